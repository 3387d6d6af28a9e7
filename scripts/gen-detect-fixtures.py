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
  detect_ops2_opset11.onnx    the operators torchvision's detectors add: Max, Min, Mod, And, Or, Xor,
                              Not, Reciprocal, Abs, ScatterElements, RoiAlign (two inputs: .input.npy,
                              .input1.npy). Opset 11 only: torchvision 0.14 writes RoiAlign without
                              coordinate_transformation_mode at every opset, and from opset 16 ONNX's
                              default for it is half_pixel, not the aligned=False that PyTorch
                              computes (ONNX Runtime and cpudl follow the standard).
  ssdlite_opset11.onnx        torchvision's SSDlite (ssdlite320_mobilenet_v3_large's architecture:
                              its head, anchors, box coder and post-processing) on a MobileNetV3-
                              Large backbone at width 0.25, 20 classes, random weights spread so
                              that no two scores tie: boxes, scores, labels
  fasterrcnn_opset11.onnx     torchvision's Faster R-CNN (the mobilenet_v3_large_320_fpn recipe: FPN
                              backbone, RPN with its NMS, MultiScaleRoIAlign, box head and per-class
                              NMS) on a width-0.25 MobileNetV3 with a 64-wide box head, 20 classes:
                              boxes, labels, scores
  retinanet_opset11.onnx      torchvision's RetinaNet (the retinanet_resnet50_fpn recipe: ResNet-50's
                              Bottleneck stages, FrozenBatchNorm, FPN on C3-C5 with P6/P7, the
                              classification and regression heads, 9 anchors per place, per-level
                              top-k and batched NMS) at 1/8 width with one block per stage and a
                              32-channel FPN, 20 classes: boxes, scores, labels
  neck_opset17.onnx           an upsample + concat neck whose channels all fill AVX-512's blocks of
                              16, so that cpudl keeps Resize and Concat in its blocked layout
  loops_opset13.onnx          scripted code with loops (TorchScript -> ONNX Loop): a for loop over
                              a dynamic dimension (trip count from Shape, the rows read through an
                              outer-scope value) and a while loop on a condition computed in its
                              body (an If inside the Loop): inputs x (rows x 3 x 4) and n (int64);
                              three cases, .case<C>.input<I>.npy and .case<C>.output<K>.npy

`--only NAME[,NAME]` writes only those fixtures (yolo, neck, ops2, ssdlite, fasterrcnn,
retinanet, ops, loops),
leaving the others' files as they are (retinanet included).
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


class DetectOps2(torch.nn.Module):
    def forward(self, x, boxes):  # x: 2 x 4 x 8 x 8, boxes: 5 x 4 (corners inside the map)
        import torchvision
        n = x.shape[0]
        flat = x.reshape(n, -1)
        mask = flat > 0.2
        idx = torch.tensor([[0, 3], [1, 2], [0, 1]])
        scattered = torch.zeros(n, 256).scatter(1, torch.tensor([[3, 1, 7], [0, 2, 9]]), flat[:, :3])
        put = torch.zeros(4, 3).index_put((torch.tensor([2, 0]),), torch.ones(2, 3))
        rois = torch.cat((torch.tensor([[0.0], [1.0], [0.0], [1.0], [0.0]]), boxes), 1)
        pieces = [
            torch.maximum(flat, flat.flip(1)), torch.minimum(flat, torch.tensor(0.3)),
            torch.fmod(flat * 7, 2.5), torch.remainder(torch.arange(-6, 6), 4).float().expand(n, -1),
            (mask & flat.flip(1).gt(0)).float(), (mask | flat.lt(-0.5)).float(), torch.logical_xor(mask, flat.lt(0.5)).float(),
            (~mask).float(), torch.reciprocal(flat.abs() + 1),
            x[:, 1, 2:4].reshape(n, -1), x.reshape(n, 4, -1)[idx[:, 0], idx[:, 1]].reshape(1, -1).expand(n, -1),
            scattered, put.reshape(1, -1).expand(n, -1),
            torchvision.ops.roi_align(x, rois, output_size=(3, 2), spatial_scale=0.5, sampling_ratio=2).reshape(1, -1).expand(n, -1),
            torchvision.ops.roi_align(x, rois, output_size=2, spatial_scale=1.0, sampling_ratio=0).reshape(1, -1).expand(n, -1),
        ]
        return torch.cat([p.reshape(n, -1) for p in pieces], 1)


