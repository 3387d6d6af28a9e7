#!/usr/bin/env python3
"""fp32 vs dynamic int8: cpudl, ONNX Runtime and PyTorch on the same MLP, in one run (make bench-quant).

The MLP 784-1024-1024-10 (ReLU; random weights, seeded) is exported by torch.onnx.export (opset 13,
dynamic batch) and quantised by `cpudl quantize --mode dynamic`, with 8-bit weights and with 7-bit
ones (--reduce-range). At batch 1 and 64, on 1 and 2 threads, back to back:
  cpudl         build/cpudl run MODEL --input X.npy --bench N --threads T --json, on the three files
  ONNX Runtime  npm onnxruntime-node (bench/ort_time.js, installed into build/bench-onnx/ as by
                vs_onnx.py) on the same files: its own kernels for cpudl's int8 files, which also
                checks they are standard ONNX; the outputs of both engines are compared with the
                exact answer (NumPy, from the ONNX operator definitions)
  PyTorch       the model itself, and torch.ao.quantization.quantize_dynamic(model, {Linear}, qint8)
Latency is the median of N runs after warm-up. The int8 roof is the `int8_dot` probe of
`cpudl bench peak` in the same run (on AVX2 without VNNI it is close to the fp32 roof: the speed of
int8 there comes from moving a quarter of the bytes, not from more multiply-adds per cycle).
Results go to stdout and, with --write-doc, into docs/BENCHMARKS.md between the quant markers.
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np
import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from vs_onnx import CPUDL, ROOT, ort_dir, peak_rows, time_torch  # noqa: E402

WORK = os.path.join(ROOT, "build", "bench-quant")


def exact_int8(path, x):
    """The int8 file's output evaluated exactly from the ONNX operator definitions (int64 sums)."""
    import onnx
    from onnx import numpy_helper
    m = onnx.load(path)
    vals = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    vals[m.graph.input[0].name] = x
    f32 = np.float32
    for n in m.graph.node:
        i = [vals[k] if k else None for k in n.input]
        if n.op_type == "DynamicQuantizeLinear":
            lo, hi = min(f32(0), i[0].min()), max(f32(0), i[0].max())
            s = f32((hi - lo) / f32(255))
            z = np.round(np.clip(f32(0) - lo / s, 0, 255))
            out = [np.clip(np.round(i[0] / s) + z, 0, 255).astype(np.uint8), s, np.uint8(z)]
        elif n.op_type == "MatMulInteger":
            out = [(i[0].astype(np.int64) - np.int64(i[2])) @ i[1].astype(np.int64)]
        elif n.op_type == "Cast":
            out = [i[0].astype(f32)]
        elif n.op_type in ("Mul", "Add"):
            out = [(i[0] * i[1] if n.op_type == "Mul" else i[0] + i[1]).astype(f32)]
        elif n.op_type == "Relu":
            out = [np.maximum(i[0], 0)]
        else:
            raise SystemExit(f"exact_int8: unexpected {n.op_type}")
        vals.update(zip(n.output, out))
    return vals[m.graph.output[0].name]


