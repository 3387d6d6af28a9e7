#!/usr/bin/env python3
"""Writes the detector fixtures of tests/onnx/detect/ (committed; CI needs neither PyTorch nor onnx).

Needs Debian's PyTorch 1.13 and torchvision 0.14:  apt-get install python3-torch python3-torchvision
Run from the repository root:                      python3 scripts/gen-detect-fixtures.py

Models, random weights (scripts/yolo_style.py; no download), snapped to 31 levels per tensor so git
stores them compressed:
  yolo_tiny_raw_opset17.onnx  a YOLOv5s-style network at width 1/16 (Conv-BN-SiLU, C3, SPPF, the
                              upsample+concat neck, three heads): output (1, 1008, 85)
  yolo_tiny_nms_opset{11,17}.onnx  the same with YOLOv5's post-processing in the graph (score
                              filter, torchvision's batched_nms -> If + NonMaxSuppression):
                              boxes (n, 4), scores (n), labels (n)
  <name>.input.npy            the input: a smooth synthetic picture, 1 x 3 x 128 x 128, in 8-bit
                              steps, which image.png holds (what `cpudl detect` reads)
  <name>.output<K>.npy        PyTorch's outputs for it
  detect_ops_opset{11,17}.onnx     every other operator detectors bring (Resize in nearest and
                              linear with each coordinate mode PyTorch exports, TopK, ReduceMax/
                              Min/Prod/Sum, ArgMax, HardSigmoid, HardSwish, Ceil, Floor, Greater,
                              Less, Tile, Range), dynamic batch: .input.npy, .output.npy
  neck_opset17.onnx           an upsample + concat neck whose channels all fill AVX-512's blocks of
                              16, so that cpudl keeps Resize and Concat in its blocked layout
"""
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from yolo_style import YoloStyle, randomize  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "onnx", "detect")


def snap(model):
    with torch.no_grad():
        for p in model.parameters():
            lo, hi = p.min(), p.max()
            if hi > lo:
                p.copy_(lo + torch.round((p - lo) / (hi - lo) * 30) / 30 * (hi - lo))


def image(size):
    """A smooth picture-like input: gradients and blobs, in 8-bit steps of [0, 1]."""
    y, x = torch.meshgrid(torch.linspace(0, 1, size), torch.linspace(0, 1, size), indexing="ij")
    r = torch.sin(6 * x) * 0.5 + 0.5
    g = torch.exp(-((x - 0.3) ** 2 + (y - 0.6) ** 2) * 20)
    b = (torch.cos(9 * y + 3 * x) * 0.5 + 0.5) * 0.8
    return (torch.round(torch.stack((r, g, b)) * 255) / 255).unsqueeze(0).contiguous()


def write_png(path, x):
    """An RGB PNG of a 1 x 3 x H x W tensor in [0, 1] (zlib by hand: no imaging library needed)."""
    import struct
    import zlib
    a = (x[0].permute(1, 2, 0).numpy() * 255).round().astype(np.uint8)
    raw = b"".join(b"\x00" + a[row].tobytes() for row in range(a.shape[0]))

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", a.shape[1], a.shape[0], 8, 2, 0, 0, 0)
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def export(name, model, x, opset):
    base = os.path.join(OUT, name)
    with torch.no_grad():
        y = model(x)
    ys = list(y) if isinstance(y, tuple) else [y]
    names = ["boxes", "scores", "labels"] if len(ys) == 3 else ["output"]
    torch.onnx.export(model, x, base + ".onnx", opset_version=opset, input_names=["images"], output_names=names)
    np.save(base + ".input.npy", x.numpy())
    for k, t in enumerate(ys):
        np.save(f"{base}.output{k}.npy", t.numpy())
    print(f"{name}: outputs {[tuple(t.shape) for t in ys]}")


class DetectOps(torch.nn.Module):
    def forward(self, x):  # x: N x 4 x 6 x 6
        F = torch.nn.functional
        n = x.shape[0]
        pieces = [
            F.interpolate(x, scale_factor=2, mode="nearest"),
            F.interpolate(x, size=(9, 11), mode="nearest"),
            F.interpolate(x, size=(9, 11), mode="bilinear", align_corners=False),
            F.interpolate(x, scale_factor=1.5, mode="bilinear", align_corners=True),
            F.interpolate(x, size=(3, 4), mode="bilinear", align_corners=False),
            F.hardsigmoid(x),
            F.hardswish(x),
            torch.ceil(x * 3),
            torch.floor(x * 3),
            x.repeat(1, 2, 1, 3),
            torch.topk(x.flatten(1), 5)[0],
            torch.topk(x.flatten(1), 3, largest=False)[1].float(),
            x.amax(dim=(2, 3)),
            x.amin(dim=1),
            x[:, :2].prod(dim=1),
            x.sum(dim=3, keepdim=True),
            x.argmax(dim=1).float(),
            (x > 0.1).float() + (x < -0.2).float() * 2,
            torch.arange(n, dtype=torch.float32).view(n, 1) * x[:, :, 0, 0],
        ]
        return torch.cat([p.reshape(n, -1) for p in pieces], 1)


class Neck(torch.nn.Module):
    def __init__(self):
        super().__init__()
        from yolo_style import Conv
        self.stem, self.down, self.mix = Conv(3, 16, 3), Conv(16, 32, 3, 2), Conv(48, 16, 1)
        self.up = torch.nn.Upsample(scale_factor=2, mode="nearest")

    def forward(self, x):
        a = self.stem(x)
        b = self.down(a)
        c = torch.nn.functional.interpolate(b, scale_factor=2, mode="bilinear", align_corners=False)
        return self.mix(torch.cat((self.up(b) + c, a), 1))


def main():
    os.makedirs(OUT, exist_ok=True)
    torch.manual_seed(0)
    x = image(128)
    write_png(os.path.join(OUT, "image.png"), x)
    raw = randomize(YoloStyle(nc=80, width=0.0625), seed=1)
    snap(raw)
    export("yolo_tiny_raw_opset17", raw, x, 17)
    nms = YoloStyle(nc=80, width=0.0625, nms=True, conf=0.3, iou=0.45, max_det=300)
    nms.load_state_dict(raw.state_dict())
    nms.eval()
    for opset in (11, 17):
        export(f"yolo_tiny_nms_opset{opset}", nms, x, opset)
    neck = randomize(Neck(), seed=2)
    base = os.path.join(OUT, "neck_opset17")
    neck_input = torch.rand(2, 3, 16, 16)
    torch.onnx.export(neck, neck_input, base + ".onnx", opset_version=17, input_names=["input"], output_names=["output"])
    np.save(base + ".input.npy", neck_input.numpy())
    np.save(base + ".output.npy", neck(neck_input).detach().numpy())
    ops_input = torch.randn(3, 4, 6, 6)
    for opset in (11, 17):
        base = os.path.join(OUT, f"detect_ops_opset{opset}")
        torch.onnx.export(DetectOps(), ops_input, base + ".onnx", opset_version=opset, input_names=["input"],
                          output_names=["output"], dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}})
        np.save(base + ".input.npy", ops_input.numpy())
        np.save(base + ".output.npy", DetectOps()(ops_input).numpy())


if __name__ == "__main__":
    main()
