#!/usr/bin/env python3
"""The PyTorch tutorial's MNIST training loop, written against cpudl's Python API.

    make build && scripts/fetch-mnist.sh data/mnist
    PYTHONPATH=build/python /usr/bin/python3 examples/train_mnist.py data/mnist

A model built in Python from cpudl.nn layers (swap in cpudl.nn.zoo("simplecnn") for the fused
one), Adam, the seeded DataLoader, evaluation under no_grad, and the weights saved as safetensors
(`cpudl eval --model`, `cpudl serve` and PyTorch's safetensors loader read them).
"""
import sys
import time

import cpudl
import cpudl.nn as nn
import cpudl.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3)
        self.fc = nn.Linear(32 * 26 * 26, 10)

    def forward(self, x):
        return self.fc(F.relu(self.conv1(x)).flatten(1))


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "data/mnist"
    cpudl.manual_seed(0)
    train = cpudl.data.DataLoader(cpudl.data.mnist(root, train=True), batch_size=256, shuffle=True, seed=0)
    test = cpudl.data.mnist(root, train=False)
    model = Net()
    optimizer = cpudl.optim.Adam(model.parameters(), lr=1e-3)
    for epoch in range(1, 4):
        model.train()
        start, seen = time.perf_counter(), 0
        for images, labels in train:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(images), labels)
            loss.backward()
            optimizer.step()
            seen += len(labels)
        model.eval()
        with cpudl.no_grad():
            predicted = model(test.images).argmax(1).numpy()
        accuracy = (predicted == test.labels.numpy()).mean()
        print(f"epoch {epoch}: loss {loss.item():.4f}, test accuracy {accuracy:.4f}, "
              f"{seen / (time.perf_counter() - start):,.0f} images/s")
    # Net has simplecnn's layers and parameter names: with the metadata `cpudl train` writes, the
    # CLI's eval, predict and serve take the file as they take their own.
    cpudl.save_safetensors("mnist_cnn.safetensors", model.state_dict(),
                           {"architecture": "simplecnn", "classes": "10", "dataset": "mnist", "input_shape": "1,28,28",
                            "normalization_mean": "0.5", "normalization_std": "0.5"})
    print("saved mnist_cnn.safetensors (try: build/cpudl eval --model mnist_cnn.safetensors --data " + root + ")")


if __name__ == "__main__":
    main()
