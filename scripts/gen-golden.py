#!/usr/bin/env python3
"""Writes the PyTorch-made fixtures of tests/golden/ (committed; CI does not need PyTorch).

Needs Debian's PyTorch 1.13:  sudo apt-get install python3-torch
Run from the repository root:  python3 scripts/gen-golden.py

  ops.safetensors            per op: inputs (<op>.in<i>), output (<op>.out), a random weight
                             <op>.w for the loss sum(out * w), and input gradients (<op>.grad<i>)
  model_<name>.safetensors   simplecnn, lenet5: PyTorch-initialised weights (seed 0),
                             input, target, logits, and grad.<param> of the cross-entropy loss
  model_mlp.safetensors,     mlp and resnet18 (CIFAR stem) with weights filled by a formula both
  model_resnet18.safetensors sides share (storing 7.5 and 45 MB of weights is not worth it):
                             input, logits and a few gradients (resnet18 in eval mode)
  train_<model>_<opt>.safetensors  losses of 20 steps from the model file's weights on the
                             batches of train_batches.safetensors, and the final weights
  mnist_tiny/                a small MNIST-format data set (640 train, 64 test 28x28 IDX images
                             with synthetic digit-like strokes), simplecnn_init.safetensors (the
                             tutorial model's PyTorch initial weights) and pytorch_losses.json:
                             the per-step losses of the tutorial's training (Adam 1e-3, batch 32,
                             no shuffling) that `cpudl train --init ... --no-shuffle` must follow
"""
import json
import math
import os
import struct
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "golden")
DTYPES = {torch.float32: "F32", torch.int64: "I64", torch.int32: "I32"}


def save(name, tensors, metadata=None):
    """safetensors by hand (the format is a length, a JSON header and raw little-endian data)."""
    header, blobs, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = metadata
    for key, t in tensors.items():
        t = t.detach().contiguous().cpu()
        data = t.numpy().tobytes()
        header[key] = {"dtype": DTYPES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":"))
    text += " " * ((8 - len(text) % 8) % 8)
    path = os.path.join(OUT, name)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text.encode() + b"".join(blobs))
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")


def gen_ops():
    g = torch.Generator().manual_seed(1)
    r = lambda *s: torch.randn(*s, generator=g, dtype=torch.float32)
    away = lambda *s: (lambda t: t + 0.3 * torch.sign(t))(r(*s))
    positive = lambda *s: r(*s).exp() + 0.5
    labels = torch.tensor([2, 0, 4, 1], dtype=torch.int64)
    idx = torch.tensor([[3, 0, 3], [1, 4, 2]], dtype=torch.int64)
    ops = {
        "add": (lambda a, b: a + b, [r(2, 3), r(3)]),
        "sub": (lambda a, b: a - b, [r(2, 1), r(2, 4)]),
        "mul": (lambda a, b: a * b, [r(3, 1, 2), r(4, 1)]),
        "div": (lambda a, b: a / b, [r(2, 3), away(2, 3)]),
        "matmul": (torch.matmul, [r(2, 3, 4), r(2, 4, 5)]),
        "exp": (torch.exp, [r(6)]),
        "log": (torch.log, [positive(6)]),
        "sqrt": (torch.sqrt, [positive(6)]),
        "pow": (lambda x: torch.pow(x, 3.0), [r(6)]),
        "clamp": (lambda x: torch.clamp(x, -0.5, 0.8), [r(20)]),
        "relu": (F.relu, [away(20)]),
        "leaky_relu": (lambda x: F.leaky_relu(x, 0.1), [away(20)]),
        "gelu": (F.gelu, [r(20) * 3]),
        "sigmoid": (torch.sigmoid, [r(20) * 3]),
        "tanh": (torch.tanh, [r(20) * 2]),
        "softmax": (lambda x: F.softmax(x, dim=-1), [r(3, 5)]),
        "log_softmax": (lambda x: F.log_softmax(x, dim=1), [r(4, 3, 2)]),
        "sum": (lambda x: torch.sum(x, dim=(0, 2)), [r(2, 3, 4)]),
        "mean": (lambda x: torch.mean(x, dim=1), [r(3, 5)]),
        "max": (lambda x: torch.max(x, dim=1).values, [r(4, 6)]),
        "linear": (F.linear, [r(5, 4), r(3, 4), r(3)]),
        "conv2d": (lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=1, groups=2), [r(2, 4, 7, 6), r(6, 2, 3, 3), r(6)]),
        "conv2d_dilated": (lambda x, w: F.conv2d(x, w, None, stride=1, padding=2, dilation=2), [r(1, 3, 8, 8), r(4, 3, 3, 3)]),
        "max_pool2d": (lambda x: F.max_pool2d(x, 3, 2, 1), [r(2, 3, 7, 7)]),
        "avg_pool2d": (lambda x: F.avg_pool2d(x, 3, 2, 1), [r(2, 3, 7, 7)]),
        "adaptive_avg_pool2d": (lambda x: F.adaptive_avg_pool2d(x, (3, 2)), [r(2, 2, 7, 5)]),
        "batch_norm2d": (lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True), [r(4, 3, 5, 5), r(3) * 0.2 + 1, r(3)]),
        "layer_norm": (lambda x, w, b: F.layer_norm(x, (6,), w, b), [r(3, 6) * 2 + 5, r(6), r(6)]),
        "concat": (lambda a, b: torch.cat([a, b], dim=1), [r(2, 3), r(2, 2)]),
        "embedding": (lambda w: F.embedding(idx, w), [r(5, 4)]),
        "cross_entropy": (lambda x: F.cross_entropy(x, labels, label_smoothing=0.1), [r(4, 5)]),
        "nll_loss": (lambda x: F.nll_loss(F.log_softmax(x, 1), labels), [r(4, 5)]),
        "mse_loss": (F.mse_loss, [r(3, 4), r(3, 4)]),
        "bce_with_logits": (F.binary_cross_entropy_with_logits, [r(6) * 3, torch.sigmoid(r(6))]),
    }
    tensors = {}
    for name, (fn, inputs) in ops.items():
        inputs = [t.clone().requires_grad_(True) for t in inputs]
        out = fn(*inputs)
        w = torch.randn(out.shape, generator=g)
        (out * w).sum().backward()
        for i, t in enumerate(inputs):
            tensors[f"{name}.in{i}"] = t
            tensors[f"{name}.grad{i}"] = t.grad
        tensors[f"{name}.out"] = out
        tensors[f"{name}.w"] = w
    save("ops.safetensors", tensors, {"torch": torch.__version__})


