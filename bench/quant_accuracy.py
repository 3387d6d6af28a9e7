#!/usr/bin/env python3
"""What int8 and bf16 cost in accuracy on real data (make bench-quant): simplecnn and lenet5, trained here
with PyTorch on the 8,000 MNIST training digits of data/mnist (Adam 1e-3, batch 256, EPOCHS
epochs, seeded; cpudl's normalisation), exported to ONNX (opset 13), then quantised by cpudl:
  dynamic           cpudl quantize --mode dynamic (Linear layers only)
  static min-max    cpudl quantize --mode static --calib 512 training digits
  static percentile the same with --observer percentile
  bf16              cpudl quantize --mode bf16 (weights stored bfloat16; computed in bf16 where the
                    CPU has AVX512-BF16 or AMX, else in f32 on the rounded weights: the report says)
Each report measures top-1 accuracy of the float and the quantised model on the 2,000 held-out test
digits (--eval, --labels). PyTorch's own quantize_dynamic (qint8 Linear) and the float model under
torch.autocast(bfloat16) are scored alongside.
With --write-doc the table goes into docs/BENCHMARKS.md between the quant-accuracy markers.
"""
import argparse
import importlib.util
import json
import os
import subprocess

import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from vs_onnx import cpu_model  # noqa: E402
from vs_pytorch import ROOT, load_idx  # noqa: E402

CPUDL = os.environ.get("CPUDL_BIN", os.path.join(ROOT, "build", "cpudl"))
WORK = os.path.join(ROOT, "build", "bench-quant")


def normalise(images):  # cpudl's MNIST loader (include/cpudl/data.h): pixels / 255, then (x - 0.5) / 0.5
    return ((images.astype(np.float32) / 255.0 - 0.5) / 0.5)[:, None, :, :]


def zoo():
    spec = importlib.util.spec_from_file_location("gen_golden", os.path.join(ROOT, "scripts", "gen-golden.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def train(model, x, y, epochs):
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _ in range(epochs):
        perm = torch.randperm(len(x))
        for i in range(0, len(x), 256):
            idx = perm[i:i + 256]
            opt.zero_grad()
            F.cross_entropy(model(x[idx]), y[idx]).backward()
            opt.step()
    return model.eval()


def quantize(model_path, mode, extra, files):
    out = os.path.join(WORK, os.path.basename(model_path).replace(".onnx", f"-{mode}{'-p' if extra else ''}.onnx"))
    cmd = [CPUDL, "quantize", model_path, out, "--mode", mode, "--eval", files["test"], "--labels", files["labels"], "--json"]
    if mode == "bf16":  # the text report says whether bf16 units computed it; --json leaves that out
        text = subprocess.run(cmd[:-1], check=True, capture_output=True, text=True).stdout
        return {**json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout),
                "bf16_units": "computes in bf16 here" in text}
    if mode == "static":
        cmd += ["--calib", files["calib"]] + extra
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--write-doc", action="store_true")
    args = ap.parse_args()
    os.makedirs(WORK, exist_ok=True)
    torch.set_num_threads(os.cpu_count() or 1)
    x = torch.from_numpy(normalise(load_idx("train-images-idx3-ubyte")))
    y = torch.from_numpy(load_idx("train-labels-idx1-ubyte").astype(np.int64))
    tx = normalise(load_idx("t10k-images-idx3-ubyte"))
    ty = load_idx("t10k-labels-idx1-ubyte").astype(np.int64)
    files = {"calib": os.path.join(WORK, "mnist_calib.npy"), "test": os.path.join(WORK, "mnist_test.npy"),
             "labels": os.path.join(WORK, "mnist_test_labels.npy")}
    np.save(files["calib"], x[:512].numpy())
    np.save(files["test"], tx)
    np.save(files["labels"], ty)
    z = zoo()
    rows = []
    for name in ("simplecnn", "lenet5"):
        torch.manual_seed(0)
        model = train(z.SimpleCNN() if name == "simplecnn" else z.LeNet5(), x, y, args.epochs)
        path = os.path.join(WORK, f"{name}-mnist.onnx")
        torch.onnx.export(model, torch.from_numpy(tx[:1]), path, opset_version=13, input_names=["input"], output_names=["output"],
                          dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}})
        qmodel = torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8)
        with torch.no_grad():
            torch_fp32 = float((model(torch.from_numpy(tx)).argmax(1).numpy() == ty).mean())
            torch_int8 = float((qmodel(torch.from_numpy(tx)).argmax(1).numpy() == ty).mean())
            with torch.autocast("cpu", dtype=torch.bfloat16):
                torch_bf16 = float((model(torch.from_numpy(tx)).float().argmax(1).numpy() == ty).mean())
        row = {"model": name, "torch_fp32": torch_fp32, "torch_dynamic": torch_int8, "torch_bf16": torch_bf16}
        for key, mode, extra in (("dynamic", "dynamic", []), ("static_minmax", "static", []),
                                 ("static_percentile", "static", ["--observer", "percentile"])):
            r = quantize(path, mode, extra, files)
            row["cpudl_fp32"] = r["fp32_accuracy"]
            row[key] = r["int8_accuracy"]
            row[key + "_layers"] = sum(1 for l in r["layers"] if l["quantized"])
        r = quantize(path, "bf16", [], files)
        row["bf16"], row["bf16_units"] = r["bf16_accuracy"], r["bf16_units"]
        rows.append(row)
        print(json.dumps(row), flush=True)
    lines = ["| model | float (cpudl / PyTorch) | cpudl dynamic int8 | cpudl static int8, min-max | cpudl static int8, percentile | "
             "cpudl bf16 | PyTorch quantize_dynamic | PyTorch autocast bf16 |", "|---|---|---|---|---|---|---|---|"]
    pts = lambda a, b: f"{100 * a:.2f}% ({100 * (a - b):+.2f})"
    for r in rows:
        lines.append(f"| {r['model']} | {100 * r['cpudl_fp32']:.2f}% / {100 * r['torch_fp32']:.2f}% | "
                     f"{pts(r['dynamic'], r['cpudl_fp32'])} | {pts(r['static_minmax'], r['cpudl_fp32'])} | "
                     f"{pts(r['static_percentile'], r['cpudl_fp32'])} | {pts(r['bf16'], r['cpudl_fp32'])} | "
                     f"{pts(r['torch_dynamic'], r['torch_fp32'])} | {pts(r['torch_bf16'], r['torch_fp32'])} |")
    table = "\n".join(lines)
    print(table)
    if args.write_doc:
        from benchmarks_doc import write_section
        units = "computed in bf16 (AVX512-BF16 or AMX)" if all(r["bf16_units"] for r in rows) else \
            "computed in f32 on the bf16-rounded weights (this CPU has no bf16 units)"
        write_section("quant-accuracy", "int8 and bf16 accuracy on MNIST (simplecnn, lenet5)",
                      f"Command: `make bench-quant` (bench/quant_accuracy.py): models trained with PyTorch {torch.__version__} on "
                      f"the 8,000 training digits ({args.epochs} epochs, Adam 1e-3, batch 256, seed 0), exported to ONNX, "
                      "quantised by `cpudl quantize` (static: calibrated on 512 training digits; bf16: weights stored bfloat16, "
                      f"{units}); top-1 accuracy on the 2,000 held-out test digits, in brackets the change from float in points. "
                      f"Machine: {cpu_model()}.\n\n" + table)


if __name__ == "__main__":
    main()