def spread_weights(model, seed):
    """Random weights and BatchNorm statistics that make a detector's scores distinct (torchvision's
    own initialisation gives many equal scores, whose NMS order no engine defines). Batch norm
    statistics are drawn for trainable and frozen layers (torchvision's detection ResNets)."""
    from torchvision.ops.misc import FrozenBatchNorm2d
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.Conv2d):
                fan_in = m.in_channels // m.groups * m.kernel_size[0] * m.kernel_size[1]
                m.weight.copy_(torch.randn(m.weight.shape, generator=g) * (2.0 / fan_in) ** 0.5)
                if m.bias is not None:
                    m.bias.copy_(torch.randn(m.bias.shape, generator=g) * 0.3)
            elif isinstance(m, (torch.nn.BatchNorm2d, FrozenBatchNorm2d)):
                m.weight.copy_(1 + 0.1 * torch.randn(m.weight.shape, generator=g))
                m.bias.copy_(0.1 * torch.randn(m.bias.shape, generator=g))
                m.running_mean.copy_(0.1 * torch.randn(m.running_mean.shape, generator=g))
                m.running_var.copy_(1 + 0.2 * torch.rand(m.running_var.shape, generator=g))
    return model.eval()


def ssdlite():
    """ssdlite320_mobilenet_v3_large as torchvision builds it, on a narrower backbone."""
    from functools import partial
    import torchvision
    from torchvision.models.detection import _utils as det_utils
    from torchvision.models.detection.anchor_utils import DefaultBoxGenerator
    from torchvision.models.detection.ssd import SSD
    from torchvision.models.detection.ssdlite import SSDLiteHead, _mobilenet_extractor
    norm = partial(torch.nn.BatchNorm2d, eps=0.001, momentum=0.03)
    backbone = torchvision.models.mobilenet_v3_large(weights=None, norm_layer=norm, reduced_tail=True, width_mult=0.25)
    backbone = _mobilenet_extractor(backbone, 6, norm)
    anchors = DefaultBoxGenerator([[2, 3] for _ in range(6)], min_ratio=0.2, max_ratio=0.95)
    channels = det_utils.retrieve_out_channels(backbone, (320, 320))
    model = SSD(backbone, anchors, (320, 320), 20, head=SSDLiteHead(channels, anchors.num_anchors_per_location(), 20, norm),
                score_thresh=0.001, nms_thresh=0.55, detections_per_img=300, topk_candidates=300,
                image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5])
    return spread_weights(model, 3)


def fasterrcnn():
    """fasterrcnn_mobilenet_v3_large_320_fpn as torchvision builds it, narrower."""
    from functools import partial
    import torchvision
    from torchvision.models.detection import FasterRCNN
    from torchvision.models.detection.anchor_utils import AnchorGenerator
    from torchvision.models.detection.backbone_utils import _mobilenet_extractor
    from torchvision.models.detection.faster_rcnn import FastRCNNPredictor, TwoMLPHead
    backbone = torchvision.models.mobilenet_v3_large(weights=None, norm_layer=partial(torch.nn.BatchNorm2d, eps=0.001),
                                                     width_mult=0.25)
    backbone = _mobilenet_extractor(backbone, True, 6)
    sizes = ((32, 64, 128, 256, 512),) * 3
    model = FasterRCNN(backbone, None, rpn_anchor_generator=AnchorGenerator(sizes, ((0.5, 1.0, 2.0),) * 3),
                       min_size=320, max_size=320, rpn_pre_nms_top_n_test=150, rpn_post_nms_top_n_test=150,
                       rpn_score_thresh=0.05, box_head=TwoMLPHead(256 * 7 * 7, 64),
                       box_predictor=FastRCNNPredictor(64, 20), box_score_thresh=0.05)
    spread_weights(model, 4)
    with torch.no_grad():
        g = torch.Generator().manual_seed(5)
        for m in model.modules():
            if isinstance(m, torch.nn.Linear):
                m.weight.copy_(torch.randn(m.weight.shape, generator=g) * (1.0 / m.in_features) ** 0.5)
                m.bias.copy_(torch.randn(m.bias.shape, generator=g) * 0.3)
        # Box deltas as a trained model predicts them, small: the box coder's exp() would otherwise
        # turn float rounding into visible box differences (in every engine).
        for layer in (model.rpn.head.bbox_pred, model.roi_heads.box_predictor.bbox_pred):
            layer.weight.mul_(0.05)
            layer.bias.mul_(0.05)
    return model.eval()