class SimpleCNN(nn.Module):  # the popular PyTorch-on-CPU tutorial's model
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3)
        self.fc = nn.Linear(32 * 26 * 26, 10)

    def forward(self, x):
        return self.fc(F.relu(self.conv1(x)).view(-1, 32 * 26 * 26))


class LeNet5(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 5, padding=2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2).flatten(1)
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 1024)
        self.fc2 = nn.Linear(1024, 1024)
        self.fc3 = nn.Linear(1024, 10)

    def forward(self, x):
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x.flatten(1))))))


def resnet18_cifar():
    import torchvision  # python3-torchvision

    m = torchvision.models.resnet18(num_classes=10)
    m.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)
    m.maxpool = nn.Identity()
    return m


def formula_fill(model):
    """Deterministic, well-conditioned weights that C++ reproduces (tests/train/golden_test.cpp):
    parameter i (named_parameters order), element k: u = sin(12.9898 k + 78.233 i) in [-1, 1];
    matrices and kernels u / sqrt(fan_in), 1-d weights 1 + 0.1 u, 1-d biases 0.1 u."""
    with torch.no_grad():
        for i, (name, p) in enumerate(model.named_parameters()):
            k = torch.arange(p.numel(), dtype=torch.float64)
            u = torch.sin(12.9898 * k + 78.233 * i)
            if p.dim() > 1:
                v = u / math.sqrt(p.numel() // p.shape[0])
            elif name.endswith("weight"):
                v = 1 + 0.1 * u
            else:
                v = 0.1 * u
            p.copy_(v.float().view_as(p))


def gen_models(batches):
    for name, cls in (("simplecnn", SimpleCNN), ("lenet5", LeNet5)):
        torch.manual_seed(0)
        model = cls()
        x, y = batches["x"][0], batches["y"][0]
        logits = model(x)
        F.cross_entropy(logits, y).backward()
        tensors = {k: v for k, v in model.state_dict().items()}
        tensors.update({"input": x, "target": y, "logits": logits})
        tensors.update({f"grad.{k}": p.grad for k, p in model.named_parameters()})
        save(f"model_{name}.safetensors", tensors, {"architecture": name})
        for opt_name in ("adam", "sgd"):
            torch.manual_seed(0)
            model = cls()
            opt = (torch.optim.Adam(model.parameters(), lr=1e-3) if opt_name == "adam"
                   else torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9))
            losses = []
            for step in range(batches["x"].shape[0]):
                opt.zero_grad()
                loss = F.cross_entropy(model(batches["x"][step]), batches["y"][step])
                loss.backward()
                opt.step()
                losses.append(loss.item())
            tensors = {f"final.{k}": v for k, v in model.state_dict().items()}
            tensors["losses"] = torch.tensor(losses, dtype=torch.float32)
            save(f"train_{name}_{opt_name}.safetensors", tensors, {"architecture": name, "optimizer": opt_name})
    model = MLP()
    formula_fill(model)
    x, y = batches["x"][1], batches["y"][1]
    logits = model(x)
    F.cross_entropy(logits, y).backward()
    tensors = {"input": x, "target": y, "logits": logits}
    for k in ("fc3.weight", "fc3.bias", "fc1.bias"):
        tensors[f"grad.{k}"] = dict(model.named_parameters())[k].grad
    save("model_mlp.safetensors", tensors, {"architecture": "mlp", "weights": "formula"})
    try:
        model = resnet18_cifar()
    except ImportError:
        print("python3-torchvision missing: model_resnet18.safetensors not written", file=sys.stderr)
        return
    formula_fill(model)
    # Eval mode: with a batch of 2, training-mode batch norm makes ResNet-18's input gradients
    # so ill-conditioned that PyTorch's own float32 and float64 results differ by 15%.
    model.eval()
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 3, 32, 32, generator=g)  # layer4 keeps 4x4: BN over 32 values, well conditioned
    y = torch.tensor([3, 7])
    logits = model(x)
    F.cross_entropy(logits, y).backward()
    tensors = {"input": x, "target": y, "logits": logits}
    for k in ("fc.weight", "fc.bias", "conv1.weight", "layer4.1.bn2.weight", "layer2.0.downsample.0.weight"):
        tensors[f"grad.{k}"] = dict(model.named_parameters())[k].grad
    save("model_resnet18.safetensors", tensors, {"architecture": "resnet18", "weights": "formula"})