def cpudl_us(path, xpath, threads, runs, *extra):
    out = subprocess.run([CPUDL, "run", path, "--input", xpath, "--bench", str(runs), "--threads", str(threads), "--json", *extra],
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
    roof = peak_rows()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10)).eval()
    fp32 = os.path.join(WORK, "mlp.onnx")
    int8 = os.path.join(WORK, "mlp-int8.onnx")
    int7 = os.path.join(WORK, "mlp-int8-7bit.onnx")
    torch.onnx.export(model, torch.randn(1, 784), fp32, opset_version=13, input_names=["input"], output_names=["output"],
                      dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}})
    subprocess.run([CPUDL, "quantize", fp32, int8, "--mode", "dynamic"], check=True, stdout=subprocess.DEVNULL)
    subprocess.run([CPUDL, "quantize", fp32, int7, "--mode", "dynamic", "--reduce-range"], check=True, stdout=subprocess.DEVNULL)
    qmodel = torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8)
    flops_per_row = 2 * (784 * 1024 + 1024 * 1024 + 1024 * 10)
    rows = []
    for batch in (1, 64):
        x = torch.randn(batch, 784)
        xpath = os.path.join(WORK, f"x_b{batch}.npy")
        np.save(xpath, x.numpy())
        runs = args.runs if batch == 1 else max(20, args.runs // 4)
        # Numbers first: each engine's output on each int8 file against the exact answer.
        agreement = {}
        with torch.no_grad():
            scale = float(np.abs(model(x).numpy()).max())
        for tag, path in (("8bit", int8), ("7bit", int7)):
            exact = exact_int8(path, x.numpy())
            ort_out = os.path.join(WORK, f"ort_{tag}_b{batch}.npy")
            cpudl_out = os.path.join(WORK, f"cpudl_{tag}_b{batch}.npy")
            ort_us(ort, path, xpath, 1, 1, ort_out)
            subprocess.run([CPUDL, "run", path, "--input", xpath, "--output", cpudl_out], check=True, capture_output=True)
            agreement[f"cpudl_{tag}_error"] = float(np.abs(np.load(cpudl_out) - exact).max() / scale)
            agreement[f"ort_{tag}_error"] = float(np.abs(np.load(ort_out) - exact).max() / scale)
        print(json.dumps({"batch": batch, **agreement}), flush=True)
        for threads in (1, 2):
            r = {"batch": batch, "threads": threads, **agreement}
            r["cpudl_fp32"] = cpudl_us(fp32, xpath, threads, runs)
            r["cpudl_int8"] = cpudl_us(int8, xpath, threads, runs)
            r["cpudl_int7"] = cpudl_us(int7, xpath, threads, runs)
            r["ort_fp32"] = ort_us(ort, fp32, xpath, threads, runs)
            r["ort_int8"] = ort_us(ort, int8, xpath, threads, runs)
            r["ort_int7"] = ort_us(ort, int7, xpath, threads, runs)
            r["torch_fp32"] = 1e3 * time_torch(model, x, threads, runs)  # ms -> µs
            r["torch_int8"] = 1e3 * time_torch(qmodel, x, threads, runs)
            flops = flops_per_row * batch
            r["cpudl_int8_pct_int8_roof"] = 100 * flops / (min(r["cpudl_int8"], r["cpudl_int7"]) * 1e-6) / (roof[("peak_int8_dot", threads)] * 1e9)
            rows.append(r)
            print(json.dumps(r), flush=True)
    lines = ["| batch | threads | cpudl fp32 µs | cpudl int8 µs (7-bit) | int8 speed-up (7-bit) | ORT fp32 µs | ORT int8 µs (7-bit) | "
             "PyTorch fp32 µs | PyTorch int8 µs | cpudl int8 / ORT int8 | cpudl int8 / PyTorch int8 | cpudl best int8 % int8 roof |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['batch']} | {r['threads']} | {r['cpudl_fp32']:.0f} | {r['cpudl_int8']:.0f} ({r['cpudl_int7']:.0f}) | "
                     f"{r['cpudl_fp32'] / r['cpudl_int8']:.2f}x ({r['cpudl_fp32'] / r['cpudl_int7']:.2f}x) | {r['ort_fp32']:.0f} | "
                     f"{r['ort_int8']:.0f} ({r['ort_int7']:.0f}) | {r['torch_fp32']:.0f} | {r['torch_int8']:.0f} | "
                     f"{r['cpudl_int8'] / r['ort_int8']:.2f}x | {r['cpudl_int8'] / r['torch_int8']:.2f}x | {r['cpudl_int8_pct_int8_roof']:.0f}% |")
    table = "\n".join(lines)
    roofs = ", ".join(f"{op.replace('peak_', '')} {v:.0f} GOP/s on {t} thread(s)" for (op, t), v in sorted(roof.items())
                      if op in ("peak_fp32_fma", "peak_int8_dot"))
    agree = "; ".join(f"batch {r['batch']}: cpudl {r['cpudl_8bit_error']:.1e} (7-bit {r['cpudl_7bit_error']:.1e}), "
                      f"ONNX Runtime {r['ort_8bit_error']:.1e} (7-bit {r['ort_7bit_error']:.1e})" for r in rows if r["threads"] == 1)
    print("\nroofs measured now: " + roofs)
    print("int8 outputs' max distance from the exact int8 answer, relative to the output's scale: " + agree)
    print(table)
    if args.write_doc:
        from benchmarks_doc import write_section
        write_section("bench-quant", "Dynamic int8: cpudl vs ONNX Runtime vs PyTorch (MLP 784-1024-1024-10)",
                      f"Command: `make bench-quant` (bench/vs_quantized.py, {args.runs} runs at batch 1, {max(20, args.runs // 4)} at "
                      f"batch 64; torch {torch.__version__} quantize_dynamic qint8, onnxruntime-node on cpudl's int8 file). "
                      "Median latency; ratios below 1.00x mean cpudl is faster. Roofs measured in the same run: " + roofs +
                      ". Each engine's int8 output, max distance from the exact answer of the int8 file (NumPy, from the "
                      "ONNX operator definitions), relative to the output's scale: " + agree + ".\n\n" + table)


if __name__ == "__main__":
    main()
