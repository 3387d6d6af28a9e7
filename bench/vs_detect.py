#!/usr/bin/env python3
"""cpudl vs ONNX Runtime on detectors, same ONNX files and inputs, in one run (part of make bench-onnx).

Models (random weights, no download; scripts/yolo_style.py): the YOLOv5s-style network at full
size (width 0.50, depth 0.33, 80 classes, 7.2M parameters), exported by torch.onnx.export (opset 17)
  - with its post-processing in the graph (score filter 0.25, batched_nms IoU 0.45 -> If +
    NonMaxSuppression), batch 1, at 320 and 640;
  - raw (dynamic batch, [batch, candidates, 85] out), at 320 and 640, batch 1 and 8;
torchvision's ssdlite320_mobilenet_v3_large (random weights, opset 11, one [3, 320, 320] image, its
post-processing in the graph: TopK, NonMaxSuppression), batch 1; and a NonMaxSuppression-only model at YOLOv5s 640's size: 25,200 boxes (a constant, in clusters)
x 80 classes (the input), score threshold 0.25, IoU 0.45, at most 100 per class, with scores of two
densities: about 1,000 of the 2M above the threshold (the order of what a trained detector finds
in a busy picture) and about 14,000 (ten times that, a stress case for the greedy pass).
Each engine on 1 and 2 threads, back to back; for the raw models at batch 1 also cpudl in bf16
(`--precision bf16`, where the CPU has AMX or AVX512-BF16) and in int8 (`cpudl quantize --mode
static` calibrated on four variants of the input picture), beside ONNX Runtime in fp32:
  cpudl         build/cpudl run MODEL --input X.npy --bench N --threads T --json
  ONNX Runtime  npm onnxruntime-node (bench/ort_time.js), as vs_onnx.py installs it
NMS time is also taken from cpudl's own profile of the post-processed models (CPUDL_PROFILE=1:
the If that holds the NonMaxSuppression, the NonZero before it). Latency is the median; the
machine is shared, so ratios of one run hold and absolute times drift. With --write-doc the
tables go into docs/BENCHMARKS.md between the detect markers.
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from vs_onnx import CPUDL, WORK, ort_dir, cpu_model  # noqa: E402
from yolo_style import YoloStyle, randomize  # noqa: E402

OUT = os.path.join(WORK, "detect")


def picture(size, batch):
    y, x = torch.meshgrid(torch.linspace(0, 1, size), torch.linspace(0, 1, size), indexing="ij")
    img = torch.stack((torch.sin(6 * x) * 0.5 + 0.5, torch.exp(-((x - 0.3) ** 2 + (y - 0.6) ** 2) * 20),
                       (torch.cos(9 * y + 3 * x) * 0.5 + 0.5) * 0.8))
    return img.unsqueeze(0).repeat(batch, 1, 1, 1).contiguous()


def export_models():
    os.makedirs(OUT, exist_ok=True)
    raw = randomize(YoloStyle(nc=80, width=0.5, depth=0.33), seed=1)
    nms = YoloStyle(nc=80, width=0.5, depth=0.33, nms=True, conf=0.25, iou=0.45, max_det=300)
    nms.load_state_dict(raw.state_dict())
    nms.eval()
    files = {}
    for size in (320, 640):
        x = picture(size, 1)
        path = os.path.join(OUT, f"yolo_s_nms_{size}.onnx")
        if not os.path.exists(path):
            torch.onnx.export(nms, x, path, opset_version=17, input_names=["images"],
                              output_names=["boxes", "scores", "labels"])
        files[("nms", size)] = path
        path = os.path.join(OUT, f"yolo_s_raw_{size}.onnx")
        if not os.path.exists(path):
            torch.onnx.export(raw, x, path, opset_version=17, input_names=["images"], output_names=["output"],
                              dynamic_axes={"images": {0: "batch"}, "output": {0: "batch"}})
        files[("raw", size)] = path
    import torchvision
    path = os.path.join(OUT, "ssdlite320.onnx")
    if not os.path.exists(path):
        torch.manual_seed(0)
        model = torchvision.models.detection.ssdlite320_mobilenet_v3_large(weights=None, weights_backbone=None).eval()
        torch.onnx.export(model, ([picture(320, 1)[0]],), path, opset_version=11, input_names=["image"])
    files[("ssdlite", 320)] = path
    return files


def nms_model(power):
    """NonMaxSuppression alone: boxes a constant, scores [1, 80, 25200] the input, uniform^power
    (P(score > 0.25) = 1 - 0.25^(1/power))."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    n, classes = 25200, 80
    centres = rng.integers(0, 20, size=(n, 2)) * 32 + rng.uniform(0, 8, size=(n, 2))
    sizes = rng.uniform(10, 120, size=(n, 2))
    boxes = np.concatenate((centres - sizes / 2, centres + sizes / 2), 1)[:, [1, 0, 3, 2]].astype(np.float32)
    scores = (rng.uniform(0, 1, size=(1, classes, n)) ** power).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("NonMaxSuppression", ["boxes", "scores", "max", "iou", "score"], ["selected"])],
        "nms", [helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, classes, n])],
        [helper.make_tensor_value_info("selected", TensorProto.INT64, None)],
        [numpy_helper.from_array(boxes[None], "boxes"), numpy_helper.from_array(np.array([100], np.int64), "max"),
         numpy_helper.from_array(np.array([0.45], np.float32), "iou"),
         numpy_helper.from_array(np.array([0.25], np.float32), "score")])
    path = os.path.join(OUT, "nms_25200x80.onnx")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    np.save(os.path.join(OUT, f"nms_scores_{power}.npy"), scores)
    return path, os.path.join(OUT, f"nms_scores_{power}.npy"), int((scores > 0.25).sum())