def narrow_resnet50(base=8, blocks=(1, 1, 1, 1)):
    """ResNet-50's structure (stem, four stages of Bottleneck blocks of expansion 4, frozen batch
    norm as torchvision's detection backbones use) at `base` channels instead of 64."""
    from collections import OrderedDict
    from torchvision.models.resnet import Bottleneck
    from torchvision.ops.misc import FrozenBatchNorm2d
    layers = OrderedDict(conv1=torch.nn.Conv2d(3, base, 7, 2, 3, bias=False), bn1=FrozenBatchNorm2d(base),
                         relu=torch.nn.ReLU(inplace=True), maxpool=torch.nn.MaxPool2d(3, 2, 1))
    inplanes = base
    for i, n in enumerate(blocks):
        planes, stride = base * 2 ** i, 1 if i == 0 else 2
        down = torch.nn.Sequential(torch.nn.Conv2d(inplanes, planes * 4, 1, stride, bias=False),
                                   FrozenBatchNorm2d(planes * 4))
        stage = [Bottleneck(inplanes, planes, stride, down, norm_layer=FrozenBatchNorm2d)]
        inplanes = planes * 4
        stage += [Bottleneck(inplanes, planes, norm_layer=FrozenBatchNorm2d) for _ in range(n - 1)]
        layers[f"layer{i + 1}"] = torch.nn.Sequential(*stage)
    return torch.nn.Sequential(layers), [base * 4 * 2 ** i for i in range(4)]


def retinanet():
    """retinanet_resnet50_fpn as torchvision builds it, on a narrow ResNet-50."""
    from torchvision.models.detection import RetinaNet
    from torchvision.models.detection.backbone_utils import BackboneWithFPN
    from torchvision.ops.feature_pyramid_network import LastLevelP6P7
    body, widths = narrow_resnet50()
    fpn = 32
    backbone = BackboneWithFPN(body, {"layer2": "0", "layer3": "1", "layer4": "2"}, widths[1:], fpn,
                               extra_blocks=LastLevelP6P7(fpn, fpn))
    model = RetinaNet(backbone, 20, min_size=320, max_size=320, score_thresh=0.05, nms_thresh=0.5,
                      detections_per_img=100, topk_candidates=200)
    spread_weights(model, 6)
    with torch.no_grad():
        # Small box deltas (as for Faster R-CNN), and class logits below zero as RetinaNet's prior
        # sets them: large random logits saturate the sigmoid at 1.0, and equal scores have no
        # defined NMS order.
        model.head.regression_head.bbox_reg.weight.mul_(0.05)
        model.head.regression_head.bbox_reg.bias.mul_(0.05)
        model.head.classification_head.cls_logits.weight.mul_(0.03)
        model.head.classification_head.cls_logits.bias.sub_(2.0)
    return model.eval()


def export_torchvision(name, model, picture, keys):
    snap(model)
    with torch.no_grad():
        out = model([picture])[0]
    base = os.path.join(OUT, f"{name}_opset11")
    torch.onnx.export(model, ([picture],), base + ".onnx", opset_version=11, input_names=["image"], output_names=keys)
    np.save(base + ".input.npy", picture.numpy())
    for k, key in enumerate(keys):
        np.save(f"{base}.output{k}.npy", out[key].numpy())
    scores = out["scores"].numpy()
    print(f"{name}: {len(scores)} detections, closest scores {np.diff(np.sort(scores)).min():.2e} apart")


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


class Loops(torch.nn.Module):
    """Loops as scripted code writes them: TorchScript keeps them, and the export makes ONNX Loops."""

    def forward(self, x, n):
        h = torch.zeros_like(x[0])
        for i in range(x.size(0)):  # the trip count: a dynamic dimension
            h = torch.tanh(h * 0.5 + x[i] * float(i + 1))
        k = n - n  # (zeros_like(n) exports as a float ConstantOfShape)
        while bool(k < n) and bool(h.sum() > -100.0):  # a condition computed in the body
            h = h * 0.9 + 0.1
            k = k + 1
        return h, k


