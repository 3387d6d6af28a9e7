#!/usr/bin/env python3
"""The cost model of data-parallel training (make bench-distributed; docs/DISTRIBUTED.md explains it).

Measures, on this machine:
  allreduce   `mpirun -np 2 cpudl bench allreduce --json`: float sums of 4 KiB-64 MiB between two
              ranks (shared memory here), and t = alpha + bytes / beta
  compute     `cpudl bench model --train --threads 1 --json`: one training step of resnet18 (batch 64,
              32x32) and simplecnn (batch 256) on one core: the per-node compute of weak scaling
then projects a ring allreduce of each model's gradients, T = 2(p-1) alpha + 2(p-1)/p S / B, for
p = 8, 16, 64 nodes on 10, 25 and 100 Gb/s Ethernet (alpha = ALPHA_US per message, an assumption
for kernel TCP, since no network is measured here), and the scaling efficiency T_compute /
(T_compute + T_comm exposed), without overlap and with backward (2/3 of the step) hiding the
sums. Results go to stdout and, with --write-doc, into docs/BENCHMARKS.md (bench-distributed).
"""
import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CPUDL = os.environ.get("CPUDL_BIN", os.path.join(ROOT, "build", "cpudl"))
ALPHA_US = 30.0  # kernel TCP over Ethernet, per message: an assumption, stated in the table
MODELS = {"resnet18": {"params": None, "batch": 64}, "simplecnn": {"params": None, "batch": 256}}


def run_json(cmd, env=None):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--write-doc", action="store_true")
    args = ap.parse_args()
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    rows = run_json(["mpirun", "-np", "2", CPUDL, "bench", "allreduce", "--json"], env)
    fit = [r for r in rows if r.get("fit")][-1]
    sizes = [r for r in rows if r.get("op") == "allreduce"]
    compute = {}
    for name, m in MODELS.items():
        r = run_json([CPUDL, "bench", "model", "--model", name, "--train", "--batch", str(m["batch"]), "--steps", "5",
                      "--threads", "1", "--json"])[-1]
        compute[name] = {"step_s": r["ms_per_step"] / 1e3, "bytes": 4 * r["parameters"]}
        print(json.dumps({"model": name, **compute[name]}), flush=True)
    lines = ["Measured allreduce between 2 ranks on this machine (shared memory):", "",
             "| bytes | ms | algorithm GB/s | bus GB/s |", "|---|---|---|---|"]
    for r in sizes:
        lines.append(f"| {r['bytes']:,} | {r['ms']:.4f} | {r['algbw_gbs']:.2f} | {r['busbw_gbs']:.2f} |")
    lines += ["", f"Model: t = {fit['alpha_us']:.1f} µs + bytes / {fit['beta_gbs']:.2f} GB/s (α: the 4 KiB message's time; β: the 64 MiB one's bandwidth).", "",
              f"Projected ring allreduce of the gradients (α = {ALPHA_US:.0f} µs per message, assumed; B = link rate) and "
              "scaling efficiency against the measured one-core step (weak scaling: each node keeps its batch):", "",
              "| model | gradient MB | step s (1 core) | nodes | link | allreduce ms | efficiency, no overlap | with backward overlap |",
              "|---|---|---|---|---|---|---|---|"]
    for name, c in compute.items():
        for p in (8, 16, 64):
            for gbit in (10, 25, 100):
                bw = gbit / 8 * 1e9
                t = 2 * (p - 1) * ALPHA_US * 1e-6 + 2 * (p - 1) / p * c["bytes"] / bw
                plain = c["step_s"] / (c["step_s"] + t)
                hidden = c["step_s"] / (c["step_s"] + max(0.0, t - 2 / 3 * c["step_s"]))
                lines.append(f"| {name} | {c['bytes'] / 1e6:.1f} | {c['step_s']:.3f} | {p} | {gbit} Gb/s | {t * 1e3:.1f} | "
                             f"{100 * plain:.0f}% | {100 * hidden:.0f}% |")
    table = "\n".join(lines)
    print(table)
    if args.write_doc:
        sys.path.insert(0, os.path.join(ROOT, "bench"))
        from benchmarks_doc import write_section
        write_section("bench-distributed", "Data-parallel training: allreduce and its cost model",
                      "Command: `make bench-distributed` (bench/distributed_cost.py; docs/DISTRIBUTED.md explains "
                      "the model).\n\n" + table)


if __name__ == "__main__":
    main()
