"""Modules as torch.nn: parameters and sub-modules registered by attribute, PyTorch's parameter
names in state dicts, train()/eval(). The layers (Linear, Conv2d, BatchNorm2d, ...) are cpudl's
C++ modules, initialised as PyTorch initialises them; subclass Module to build your own."""
from __future__ import annotations

from collections import OrderedDict
from typing import Any, Dict, Iterator, List, Optional, Tuple, Union

from .. import _cpudl
from .._cpudl import Tensor
from . import functional  # noqa: F401


def Parameter(data: Tensor, requires_grad: bool = True) -> Tensor:  # noqa: N802  (torch.nn.Parameter)
    """A leaf tensor over `data`'s memory that requires grad: assigned to a Module attribute, it is
    registered as a parameter."""
    return data.detach().requires_grad_(requires_grad)


class Module:
    """Base class of all modules. Attributes that are Modules become children; leaf tensors that
    require grad become parameters (register_buffer adds state that is not trained)."""

    def __init__(self) -> None:
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "training", True)

    def __setattr__(self, name: str, value: Any) -> None:
        if "_parameters" not in self.__dict__:
            raise AttributeError(f"{type(self).__name__}: call super().__init__() before assigning attributes")
        for table in (self._parameters, self._buffers, self._modules):
            table.pop(name, None)
        if isinstance(value, Module):
            self._modules[name] = value
        elif isinstance(value, Tensor) and value.requires_grad and value.is_leaf:
            self._parameters[name] = value
        else:
            object.__setattr__(self, name, value)

    def __getattr__(self, name: str) -> Any:
        for table in ("_parameters", "_buffers", "_modules"):
            entries = self.__dict__.get(table)
            if entries is not None and name in entries:
                return entries[name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def register_buffer(self, name: str, tensor: Tensor) -> None:
        """State saved in state_dict() but not trained (as running statistics)."""
        self._buffers[name] = tensor

    def register_parameter(self, name: str, tensor: Tensor) -> None:
        self._parameters[name] = tensor

    def forward(self, *args: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} defines no forward()")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.forward(*args, **kwargs)

    def children(self) -> Iterator["Module"]:
        return iter(self._modules.values())

    def named_modules(self, prefix: str = "") -> Iterator[Tuple[str, "Module"]]:
        yield prefix, self
        for name, child in self._modules.items():
            yield from child.named_modules(prefix + ("." if prefix else "") + name)

    def _named(self, table: str, prefix: str = "") -> Iterator[Tuple[str, Tensor]]:
        for name, t in getattr(self, table).items():
            yield prefix + name, t
        for name, child in self._modules.items():
            yield from child._named(table, prefix + name + ".")

    def named_parameters(self) -> Iterator[Tuple[str, Tensor]]:
        return self._named("_parameters")

    def parameters(self) -> Iterator[Tensor]:
        return (t for _, t in self.named_parameters())

    def named_buffers(self) -> Iterator[Tuple[str, Tensor]]:
        return self._named("_buffers")

    def state_dict(self) -> "OrderedDict[str, Tensor]":
        """Parameters then buffers of each module, by PyTorch's dotted names; the tensors are the
        module's own (detached), as PyTorch returns them."""
        out: "OrderedDict[str, Tensor]" = OrderedDict()
        self._state(out, "")
        return out

    def _state(self, out: Dict[str, Tensor], prefix: str) -> None:
        for name, t in self._parameters.items():
            out[prefix + name] = t.detach()
        for name, t in self._buffers.items():
            out[prefix + name] = t.detach()
        for name, child in self._modules.items():
            child._state(out, prefix + name + ".")

    def load_state_dict(self, state_dict: Dict[str, Tensor], strict: bool = True) -> None:
        """Copies values into this module's tensors. Strict: missing, unexpected and mis-shaped
        entries are one error that lists them all, and nothing is changed."""
        own = self.state_dict()
        missing = [k for k in own if k not in state_dict]
        unexpected = [k for k in state_dict if k not in own]
        wrong = [f"{k}: {tuple(state_dict[k].shape)} for {tuple(t.shape)}" for k, t in own.items()
                 if k in state_dict and tuple(state_dict[k].shape) != tuple(t.shape)]
        problems = wrong + ([f"missing {', '.join(missing)}"] if strict and missing else []) + \
                   ([f"unexpected {', '.join(unexpected)}"] if strict and unexpected else [])
        if problems:
            raise ValueError("load_state_dict: " + "; ".join(problems))
        for key, target in own.items():
            if key in state_dict:
                source = state_dict[key]
                target.numpy()[...] = source.numpy() if isinstance(source, Tensor) else source
                target._bump_version()

    def train(self, mode: bool = True) -> "Module":
        object.__setattr__(self, "training", mode)
        for child in self._modules.values():
            child.train(mode)
        return self

    def eval(self) -> "Module":
        return self.train(False)

    def zero_grad(self) -> None:
        for p in self.parameters():
            p.grad = None

    def __repr__(self) -> str:
        lines = [f"  ({name}): " + repr(child).replace("\n", "\n  ") for name, child in self._modules.items()]
        extra = self.extra_repr()
        if not lines:
            return f"{type(self).__name__}({extra})"
        return f"{type(self).__name__}(\n" + "\n".join(lines) + "\n)"

    def extra_repr(self) -> str:
        return ""


class _Native(Module):
    """A module whose forward and tensors are cpudl's C++ module (fused kernels included)."""

    def __init__(self, native: Any, description: str = "") -> None:
        super().__init__()
        object.__setattr__(self, "_native", native)
        object.__setattr__(self, "_description", description)
        for name, t in native.named_parameters():
            self._parameters[name] = t
        for name, t in native.named_buffers():
            self._buffers[name] = t

    def forward(self, x: Tensor) -> Tensor:
        return self._native.forward(x)

    def train(self, mode: bool = True) -> "Module":
        self._native.train(mode)
        return super().train(mode)

    def extra_repr(self) -> str:
        return self._description


class Linear(_Native):
    """y = x W^T + b with W [out_features, in_features], as torch.nn.Linear."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True) -> None:
        super().__init__(_cpudl._linear(in_features, out_features, bias),
                         f"in_features={in_features}, out_features={out_features}, bias={bias}")


class Conv2d(_Native):
    """2-D convolution over NCHW input, as torch.nn.Conv2d (square kernel, stride and padding)."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int = 1, padding: int = 0,
                 dilation: int = 1, groups: int = 1, bias: bool = True) -> None:
        super().__init__(_cpudl._conv2d(in_channels, out_channels, kernel_size, stride, padding, bias, dilation, groups),
                         f"{in_channels}, {out_channels}, kernel_size={kernel_size}, stride={stride}, padding={padding}")


