# The tutorial's training loop written in Python lands on the weights `cpudl train` writes from the
# same initial weights and batches, and optimisers and the data loader behave as PyTorch's.
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest
import torch

import cpudl
import cpudl.nn.functional as F


def python_training(mnist_tiny, steps=None):
    model = cpudl.nn.zoo("simplecnn")
    model.load_state_dict(cpudl.load_safetensors(mnist_tiny / "simplecnn_init.safetensors"))
    model.train()
    optimizer = cpudl.optim.Adam(model.parameters(), lr=1e-3)
    loader = cpudl.data.DataLoader(cpudl.data.mnist(mnist_tiny, train=True), batch_size=32, shuffle=False)
    losses = []
    for images, labels in loader:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(images), labels)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return model, losses


def test_python_loop_lands_on_the_cli_weights(tmp_path, mnist_tiny, cpudl_binary):
    out = tmp_path / "cli.safetensors"
    subprocess.run([str(cpudl_binary), "train", "--model", "simplecnn", "--data", str(mnist_tiny), "--init",
                    str(mnist_tiny / "simplecnn_init.safetensors"), "--no-shuffle", "--batch", "32", "--epochs", "1",
                    "--optimizer", "adam", "--lr", "0.001", "--out", str(out)],
                   check=True, capture_output=True)
    model, losses = python_training(mnist_tiny)
    assert len(losses) == 20  # 640 images, batch 32: 20 Adam steps
    cli = cpudl.load_safetensors(out)
    for name, value in model.state_dict().items():
        np.testing.assert_allclose(value.numpy(), cli[name].numpy(), rtol=1e-5, atol=1e-6, err_msg=name)
    # and the losses follow PyTorch's own run of the tutorial from the same weights
    import json
    reference = json.loads((mnist_tiny / "pytorch_losses.json").read_text())["losses"]
    np.testing.assert_allclose(losses, reference[:20], atol=1e-3)


@pytest.mark.parametrize("name,make", [
    ("sgd", lambda p: (cpudl.optim.SGD(p[0], lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-3),
                       torch.optim.SGD(p[1], lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-3))),
    ("adam", lambda p: (cpudl.optim.Adam(p[0], lr=0.01, weight_decay=1e-2),
                        torch.optim.Adam(p[1], lr=0.01, weight_decay=1e-2))),
    ("adamw", lambda p: (cpudl.optim.AdamW(p[0], lr=0.01), torch.optim.AdamW(p[1], lr=0.01))),
])
def test_optimisers_follow_pytorch(name, make):
    rng = np.random.default_rng(1)
    w0 = rng.standard_normal((5, 7)).astype(np.float32)
    w, tw = cpudl.tensor(w0, requires_grad=True), torch.tensor(w0, requires_grad=True)
    ours, theirs = make(([w], [tw]))
    for step in range(5):
        x = rng.standard_normal((7, 3)).astype(np.float32)
        ours.zero_grad()
        ((w @ cpudl.tensor(x)) * (w @ cpudl.tensor(x))).mean().backward()
        ours.step()
        theirs.zero_grad()
        ((tw @ torch.tensor(x)) ** 2).mean().backward()
        theirs.step()
    np.testing.assert_allclose(w.detach().numpy(), tw.detach().numpy(), rtol=1e-5, atol=1e-6, err_msg=name)


def test_lr_schedules_follow_pytorch():
    p = cpudl.tensor([1.0], requires_grad=True)
    tp = torch.tensor([1.0], requires_grad=True)
    for ours_cls, theirs_cls, kwargs in [(cpudl.optim.lr_scheduler.StepLR, torch.optim.lr_scheduler.StepLR,
                                          {"step_size": 2, "gamma": 0.5}),
                                         (cpudl.optim.lr_scheduler.CosineAnnealingLR,
                                          torch.optim.lr_scheduler.CosineAnnealingLR, {"T_max": 5})]:
        opt, topt = cpudl.optim.SGD([p], lr=0.1), torch.optim.SGD([tp], lr=0.1)
        s, ts = ours_cls(opt, **kwargs), theirs_cls(topt, **kwargs)
        for _ in range(6):
            topt.step()
            s.step(), ts.step()
            assert opt.lr == pytest.approx(topt.param_groups[0]["lr"], rel=1e-6)


def test_loader_batches_and_epochs(mnist_tiny):
    data = cpudl.data.mnist(mnist_tiny, train=True)
    assert len(data) == 640 and data.images.shape == (640, 1, 28, 28)
    loader = cpudl.data.DataLoader(data, batch_size=100, shuffle=True, seed=3)
    first = [y.numpy().copy() for _, y in loader]
    second = [y.numpy().copy() for _, y in loader]
    assert [len(b) for b in first] == [100] * 6 + [40] and len(loader) == 7
    assert not all(np.array_equal(a, b) for a, b in zip(first, second)), "a new order each epoch"
    assert sorted(np.concatenate(first)) == sorted(data.labels.numpy())


def test_bad_training_input(mnist_tiny, tmp_path):
    with pytest.raises(FileNotFoundError):
        cpudl.data.mnist(tmp_path / "nothing-here")
    with pytest.raises(ValueError, match="parameter list is empty"):
        cpudl.optim.Adam([])
    with pytest.raises(TypeError, match="not a cpudl.Tensor"):
        cpudl.optim.SGD([np.zeros(3)], lr=0.1)
    with pytest.raises(ValueError, match="unknown model"):
        cpudl.nn.zoo("resnet9000")
    with pytest.raises(FileNotFoundError, match="No such file"):
        cpudl.load_safetensors(tmp_path / "missing.safetensors")
    (tmp_path / "bad.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{broken}")
    with pytest.raises(RuntimeError, match="bad.safetensors"):
        cpudl.load_safetensors(tmp_path / "bad.safetensors")


def test_safetensors_round_trip_is_atomic(tmp_path):
    state = {"a": cpudl.randn([3, 4]), "b": cpudl.tensor([1, 2, 3])}
    path = tmp_path / "m.safetensors"
    cpudl.save_safetensors(path, state, {"note": "python"})
    back = cpudl.load_safetensors(path)
    assert list(back) == ["a", "b"]
    np.testing.assert_array_equal(back["a"].numpy(), state["a"].numpy())
    with pytest.raises(TypeError, match="not a cpudl.Tensor"):
        cpudl.save_safetensors(path, {"a": np.zeros(3)})
    assert list(tmp_path.iterdir()) == [path]  # no temporary file left behind


def test_the_examples_run(tmp_path, mnist_tiny, cpudl_binary, llm_fixtures):
    root = pathlib.Path(__file__).resolve().parents[2]
    env = dict(os.environ)
    out = subprocess.run([sys.executable, str(root / "examples" / "train_mnist.py"), str(mnist_tiny)], cwd=tmp_path,
                         check=True, capture_output=True, text=True, env=env).stdout
    assert "epoch 3" in out
    report = subprocess.run([str(cpudl_binary), "eval", "--model", str(tmp_path / "mnist_cnn.safetensors"), "--data",
                             str(mnist_tiny)], check=True, capture_output=True, text=True).stdout
    assert "accuracy" in report
    out = subprocess.run([sys.executable, str(root / "examples" / "generate.py"),
                          str(llm_fixtures / "tiny-llama-q8_0.gguf"), "Hello"], check=True, capture_output=True,
                         text=True, env=env).stdout
    assert out.startswith("Hello") and "usage:" in out
