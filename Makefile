# tlbsim — quick start: `make demo`, `make test`. Each target sets itself up on a fresh
# machine (needs only Rust, Python >= 3.11 with pip; cargo-nextest is used when present):
# it creates .venv/, installs the build and test dependencies named in pyproject.toml, and
# builds the extension into .venv with `maturin develop --release` (incremental via cargo).

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := demo

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
VPY := $(VENV)/bin/python
# The dependency stamp is keyed on pyproject.toml's content: editing it reinstalls.
DEPS_STAMP := $(VENV)/.deps-$(shell sha256sum pyproject.toml | cut -c1-16)
READ_DEPS := import tomllib; d = tomllib.load(open("pyproject.toml", "rb")); \
	print("\n".join(d["build-system"]["requires"] + d["project"]["dependencies"] \
	+ d["project"]["optional-dependencies"]["test"]))

# The core's tests run twice: in release builds (what users run), then under the `checked`
# profile (Cargo.toml: integer overflow and debug_assert! checked, which release builds
# skip; about 2 minutes to build, 20 s to run).
RUST_TEST := if cargo nextest --version >/dev/null 2>&1; then \
		echo "+ cargo nextest run --release --workspace --exclude tlbsim-py"; \
		cargo nextest run --release --workspace --exclude tlbsim-py \
		&& echo "+ cargo nextest run --cargo-profile checked -p tlbsim-core" \
		&& cargo nextest run --cargo-profile checked -p tlbsim-core; \
	else \
		echo "+ cargo test --release --workspace --exclude tlbsim-py"; \
		cargo test --release --workspace --exclude tlbsim-py \
		&& echo "+ cargo test --profile checked -p tlbsim-core" \
		&& cargo test --profile checked -p tlbsim-core; \
	fi
PY_TEST := echo "+ $(VPY) -m pytest python/tests -q"; $(VPY) -m pytest python/tests -q
# The Python gates (configured in pyproject.toml): lint, formatting, types. Each runs even
# when one before it failed, so that one pass reports everything.
LINT_PY := status=0; \
	echo "+ $(VENV)/bin/ruff check python"; $(VENV)/bin/ruff check python || status=1; \
	echo "+ $(VENV)/bin/ruff format --check python"; $(VENV)/bin/ruff format --check python || status=1; \
	echo "+ $(VENV)/bin/mypy python/tlbsim"; $(VENV)/bin/mypy python/tlbsim || status=1; \
	exit $$status

# The Rust gates: formatting (rustfmt.toml) and clippy with warnings denied (the lints the
# project allows, each with its reason, are in Cargo.toml's [workspace.lints.clippy]).
LINT_RUST := status=0; \
	echo "+ cargo fmt --all --check"; cargo fmt --all --check || status=1; \
	echo "+ cargo clippy --workspace --all-targets -- -D warnings"; \
	cargo clippy --workspace --all-targets --quiet -- -D warnings || status=1; \
	exit $$status

.PHONY: fuzz fuzz-cpu fuzz-build demo test bench bench-native calibrate validate develop rust-test py-test lint-py lint-rust chromium qemu-user record-plugin recordings generators clean

# Native shootdown micro-benchmarks on the real kernel (bench/shootdown.c, patterns in
# bench/patterns.toml): one JSON line per pattern. malloc_handoff is built, not run: it is
# run under strace (its header).
NATIVE_BENCH := target/native/shootdown target/native/tlb_reach target/native/fpr_munmap target/native/munmap_lock target/native/wake_latency target/native/stream_bw target/native/malloc_handoff
# Example programs to record and replay (examples/record/, `tlbsim record`).
RECORD_EXAMPLES := target/native/file_server target/native/gc_barrier target/native/spin_unmap target/native/sleep_read target/native/prefork_threads

# Fuzzing (docs/DEVELOPING.md "Fuzzing"), not part of `make test`, which runs only the
# committed inputs (fuzz/corpus/, fuzz/regressions/). `make fuzz TARGET=native SECONDS=3600`
# fuzzes one target for that long; its findings and stats are in fuzz/out/TARGET/ (kept, so a
# second run resumes). Rust targets: AFL++ through cargo-afl (crates.io; installing it builds
# AFL++ from the source it ships), per input 1 s at most (-t) and 2 GiB of address space (-m),
# the harness aborting past 512 MiB of live heap. Python targets: atheris (PyPI), per input
# 10 s and 2 GiB of RSS.
FUZZ_RUST_TARGETS := lackey champsim native recorded compile config scenario
FUZZ_PY_TARGETS := sweep paper
TARGET ?= native
SECONDS ?= 300
CARGO_AFL_VERSION := 0.18.2
ATHERIS_VERSION := 3.0.0

