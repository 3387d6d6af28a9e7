# Tensors in Python: memory shared with NumPy and PyTorch (DLPack) both ways, views and indexing
# against NumPy's, operators with broadcasting, and clear errors for what cannot be shared.
import numpy as np
import pytest
import torch

import cpudl


def test_from_numpy_shares_memory_both_ways():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = cpudl.from_numpy(a)
    assert t.shape == (3, 4) and t.dtype == "float32"
    a[1, 2] = 100.0
    assert t[1, 2].item() == 100.0
    v = t.numpy()
    v[2, 3] = -7.0
    assert a[2, 3] == -7.0
    assert v.ctypes.data == a.ctypes.data  # the same bytes, no copy


def test_int64_arrays_are_shared_and_labels_work():
    labels = np.array([3, 1, 2], dtype=np.int64)
    t = cpudl.from_numpy(labels)
    assert t.dtype == "int64" and t._data_ptr() == labels.ctypes.data
    logits = cpudl.tensor(np.eye(3, 4, dtype=np.float32))
    loss = cpudl.nn.functional.cross_entropy(logits, t)
    expected = torch.nn.functional.cross_entropy(torch.eye(3, 4), torch.tensor([3, 1, 2]))
    assert loss.item() == pytest.approx(expected.item(), rel=1e-6)


def test_the_tensor_outlives_the_array_it_borrows():
    t = cpudl.from_numpy(np.full((1000,), 2.5, dtype=np.float32))  # the array's only reference is t's
    assert float(t.numpy().sum()) == 2500.0
    view = t.numpy()
    del t
    assert view[999] == 2.5  # the view keeps the tensor, which keeps the array


def test_numpy_view_of_a_strided_tensor():
    t = cpudl.tensor(np.arange(24, dtype=np.float32).reshape(2, 3, 4))
    v = t.transpose(0, 2)
    np.testing.assert_array_equal(v.numpy(), np.arange(24, dtype=np.float32).reshape(2, 3, 4).transpose(2, 1, 0))
    assert v.numpy().ctypes.data == t.numpy().ctypes.data


def test_dlpack_to_and_from_pytorch_without_copies():
    x = torch.arange(10, dtype=torch.float32)
    t = cpudl.from_dlpack(x)
    x[3] = 33.0
    assert t[3].item() == 33.0 and t._data_ptr() == x.data_ptr()
    back = torch.from_dlpack(t)
    back[4] = 44.0
    assert t[4].item() == 44.0 and x[4].item() == 44.0
    # strided PyTorch views keep their strides
    m = torch.arange(12, dtype=torch.float32).reshape(3, 4).t()
    tm = cpudl.from_dlpack(m)
    assert tm.shape == (4, 3)
    np.testing.assert_array_equal(tm.numpy(), m.numpy())
    # integer tensors
    assert cpudl.from_dlpack(torch.tensor([1, 2], dtype=torch.int64)).dtype == "int64"


def test_dlpack_with_numpy():
    a = np.linspace(0, 1, 5, dtype=np.float32)
    t = cpudl.from_dlpack(a)
    a[0] = 9.0
    assert t[0].item() == 9.0
    b = np.from_dlpack(t)
    assert b.ctypes.data == a.ctypes.data


def test_dlpack_refuses_what_it_cannot_take():
    with pytest.raises(ValueError, match="unsupported element type"):
        cpudl.from_dlpack(torch.zeros(3, dtype=torch.float64))
    with pytest.raises(TypeError, match="__dlpack__"):
        cpudl.from_dlpack([1, 2, 3])


@pytest.mark.parametrize("key", [1, -1, (0, 2), (slice(None), 1), (slice(1, None, 2),), (Ellipsis, 0),
                                 (None, 1), (0, slice(1, 3), slice(None, None, 2))])
def test_indexing_matches_numpy(key):
    a = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
    np.testing.assert_array_equal(cpudl.tensor(a)[key].numpy(), a[key])


def test_setitem_writes_through():
    a = np.zeros((2, 3), dtype=np.float32)
    t = cpudl.from_numpy(a)
    t[0, 1:] = 5.0
    np.testing.assert_array_equal(a, [[0, 5, 5], [0, 0, 0]])


def test_operators_broadcast_as_numpy():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((3, 1, 4), dtype=np.float32), rng.standard_normal((5, 1), dtype=np.float32)
    ta, tb = cpudl.tensor(a), cpudl.tensor(b)
    for got, want in [(ta + tb, a + b), (ta - tb, a - b), (ta * tb, a * b), (ta / (tb * tb + 1), a / (b * b + 1)),
                      (2.0 - ta, 2.0 - a), (ta * 3, a * 3), (-ta, -a), (1.0 / (ta * ta + 1), 1.0 / (a * a + 1))]:
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-6, atol=1e-6)
    m1, m2 = rng.standard_normal((4, 6), dtype=np.float32), rng.standard_normal((6, 5), dtype=np.float32)
    np.testing.assert_allclose((cpudl.tensor(m1) @ cpudl.tensor(m2)).numpy(), m1 @ m2, rtol=1e-5, atol=1e-5)


def test_tensor_copies_and_converts():
    a = np.arange(4, dtype=np.float64)
    t = cpudl.tensor(a)
    a[0] = 10
    assert t.dtype == "float32" and t[0].item() == 0.0
    assert cpudl.tensor([1, 2]).dtype == "int64"
    assert cpudl.tensor(np.arange(3, dtype=np.float32)[::2]).tolist() == [0.0, 2.0]


def test_bad_arrays_get_clear_errors():
    with pytest.raises(ValueError, match="float64 is not supported"):
        cpudl.from_numpy(np.zeros(3))
    with pytest.raises(ValueError, match="not C-contiguous"):
        cpudl.from_numpy(np.zeros((4, 4), dtype=np.float32)[:, ::2])
    ro = np.zeros(3, dtype=np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        cpudl.from_numpy(ro)
    with pytest.raises(IndexError, match="out of bounds"):
        cpudl.zeros([2, 3])[5]
    with pytest.raises(RuntimeError):
        cpudl.zeros([2, 3]) + cpudl.zeros([4])
    with pytest.raises(TypeError):
        cpudl.zeros([2]) + "text"
    with pytest.raises(ValueError, match="one"):
        cpudl.zeros([2]).item()


def test_no_grad_stops_recording():
    x = cpudl.tensor([1.0, 2.0], requires_grad=True)
    with cpudl.no_grad():
        y = x * 2
    assert not y.requires_grad and y.grad_fn is None
    z = x * 2
    assert z.requires_grad and z.grad_fn is not None
