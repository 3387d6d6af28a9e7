#!/usr/bin/env python3
"""Static int8 and bf16 CNNs: cpudl vs ONNX Runtime vs PyTorch on the same models, in one run (make bench-quant).

torchvision resnet18 and mobilenet_v2 (3x224x224, batch 1 and 16) and the zoo's lenet5 and MLP
784-1024-1024-10 (scripts/gen-golden.py, 1x28x28, batch 1 and 64), random weights, seeded, are
exported by torch.onnx.export (opset 13, dynamic batch) and quantised by `cpudl quantize --mode
static` on CALIB random images (min-max). At both batches, on 1 and 2 threads, back to back:
  cpudl         build/cpudl run MODEL --bench N --threads T --json: the fp32 file, the same file with
                --precision bf16 (where the CPU has the units), and the int8 (QDQ) file
  ONNX Runtime  npm onnxruntime-node (bench/ort_time.js, as vs_onnx.py installs it) on the fp32 file
                and on the same int8 file
  PyTorch       the fp32 model, the same under torch.autocast(bfloat16) (where cpudl has bf16
                units), and the model quantised by FX graph mode (prepare_fx/convert_fx, the
                qconfig of the first quantized engine this torch has of x86, fbgemm, onednn;
                Debian's 1.13 has onednn) calibrated on the same images; a path PyTorch fails to
                run (its onednn engine refuses some shapes) is reported as such, not hidden
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
from quant_accuracy import zoo  # noqa: E402
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


def models():
    """name -> (the module, one image's shape, the two batches timed)."""
    z = zoo()
    return {"resnet18": (torchvision.models.resnet18, (3, 224, 224), (1, 16)),
            "mobilenet_v2": (torchvision.models.mobilenet_v2, (3, 224, 224), (1, 16)),
            "lenet5": (z.LeNet5, (1, 28, 28), (1, 64)),
            "mlp": (z.MLP, (1, 28, 28), (1, 64))}


def time_torch_or_none(model, x, threads, runs, bf16=False):
    try:
        return time_torch(model, x, threads, runs, bf16)
    except RuntimeError as e:
        print(f"PyTorch failed ({str(e).splitlines()[0]}); reported as n/a", file=sys.stderr)
        return None


def ms(v):
    return "n/a" if v is None else f"{v:.1f}" if v >= 100 else f"{v:.2f}" if v >= 1 else f"{v:.3f}"


def ratio(a, b):
    return "n/a" if a is None or b is None else f"{a / b:.2f}x"


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
    ap.add_argument("--models", default="resnet18,mobilenet_v2,lenet5,mlp")
    ap.add_argument("--write-doc", action="store_true")
    args = ap.parse_args()
    os.makedirs(WORK, exist_ok=True)
    ort = ort_dir()
    machine = cpu_model()
    bf16 = None
    engine = "?"
    torch.manual_seed(0)
    makers = models()
    rows, accuracy = [], []
    for name in args.models.split(","):
        maker, shape, batches = makers[name]
        model = maker().eval()
        fp32 = os.path.join(WORK, f"{name}.onnx")
        int8 = os.path.join(WORK, f"{name}-int8.onnx")
        torch.onnx.export(model, torch.randn(1, *shape), fp32, opset_version=13, input_names=["input"],
                          output_names=["output"], dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}})
        calib = torch.randn(args.calib, *shape)
        cpath = os.path.join(WORK, f"{name}_calib.npy")
        np.save(cpath, calib.numpy())
        subprocess.run([CPUDL, "quantize", fp32, int8, "--mode", "static", "--calib", cpath], check=True, stdout=subprocess.DEVNULL)
        fresh = os.path.join(WORK, f"{name}_fresh.npy")
        np.save(fresh, torch.randn(args.calib, *shape).numpy())
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
        small = shape[1] < 100  # the MNIST-sized models take microseconds: more runs for a steady median
        for batch in batches:
            x = torch.randn(batch, *shape)
            xpath = os.path.join(WORK, f"{name}_b{batch}.npy")
            np.save(xpath, x.numpy())
            runs = (args.runs if batch == 1 else max(5, args.runs // 2)) * (10 if small else 1)
            for threads in (1, 2):
                r = {"model": name, "batch": batch, "threads": threads}
                r["cpudl_fp32"] = cpudl_ms(fp32, xpath, threads, runs)
                r["cpudl_bf16"] = cpudl_ms(fp32, xpath, threads, runs, "--precision", "bf16") if bf16 else None
                r["cpudl_int8"] = cpudl_ms(int8, xpath, threads, runs)
                r["ort_fp32"] = ort_ms(ort, fp32, xpath, threads, runs)
                r["ort_int8"] = ort_ms(ort, int8, xpath, threads, runs)
                r["torch_fp32"] = time_torch(model, x, threads, runs)
                r["torch_bf16"] = time_torch_or_none(model, x, threads, runs, bf16=True) if bf16 else None
                r["torch_int8"] = time_torch_or_none(qmodel, x, threads, runs)
                rows.append(r)
                print(json.dumps(r), flush=True)
    lines = ["| model | batch | threads | cpudl fp32 ms | cpudl bf16 ms | cpudl int8 ms | int8 speed-up | bf16 speed-up | "
             "ORT fp32 ms | ORT int8 ms | PyTorch fp32 ms | PyTorch bf16 ms | PyTorch int8 ms | cpudl int8 / ORT int8 | "
             "cpudl int8 / PyTorch int8 | cpudl bf16 / PyTorch bf16 |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['batch']} | {r['threads']} | {ms(r['cpudl_fp32'])} | {ms(r['cpudl_bf16'])} | "
                     f"{ms(r['cpudl_int8'])} | {ratio(r['cpudl_fp32'], r['cpudl_int8'])} | {ratio(r['cpudl_fp32'], r['cpudl_bf16'])} | "
                     f"{ms(r['ort_fp32'])} | {ms(r['ort_int8'])} | {ms(r['torch_fp32'])} | {ms(r['torch_bf16'])} | "
                     f"{ms(r['torch_int8'])} | {ratio(r['cpudl_int8'], r['ort_int8'])} | {ratio(r['cpudl_int8'], r['torch_int8'])} | "
                     f"{ratio(r['cpudl_bf16'], r['torch_bf16'])} |")
    table = "\n".join(lines)
    agree = "; ".join(f"{a['model']}: {100 * a['calibration']:.1f}% on the {args.calib} calibration images, "
                      f"{100 * a['fresh']:.1f}% on {args.calib} fresh ones" for a in accuracy)
    print(f"\nmachine: {machine}\ntop-1 agreement of int8 with fp32 (cpudl): {agree}")
    print(table)
    if args.write_doc:
        from benchmarks_doc import write_section
        write_section("bench-quant-cnn", "Static int8 and bf16 CNNs: cpudl vs ONNX Runtime vs PyTorch",
                      f"Machine: {machine}. Command: `make bench-quant` (bench/vs_quantized_cnn.py, {args.runs} runs at batch 1, "
                      f"{max(5, args.runs // 2)} at the larger batch, ten times as many for lenet5 and the MLP; `cpudl quantize --mode static` "
                      f"on {args.calib} random images, min-max; onnxruntime-node on the same int8 file; torch {torch.__version__} FX static "
                      f"quantisation, engine {engine}, and torch.autocast(bfloat16)). Median latency; speed-ups are over cpudl's own fp32; "
                      f"ratios of cpudl to a peer below 1.00x mean cpudl is faster; n/a: the path does not run here (no bf16 units, or "
                      f"PyTorch raised an error). Top-1 agreement of cpudl's int8 with its fp32: {agree}.\n\n" + table)


if __name__ == "__main__":
    main()