def time_cpudl(model, x, threads, runs, profile=False):
    env = dict(os.environ, CPUDL_GOVERNOR="off")
    if profile:
        env["CPUDL_PROFILE"] = "1"
    r = subprocess.run([CPUDL, "run", model, "--input", x, "--bench", str(runs), "--threads", str(threads), "--json"],
                       check=True, capture_output=True, text=True, env=env)
    return json.loads(r.stdout)["median_ms"], r.stderr


def bf16_available():
    doctor = subprocess.run([CPUDL, "doctor", "--json"], capture_output=True, text=True).stdout
    isa = json.loads(doctor).get("isa", {})
    return bool(isa.get("avx512_bf16") or isa.get("amx_bf16"))


def quantized(model, size):
    path = model.replace(".onnx", "_int8.onnx")
    if not os.path.exists(path):
        x = picture(size, 1).numpy()
        calib = os.path.join(OUT, f"calib_{size}.npy")
        np.save(calib, np.concatenate([x, x[:, :, ::-1], x[:, :, :, ::-1], x * 0.8]).astype(np.float32))
        subprocess.run([CPUDL, "quantize", model, path, "--mode", "static", "--calib", calib], check=True,
                       capture_output=True)
    return path


def time_ort(model, x, threads, runs):
    out = subprocess.run(["node", os.path.join(ROOT, "bench", "ort_time.js"), model, x, str(threads), str(runs)],
                         check=True, capture_output=True, text=True, cwd=ort_dir(),
                         env=dict(os.environ, NODE_PATH=os.path.join(ort_dir(), "node_modules"))).stdout
    return json.loads(out)["median_ms"]


