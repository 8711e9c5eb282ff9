#!/bin/bash
# Trace who takes mmap_lock after a release in bench/munmap_lock (issue 46 item 1; the
# findings are in docs/OS_MODEL.md, "Checked against this kernel"). Needs root and tracefs.
#   bench/mmap_lock_trace.sh OUT [SECONDS]   -> OUT.json (the benchmark's line), OUT.txt (trace)
#   python3 bench/mmap_lock_trace.py OUT.txt  -> wake outcomes, wake latency, free windows
# Run it on a quiet machine: other runnable work changes who wins.
set -e
out=${1:?usage: mmap_lock_trace.sh OUT [SECONDS]}; secs=${2:-0.5}
T=/sys/kernel/tracing
here=$(cd "$(dirname "$0")" && pwd)
bin=$(mktemp /tmp/munmap_lock.XXXXXX)
gcc -O2 -pthread "$here/munmap_lock.c" -o "$bin"
events="mmap_lock lock/contention_begin lock/contention_end sched/sched_switch sched/sched_waking sched/sched_wakeup"
echo 0 > $T/tracing_on; echo > $T/trace; echo 65536 > $T/buffer_size_kb
for e in $events; do echo 1 > $T/events/$e/enable; done
echo 1 > $T/tracing_on
"$bin" --mode threads --workers 2 --seconds "$secs" > "$out.json"
echo 0 > $T/tracing_on
cat $T/trace > "$out.txt"
for e in $events; do echo 0 > $T/events/$e/enable; done
echo > $T/trace; rm -f "$bin"
cat "$out.json"