# `make fuzz-cpu TARGET=x CPU_SECONDS=3600`: one target for that much CPU time, however
# loaded the machine (fuzz/cpu_budget.py); the figures issue 51 asks for.
CPU_SECONDS ?= 3600
fuzz-cpu:
	$(PYTHON) fuzz/cpu_budget.py $(TARGET) $(CPU_SECONDS)

fuzz-build:
	@cargo afl --version >/dev/null 2>&1 || cargo install --locked cargo-afl --version $(CARGO_AFL_VERSION)
	cd fuzz && cargo afl build --release

fuzz:
	@case " $(FUZZ_RUST_TARGETS) " in *" $(TARGET) "*) $(MAKE) --no-print-directory fuzz-rust;; *) \
	case " $(FUZZ_PY_TARGETS) " in *" $(TARGET) "*) $(MAKE) --no-print-directory fuzz-py;; *) \
		echo "make fuzz: unknown TARGET=$(TARGET); targets: $(FUZZ_RUST_TARGETS) $(FUZZ_PY_TARGETS)" >&2; exit 2;; esac;; esac

.PHONY: fuzz-rust fuzz-py
fuzz-rust: fuzz-build
	mkdir -p fuzz/out
	AFL_SKIP_CPUFREQ=1 AFL_NO_AFFINITY=1 AFL_FORKSRV_INIT_TMOUT=60000 AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES=1 AFL_AUTORESUME=1 \
		AFL_NO_UI=1 cargo afl fuzz -i fuzz/corpus/$(TARGET) -o fuzz/out/$(TARGET) \
		-t 1000 -m 2048 -V $(SECONDS) -- fuzz/target/release/tlbsim-fuzz $(TARGET) > fuzz/out/$(TARGET).log 2>&1 \
		|| { tail -30 fuzz/out/$(TARGET).log; exit 1; }
	@grep -E '^(run_time|execs_done|execs_per_sec|corpus_count|saved_crashes|saved_hangs) ' fuzz/out/$(TARGET)/default/fuzzer_stats
	@ls fuzz/out/$(TARGET)/default/crashes fuzz/out/$(TARGET)/default/hangs | grep -v README || true

fuzz-py: develop
	@$(VPY) -c 'import atheris' 2>/dev/null || $(VPY) -m pip install --quiet --disable-pip-version-check atheris==$(ATHERIS_VERSION)
	mkdir -p fuzz/out/$(TARGET)/corpus
	$(VPY) fuzz/atheris_main.py $(TARGET) -max_total_time=$(SECONDS) -timeout=10 -rss_limit_mb=2048 \
		-print_final_stats=1 -artifact_prefix=fuzz/out/$(TARGET)/ fuzz/out/$(TARGET)/corpus fuzz/corpus/$(TARGET) \
		> fuzz/out/$(TARGET).log 2>&1 || { tail -40 fuzz/out/$(TARGET).log; exit 1; }
	@grep -E '^(stat::|Done )' fuzz/out/$(TARGET).log; echo "corpus: $$(ls fuzz/out/$(TARGET)/corpus | wc -l) files"

demo: develop
	$(VENV)/bin/tlbsim demo

# Both suites and the Python gates always run; the target fails if any failed.
# The gates run first, so that the test runners' summaries close the output.
test: develop chromium record-plugin
	@status=0; \
	( $(LINT_RUST) ) || status=1; \
	( $(LINT_PY) ) || status=1; \
	( $(RUST_TEST) ) || status=1; \
	( $(PY_TEST) ) || status=1; \
	exit $$status

bench: develop
	$(VENV)/bin/tlbsim bench

bench-native: $(NATIVE_BENCH)
	target/native/shootdown
	target/native/tlb_reach
	target/native/fpr_munmap
	target/native/munmap_lock
	target/native/wake_latency
	target/native/stream_bw

