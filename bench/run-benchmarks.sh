#!/usr/bin/env bash
# Runs every benchmark of the compute core in one go and writes docs/BENCHMARKS.md: the machine
# (cpudl doctor --json), then each command with the table it printed. Ratios, not absolute
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
  echo "# cpudl benchmarks"
  echo
  echo "Written by \`make bench\` (bench/run-benchmarks.sh) on $(date -u +%Y-%m-%d). Every percentage is"
  echo "of a roof measured in the same run on the same number of threads; the host is shared, so read"
  echo "ratios, not absolute times. The machine, as \`cpudl doctor --json --measure\` reports it:"
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
if [ -f data/mnist/train-images-idx3-ubyte ]; then
  run "$bin train --model simplecnn --data data/mnist --out build/bench-simplecnn.safetensors --json"
  run "$bin train --model lenet5 --data data/mnist --out build/bench-lenet5.safetensors --json"
fi
mv "$tmp" "$out"
trap - EXIT
echo "wrote $out" >&2
