#!/usr/bin/env python3
"""cpudl beside other work: the thread governor against fixed thread counts (docs/OPERATIONS.md).

On this machine's cores, for each workload and each load beside it (nothing, `stress-ng --cpu 1`,
`stress-ng --cpu 2`), back to back:
  default          the governor on, threads up to the usable cores
  --threads 1      governor off
  --threads N      governor off, N = the usable cores
and the ratio of the default to the best fixed count (the issue's target: within 15%). Workloads:
  train     cpudl train --model lenet5 --data data/mnist --epochs 4     (images/s)
  run       cpudl run resnet18.onnx --batch 1 --bench 100                (median latency; 1/ms)
  generate  cpudl generate -m 134M Q8_0 (or the tiny test model) -n 128  (tokens/s)
Then:
  quota     train inside a cgroup whose quota drops from N to 0.5 CPUs 1.5 s in: governor on vs off
  recovery  seconds from the end of `stress-ng --cpu N` to the governor's full count again
  overhead  one sample and decision of the governor (cpudl_bench_governor) as % of one CPU at 2 Hz
Results go to stdout and, with --write-doc, into docs/BENCHMARKS.md between the contention markers.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from benchmarks_doc import write_section  # noqa: E402

CPUDL = os.environ.get("CPUDL_BIN", os.path.join(ROOT, "build", "cpudl"))
WORK = os.path.join(ROOT, "build", "bench-contention")
MNIST = os.path.join(ROOT, "data", "mnist")


def cores():
    doctor = json.loads(subprocess.run([CPUDL, "doctor", "--json"], check=True, capture_output=True, text=True).stdout)
    cpu = doctor["cpu"]
    return doctor["threads"], f"{cpu['model_name']} (family {cpu['family']} model {cpu['model']}" + \
        (f", {cpu['hypervisor']} guest)" if cpu.get("hypervisor") else ")")


def resnet18():
    path = os.path.join(WORK, "resnet18.onnx")
    if not os.path.exists(path):
        import torch
        import torchvision
        torch.manual_seed(0)
        torch.onnx.export(torchvision.models.resnet18().eval(), torch.randn(1, 3, 224, 224), path, opset_version=13,
                          input_names=["input"], output_names=["output"])
    return path


def llm():
    for path in [os.path.join(ROOT, "build", "llm-bench", "llama-134m-q8_0.gguf"),
                 os.path.join(ROOT, "build", "llm-fixtures", "tiny-llama-q8_0.gguf")]:
        if os.path.exists(path):
            return path
    sys.exit("no GGUF model: run `make bench-llm` (134M) or build the tests (tiny model)")


def measure(workload, flags):
    """Higher is better: images/s, runs/s, tokens/s."""
    if workload == "train":
        out = subprocess.run([CPUDL, "train", "--model", "lenet5", "--data", MNIST, "--epochs", "4", "--json",
                              "--out", os.path.join(WORK, "m.safetensors"), *flags],
                             check=True, capture_output=True, text=True).stdout
        return json.loads(out.strip().splitlines()[-1])["images_per_second"]
    if workload == "run":
        out = subprocess.run([CPUDL, "run", resnet18(), "--batch", "1", "--bench", "100", "--json", *flags],
                             check=True, capture_output=True, text=True).stdout
        return 1000.0 / json.loads(out)["median_ms"]
    out = subprocess.run([CPUDL, "generate", "-m", llm(), "-p", "Once upon a time", "-n", "128", "--temp", "0",
                          "--json", *flags], check=True, capture_output=True, text=True).stdout
    return json.loads(out)["tokens_per_second"]


class Load:
    def __init__(self, n):
        self.p = subprocess.Popen(["stress-ng", "--cpu", str(n), "--quiet"]) if n else None
        time.sleep(1.0 if n else 0)

    def stop(self):
        if self.p:
            self.p.terminate()
            self.p.wait()


def best_of(workload, flags, repeats):
    return max(measure(workload, flags) for _ in range(repeats))


def quota_run(n, governor):
    """images/s of train in a cgroup whose quota drops from n to 0.5 CPUs 1.5 s in; None without cgroups."""
    for base in ["/sys/fs/cgroup/cpu", "/sys/fs/cgroup"]:
        cg = os.path.join(base, f"cpudl_bench_{os.getpid()}")
        try:
            os.mkdir(cg)
        except OSError:
            continue
        v2 = os.path.exists(os.path.join(cg, "cpu.max"))
        if not v2 and not os.path.exists(os.path.join(cg, "cpu.cfs_quota_us")):
            os.rmdir(cg)
            continue

        def set_quota(cpus):
            if v2:
                open(os.path.join(cg, "cpu.max"), "w").write(f"{int(cpus * 100000)} 100000\n")
            else:
                open(os.path.join(cg, "cpu.cfs_period_us"), "w").write("100000\n")
                open(os.path.join(cg, "cpu.cfs_quota_us"), "w").write(f"{int(cpus * 100000)}\n")
        set_quota(n)
        cmd = (f"echo $$ > {cg}/cgroup.procs && exec {CPUDL} train --model lenet5 --data {MNIST} --epochs 12 --json "
               f"--out {WORK}/q.safetensors --governor {governor}")
        p = subprocess.Popen(["sh", "-c", cmd], stdout=subprocess.PIPE, text=True)
        start = time.time()
        epochs, changed = [], None
        for line in p.stdout:
            if changed is None and time.time() - start > 1.5:
                set_quota(0.5)
                changed = time.time()
            if line.startswith('{"epoch"'):
                epochs.append((time.time(), json.loads(line)))
        p.wait()
        os.rmdir(cg)
        # The epochs that began at least a second after the change (the governor's reaction time is
        # part of it; the first epochs ran before the change, at full speed).
        late = [e for t, e in epochs if changed is not None and t - e["seconds"] > changed + 1.0]
        return sum(e["images_per_second"] for e in late) / len(late) if late else None
    return None


def recovery(n):
    """Seconds from the end of stress-ng --cpu n to the governor's full count again."""
    load = Load(n)
    p = subprocess.Popen([CPUDL, "train", "--model", "lenet5", "--data", MNIST, "--epochs", "1000", "--out",
                          os.path.join(WORK, "r.safetensors"), "--metrics-port", "0"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    port = None
    while port is None:
        line = p.stderr.readline()
        m = re.search(r"metrics on http://127\.0\.0\.1:(\d+)/metrics", line)
        port = m and m.group(1)

    def threads():
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
        return float(re.search(r"^cpudl_governor_threads (\S+)$", body, re.M).group(1))
    time.sleep(5)
    lowered = threads()
    load.stop()
    start = time.time()
    while threads() < n and time.time() - start < 30:
        time.sleep(0.05)
    seconds = time.time() - start
    p.terminate()
    p.wait()
    return lowered, seconds


def governor_overhead():
    exe = os.path.join(ROOT, "build", "bench", "cpudl_bench_governor")
    out = subprocess.run([exe, "--benchmark_format=json", "--benchmark_min_time=1"], check=True,
                         capture_output=True, text=True).stdout
    b = json.loads(out)["benchmarks"][0]
    return b["real_time"], b["pct_of_one_cpu"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--write-doc", action="store_true")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--workloads", default="train,run,generate")
    args = ap.parse_args()
    os.makedirs(WORK, exist_ok=True)
    n, cpu = cores()
    rows = []
    for load_n in [0, 1, n]:
        load = Load(load_n)
        try:
            for w in args.workloads.split(","):
                on = best_of(w, [], args.repeats)
                fixed = {t: best_of(w, ["--governor", "off", "--threads", str(t)], args.repeats) for t in sorted({1, n})}
                best = max(fixed.values())
                row = {"workload": w, "load": load_n, "governor": on, **{f"threads_{t}": v for t, v in fixed.items()},
                       "vs_best_fixed": on / best}
                rows.append(row)
                print(json.dumps(row), flush=True)
        finally:
            load.stop()
    quota = {g: quota_run(n, g) for g in ["on", "off"]}
    print(json.dumps({"quota_images_per_second": quota}), flush=True)
    lowered, seconds = recovery(n)
    print(json.dumps({"recovery_lowered_to": lowered, "recovery_seconds": seconds}), flush=True)
    sample_us, pct = governor_overhead()
    print(json.dumps({"governor_sample_us": sample_us, "pct_of_one_cpu": pct}), flush=True)
    if args.write_doc:
        unit = {"train": "images/s", "run": "runs/s (resnet18, batch 1)", "generate": "tokens/s"}
        lines = [f"`make bench-contention` on {cpu} ({n} threads). Each cell is the best of {args.repeats} runs; "
                 f"`stress-ng --cpu K` runs beside it. The target: the default within 15% of the best fixed count "
                 f"(vs best >= 0.85).", "",
                 "| workload | beside it | default (governor) | " + " | ".join(f"--threads {t}" for t in sorted({1, n}))
                 + " | default vs best fixed |",
                 "|---|---|---|" + "---|" * len({1, n}) + "---|"]
        for r in rows:
            lines.append(f"| {r['workload']} ({unit[r['workload']]}) | "
                         f"{'nothing' if r['load'] == 0 else 'stress-ng --cpu %d' % r['load']} | {r['governor']:.1f} | "
                         + " | ".join(f"{r['threads_%d' % t]:.1f}" for t in sorted({1, n})) + f" | {r['vs_best_fixed']:.2f} |")
        lines.append("")
        if quota["on"] and quota["off"]:
            lines.append(f"Quota lowered from {n} to 0.5 CPUs mid-run (train, images/s after the change): governor "
                         f"{quota['on']:.0f}, `--governor off` {quota['off']:.0f} ({quota['on'] / quota['off']:.2f}x; "
                         f"target 1.3x).")
        else:
            lines.append("Quota lowered mid-run: not measured (no cgroup could be created here).")
        busy = next((r for r in rows if r["workload"] == "train" and r["load"] == n), None)
        if busy:
            lines.append(f"Beside `stress-ng --cpu {n}`, training with the governor: {busy['governor']:.0f} images/s, with "
                         f"`--governor off` on {n} threads {busy['threads_%d' % n]:.0f} "
                         f"({busy['governor'] / busy['threads_%d' % n]:.2f}x; target 1.2x).")
        lines.append(f"Recovery: under `stress-ng --cpu {n}` the governor held {lowered:.0f} thread(s); "
                     f"{seconds:.1f} s after the neighbours ended it was back at {n} (target 3 s).")
        lines.append(f"Overhead: one sample and decision takes {sample_us:.0f} µs, twice a second: {pct:.3f}% of one CPU "
                     f"(target 0.5% of step time).")
        write_section("contention", "Beside other work: the thread governor", "\n".join(lines))


if __name__ == "__main__":
    main()
