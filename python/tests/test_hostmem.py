"""Issue 51 item 3: a run that cannot fit in the host's memory is refused before it starts,
naming the keys that drive the estimate (tlbsim.ConfigError; exit status 2 on the CLI)."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

import tlbsim

BIG = """\
seed = 1
[machine]
sockets = 1
cores_per_socket = 1
[machine.memory]
node_mib = 67108864
[workload]
kind = "scenario"
[[workload.scenario.process]]
name = "p"
region = [{ name = "heap", bytes = 70368744177664, populate = true }]
[[workload.scenario.process.thread]]
name = "t"
core = 0
program = [{ op = "access", region = "heap", pattern = "random", count = 10 }, { op = "exit" }]
"""


def _limit_address_space() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (6_000_000 * 1024, 6_000_000 * 1024))


def test_a_64_tib_populate_under_ulimit_is_refused_with_exit_2(tmp_path: Path) -> None:
    (tmp_path / "big.toml").write_text(BIG)
    cmd = [sys.executable, "-c", "import sys; from tlbsim.cli import main; sys.exit(main())"]
    done = subprocess.run(
        [*cmd, "run", str(tmp_path / "big.toml"), "--out", str(tmp_path / "out")],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=_limit_address_space,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)},
    )
    assert done.returncode == 2, done.stderr
    for says in ("machine.memory.node_mib", "machine.sockets", "needs about", "ulimit -v"):
        assert says in done.stderr, done.stderr
    assert "panicked" not in done.stderr and "backtrace" not in done.stderr


def test_the_python_api_raises_config_error(tmp_path: Path) -> None:
    # 16 nodes of 1 TiB at 160 bytes a populated page: 640 GiB, more than any host here.
    (tmp_path / "big.toml").write_text(BIG.replace("bytes = 70368744177664", "bytes = 140737488355328"))
    with pytest.raises(tlbsim.ConfigError, match=r"machine\.memory\.node_mib: this run needs about") as err:
        tlbsim.run(tmp_path / "big.toml", overrides=["machine.sockets=16"])
    assert "TLBSIM_NO_MEMORY_CHECK" in str(err.value)