def loops():
    base = os.path.join(OUT, "loops_opset13")
    model = torch.jit.script(Loops())
    g = torch.Generator().manual_seed(13)
    cases = [(torch.randn(5, 3, 4, generator=g), 3), (torch.randn(7, 3, 4, generator=g), 0),
             (torch.randn(2, 3, 4, generator=g), 40)]
    torch.onnx.export(model, (cases[0][0], torch.tensor(cases[0][1])), base + ".onnx", opset_version=13,
                      input_names=["x", "n"], output_names=["h", "k"], dynamic_axes={"x": {0: "rows"}})
    for c, (x, n) in enumerate(cases):
        n = torch.tensor(n)
        for i, t in enumerate((x, n)):
            np.save(f"{base}.case{c}.input{i}.npy", t.numpy())
        for k, t in enumerate(model(x, n)):
            np.save(f"{base}.case{c}.output{k}.npy", t.numpy())


def main():
    os.makedirs(OUT, exist_ok=True)
    only = None
    if len(sys.argv) == 3 and sys.argv[1] == "--only":
        only = set(sys.argv[2].split(","))
    elif len(sys.argv) != 1:
        sys.exit("usage: gen-detect-fixtures.py [--only NAME[,NAME]]")
    wanted = lambda name: only is None or name in only  # noqa: E731
    torch.manual_seed(0)
    x = image(128)
    if wanted("yolo"):
        write_png(os.path.join(OUT, "image.png"), x)
        raw = randomize(YoloStyle(nc=80, width=0.0625), seed=1)
        snap(raw)
        export("yolo_tiny_raw_opset17", raw, x, 17)
        nms = YoloStyle(nc=80, width=0.0625, nms=True, conf=0.3, iou=0.45, max_det=300)
        nms.load_state_dict(raw.state_dict())
        nms.eval()
        for opset in (11, 17):
            export(f"yolo_tiny_nms_opset{opset}", nms, x, opset)
    if wanted("neck"):
        neck = randomize(Neck(), seed=2)
        base = os.path.join(OUT, "neck_opset17")
        neck_input = torch.rand(2, 3, 16, 16)
        torch.onnx.export(neck, neck_input, base + ".onnx", opset_version=17, input_names=["input"],
                          output_names=["output"])
        np.save(base + ".input.npy", neck_input.numpy())
        np.save(base + ".output.npy", neck(neck_input).detach().numpy())
    if wanted("ops2"):
        ops2 = (torch.randn(2, 4, 8, 8), torch.tensor([[0.5, 1.0, 6.0, 5.5], [2.0, 0.0, 7.5, 7.0], [1.0, 1.0, 1.5, 2.0],
                                                       [3.3, 2.1, 5.9, 7.7], [0.0, 0.0, 12.0, 12.0]]))
        for opset in (11,):
            base = os.path.join(OUT, f"detect_ops2_opset{opset}")
            torch.onnx.export(DetectOps2(), ops2, base + ".onnx", opset_version=opset, input_names=["input", "boxes"],
                              output_names=["output"])
            np.save(base + ".input.npy", ops2[0].numpy())
            np.save(base + ".input1.npy", ops2[1].numpy())
            np.save(base + ".output.npy", DetectOps2()(*ops2).numpy())
    if wanted("ssdlite"):
        export_torchvision("ssdlite", ssdlite(), image(320)[0], ["boxes", "scores", "labels"])
    if wanted("fasterrcnn"):
        export_torchvision("fasterrcnn", fasterrcnn(), image(320)[0], ["boxes", "labels", "scores"])
    if wanted("retinanet"):
        export_torchvision("retinanet", retinanet(), image(320)[0], ["boxes", "scores", "labels"])
    if wanted("ops"):
        ops_input = torch.randn(3, 4, 6, 6, generator=torch.Generator().manual_seed(11))
        for opset in (11, 17):
            base = os.path.join(OUT, f"detect_ops_opset{opset}")
            torch.onnx.export(DetectOps(), ops_input, base + ".onnx", opset_version=opset, input_names=["input"],
                              output_names=["output"], dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}})
            np.save(base + ".input.npy", ops_input.numpy())
            np.save(base + ".output.npy", DetectOps()(ops_input).numpy())
    if wanted("loops"):
        loops()


if __name__ == "__main__":
    main()
