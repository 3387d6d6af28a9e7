#!/usr/bin/env python3
"""cpudl vs ONNX Runtime vs PyTorch on the same ONNX files and inputs, in one run (make bench-onnx).

torchvision's resnet18 and mobilenet_v2 (random weights, no download) are exported at 3x224x224
with a dynamic batch by torch.onnx.export (opset 13), then for batch 1 and 16 on 1 and 2 threads
each engine is timed back to back on the same input:
  cpudl         build/cpudl run MODEL --input X.npy --bench N --threads T --json
  ONNX Runtime  npm onnxruntime-node (bench/ort_time.js), installed into build/bench-onnx/ unless
                ORT_NODE_DIR names a folder whose node_modules has it; never a cpudl dependency
  PyTorch       the exporting model itself, torch.set_num_threads(T), inference_mode, NCHW
On CPUs with AVX512-BF16 or AMX a second table puts `cpudl run --precision bf16` beside cpudl's
fp32 and PyTorch under torch.autocast(bfloat16) (ONNX Runtime's CPU provider has no bf16 path for
an fp32 file). Latency is the median of N runs after warm-up; % of peak uses the fp32 FMA roof that
`cpudl bench peak` measures at the start of the same run. Results go to stdout and, with
--write-doc, into docs/BENCHMARKS.md between the onnx markers.
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
import torchvision

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CPUDL = os.environ.get("CPUDL_BIN", os.path.join(ROOT, "build", "cpudl"))
WORK = os.path.join(ROOT, "build", "bench-onnx")
ORT_VERSION = "1.30.0"


def ort_dir():
    d = os.environ.get("ORT_NODE_DIR", WORK)
    if not os.path.isdir(os.path.join(d, "node_modules", "onnxruntime-node")):
        print(f"installing onnxruntime-node@{ORT_VERSION} into {d} (npm, --ignore-scripts: the CPU build is in the package)", file=sys.stderr)
        subprocess.run(["npm", "install", "--prefix", d, "--no-audit", "--no-fund", "--ignore-scripts",
                        f"onnxruntime-node@{ORT_VERSION}"], check=True, stdout=subprocess.DEVNULL)
    return d


def cpu_model():
    """The CPU's name as `cpudl doctor` prints it, for the table's heading."""
    doctor = subprocess.run([CPUDL, "doctor"], capture_output=True, text=True).stdout
    line = next((l for l in doctor.splitlines() if l.startswith("CPU ")), "CPU unknown")
    return line[4:].strip()


def peak_rows():
    """`cpudl bench peak` on 1 and 2 threads: {(row, threads): G op/s} (fp32 FMA, int8, bf16, bandwidth)."""
    out = subprocess.run([CPUDL, "bench", "peak", "--json", "--threads", "1,2", "--min-time", "0.5"],
                         check=True, capture_output=True, text=True).stdout
    return {(r["op"], r["threads"]): r.get("gops", 0) for r in map(json.loads, out.splitlines())}


def peaks():
    """The fp32 FMA roof per thread count."""
    return {threads: gops for (op, threads), gops in peak_rows().items() if op == "peak_fp32_fma"}


def time_torch(model, x, threads, runs, bf16=False):
    torch.set_num_threads(threads)
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        for _ in range(4):
            model(x)
        ms = []
        for _ in range(runs):
            t0 = time.perf_counter()
            model(x)
            ms.append(1e3 * (time.perf_counter() - t0))
    return statistics.median(ms)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--write-doc", action="store_true")
    ap.add_argument("--models", default="resnet18,mobilenet_v2", help="comma-separated subset")
    args = ap.parse_args()
    os.makedirs(WORK, exist_ok=True)
    ort = ort_dir()
    roof = peaks()
    torch.manual_seed(0)
    models = {"resnet18": torchvision.models.resnet18().eval(), "mobilenet_v2": torchvision.models.mobilenet_v2().eval()}
    models = {k: v for k, v in models.items() if k in args.models.split(",")}
    rows, bf16_rows = [], []
    for name, model in models.items():
        path = os.path.join(WORK, f"{name}.onnx")
        torch.onnx.export(model, torch.randn(1, 3, 224, 224), path, opset_version=13, input_names=["input"],
                          output_names=["output"], dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}})
        info = json.loads(subprocess.run([CPUDL, "info", path, "--json"], check=True, capture_output=True, text=True).stdout)
        bf16 = subprocess.run([CPUDL, "info", path, "--precision", "bf16"], capture_output=True).returncode == 0
        for batch in (1, 16):
            x = torch.randn(batch, 3, 224, 224)
            xpath = os.path.join(WORK, f"{name}_b{batch}.npy")
            np.save(xpath, x.numpy())
            flops = info["flops"] * batch
            runs = args.runs if batch == 1 else max(5, args.runs // 2)
            for threads in (1, 2):
                c = json.loads(subprocess.run([CPUDL, "run", path, "--input", xpath, "--bench", str(runs), "--threads",
                                               str(threads), "--json"], check=True, capture_output=True, text=True).stdout)
                o = json.loads(subprocess.run(["node", os.path.join(ROOT, "bench", "ort_time.js"), path, xpath, str(threads), str(runs)],
                                              check=True, capture_output=True, text=True, env=dict(os.environ, NODE_PATH=os.path.join(ort, "node_modules"))).stdout)
                t = time_torch(model, x, threads, runs)
                row = {"model": name, "batch": batch, "threads": threads, "cpudl_ms": c["median_ms"], "cpudl_p90_ms": c["p90_ms"],
                       "ort_ms": o["median_ms"], "torch_ms": t, "gflop": flops / 1e9,
                       "cpudl_pct_peak": 100 * flops / (c["median_ms"] * 1e-3) / (roof[threads] * 1e9),
                       "ort_pct_peak": 100 * flops / (o["median_ms"] * 1e-3) / (roof[threads] * 1e9)}
                rows.append(row)
                print(json.dumps(row), flush=True)
                if bf16:
                    b = json.loads(subprocess.run([CPUDL, "run", path, "--input", xpath, "--bench", str(runs), "--threads",
                                                   str(threads), "--precision", "bf16", "--json"], check=True, capture_output=True,
                                                  text=True).stdout)
                    brow = {"model": name, "batch": batch, "threads": threads, "cpudl_ms": c["median_ms"],
                            "cpudl_bf16_ms": b["median_ms"], "torch_ms": t, "torch_bf16_ms": time_torch(model, x, threads, runs, bf16=True)}
                    bf16_rows.append(brow)
                    print(json.dumps(brow), flush=True)
    lines = ["| model | batch | threads | cpudl ms (p90) | ONNX Runtime ms | PyTorch ms | cpudl / ORT | cpudl / PyTorch | cpudl % peak | ORT % peak |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['batch']} | {r['threads']} | {r['cpudl_ms']:.2f} ({r['cpudl_p90_ms']:.2f}) | {r['ort_ms']:.2f} | "
                     f"{r['torch_ms']:.2f} | {r['cpudl_ms'] / r['ort_ms']:.2f}x | {r['cpudl_ms'] / r['torch_ms']:.2f}x | "
                     f"{r['cpudl_pct_peak']:.0f}% | {r['ort_pct_peak']:.0f}% |")
    table = "\n".join(lines)
    if bf16_rows:
        lines = ["", "bf16 (`cpudl run --precision bf16`; PyTorch under torch.autocast(\"cpu\", dtype=torch.bfloat16)):", "",
                 "| model | batch | threads | cpudl fp32 ms | cpudl bf16 ms | bf16 speed-up | PyTorch fp32 ms | PyTorch bf16 ms | cpudl bf16 / PyTorch bf16 |",
                 "|---|---|---|---|---|---|---|---|---|"]
        for r in bf16_rows:
            lines.append(f"| {r['model']} | {r['batch']} | {r['threads']} | {r['cpudl_ms']:.2f} | {r['cpudl_bf16_ms']:.2f} | "
                         f"{r['cpudl_ms'] / r['cpudl_bf16_ms']:.2f}x | {r['torch_ms']:.2f} | {r['torch_bf16_ms']:.2f} | "
                         f"{r['cpudl_bf16_ms'] / r['torch_bf16_ms']:.2f}x |")
        table += "\n" + "\n".join(lines)
    print("\nfp32 FMA roof measured now: " + ", ".join(f"{v:.0f} GFLOP/s on {k} thread(s)" for k, v in sorted(roof.items())))
    print(table)
    if args.write_doc:
        from benchmarks_doc import write_section
        write_section("bench-onnx", "ONNX inference: cpudl vs ONNX Runtime vs PyTorch",
                      f"Machine: {cpu_model()}. Command: `make bench-onnx` (bench/vs_onnx.py, {args.runs} runs at batch 1, {max(5, args.runs // 2)} at batch 16; "
                      f"torch {torch.__version__}, onnxruntime-node {ORT_VERSION}). Latency is the median; "
                      "`cpudl / X` below 1.00x means cpudl is faster. fp32 FMA roof measured in the same run: "
                      + ", ".join(f"{v:.0f} GFLOP/s on {k} thread(s)" for k, v in sorted(roof.items())) + ".\n\n" + table)

if __name__ == "__main__":
    main()
