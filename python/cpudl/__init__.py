"""cpudl: deep learning on the CPU you have.

A PyTorch-shaped API over cpudl's C++ engine: tensors that share memory with NumPy and PyTorch
(``from_numpy``, ``Tensor.numpy()``, DLPack), autograd, ``cpudl.nn`` / ``cpudl.optim`` /
``cpudl.data``, ONNX models with ONNX Runtime's session API (``InferenceSession``) and GGUF
language models (``cpudl.llm.Model``). Every call that computes releases the GIL.
"""
from __future__ import annotations

import json as _json
from typing import Any, Iterable, Optional

import numpy as _np

from . import _cpudl
from ._cpudl import (  # noqa: F401  (the public names of the engine)
    Tensor,
    from_numpy,
    from_dlpack,
    add,
    sub,
    mul,
    div,
    matmul,
    exp,
    log,
    sqrt,
    pow,
    clamp,
    relu,
    gelu,
    sigmoid,
    tanh,
    sum,
    mean,
    argmax,
    cat,
    softmax,
    log_softmax,
    zeros,
    ones,
    full,
    empty,
    rand,
    randn,
    arange,
    manual_seed,
    is_grad_enabled,
    set_threads,
    get_threads,
    load_safetensors,
    save_safetensors,
    load_npy,
    save_npy,
    read_image,
    InferenceSession,
    NodeArg,
)

__version__ = "0.1.0"

float32, bfloat16, int8, int32, int64, uint8 = "float32", "bfloat16", "int8", "int32", "int64", "uint8"
_NUMPY_DTYPES = {"float32": _np.float32, "int8": _np.int8, "int32": _np.int32, "int64": _np.int64, "uint8": _np.uint8}


def tensor(data: Any, dtype: Optional[str] = None, requires_grad: bool = False) -> Tensor:
    """A new tensor holding a copy of ``data`` (a NumPy array, nested lists, a number, a Tensor).

    Without ``dtype``, floating-point data becomes float32 and integers int64, as in PyTorch.
    """
    if isinstance(data, Tensor):
        data = data.numpy()
    array = _np.asarray(data)
    if dtype is None:
        dtype = "int64" if array.dtype.kind in "iub" else "float32"
    if dtype not in _NUMPY_DTYPES:
        raise ValueError(f"tensor: dtype {dtype!r} is not one of {', '.join(_NUMPY_DTYPES)}")
    # np.array keeps 0-d arrays 0-d (ascontiguousarray would make them 1-d)
    array = _np.array(array, dtype=_NUMPY_DTYPES[dtype], order="C", copy=False)
    if not array.flags.writeable:
        array = array.copy()
    t = _cpudl._from_buffer_copy(array)
    if requires_grad:
        t.requires_grad = True
    return t


def _setitem(self: Tensor, key: Any, value: Any) -> None:
    """Writes into the tensor's memory (as NumPy assignment); not recorded by autograd."""
    if self.requires_grad and is_grad_enabled():
        raise RuntimeError("a leaf tensor that requires grad cannot be written in place (use `with cpudl.no_grad():`)")
    self.numpy()[key] = value.numpy() if isinstance(value, Tensor) else value
    self._bump_version()


Tensor.__setitem__ = _setitem


class no_grad:
    """Context manager (and decorator) that stops recording the autograd graph, as torch.no_grad."""

    def __enter__(self) -> "no_grad":
        self._guard = _cpudl._NoGradGuard()
        return self

    def __exit__(self, *exc: Any) -> None:
        del self._guard

    def __call__(self, function):
        def wrapped(*args, **kwargs):
            with no_grad():
                return function(*args, **kwargs)

        wrapped.__doc__, wrapped.__name__ = function.__doc__, function.__name__
        return wrapped


def doctor() -> dict:
    """What ``cpudl doctor --json`` prints: the CPU, its instruction sets, caches, NUMA, threads,
    the kernels chosen and the BLAS libraries, with warnings about what slows this machine down."""
    return _json.loads(_cpudl._doctor_json())


from . import nn, optim, data, llm  # noqa: E402,F401  (they import the names above)
