#!/usr/bin/env python3
"""Static int8 CNNs: cpudl vs ONNX Runtime vs PyTorch on the same models, in one run (make bench-quant).

torchvision resnet18 and mobilenet_v2 (random weights, seeded; 3x224x224) are exported by
torch.onnx.export (opset 13, dynamic batch) and quantised by `cpudl quantize --mode static` on
CALIB random images (min-max). At batch 1 and 16, on 1 and 2 threads, back to back:
  cpudl         build/cpudl run MODEL --bench N --threads T --json: the fp32 file, the same file with
                --precision bf16 (where the CPU has the units), and the int8 (QDQ) file
  ONNX Runtime  npm onnxruntime-node (bench/ort_time.js, as vs_onnx.py installs it) on the fp32 file
                and on the same int8 file
  PyTorch       the fp32 model, and the model quantised by FX graph mode (prepare_fx/convert_fx,
                the qconfig of the first quantized engine this torch has of x86, fbgemm, onednn;
                Debian's 1.13 has onednn) calibrated on the same images
Latency is the median of N runs after warm-up. Accuracy: top-1 agreement of cpudl's int8 run with
its fp32 run on the CALIB calibration images, and on as many fresh images.
Results go to stdout and, with --write-doc, into docs/BENCHMARKS.md between the quant-cnn markers.
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np
import torch
import torchvision

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from vs_onnx import CPUDL, ROOT, cpu_model, ort_dir, time_torch  # noqa: E402
from vs_quantized import cpudl_us, ort_us  # noqa: E402

WORK = os.path.join(ROOT, "build", "bench-quant")


def cpudl_ms(path, xpath, threads, runs, *extra):
    return cpudl_us(path, xpath, threads, runs, *extra) / 1e3


def ort_ms(ort, path, xpath, threads, runs):
    return ort_us(ort, path, xpath, threads, runs) / 1e3


def top1(path, xpath, out):
    subprocess.run([CPUDL, "run", path, "--input", xpath, "--output", out], check=True, capture_output=True)
    return np.load(out).argmax(axis=1)


def torch_int8(model, calib):
    from torch.ao.quantization import get_default_qconfig_mapping
    from torch.ao.quantization.quantize_fx import convert_fx, prepare_fx
    engine = next(e for e in ("x86", "fbgemm", "onednn", "qnnpack") if e in torch.backends.quantized.supported_engines)
    torch.backends.quantized.engine = engine
    prepared = prepare_fx(model, get_default_qconfig_mapping(engine), example_inputs=(calib[:1],))
    with torch.no_grad():
        for i in range(0, len(calib), 16):
            prepared(calib[i:i + 16])
    return convert_fx(prepared), engine


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--calib", type=int, default=256, help="calibration images (also the agreement check)")
    ap.add_argument("--models", default="resnet18,mobilenet_v2")
    ap.add_argument("--write-doc", action="store_true")
    args = ap.parse_args()
    os.makedirs(WORK, exist_ok=True)
    ort = ort_dir()
    machine = cpu_model()
    bf16 = None
    engine = "?"
    torch.manual_seed(0)
    makers = {"resnet18": torchvision.models.resnet18, "mobilenet_v2": torchvision.models.mobilenet_v2}
    rows, accuracy = [], []
    for name in args.models.split(","):
        model = makers[name]().eval()
        fp32 = os.path.join(WORK, f"{name}.onnx")
        int8 = os.path.join(WORK, f"{name}-int8.onnx")
        torch.onnx.export(model, torch.randn(1, 3, 224, 224), fp32, opset_version=13, input_names=["input"],
                          output_names=["output"], dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}})
        calib = torch.randn(args.calib, 3, 224, 224)
        cpath = os.path.join(WORK, f"{name}_calib.npy")
        np.save(cpath, calib.numpy())
        subprocess.run([CPUDL, "quantize", fp32, int8, "--mode", "static", "--calib", cpath], check=True, stdout=subprocess.DEVNULL)
        fresh = os.path.join(WORK, f"{name}_fresh.npy")
        np.save(fresh, torch.randn(args.calib, 3, 224, 224).numpy())
        agree = {}
        for tag, xs in (("calibration", cpath), ("fresh", fresh)):
            a = top1(fp32, xs, os.path.join(WORK, "fp32_out.npy"))
            b = top1(int8, xs, os.path.join(WORK, "int8_out.npy"))
            agree[tag] = float((a == b).mean())
        accuracy.append({"model": name, **agree})
        print(json.dumps(accuracy[-1]), flush=True)
        if bf16 is None:
            bf16 = subprocess.run([CPUDL, "info", fp32, "--precision", "bf16"], capture_output=True).returncode == 0
        qmodel, engine = torch_int8(model, calib[:64])
        for batch in (1, 16):
            x = torch.randn(batch, 3, 224, 224)
            xpath = os.path.join(WORK, f"{name}_b{batch}.npy")
            np.save(xpath, x.numpy())
            runs = args.runs if batch == 1 else max(5, args.runs // 2)
            for threads in (1, 2):
                r = {"model": name, "batch": batch, "threads": threads}
                r["cpudl_fp32"] = cpudl_ms(fp32, xpath, threads, runs)
                r["cpudl_bf16"] = cpudl_ms(fp32, xpath, threads, runs, "--precision", "bf16") if bf16 else None
                r["cpudl_int8"] = cpudl_ms(int8, xpath, threads, runs)
                r["ort_fp32"] = ort_ms(ort, fp32, xpath, threads, runs)
                r["ort_int8"] = ort_ms(ort, int8, xpath, threads, runs)
                r["torch_fp32"] = time_torch(model, x, threads, runs)
                r["torch_int8"] = time_torch(qmodel, x, threads, runs)
                rows.append(r)
                print(json.dumps(r), flush=True)
    lines = ["| model | batch | threads | cpudl fp32 ms | cpudl bf16 ms | cpudl int8 ms | int8 speed-up | ORT fp32 ms | ORT int8 ms | "
             "PyTorch fp32 ms | PyTorch int8 ms | cpudl int8 / ORT int8 | cpudl int8 / PyTorch int8 |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        b = f"{r['cpudl_bf16']:.2f}" if r["cpudl_bf16"] else "n/a"
        lines.append(f"| {r['model']} | {r['batch']} | {r['threads']} | {r['cpudl_fp32']:.2f} | {b} | {r['cpudl_int8']:.2f} | "
                     f"{r['cpudl_fp32'] / r['cpudl_int8']:.2f}x | {r['ort_fp32']:.2f} | {r['ort_int8']:.2f} | {r['torch_fp32']:.2f} | "
                     f"{r['torch_int8']:.2f} | {r['cpudl_int8'] / r['ort_int8']:.2f}x | {r['cpudl_int8'] / r['torch_int8']:.2f}x |")
    table = "\n".join(lines)
    agree = "; ".join(f"{a['model']}: {100 * a['calibration']:.1f}% on the {args.calib} calibration images, "
                      f"{100 * a['fresh']:.1f}% on {args.calib} fresh ones" for a in accuracy)
    print(f"\nmachine: {machine}\ntop-1 agreement of int8 with fp32 (cpudl): {agree}")
    print(table)
    if args.write_doc:
        from benchmarks_doc import write_section
        write_section("bench-quant-cnn", f"Static int8 CNNs: cpudl vs ONNX Runtime vs PyTorch ({machine})",
                      f"Command: `make bench-quant` (bench/vs_quantized_cnn.py, {args.runs} runs at batch 1, {max(5, args.runs // 2)} "
                      f"at batch 16; `cpudl quantize --mode static` on {args.calib} random images, min-max; onnxruntime-node on the "
                      f"same int8 file; torch {torch.__version__} FX static quantisation, engine {engine}). Median latency; ratios below 1.00x "
                      f"mean cpudl is faster. Top-1 agreement of cpudl's int8 with its fp32: {agree}.\n\n" + table)


if __name__ == "__main__":
    main()