# This host as a machine preset (host-calibrated.toml + .json), and the simulator against it.
# Not part of `make test`, whose python/tests run `tlbsim calibrate --quick` once.
calibrate: develop
	$(VENV)/bin/tlbsim calibrate

validate: develop
	$(VENV)/bin/tlbsim validate

target/native/%: bench/%.c bench/proc_interrupts.h
	@mkdir -p $(dir $@)
	gcc -O2 -Wall -Wextra -pthread -o $@ $<

rust-test:
	@$(RUST_TEST)

py-test: develop chromium record-plugin
	@$(PY_TEST)

# ruff and mypy come with the test dependencies (pyproject.toml), installed by $(DEPS_STAMP).
lint-py: $(DEPS_STAMP)
	@$(LINT_PY)

lint-rust:
	@$(LINT_RUST)

# `tlbsim record` (python/tlbsim/record.py) runs programs under qemu-x86_64 with the TCG
# plugin record/tlbsim_record.c. Debian ships no qemu-plugin.h: the plugin declares the
# API entry points it uses itself.
record-plugin: qemu-user target/native/tlbsim_record.so $(RECORD_EXAMPLES)

# A library of real programs, recorded and replayed (docs/GUIDE.md "A library of real
# programs"; not part of `make test`): record/recordings.py installs pbzip2, memcached,
# PostgreSQL, apache2, xz, LevelDB and LMDB (for record/ycsb_leveldb.cc and ycsb_lmdb.c)
# from Debian's packages when missing (apt-get, as root), runs each natively counting its
# TLB-shootdown IPIs, records it under `tlbsim record` (a server under QEMU, its load
# generator native), replays it, and writes out/recordings/ (the recordings, results.json,
# table.md). About 15 minutes on 2 CPUs.
recordings: develop
	nice -n 10 $(VPY) record/recordings.py --out out/recordings

# The generators held against the programs they stand for (docs/GUIDE.md "Generators beside
# the programs they stand for"; not part of `make test`): record/generators.py replays the
# recordings of `make recordings` (run it first) and runs the apache, reclaim, vm-mix, ycsb
# and mitosis-bench generators on the same machine (one socket of 2 cores, linux coherence),
# per operation side by side in out/generators/ (generators.md, generators.json). About 2
# minutes on 2 CPUs.
generators: develop
	nice -n 10 $(VPY) record/generators.py --recordings out/recordings --out out/generators

target/native/%: examples/record/%.c bench/proc_interrupts.h
	@mkdir -p $(dir $@)
	gcc -O2 -Wall -Wextra -pthread -o $@ $<

target/native/tlbsim_record.so: record/tlbsim_record.c
	@mkdir -p $(dir $@)
	gcc -O2 -Wall -Wextra -shared -fPIC -pthread -o $@ $<

# qemu-user installed here when missing (Debian, as root, as in CI); elsewhere the record
# tests fail and say which package is missing.
qemu-user:
	@command -v qemu-x86_64 >/dev/null || for attempt in 1 2 3; do \
		( apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y qemu-user ) && break; \
		sleep 10; \
	done; \
	command -v qemu-x86_64 >/dev/null || \
	echo "warning: could not install qemu-user (needs apt-get as root);" \
		"tlbsim record and python/tests/test_record.py need it (Debian package qemu-user)" >&2

# python/tests/test_report.py opens the HTML report in headless Chromium. Installed here
# when missing (Debian, as root, as in CI); elsewhere that one test fails and says why.
chromium:
	@command -v chromium >/dev/null || for attempt in 1 2 3; do \
		( apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium ) && break; \
		sleep 10; \
	done; \
	command -v chromium >/dev/null || \
	echo "warning: could not install chromium (needs apt-get as root);" \
		"the browser test in python/tests/test_report.py will fail" >&2

develop: $(DEPS_STAMP) record-plugin
	VIRTUAL_ENV="$(abspath $(VENV))" $(VENV)/bin/maturin develop --release

$(VPY):
	$(PYTHON) -m venv $(VENV)

$(DEPS_STAMP): pyproject.toml | $(VPY)
	rm -f $(VENV)/.deps-*
	$(VPY) -c '$(READ_DEPS)' > $(VENV)/requirements.txt
	$(VPY) -m pip install --quiet --disable-pip-version-check -r $(VENV)/requirements.txt
	touch $@

clean:
	rm -rf $(VENV) target
