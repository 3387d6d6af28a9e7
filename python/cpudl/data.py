"""Datasets and batches, as torch.utils.data: MNIST (IDX files), CIFAR-10 and CSV folders, and a
loader that assembles batches on background threads in a seeded order."""
from __future__ import annotations

import os
from typing import Iterator, Tuple

from . import _cpudl
from ._cpudl import Dataset, Tensor  # noqa: F401


def _existing_dir(path: str, who: str) -> str:
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{who}: {path}: no such directory")
    return path


def mnist(root: str, train: bool = True, mean: float = 0.5, std: float = 0.5) -> Dataset:
    """MNIST from ROOT/{train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]: images [N, 1, 28, 28]
    normalised by (x - mean) / std (the PyTorch tutorial's 0.5, 0.5), labels [N] int64."""
    return _cpudl._load_mnist(_existing_dir(root, "mnist"), train, mean, std)


def load_dataset(root: str, train: bool = True) -> Dataset:
    """Whichever of MNIST, CIFAR-10 (binary batches) or train.csv/test.csv the folder holds."""
    return _cpudl._load_dataset(_existing_dir(root, "load_dataset"), train)


class DataLoader:
    """Batches (images, labels) of a Dataset, as torch.utils.data.DataLoader. Each pass over it is
    an epoch; the order depends only on (seed, epoch), so a run is reproducible."""

    def __init__(self, dataset: Dataset, batch_size: int = 1, shuffle: bool = False, drop_last: bool = False,
                 seed: int = 0, num_workers: int = 1) -> None:
        if not isinstance(dataset, Dataset):
            raise TypeError(f"DataLoader: expected a cpudl.data.Dataset, got {type(dataset).__name__}")
        if batch_size < 1:
            raise ValueError(f"DataLoader: batch_size must be >= 1 (got {batch_size})")
        self.dataset, self.batch_size = dataset, batch_size
        self._loader = _cpudl._DataLoader(dataset, batch_size, shuffle, drop_last, seed, max(1, num_workers))
        self.epoch = 0

    def __len__(self) -> int:
        return len(self._loader)

    def __iter__(self) -> Iterator[Tuple[Tensor, Tensor]]:
        self._loader.start_epoch(self.epoch)
        self.epoch += 1
        while True:
            batch = self._loader.next()
            if batch is None:
                return
            yield batch
