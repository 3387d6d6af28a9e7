"""Optimisers with PyTorch 1.13's update rules (each one fused pass over a parameter's memory),
and learning-rate schedules, as torch.optim."""
from __future__ import annotations

import math
from typing import Iterable, Tuple

from . import _cpudl
from ._cpudl import Tensor, clip_grad_norm_  # noqa: F401


def _parameter_list(params: Iterable[Tensor], who: str) -> list:
    params = list(params)
    if not params:
        raise ValueError(f"{who}: the parameter list is empty")
    for i, p in enumerate(params):
        if not isinstance(p, Tensor):
            raise TypeError(f"{who}: parameter {i} is a {type(p).__name__}, not a cpudl.Tensor")
    return params


class SGD(_cpudl._Sgd):
    """Stochastic gradient descent with momentum, dampening, Nesterov and weight decay (torch.optim.SGD)."""

    def __init__(self, params: Iterable[Tensor], lr: float, momentum: float = 0.0, dampening: float = 0.0,
                 weight_decay: float = 0.0, nesterov: bool = False) -> None:
        if lr < 0 or momentum < 0 or weight_decay < 0:
            raise ValueError(f"SGD: lr, momentum and weight_decay must be >= 0 (got {lr}, {momentum}, {weight_decay})")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("SGD: Nesterov momentum needs momentum > 0 and dampening 0")
        super().__init__(_parameter_list(params, "SGD"), lr, momentum, dampening, weight_decay, nesterov)


class Adam(_cpudl._Adam):
    """Adam (torch.optim.Adam): L2 weight decay added to the gradient."""

    _decoupled = False

    def __init__(self, params: Iterable[Tensor], lr: float = 1e-3, betas: Tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0) -> None:
        if lr < 0 or eps < 0 or weight_decay < 0 or not (0 <= betas[0] < 1 and 0 <= betas[1] < 1):
            raise ValueError(f"{type(self).__name__}: invalid lr {lr}, betas {betas}, eps {eps} or weight_decay {weight_decay}")
        super().__init__(_parameter_list(params, type(self).__name__), lr, betas[0], betas[1], eps, weight_decay,
                         self._decoupled)


class AdamW(Adam):
    """AdamW (torch.optim.AdamW): weight decay decoupled from the gradient, 0.01 by default."""

    _decoupled = True

    def __init__(self, params: Iterable[Tensor], lr: float = 1e-3, betas: Tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 1e-2) -> None:
        super().__init__(params, lr, betas, eps, weight_decay)


class _Scheduler:
    def __init__(self, optimizer) -> None:
        self.optimizer, self.base_lr, self.last_epoch = optimizer, optimizer.lr, 0

    def step(self) -> None:
        self.last_epoch += 1
        self.optimizer.lr = self.lr_at(self.last_epoch)

    def get_last_lr(self) -> list:
        return [self.optimizer.lr]


class StepLR(_Scheduler):
    """lr * gamma ** (epoch // step_size), as torch.optim.lr_scheduler.StepLR."""

    def __init__(self, optimizer, step_size: int, gamma: float = 0.1) -> None:
        super().__init__(optimizer)
        self.step_size, self.gamma = step_size, gamma

    def lr_at(self, epoch: int) -> float:
        return self.base_lr * self.gamma ** (epoch // self.step_size)


class CosineAnnealingLR(_Scheduler):
    """Cosine from lr down to eta_min over T_max epochs, as torch.optim.lr_scheduler.CosineAnnealingLR."""

    def __init__(self, optimizer, T_max: int, eta_min: float = 0.0) -> None:
        super().__init__(optimizer)
        self.T_max, self.eta_min = T_max, eta_min

    def lr_at(self, epoch: int) -> float:
        return self.eta_min + (self.base_lr - self.eta_min) * (1 + math.cos(math.pi * epoch / self.T_max)) / 2


class lr_scheduler:  # noqa: N801  (torch.optim.lr_scheduler's spelling)
    """The schedules under torch.optim.lr_scheduler's names."""

    StepLR = StepLR
    CosineAnnealingLR = CosineAnnealingLR