def gen_cli_fixture():
    out = os.path.join(OUT, "mnist_tiny")
    os.makedirs(out, exist_ok=True)
    g = torch.Generator().manual_seed(4)

    def images(n):
        labels = torch.randint(0, 10, (n,), generator=g)
        x = (torch.rand(n, 28, 28, generator=g) * 60).to(torch.uint8)
        for i, lab in enumerate(labels.tolist()):  # a bright stroke whose place and slant encode the label
            for t in range(16):
                r, c = 4 + t + (lab % 3), 4 + lab + (t * (lab % 4)) // 4
                x[i, r, min(c, 27)] = 255
                x[i, r, min(c + 1, 27)] = 200
        return x, labels

    for prefix, n in (("train", 640), ("t10k", 64)):
        x, y = images(n)
        with open(os.path.join(out, f"{prefix}-images-idx3-ubyte"), "wb") as f:
            f.write(struct.pack(">IIII", 0x803, n, 28, 28) + x.numpy().tobytes())
        with open(os.path.join(out, f"{prefix}-labels-idx1-ubyte"), "wb") as f:
            f.write(struct.pack(">II", 0x801, n) + y.to(torch.uint8).numpy().tobytes())
        if prefix == "train":
            train_x, train_y = (x.float() / 255 - 0.5) / 0.5, y
    torch.manual_seed(0)
    model = SimpleCNN()
    save("mnist_tiny/simplecnn_init.safetensors", model.state_dict(), {"architecture": "simplecnn"})
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    losses = []
    for step in range(20):
        xb = train_x[step * 32:(step + 1) * 32].unsqueeze(1)
        yb = train_y[step * 32:(step + 1) * 32]
        opt.zero_grad()
        loss = F.cross_entropy(model(xb), yb)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    with open(os.path.join(out, "pytorch_losses.json"), "w") as f:
        json.dump({"command": "Adam lr 1e-3, batch 32, no shuffle, torch " + torch.__version__, "losses": losses}, f, indent=1)
    print(f"wrote {out}")


def main():
    os.makedirs(OUT, exist_ok=True)
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(2)
    batches = {"x": torch.randn(20, 8, 1, 28, 28, generator=g), "y": torch.randint(0, 10, (20, 8), generator=g)}
    save("train_batches.safetensors", batches)
    gen_ops()
    gen_models(batches)
    gen_cli_fixture()


if __name__ == "__main__":
    main()