def profiled_ms(stderr, ops):
    """Milliseconds per call of `ops` from cpudl's CPUDL_PROFILE table (op, calls, ms/call, ...)."""
    total = 0.0
    for line in stderr.splitlines():
        parts = line.split()
        if parts and parts[0] in ops and len(parts) >= 3:
            try:
                total += float(parts[2])
            except ValueError:
                pass
    return total


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--write-doc", action="store_true")
    args = ap.parse_args()
    files = export_models()
    rows, low_rows = [], []
    for kind, size, batch in (("nms", 320, 1), ("nms", 640, 1), ("raw", 320, 1), ("raw", 640, 1), ("raw", 320, 8),
                              ("raw", 640, 8)):
        x = os.path.join(OUT, f"x_{size}_{batch}.npy")
        np.save(x, picture(size, batch).numpy())
        for threads in (1, 2):
            runs = max(3, args.runs // (4 if batch > 1 or size > 320 else 1))
            ours, stderr = time_cpudl(files[(kind, size)], x, threads, runs, profile=kind == "nms")
            ours_plain, _ = time_cpudl(files[(kind, size)], x, threads, runs)
            theirs = time_ort(files[(kind, size)], x, threads, runs)
            post = profiled_ms(stderr, ("If", "NonZero")) if kind == "nms" else None
            rows.append((f"yolov5s-style {'+ NMS' if kind == 'nms' else 'raw'}", size, batch, threads, ours_plain, theirs, post))
            print(rows[-1], file=sys.stderr)
            if kind == "raw" and batch == 1:
                low = []
                if bf16_available():
                    r = subprocess.run([CPUDL, "run", files[(kind, size)], "--input", x, "--bench", str(runs), "--threads",
                                        str(threads), "--precision", "bf16", "--json"], check=True, capture_output=True,
                                       text=True, env=dict(os.environ, CPUDL_GOVERNOR="off"))
                    low.append(("bf16", json.loads(r.stdout)["median_ms"]))
                int8_ms, _ = time_cpudl(quantized(files[(kind, size)], size), x, threads, runs)
                low.append(("int8", int8_ms))
                low_rows.append((size, threads, theirs, low))
                print(low_rows[-1], file=sys.stderr)
    x = os.path.join(OUT, "x_ssdlite.npy")
    np.save(x, picture(320, 1)[0].numpy())
    for threads in (1, 2):
        ours, _ = time_cpudl(files[("ssdlite", 320)], x, threads, args.runs)
        theirs = time_ort(files[("ssdlite", 320)], x, threads, args.runs)
        rows.append(("ssdlite320_mobilenet_v3_large", 320, 1, threads, ours, theirs, None))
        print(rows[-1], file=sys.stderr)
    nms_rows = []
    for power in (2800, 200):
        nms_path, scores, candidates = nms_model(power)
        for threads in (1, 2):
            ours, _ = time_cpudl(nms_path, scores, threads, args.runs * 10)
            theirs = time_ort(nms_path, scores, threads, args.runs * 10)
            nms_rows.append((candidates, threads, ours, theirs))
            print(nms_rows[-1], file=sys.stderr)

    lines = [f"Machine: {cpu_model()}. Command: `/usr/bin/python3 bench/vs_detect.py` (part of `make bench-onnx`). "
             "Median latency in ms; ratio = cpudl / ONNX Runtime (below 1: cpudl faster). Models: scripts/yolo_style.py "
             "at YOLOv5s size, random weights, opset 17; `+ NMS`: YOLOv5's post-processing exported into the graph "
             "(If + NonMaxSuppression), `post` = cpudl's time in it (CPUDL_PROFILE). Random weights put tens of "
             "thousands of boxes above the 0.25 threshold, where a trained detector finds hundreds: the "
             "in-graph NMS rows time that worst case (NMS alone at a trained detector's density is below).", "",
             "| model | size | batch | threads | cpudl ms | ORT ms | ratio | cpudl post ms |", "|---|---|---|---|---|---|---|---|"]
    for name, size, batch, threads, ours, theirs, post in rows:
        lines.append(f"| {name} | {size} | {batch} | {threads} | {ours:.2f} | {theirs:.2f} | {ours / theirs:.2f} | "
                     f"{'' if post is None else f'{post:.3f}'} |")
    lines += ["", "Low precision, raw model, batch 1: cpudl in bf16 and static int8 against ONNX Runtime in fp32 "
              "(ratio = cpudl / ORT):", "", "| size | threads | ORT fp32 ms | cpudl | ms | ratio |", "|---|---|---|---|---|---|"]
    for size, threads, theirs, low in low_rows:
        for precision, ms in low:
            lines.append(f"| {size} | {threads} | {theirs:.2f} | {precision} | {ms:.2f} | {ms / theirs:.2f} |")
    lines += ["", "NonMaxSuppression alone (`cpudl run --bench` of a one-node model), 25,200 boxes x 80 classes, "
              "score threshold 0.25, IoU 0.45, at most 100 per class:", "",
              "| scores above 0.25 | threads | cpudl ms | ORT ms | ratio |", "|---|---|---|---|---|"]
    for candidates, threads, ours, theirs in nms_rows:
        lines.append(f"| {candidates} | {threads} | {ours:.3f} | {theirs:.3f} | {ours / theirs:.2f} |")
    body = "\n".join(lines)
    print(body)
    if args.write_doc:
        from benchmarks_doc import write_section
        write_section("detect", "Detectors: cpudl vs ONNX Runtime", body)


if __name__ == "__main__":
    main()
