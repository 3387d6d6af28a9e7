#!/usr/bin/env bash
# Runs every benchmark of the compute core in one go and writes its section of docs/BENCHMARKS.md:
# the machine (cpudl doctor --json), then each command with the table it printed. Ratios, not absolute
# times, are what carry over: the roofs are measured in the same run.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=build/cpudl
out=docs/BENCHMARKS.md
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT

run() {  # run "command": appends the command and its output as a section
  echo "+ $1" >&2
  {
    echo
    echo '```'
    echo "\$ $1"
    eval "$1" 2>&1
    echo '```'
  } >>"$tmp"
}

{
  echo "Written by \`make bench\` (bench/run-benchmarks.sh) on $(date -u +%Y-%m-%d). Every percentage is"
  echo "of a roof measured in the same run on the same number of threads (for bench gemm, bench conv"
  echo "and the kernel suite's pct_bw, probed just before and after each row); the host is shared, so read"
  echo "ratios, not absolute times. The steal column (steal_pct) is the share of the row's threads' time"
  echo "the hypervisor gave to other guests, from /proc/stat: a row that reads low beside a high steal"
  echo "lost its time there. Contention it cannot see (another guest on the same physical core, or on"
  echo "the shared L3 and memory) moves rows too. The machine, as \`cpudl doctor --json --measure\`"
  echo "reports it:"
  echo
  echo '```json'
  "$bin" doctor --json --measure
  echo '```'
} >"$tmp"
run "$bin bench peak"
run "$bin bench gemm"
run "$bin bench conv"
run "build/bench/cpudl_bench_kernels --benchmark_min_time=0.3"
run "build/bench/cpudl_bench_wrapper --benchmark_min_time=0.3"
run "build/bench/cpudl_bench_http_body --benchmark_min_time=0.3"
if [ -f data/mnist/train-images-idx3-ubyte ]; then
  run "$bin train --model simplecnn --data data/mnist --out build/bench-simplecnn.safetensors --json"
  run "$bin train --model lenet5 --data data/mnist --out build/bench-lenet5.safetensors --json"
fi
# Only this script's section is replaced: the peer scripts (make bench-onnx, bench-pytorch,
# bench-llm) own theirs in the same file.
/usr/bin/python3 - "$tmp" "$out" <<'PY'
import os, sys
sys.path.insert(0, "bench")
from benchmarks_doc import write_section
tmp, out = sys.argv[1], sys.argv[2]
if not os.path.exists(out):
    open(out, "w").write("# cpudl benchmarks\n")
write_section("core", "Compute core (make bench)", open(tmp).read().strip("\n"))
PY
