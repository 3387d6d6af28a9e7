"""A YOLOv5s-style detector in PyTorch (random weights; no download): Conv-BN-SiLU, C3 blocks,
SPPF, an upsample + concat neck (PANet) and three detect heads, with YOLOv5's box decoding, and
optionally its post-processing exported into the graph (score filter, per-class NMS through
torchvision.ops.batched_nms, which torch.onnx writes as NonMaxSuppression).

Written from YOLOv5's published architecture (v6 yaml: depth 0.33, width 0.50 for "s"); the
`width`/`depth` arguments shrink it for test fixtures. Shared by scripts/gen-detect-fixtures.py
and bench/vs_detect.py.
"""
import math

import torch
import torch.nn as nn
import torchvision

ANCHORS = [[10, 13, 16, 30, 33, 23], [30, 61, 62, 45, 59, 119], [116, 90, 156, 198, 373, 326]]
STRIDES = [8, 16, 32]


class Conv(nn.Module):
    def __init__(self, c1, c2, k=1, s=1, p=None):
        super().__init__()
        self.conv = nn.Conv2d(c1, c2, k, s, k // 2 if p is None else p, bias=False)
        self.bn = nn.BatchNorm2d(c2, eps=1e-3, momentum=0.03)
        self.act = nn.SiLU()

    def forward(self, x):
        return self.act(self.bn(self.conv(x)))


class Bottleneck(nn.Module):
    def __init__(self, c1, c2, shortcut=True):
        super().__init__()
        self.cv1 = Conv(c1, c2, 1)
        self.cv2 = Conv(c2, c2, 3)
        self.add = shortcut and c1 == c2

    def forward(self, x):
        y = self.cv2(self.cv1(x))
        return x + y if self.add else y


class C3(nn.Module):
    def __init__(self, c1, c2, n=1, shortcut=True):
        super().__init__()
        c_ = c2 // 2
        self.cv1 = Conv(c1, c_, 1)
        self.cv2 = Conv(c1, c_, 1)
        self.cv3 = Conv(2 * c_, c2, 1)
        self.m = nn.Sequential(*(Bottleneck(c_, c_, shortcut) for _ in range(n)))

    def forward(self, x):
        return self.cv3(torch.cat((self.m(self.cv1(x)), self.cv2(x)), 1))


class SPPF(nn.Module):
    def __init__(self, c1, c2, k=5):
        super().__init__()
        c_ = c1 // 2
        self.cv1 = Conv(c1, c_, 1)
        self.cv2 = Conv(c_ * 4, c2, 1)
        self.m = nn.MaxPool2d(k, 1, k // 2)

    def forward(self, x):
        x = self.cv1(x)
        y1 = self.m(x)
        y2 = self.m(y1)
        return self.cv2(torch.cat((x, y1, y2, self.m(y2)), 1))


class Detect(nn.Module):
    def __init__(self, nc, channels):
        super().__init__()
        self.nc, self.no, self.na = nc, nc + 5, 3
        self.m = nn.ModuleList(nn.Conv2d(c, self.no * self.na, 1) for c in channels)
        self.register_buffer("anchors", torch.tensor(ANCHORS, dtype=torch.float32).view(3, 3, 2))

    def forward(self, xs):
        out = []
        for i, x in enumerate(xs):
            x = self.m[i](x)
            b, _, ny, nx = x.shape
            x = x.view(b, self.na, self.no, ny, nx).permute(0, 1, 3, 4, 2).contiguous()
            y = x.sigmoid()
            gy, gx = torch.meshgrid(torch.arange(ny, dtype=torch.float32), torch.arange(nx, dtype=torch.float32), indexing="ij")
            grid = torch.stack((gx, gy), 2).view(1, 1, ny, nx, 2)
            anchor_grid = self.anchors[i].view(1, self.na, 1, 1, 2)
            xy = (y[..., 0:2] * 2 - 0.5 + grid) * STRIDES[i]
            wh = (y[..., 2:4] * 2) ** 2 * anchor_grid
            y = torch.cat((xy, wh, y[..., 4:]), -1)
            out.append(y.view(b, -1, self.no))
        return torch.cat(out, 1)


class YoloStyle(nn.Module):
    """Output: (batch, candidates, 5 + classes) as YOLOv5: cx, cy, w, h (pixels), objectness, class
    probabilities. With `nms`, batch 1 and three outputs instead: boxes (n, 4) corners, scores (n),
    labels (n) int64, after the score threshold and per-class NMS."""

    def __init__(self, nc=80, width=0.5, depth=0.33, nms=False, conf=0.25, iou=0.45, max_det=300):
        super().__init__()
        ch = lambda c: max(8, int(math.ceil(c * width / 8) * 8))
        n = lambda k: max(1, round(k * depth))
        self.nms, self.conf, self.iou, self.max_det = nms, conf, iou, max_det
        self.b0 = Conv(3, ch(64), 6, 2, 2)
        self.b1 = Conv(ch(64), ch(128), 3, 2)
        self.b2 = C3(ch(128), ch(128), n(3))
        self.b3 = Conv(ch(128), ch(256), 3, 2)
        self.b4 = C3(ch(256), ch(256), n(6))
        self.b5 = Conv(ch(256), ch(512), 3, 2)
        self.b6 = C3(ch(512), ch(512), n(9))
        self.b7 = Conv(ch(512), ch(1024), 3, 2)
        self.b8 = C3(ch(1024), ch(1024), n(3))
        self.b9 = SPPF(ch(1024), ch(1024))
        self.h10 = Conv(ch(1024), ch(512), 1)
        self.up = nn.Upsample(scale_factor=2, mode="nearest")
        self.h13 = C3(ch(1024), ch(512), n(3), False)
        self.h14 = Conv(ch(512), ch(256), 1)
        self.h17 = C3(ch(512), ch(256), n(3), False)
        self.h18 = Conv(ch(256), ch(256), 3, 2)
        self.h20 = C3(ch(512), ch(512), n(3), False)
        self.h21 = Conv(ch(512), ch(512), 3, 2)
        self.h23 = C3(ch(1024), ch(1024), n(3), False)
        self.detect = Detect(nc, [ch(256), ch(512), ch(1024)])

    def forward(self, x):
        x = self.b2(self.b1(self.b0(x)))
        p3 = self.b4(self.b3(x))
        p4 = self.b6(self.b5(p3))
        p5 = self.h10(self.b9(self.b8(self.b7(p4))))
        t4 = self.h14(self.h13(torch.cat((self.up(p5), p4), 1)))
        o3 = self.h17(torch.cat((self.up(t4), p3), 1))
        o4 = self.h20(torch.cat((self.h18(o3), t4), 1))
        o5 = self.h23(torch.cat((self.h21(o4), p5), 1))
        pred = self.detect([o3, o4, o5])
        return postprocess(pred, self.conf, self.iou, self.max_det) if self.nms else pred


def postprocess(pred, conf, iou, max_det):
    """YOLOv5's non_max_suppression for one image, in operators torch.onnx exports."""
    p = pred[0]
    scores, labels = (p[:, 5:] * p[:, 4:5]).max(1)
    xy, wh = p[:, :2], p[:, 2:4]
    boxes = torch.cat((xy - wh / 2, xy + wh / 2), 1)
    keep = torch.nonzero(scores > conf).squeeze(1)
    boxes, scores, labels = boxes[keep], scores[keep], labels[keep]
    keep = torchvision.ops.batched_nms(boxes, scores, labels, iou)[:max_det]
    return boxes[keep], scores[keep], labels[keep]


def randomize(model, seed):
    """Random weights with BatchNorm statistics that keep activations in range (no training)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.Conv2d):
                fan_in = m.in_channels // m.groups * m.kernel_size[0] * m.kernel_size[1]
                m.weight.copy_(torch.randn(m.weight.shape, generator=g) * math.sqrt(2.0 / fan_in))
                if m.bias is not None:
                    m.bias.copy_(torch.randn(m.bias.shape, generator=g) * 0.5)
            elif isinstance(m, nn.BatchNorm2d):
                m.weight.copy_(1 + 0.1 * torch.randn(m.weight.shape, generator=g))
                m.bias.copy_(0.1 * torch.randn(m.bias.shape, generator=g))
                m.running_mean.copy_(0.1 * torch.randn(m.running_mean.shape, generator=g))
                m.running_var.copy_(1 + 0.2 * torch.rand(m.running_var.shape, generator=g))
    return model.eval()