class BatchNorm2d(_Native):
    """Batch normalisation over channels with running statistics, as torch.nn.BatchNorm2d."""

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float = 0.1) -> None:
        super().__init__(_cpudl._batch_norm2d(num_features, eps, momentum), f"{num_features}, eps={eps}")


class LayerNorm(_Native):
    """Normalisation over the last dimensions with learned scale and shift, as torch.nn.LayerNorm."""

    def __init__(self, normalized_shape: Union[int, List[int]], eps: float = 1e-5) -> None:
        shape = [normalized_shape] if isinstance(normalized_shape, int) else list(normalized_shape)
        super().__init__(_cpudl._layer_norm(shape, eps), f"{shape}, eps={eps}")


class Embedding(_Native):
    """Rows of a [num_embeddings, embedding_dim] table picked by integer indices, as torch.nn.Embedding."""

    def __init__(self, num_embeddings: int, embedding_dim: int) -> None:
        super().__init__(_cpudl._embedding(num_embeddings, embedding_dim), f"{num_embeddings}, {embedding_dim}")


class Dropout(_Native):
    """Zeroes elements with probability p in training (scaling the rest by 1/(1-p)); identity in eval."""

    def __init__(self, p: float = 0.5) -> None:
        if not 0 <= p < 1:
            raise ValueError(f"Dropout: p must be in [0, 1) (got {p})")
        super().__init__(_cpudl._dropout(p), f"p={p}")


class ReLU(Module):
    """max(x, 0), as torch.nn.ReLU."""

    def forward(self, x: Tensor) -> Tensor:
        return _cpudl.relu(x)


class GELU(Module):
    """The GELU activation, as torch.nn.GELU."""

    def forward(self, x: Tensor) -> Tensor:
        return _cpudl.gelu(x)


class Flatten(Module):
    """Flattens dimensions start_dim..end_dim into one, as torch.nn.Flatten."""

    def __init__(self, start_dim: int = 1, end_dim: int = -1) -> None:
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, x: Tensor) -> Tensor:
        return x.flatten(self.start_dim, self.end_dim)


class MaxPool2d(Module):
    """Max pooling over NCHW input (stride defaults to the kernel size), as torch.nn.MaxPool2d."""

    def __init__(self, kernel_size: int, stride: Optional[int] = None, padding: int = 0) -> None:
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding

    def forward(self, x: Tensor) -> Tensor:
        return _cpudl.max_pool2d(x, self.kernel_size, self.stride, self.padding)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride or self.kernel_size}, padding={self.padding}"


class AdaptiveAvgPool2d(Module):
    """Average pooling to a fixed output size (h, w), as torch.nn.AdaptiveAvgPool2d."""

    def __init__(self, output_size: Union[int, Tuple[int, int]]) -> None:
        super().__init__()
        self.output_size = output_size

    def forward(self, x: Tensor) -> Tensor:
        return _cpudl.adaptive_avg_pool2d(x, self.output_size)


class Sequential(Module):
    """Modules run in order; children are named "0", "1", ... as in torch.nn.Sequential."""

    def __init__(self, *modules: Module) -> None:
        super().__init__()
        for i, m in enumerate(modules):
            if not isinstance(m, Module):
                raise TypeError(f"Sequential: argument {i} is a {type(m).__name__}, not a cpudl.nn.Module")
            self._modules[str(i)] = m

    def forward(self, x: Tensor) -> Tensor:
        for m in self._modules.values():
            x = m(x)
        return x

    def __getitem__(self, i: int) -> Module:
        return list(self._modules.values())[i]

    def __len__(self) -> int:
        return len(self._modules)


def zoo(name: str, num_classes: int = 10, in_channels: int = 1, cifar_stem: bool = True) -> Module:
    """A model of cpudl's zoo (cpudl.nn.model_names(): simplecnn, lenet5, mlp, resnet18, ...) with
    PyTorch's parameter names, running cpudl's fused C++ forward and backward."""
    if name not in _cpudl.model_names():
        raise ValueError(f"zoo: unknown model {name!r} (known: {', '.join(_cpudl.model_names())})")
    return _Native(_cpudl._make_model(name, num_classes, in_channels, cifar_stem), name)


model_names = _cpudl.model_names


class CrossEntropyLoss(Module):
    """Mean cross-entropy of logits [N, C] against class indices [N], as torch.nn.CrossEntropyLoss."""

    def __init__(self, label_smoothing: float = 0.0) -> None:
        super().__init__()
        self.label_smoothing = label_smoothing

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return _cpudl.cross_entropy(input, target, self.label_smoothing)


class MSELoss(Module):
    """Mean squared error, as torch.nn.MSELoss."""

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return _cpudl.mse_loss(input, target)
