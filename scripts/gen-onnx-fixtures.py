#!/usr/bin/env python3
"""Writes the ONNX fixtures of tests/onnx/ (committed; CI needs neither PyTorch nor onnx).

Needs Debian's PyTorch 1.13 and onnx:  apt-get install python3-torch python3-torchvision python3-onnx
Run from the repository root:          python3 scripts/gen-onnx-fixtures.py

For each model, exported by torch.onnx.export with a dynamic batch axis:
  <name>_opset<N>.onnx          the model (mlp: initializers in the external file <name>.onnx.data)
  <name>_opset<N>.input.npy     an input batch
  <name>_opset<N>.output.npy    PyTorch's output for it (eval mode, float32)
Models: opzoo (every operator the others miss, at every opset from 11 to 17), simplecnn and lenet5 (the zoo's), an MLP, resnet18 and mobilenet_v2 from torchvision
(random weights, no download; resnet18 keeps its BatchNormalization nodes so that cpudl's own
folding is what gets tested), and a 2-layer nn.TransformerEncoder (GELU, 4 heads).
The large models' weights are snapped to 31 levels per tensor, so that git stores them compressed
(about 5x): the network and its numerics are unchanged, only the weights' entropy drops.
"""
import os
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "onnx")


def zoo():
    import importlib.util

    spec = importlib.util.spec_from_file_location("gen_golden", os.path.join(os.path.dirname(__file__), "gen-golden.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class SmallMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 256)
        self.fc2 = nn.Linear(256, 128)
        self.fc3 = nn.Linear(128, 10)

    def forward(self, x):
        return self.fc3(torch.sigmoid(self.fc2(torch.relu(self.fc1(x.flatten(1))))))


class OpZoo(nn.Module):
    """Every operator the models above do not reach, in shapes that catch axis and layout bugs."""

    def __init__(self):
        super().__init__()
        self.deconv = nn.ConvTranspose2d(4, 3, 3, stride=2, padding=1, output_padding=1)
        self.conv = nn.Conv2d(3, 6, 3, padding=1, groups=3)
        self.bn = nn.BatchNorm2d(6)
        self.ln = nn.LayerNorm(8)
        self.fc = nn.Linear(8, 5)
        with torch.no_grad():
            self.bn.running_mean.uniform_(-0.5, 0.5)
            self.bn.running_var.uniform_(0.5, 2.0)

    def forward(self, x):  # x: N x 4 x 4 x 4
        y = self.deconv(x)  # N x 3 x 8 x 8
        y = F.leaky_relu(self.conv(y), 0.1)  # N x 6 x 8 x 8
        y = torch.sigmoid(self.bn(y)) + torch.tanh(y) - F.max_pool2d(y, 3, stride=1, padding=1)
        y = F.avg_pool2d(y, 2)  # N x 6 x 4 x 4
        a, b = torch.split(y, [2, 4], dim=1)
        y = torch.cat([b, a * 2.0], dim=1)
        z = y.flatten(2).transpose(1, 2)  # N x 16 x 6
        z = z[:, 1:15:2, :]  # N x 7 x 6
        z = torch.cat([z, z[:, :, :2] / 3.0], dim=2)  # N x 7 x 8
        z = F.gelu(self.ln(z))
        z = torch.where(z.clamp(min=0) == z, z, z.pow(2) - 1.0)
        z = torch.sqrt(z * z + 1.0)
        z = self.fc(z)  # N x 7 x 5
        z = z.index_select(1, torch.tensor([4, 0, 2]))  # N x 3 x 5
        z = z.unsqueeze(1).expand(-1, 2, -1, -1)  # N x 2 x 3 x 5
        z = F.log_softmax(z, dim=1) + F.softmax(z, dim=2) * torch.clamp(z, -0.5, 0.5)
        z = z.mean(dim=2).unsqueeze(2).squeeze(2)  # N x 2 x 5
        return torch.exp(-z)


def snap(model):
    with torch.no_grad():
        for p in list(model.parameters()) + [b for b in model.buffers() if b.dtype == torch.float32]:
            scale = p.abs().max().clamp(min=1e-8)
            p.copy_(torch.round(p / scale * 15) / 15 * scale)


def export(name, model, x, opset, training=torch.onnx.TrainingMode.EVAL, external=False):
    import onnx

    model.eval()
    base = f"{name}_opset{opset}"
    path = os.path.join(OUT, base + ".onnx")
    torch.onnx.export(model, x, path, opset_version=opset, training=training, input_names=["input"],
                      output_names=["output"], dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}})
    if external:
        m = onnx.load(path)
        onnx.save_model(m, path, save_as_external_data=True, all_tensors_to_one_file=True,
                        location=base + ".onnx.data", size_threshold=1024)
    with torch.no_grad():
        y = model(x)
    np.save(os.path.join(OUT, base + ".input.npy"), x.numpy())
    np.save(os.path.join(OUT, base + ".output.npy"), y.numpy())
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")


def main():
    os.makedirs(OUT, exist_ok=True)
    torch.manual_seed(0)
    g = zoo()
    digits = torch.rand(3, 1, 28, 28)
    for opset in (13, 17):
        torch.manual_seed(1)
        export("simplecnn", g.SimpleCNN(), digits, opset)
        torch.manual_seed(2)
        export("lenet5", g.LeNet5(), digits, opset)
        torch.manual_seed(3)
        export("mlp", SmallMLP(), digits, opset, external=True)
        torch.manual_seed(4)
        layer = nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True, activation="gelu")
        export("transformer", nn.TransformerEncoder(layer, 2), torch.randn(2, 10, 64), opset)
    for opset in range(11, 18):
        torch.manual_seed(7)
        export("opzoo", OpZoo(), torch.randn(2, 4, 4, 4), opset)
    torch.manual_seed(5)
    resnet = torchvision.models.resnet18()
    snap(resnet)
    with torch.no_grad():  # non-trivial running statistics, so that folding them is tested
        for m in resnet.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.2, 0.2)
                m.running_var.uniform_(0.5, 1.5)
    export("resnet18", resnet, torch.randn(2, 3, 64, 64), 13, training=torch.onnx.TrainingMode.PRESERVE)
    torch.manual_seed(6)
    mobilenet = torchvision.models.mobilenet_v2()
    snap(mobilenet)
    export("mobilenet_v2", mobilenet, torch.randn(2, 3, 64, 64), 17)


if __name__ == "__main__":
    main()
