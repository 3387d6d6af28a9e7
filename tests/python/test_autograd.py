# Gradients of Python-built computations against PyTorch 1.13 on the same inputs: every op the
# bindings expose, then modules assembled in Python with weights copied from torch.nn twins.
import numpy as np
import pytest
import torch

import cpudl
import cpudl.nn.functional as F

RNG = np.random.default_rng(7)


def leaf_pair(*shape, positive=False):
    a = RNG.standard_normal(shape).astype(np.float32)
    if positive:
        a = np.abs(a) + 0.5
    return cpudl.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)


def check(ours, theirs, inputs, rtol=1e-4, atol=1e-5):
    np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), rtol=rtol, atol=atol)
    ours.sum().backward() if ours.numel() > 1 else ours.backward()
    (theirs.sum() if theirs.numel() > 1 else theirs).backward()
    for i, (c, t) in enumerate(inputs):
        assert c.grad is not None, f"input {i} got no gradient"
        np.testing.assert_allclose(c.grad.numpy(), t.grad.numpy(), rtol=rtol, atol=atol, err_msg=f"input {i}")


def test_elementwise_and_broadcasting():
    (a, ta), (b, tb) = leaf_pair(3, 1, 4), leaf_pair(5, 4, positive=True)
    ours = cpudl.exp(a * 0.3) * b + cpudl.log(b) / (a * a + 1.0) - cpudl.sqrt(b) + cpudl.pow(b, 1.5)
    theirs = torch.exp(ta * 0.3) * tb + torch.log(tb) / (ta * ta + 1.0) - torch.sqrt(tb) + torch.pow(tb, 1.5)
    check(ours, theirs, [(a, ta), (b, tb)])


@pytest.mark.parametrize("name", ["relu", "gelu", "sigmoid", "tanh"])
def test_activations(name):
    x, tx = leaf_pair(4, 33)
    theirs = getattr(torch.nn.functional, name)(tx)
    check(getattr(cpudl, name)(x) * (x + 2.0), theirs * (tx + 2.0), [(x, tx)])


def test_softmax_log_softmax_and_reductions():
    x, tx = leaf_pair(6, 10)
    ours = cpudl.softmax(x, 1) * cpudl.log_softmax(x * 2.0, -1) + x.sum(1, keepdim=True) * x.mean(0)
    theirs = torch.softmax(tx, 1) * torch.log_softmax(tx * 2.0, -1) + tx.sum(1, keepdim=True) * tx.mean(0)
    check(ours, theirs, [(x, tx)])


def test_losses():
    x, tx = leaf_pair(8, 5)
    target = RNG.integers(0, 5, 8)
    check(F.cross_entropy(x, cpudl.tensor(target), label_smoothing=0.1),
          torch.nn.functional.cross_entropy(tx, torch.tensor(target), label_smoothing=0.1), [(x, tx)])
    y, ty = leaf_pair(8, 5)
    goal = RNG.standard_normal((8, 5)).astype(np.float32)
    check(F.mse_loss(y, cpudl.tensor(goal)), torch.nn.functional.mse_loss(ty, torch.tensor(goal)), [(y, ty)])


def test_matmul_batched_and_views():
    (a, ta), (b, tb) = leaf_pair(2, 3, 4, 5), leaf_pair(5, 6)
    ours = (a.permute(0, 1, 3, 2)[:, 1:, ::2, :].reshape(2, 2, 3, 4) @ a[:, 1:, :4, :4]).flatten(1) \
        + (a @ b).sum(1).reshape(2, -1)[:, :1]
    theirs = (ta.permute(0, 1, 3, 2)[:, 1:, ::2, :].reshape(2, 2, 3, 4) @ ta[:, 1:, :4, :4]).flatten(1) \
        + (ta @ tb).sum(1).reshape(2, -1)[:, :1]
    check(ours, theirs, [(a, ta), (b, tb)])


def test_cat_and_embedding():
    (a, ta), (w, tw) = leaf_pair(2, 3), leaf_pair(7, 3)
    idx = np.array([[1, 6], [0, 1]])
    ours = cpudl.cat([a, F.embedding(cpudl.tensor(idx), w).reshape(4, 3)], 0)
    theirs = torch.cat([ta, torch.nn.functional.embedding(torch.tensor(idx), tw).reshape(4, 3)], 0)
    check(ours * ours, theirs * theirs, [(a, ta), (w, tw)])


