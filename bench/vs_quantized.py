#!/usr/bin/env python3
"""fp32 vs dynamic int8: cpudl, ONNX Runtime and PyTorch on the same MLP, in one run (make bench-quant).

The MLP 784-1024-1024-10 (ReLU; random weights, seeded) is exported by torch.onnx.export (opset 13,
dynamic batch) and quantised by `cpudl quantize --mode dynamic`. At batch 1 and 64, on 1 and 2
threads, back to back:
  cpudl         build/cpudl run MODEL --input X.npy --bench N --threads T --json, fp32 and int8 files
  ONNX Runtime  npm onnxruntime-node (bench/ort_time.js, installed into build/bench-onnx/ as by
                vs_onnx.py) on the same two files: its own kernels for cpudl's int8 file, which also
                checks that file is standard ONNX (the outputs of both engines are compared)
  PyTorch       the model itself, and torch.ao.quantization.quantize_dynamic(model, {Linear}, qint8)
Latency is the median of N runs after warm-up. The int8 roof is the `int8_dot` probe of
`cpudl bench peak` in the same run (on AVX2 without VNNI it is close to the fp32 roof: the speed of
int8 there comes from moving a quarter of the bytes, not from more multiply-adds per cycle).
Results go to stdout and, with --write-doc, into docs/BENCHMARKS.md between the quant markers.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np
import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from vs_onnx import CPUDL, ROOT, ort_dir  # noqa: E402

WORK = os.path.join(ROOT, "build", "bench-quant")


def peaks():
    out = subprocess.run([CPUDL, "bench", "peak", "--json", "--threads", "1,2", "--min-time", "0.5"],
                         check=True, capture_output=True, text=True).stdout
    roofs = {}
    for r in map(json.loads, out.splitlines()):
        roofs[(r["op"], r["threads"])] = r.get("gops", 0)
    return roofs


def time_torch(model, x, threads, runs):
    torch.set_num_threads(threads)
    with torch.inference_mode():
        for _ in range(10):
            model(x)
        us = []
        for _ in range(runs):
            t0 = time.perf_counter()
            model(x)
            us.append(1e6 * (time.perf_counter() - t0))
    return statistics.median(us)


def cpudl_us(path, xpath, threads, runs):
    out = subprocess.run([CPUDL, "run", path, "--input", xpath, "--bench", str(runs), "--threads", str(threads), "--json"],
                         check=True, capture_output=True, text=True).stdout
    return 1e3 * json.loads(out)["median_ms"]


def ort_us(ort, path, xpath, threads, runs, output=None):
    cmd = ["node", os.path.join(ROOT, "bench", "ort_time.js"), path, xpath, str(threads), str(runs)] + ([output] if output else [])
    out = subprocess.run(cmd, check=True, capture_output=True, text=True,
                         env=dict(os.environ, NODE_PATH=os.path.join(ort, "node_modules"))).stdout
    return 1e3 * json.loads(out)["median_ms"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--write-doc", action="store_true")
    args = ap.parse_args()
    os.makedirs(WORK, exist_ok=True)
    ort = ort_dir()
    roof = peaks()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10)).eval()
    fp32 = os.path.join(WORK, "mlp.onnx")
    int8 = os.path.join(WORK, "mlp-int8.onnx")
    torch.onnx.export(model, torch.randn(1, 784), fp32, opset_version=13, input_names=["input"], output_names=["output"],
                      dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}})
    subprocess.run([CPUDL, "quantize", fp32, int8, "--mode", "dynamic"], check=True, stdout=subprocess.DEVNULL)
    qmodel = torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8)
    flops_per_row = 2 * (784 * 1024 + 1024 * 1024 + 1024 * 10)
    rows = []
    for batch in (1, 64):
        x = torch.randn(batch, 784)
        xpath = os.path.join(WORK, f"x_b{batch}.npy")
        np.save(xpath, x.numpy())
        runs = args.runs if batch == 1 else max(20, args.runs // 4)
        # Numbers first: cpudl's int8 output against ONNX Runtime's on the same int8 file, and
        # both against the float model.
        ort_out = os.path.join(WORK, f"ort_int8_b{batch}.npy")
        cpudl_out = os.path.join(WORK, f"cpudl_int8_b{batch}.npy")
        ort_us(ort, int8, xpath, 1, 1, ort_out)
        subprocess.run([CPUDL, "run", int8, "--input", xpath, "--output", cpudl_out], check=True, capture_output=True)
        with torch.no_grad():
            ref = model(x).numpy()
        a, b = np.load(cpudl_out), np.load(ort_out)
        scale = np.abs(ref).max()
        agreement = {"cpudl_vs_ort_int8": float(np.abs(a - b).max() / scale), "int8_vs_fp32": float(np.abs(a - ref).max() / scale)}
        print(json.dumps({"batch": batch, **agreement}), flush=True)
        for threads in (1, 2):
            r = {"batch": batch, "threads": threads, **agreement}
            r["cpudl_fp32"] = cpudl_us(fp32, xpath, threads, runs)
            r["cpudl_int8"] = cpudl_us(int8, xpath, threads, runs)
            r["ort_fp32"] = ort_us(ort, fp32, xpath, threads, runs)
            r["ort_int8"] = ort_us(ort, int8, xpath, threads, runs)
            r["torch_fp32"] = time_torch(model, x, threads, runs)
            r["torch_int8"] = time_torch(qmodel, x, threads, runs)
            flops = flops_per_row * batch
            r["cpudl_int8_pct_int8_roof"] = 100 * flops / (r["cpudl_int8"] * 1e-6) / (roof[("peak_int8_dot", threads)] * 1e9)
            rows.append(r)
            print(json.dumps(r), flush=True)
    lines = ["| batch | threads | cpudl fp32 µs | cpudl int8 µs | int8 speed-up | ORT fp32 µs | ORT int8 µs | PyTorch fp32 µs | "
             "PyTorch int8 µs | cpudl int8 / ORT int8 | cpudl int8 / PyTorch int8 | cpudl int8 % int8 roof |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['batch']} | {r['threads']} | {r['cpudl_fp32']:.0f} | {r['cpudl_int8']:.0f} | "
                     f"{r['cpudl_fp32'] / r['cpudl_int8']:.2f}x | {r['ort_fp32']:.0f} | {r['ort_int8']:.0f} | {r['torch_fp32']:.0f} | "
                     f"{r['torch_int8']:.0f} | {r['cpudl_int8'] / r['ort_int8']:.2f}x | {r['cpudl_int8'] / r['torch_int8']:.2f}x | "
                     f"{r['cpudl_int8_pct_int8_roof']:.0f}% |")
    table = "\n".join(lines)
    roofs = ", ".join(f"{op.replace('peak_', '')} {v:.0f} GOP/s on {t} thread(s)" for (op, t), v in sorted(roof.items())
                      if op in ("peak_fp32_fma", "peak_int8_dot"))
    agree = ", ".join(f"batch {r['batch']}: cpudl vs ORT on the int8 file {r['cpudl_vs_ort_int8']:.1e}, int8 vs fp32 "
                      f"{r['int8_vs_fp32']:.1e}" for r in rows if r["threads"] == 1)
    print("\nroofs measured now: " + roofs)
    print("max output difference, relative to the output's scale: " + agree)
    print(table)
    if args.write_doc:
        from benchmarks_doc import write_section
        write_section("bench-quant", "Dynamic int8: cpudl vs ONNX Runtime vs PyTorch (MLP 784-1024-1024-10)",
                      f"Command: `make bench-quant` (bench/vs_quantized.py, {args.runs} runs at batch 1, {max(20, args.runs // 4)} at "
                      f"batch 64; torch {torch.__version__} quantize_dynamic qint8, onnxruntime-node on cpudl's int8 file). "
                      "Median latency; ratios below 1.00x mean cpudl is faster. Roofs measured in the same run: " + roofs +
                      ". Max output difference relative to the output's scale: " + agree + ".\n\n" + table)


if __name__ == "__main__":
    main()
