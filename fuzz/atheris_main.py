"""The atheris (libFuzzer for Python, coverage-guided) driver of the Python fuzz targets:
`python fuzz/atheris_main.py TARGET [libFuzzer flags] CORPUS_DIR...` (`make fuzz` passes the
time limit per input, the RSS bound and the total time). tlbsim's Python modules are
instrumented for coverage; the Rust core they call is not (the Rust targets fuzz it).
"""

import sys
from pathlib import Path

import atheris

sys.path.insert(0, str(Path(__file__).resolve().parent))

with atheris.instrument_imports(include=["tlbsim", "python_targets"]):
    import python_targets

    import tlbsim.reproduce.paper
    import tlbsim.sweep  # noqa: F401


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in python_targets.TARGETS:
        sys.exit(
            f"usage: atheris_main.py TARGET [libFuzzer flags] [CORPUS...]; targets: {', '.join(python_targets.TARGETS)}"
        )
    target = sys.argv.pop(1)

    def one(data: bytes) -> None:
        python_targets.run(target, data)

    atheris.Setup(sys.argv, one)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