@pytest.mark.parametrize("stride,padding,groups", [(1, 0, 1), (2, 1, 1), (1, 1, 2)])
def test_conv2d_pool_linear(stride, padding, groups):
    (x, tx), (w, tw), (b, tb) = leaf_pair(2, 4, 11, 11), leaf_pair(6, 4 // groups, 3, 3), leaf_pair(6)
    ours = F.max_pool2d(F.relu(F.conv2d(x, w, b, stride=stride, padding=padding, groups=groups)), 2)
    theirs = torch.nn.functional.max_pool2d(
        torch.relu(torch.nn.functional.conv2d(tx, tw, tb, stride=stride, padding=padding, groups=groups)), 2)
    features = ours.shape[1] * ours.shape[2] * ours.shape[3]
    (fw, tfw), (fb, tfb) = leaf_pair(3, features), leaf_pair(3)
    check(F.linear(ours.flatten(1), fw, fb), torch.nn.functional.linear(theirs.flatten(1), tfw, tfb),
          [(x, tx), (w, tw), (b, tb), (fw, tfw), (fb, tfb)], rtol=1e-3, atol=1e-4)


def test_batch_norm_training_updates_running_statistics():
    (x, tx), (g, tg), (b, tb) = leaf_pair(4, 3, 5, 5), leaf_pair(3), leaf_pair(3)
    mean, var = cpudl.zeros([3]), cpudl.ones([3])
    tmean, tvar = torch.zeros(3), torch.ones(3)
    ours = F.batch_norm(x, mean, var, g, b, training=True)
    theirs = torch.nn.functional.batch_norm(tx, tmean, tvar, tg, tb, training=True)
    check(ours * ours, theirs * theirs, [(x, tx), (g, tg), (b, tb)], rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(mean.numpy(), tmean.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(var.numpy(), tvar.numpy(), rtol=1e-5, atol=1e-6)


class Net(cpudl.nn.Module):
    def __init__(self):
        super().__init__()
        self.features = cpudl.nn.Sequential(cpudl.nn.Conv2d(1, 4, 3, padding=1), cpudl.nn.BatchNorm2d(4),
                                            cpudl.nn.ReLU(), cpudl.nn.MaxPool2d(2))
        self.flatten = cpudl.nn.Flatten()
        self.fc = cpudl.nn.Linear(4 * 7 * 7, 10)
        self.scale = cpudl.nn.Parameter(cpudl.ones([10]))

    def forward(self, x):
        return self.fc(self.flatten(self.features(x))) * self.scale


class TorchNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.features = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3, padding=1), torch.nn.BatchNorm2d(4),
                                            torch.nn.ReLU(), torch.nn.MaxPool2d(2))
        self.flatten = torch.nn.Flatten()
        self.fc = torch.nn.Linear(4 * 7 * 7, 10)
        self.scale = torch.nn.Parameter(torch.ones(10))

    def forward(self, x):
        return self.fc(self.flatten(self.features(x))) * self.scale


def test_python_modules_match_torch_nn():
    net, twin = Net(), TorchNet()
    ours_names = list(net.state_dict())
    assert ours_names == list(twin.state_dict()), "PyTorch's parameter names and order"
    net.load_state_dict({k: cpudl.tensor(v.numpy()) for k, v in twin.state_dict().items()})
    x = RNG.standard_normal((3, 1, 14, 14)).astype(np.float32)
    target = np.array([1, 5, 9])
    loss = F.cross_entropy(net(cpudl.tensor(x)), cpudl.tensor(target))
    tloss = torch.nn.functional.cross_entropy(twin(torch.tensor(x)), torch.tensor(target))
    assert loss.item() == pytest.approx(tloss.item(), rel=1e-4)
    loss.backward()
    tloss.backward()
    grads = dict(twin.named_parameters())
    for name, p in net.named_parameters():
        np.testing.assert_allclose(p.grad.numpy(), grads[name].grad.numpy(), rtol=1e-3, atol=1e-5, err_msg=name)
    net.eval(), twin.eval()
    np.testing.assert_allclose(net(cpudl.tensor(x)).detach().numpy(), twin(torch.tensor(x)).detach().numpy(),
                               rtol=1e-4, atol=1e-5)
    assert not net.features[1].training


def test_load_state_dict_lists_every_problem():
    net = Net()
    state = dict(net.state_dict())
    state.pop("fc.bias")
    state["extra"] = cpudl.zeros([1])
    state["fc.weight"] = cpudl.zeros([3, 3])
    with pytest.raises(ValueError, match=r"fc.weight: \(3, 3\) for \(10, 196\).*missing fc.bias.*unexpected extra"):
        net.load_state_dict(state)
