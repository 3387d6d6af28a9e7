"""Functions of torch.nn.functional's names and arguments, on cpudl's kernels."""
from __future__ import annotations

from .._cpudl import (  # noqa: F401
    adaptive_avg_pool2d,
    avg_pool2d,
    batch_norm,
    binary_cross_entropy_with_logits,
    conv2d,
    cross_entropy,
    dropout,
    embedding,
    gelu,
    leaky_relu,
    linear,
    log_softmax,
    max_pool2d,
    mse_loss,
    nll_loss,
    relu,
    sigmoid,
    softmax,
    tanh,
)
