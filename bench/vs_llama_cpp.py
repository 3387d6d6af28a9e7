#!/usr/bin/python3
"""cpudl vs llama.cpp on the same GGUF files and threads, in one run (make bench-llm).

The 134M Llama-architecture model of scripts/gen-llm-fixtures.py (dim 768, 12 layers, 12 heads,
ffn 2048, Llama-2 vocabulary, random weights) in F32, F16, Q8_0 and Q4_0 is made once into
build/llm-bench/, and in Q4_K_M (llama.cpp's mix, what most GGUF downloads use) and Q6_K by
`cpudl quantize` from the F32 file. For each type (--types), on 1 and 2 threads, back to back:
  cpudl      build/cpudl bench llm -m M --prompt 64 --gen 32 --threads T --repetitions 1 --json
  llama.cpp  $LLAMA_BIN/llama-bench -m M -p 64 -n 32 -t T -r 1 -o json   (only when LLAMA_BIN is set:
             binaries the user already has; this repository never fetches or builds llama.cpp)
alternating, --repetitions rounds (default 5); each side's best round is reported.
Generation is also reported as % of the memory read bandwidth cpudl measures in the same run.
Results go to stdout and, with --write-doc, into docs/BENCHMARKS.md between the llm markers.
"""
import argparse
import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from benchmarks_doc import write_section  # noqa: E402

CPUDL = os.environ.get("CPUDL_BIN", os.path.join(ROOT, "build", "cpudl"))
MODELS = os.path.join(ROOT, "build", "llm-bench")
TYPES = ["f32", "f16", "q8_0", "q4_0", "q4_k_m", "q6_k"]
QUANTIZED_BY_CPUDL = {"q4_k_m", "q6_k"}  # the others come from gen-llm-fixtures.py


def model_path(ty):
    return os.path.join(MODELS, "llama-134m-%s.gguf" % ty)


def ensure_models(types):
    if not all(os.path.exists(model_path(t)) for t in TYPES if t not in QUANTIZED_BY_CPUDL):
        print("making the 134M bench models in %s (scripts/gen-llm-fixtures.py --bench)" % MODELS, file=sys.stderr)
        subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "scripts", "gen-llm-fixtures.py"), MODELS, "--bench"],
                       check=True, stdout=subprocess.DEVNULL)
    for t in types:
        if t in QUANTIZED_BY_CPUDL and not os.path.exists(model_path(t)):
            subprocess.run([CPUDL, "quantize", model_path("f32"), model_path(t), "--type", t], check=True,
                           stdout=subprocess.DEVNULL)


def cpudl(model, threads, prompt, gen, reps):
    out = subprocess.run([CPUDL, "bench", "llm", "-m", model, "--prompt", str(prompt), "--gen", str(gen),
                          "--threads", str(threads), "--repetitions", str(reps), "--json"],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def llama_cpp(llama_bin, model, threads, prompt, gen, reps):
    exe = os.path.join(llama_bin, "llama-bench")
    out = subprocess.run([exe, "-m", model, "-p", str(prompt), "-n", str(gen), "-t", str(threads), "-r", str(reps),
                          "-o", "json"], check=True, capture_output=True, text=True).stdout
    rows = json.loads(out)
    pp = next(r["avg_ts"] for r in rows if r["n_prompt"] > 0)
    tg = next(r["avg_ts"] for r in rows if r["n_gen"] > 0)
    return pp, tg, rows[0].get("build_commit", "?")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--prompt", type=int, default=64)
    ap.add_argument("--gen", type=int, default=32)
    ap.add_argument("--repetitions", type=int, default=5)
    ap.add_argument("--types", default=",".join(TYPES))
    ap.add_argument("--write-doc", action="store_true")
    args = ap.parse_args()
    types = args.types.split(",")
    if any(t not in TYPES for t in types):
        ap.error("--types: expected some of " + ",".join(TYPES))
    ensure_models(types)
    llama_bin = os.environ.get("LLAMA_BIN")
    doctor = json.loads(subprocess.run([CPUDL, "doctor", "--json"], check=True, capture_output=True, text=True).stdout)
    header = "| model | threads | cpudl pp%d tok/s | cpudl tg%d tok/s | tg %% of bandwidth |" % (args.prompt, args.gen)
    sep = "|---|---|---|---|---|"
    if llama_bin:
        header += " llama.cpp pp tok/s | llama.cpp tg tok/s | pp ratio | tg ratio |"
        sep += "---|---|---|---|"
    lines, commit = [header, sep], None
    for t in [int(x) for x in args.threads.split(",")]:
        for ty in types:
            model = model_path(ty)
            # Rounds alternate the two engines, so a noisy spell of the shared host hits both;
            # each side's best round is its figure (a slowdown is the host's, a speed-up is not).
            runs, peer = [], []
            for _ in range(args.repetitions):
                runs.append(cpudl(model, t, args.prompt, args.gen, 1))
                if llama_bin:
                    peer.append(llama_cpp(llama_bin, model, t, args.prompt, args.gen, 1))
            pp_c = max(r["prompt_tokens_per_second"] for r in runs)
            tg_c = max(r["tokens_per_second"] for r in runs)
            bandwidth = max(r["bandwidth_gbs"] for r in runs)
            pct = 100.0 * tg_c * runs[0]["bytes_per_token"] / (bandwidth * 1e9)
            row = "| %s | %d | %.0f | %.1f | %.0f%% of %.1f GB/s |" % (ty.upper(), t, pp_c, tg_c, pct, bandwidth)
            if llama_bin:
                pp, tg = max(p[0] for p in peer), max(p[1] for p in peer)
                commit = peer[0][2]
                row += " %.0f | %.1f | %.2fx | %.2fx |" % (pp, tg, pp_c / pp, tg_c / tg)
            print(row, flush=True)
            lines.append(row)
    cpu = doctor.get("cpu", {})
    body = "\n".join([
        "Command: `make bench-llm` (bench/vs_llama_cpp.py)%s; prompt %d tokens, generation %d tokens from an empty "
        "cache; %d rounds alternating the engines, each side's best round (the bandwidth: the best of cpudl's "
        "measurements in those rounds)." % (
            " with `LLAMA_BIN=%s` (llama.cpp build %s)" % (llama_bin, commit) if llama_bin else "", args.prompt, args.gen,
            args.repetitions),
        "Machine: %s %s (family %s model %s), %s; `cpudl doctor --json` has the rest." % (
            cpu.get("vendor", "?"), cpu.get("model_name", "?"), cpu.get("family", "?"), cpu.get("model", "?"), doctor.get("level", "?")),
        "Ratios are cpudl / llama.cpp (above 1: cpudl faster)." if llama_bin else
        "No LLAMA_BIN: cpudl alone, against the bandwidth measured in the same run.",
        *(["Shares above 100%%: the weights (%s) fit the last-level cache this machine reports (%s), so "
           "generation reads them from there, not from DRAM." % (
               "with the panels repacked at load", "%.0f MiB of L3" % (doctor.get("caches", {}).get("l3_bytes", 0) / 2**20))] if any(re.search(r"\| 1[0-9][0-9]% of", l) for l in lines) else []),
        "", *lines])
    print(body)
    if args.write_doc:
        write_section("llm", "LLM inference: cpudl vs llama.cpp (make bench-llm)", body)


if __name__ == "__main__":
    main()
