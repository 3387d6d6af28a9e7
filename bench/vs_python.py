#!/usr/bin/env python3
"""The Python module against the CLI, PyTorch and ONNX Runtime, in one run (make bench-python).

  training   the tutorial's loop written in Python (cpudl.nn.zoo("simplecnn"), Adam 1e-3, batch 256,
             EPOCHS epochs over the 8,000 MNIST training digits of data/mnist) against `cpudl train`
             with the same settings, and against the same loop in PyTorch eager (bench/vs_pytorch.py's
             worker, in its best configuration): images/s over the epochs, 1 and 2 threads, best of
             --rounds alternating rounds
  overhead   InferenceSession.run(None, {name: array}) on lenet5 batch 1 against the C++ run of the
             same session on the same input, timed in C++ in the same process (median of 2,000 calls):
             the difference is what a Python call costs
  resnet18   InferenceSession.run against ONNX Runtime's Node binding (bench/ort_time.js, npm
             onnxruntime-node, as make bench-onnx installs it) on torchvision's resnet18, batch 1 and
             16: median ms
Ratios are the point; the shared machine moves absolute figures between runs. Results go to stdout
and, with --write-doc, into docs/BENCHMARKS.md between the bench-python markers.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, os.path.join(ROOT, "build", "python"))
CPUDL = os.environ.get("CPUDL_BIN", os.path.join(ROOT, "build", "cpudl"))
MNIST = os.path.join(ROOT, "data", "mnist")
WORK = os.path.join(ROOT, "build", "bench-python")
EPOCHS = 3


def python_loop_worker(threads, epochs):
    """The Python training loop (run in its own process, so each measurement starts cold alike)."""
    import cpudl
    import cpudl.nn.functional as F
    cpudl.set_threads(threads)
    cpudl.manual_seed(0)
    data = cpudl.data.mnist(MNIST, train=True)
    model = cpudl.nn.zoo("simplecnn")
    model.train()
    optimizer = cpudl.optim.Adam(model.parameters(), lr=1e-3)
    loader = cpudl.data.DataLoader(data, batch_size=256, shuffle=True, seed=0)
    start, images = time.perf_counter(), 0
    for _ in range(epochs):
        for x, y in loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            images += len(y)
    print(json.dumps({"images_per_second": images / (time.perf_counter() - start)}))


def run_json(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def training_rows(rounds):
    import vs_pytorch
    rows = []
    for threads in (1, 2):
        best = {"python": 0.0, "cli": 0.0, "torch": 0.0}
        for _ in range(rounds):
            py = run_json([sys.executable, os.path.abspath(__file__), "--worker", str(threads)])[-1]
            cli = [l for l in run_json([CPUDL, "train", "--model", "simplecnn", "--data", MNIST, "--epochs", str(EPOCHS),
                                        "--batch", "256", "--threads", str(threads), "--json",
                                        "--out", os.path.join(WORK, "simplecnn.safetensors")]) if l.get("summary")][-1]
            torch = vs_pytorch.pytorch("simplecnn", threads, True, EPOCHS)
            for key, value in (("python", py["images_per_second"]), ("cli", cli["images_per_second"]),
                               ("torch", torch["images_per_second"])):
                best[key] = max(best[key], value)
        row = {"threads": threads, **best}
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def overhead_row():
    import numpy as np
    import cpudl
    session = cpudl.InferenceSession(os.path.join(ROOT, "tests", "onnx", "lenet5_opset13.onnx"), threads=1)
    name = session.get_inputs()[0].name
    feed = {name: np.load(os.path.join(ROOT, "tests", "onnx", "lenet5_opset13.input.npy"))[:1].copy()}
    for _ in range(300):
        session.run(None, feed)
    cpp, python = [], []
    for _ in range(3):  # alternating, so drift hits both sides
        cpp += session._time_cpp_runs(feed, 2000)
        for _ in range(2000):
            t0 = time.perf_counter()
            session.run(None, feed)
            python.append(time.perf_counter() - t0)
    row = {"cpp_us": 1e6 * statistics.median(cpp), "python_us": 1e6 * statistics.median(python)}
    row["overhead_us"] = row["python_us"] - row["cpp_us"]
    print(json.dumps(row), flush=True)
    return row


def resnet_rows(runs):
    import numpy as np
    import torch
    import torchvision
    import vs_onnx
    import cpudl
    ort = vs_onnx.ort_dir()
    path = os.path.join(WORK, "resnet18.onnx")
    torch.manual_seed(0)
    torch.onnx.export(torchvision.models.resnet18().eval(), torch.randn(1, 3, 224, 224), path, opset_version=13,
                      input_names=["input"], output_names=["output"],
                      dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}})
    rows = []
    for threads in (1, 2):
        session = cpudl.InferenceSession(path, threads=threads)
        for batch in (1, 16):
            x = np.random.default_rng(0).standard_normal((batch, 3, 224, 224), dtype=np.float32)
            xpath = os.path.join(WORK, f"resnet18_b{batch}.npy")
            np.save(xpath, x)
            n = runs if batch == 1 else max(5, runs // 2)
            for _ in range(3):
                session.run(None, {"input": x})
            ms = []
            for _ in range(n):
                t0 = time.perf_counter()
                session.run(None, {"input": x})
                ms.append(1e3 * (time.perf_counter() - t0))
            o = json.loads(subprocess.run(["node", os.path.join(ROOT, "bench", "ort_time.js"), path, xpath, str(threads), str(n)],
                                          check=True, capture_output=True, text=True,
                                          env=dict(os.environ, NODE_PATH=os.path.join(ort, "node_modules"))).stdout)
            row = {"batch": batch, "threads": threads, "cpudl_ms": statistics.median(ms), "ort_ms": o["median_ms"]}
            print(json.dumps(row), flush=True)
            rows.append(row)
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--write-doc", action="store_true")
    args = ap.parse_args()
    if args.worker:
        return python_loop_worker(args.worker, EPOCHS)
    os.makedirs(WORK, exist_ok=True)
    training = training_rows(args.rounds)
    overhead = overhead_row()
    resnet = resnet_rows(args.runs)
    lines = ["| threads | Python loop img/s | `cpudl train` img/s | PyTorch eager img/s | Python / CLI | Python / PyTorch |",
             "|---|---|---|---|---|---|"]
    for r in training:
        lines.append(f"| {r['threads']} | {r['python']:,.0f} | {r['cli']:,.0f} | {r['torch']:,.0f} | "
                     f"{r['python'] / r['cli']:.2f}x | {r['python'] / r['torch']:.2f}x |")
    lines += ["", "| InferenceSession.run, lenet5 batch 1, 1 thread | C++ call µs | Python call µs | overhead µs |",
              "|---|---|---|---|",
              f"| median of 6,000 calls each | {overhead['cpp_us']:.1f} | {overhead['python_us']:.1f} | {overhead['overhead_us']:.1f} |",
              "", "| resnet18 | batch | threads | cpudl.InferenceSession ms | ONNX Runtime (Node) ms | cpudl / ORT |",
              "|---|---|---|---|---|---|"]
    for r in resnet:
        lines.append(f"| 3x224x224 | {r['batch']} | {r['threads']} | {r['cpudl_ms']:.2f} | {r['ort_ms']:.2f} | "
                     f"{r['cpudl_ms'] / r['ort_ms']:.2f}x |")
    table = "\n".join(lines)
    print(table)
    import cpudl
    d = cpudl.doctor()
    machine = (f"{d['cpu']['model_name']} (family {d['cpu']['family']} model {d['cpu']['model']}"
               f"{', under ' + d['cpu']['hypervisor'] if d['cpu']['hypervisor'] else ''}), kernel level {d['level']}, "
               f"{d['cores']['logical']} logical CPUs")
    if args.write_doc:
        from benchmarks_doc import write_section
        write_section("bench-python", "Python module: training loop, call overhead, InferenceSession",
                      f"Command: `make bench-python` (bench/vs_python.py: {EPOCHS} epochs of simplecnn per training run, "
                      f"best of {args.rounds} alternating rounds; {args.runs} resnet18 runs at batch 1). "
                      "`Python / X` above 1.00x means the Python loop is faster; `cpudl / ORT` below 1.00x means "
                      "cpudl is faster. Machine (`cpudl doctor`): " + machine + ".\n\n" + table)


if __name__ == "__main__":
    main()
