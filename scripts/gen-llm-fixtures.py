#!/usr/bin/python3
"""Makes the Llama-family test models of cpudl's LLM path, with reference logits.

Random weights, no download: each model is written as GGUF v3 in F32, F16, Q8_0 and Q4_0 with a
real tokenizer copied from tests/llm-vocab (Llama-2's SentencePiece vocabulary for `llama`,
DeepSeek-Coder's byte-level BPE for `qwen2`). The reference is an independent float64 NumPy
forward pass in Hugging Face's conventions (rotate-half RoPE on the un-permuted Q/K weights),
computed from the weights as stored (dequantised), so it checks cpudl's reading of the GGUF
conventions, not only its arithmetic:
  - `llama` files hold Q/K rows permuted as llama.cpp's converter does, and expect RoPE on
    adjacent pairs; `qwen2` files hold them as trained and expect RoPE on the two halves.
Outputs, per model M and type T: M-T.gguf, M-T.logits.npy (prompt positions x vocab, float32)
and M.tokens (the prompt ids, space-separated).

    /usr/bin/python3 scripts/gen-llm-fixtures.py OUT_DIR            # the test models
    /usr/bin/python3 scripts/gen-llm-fixtures.py OUT_DIR --bench    # the 134M bench model instead
"""
import os
import struct
import sys

import numpy as np

VOCAB_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "llm-vocab")

# ---- GGUF reading (tokenizer metadata only) and writing ----
SCALAR = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
STRING, ARRAY = 8, 9


def read_metadata(path):
    data = open(path, "rb").read()
    pos = 0

    def rd(fmt):
        nonlocal pos
        v = struct.unpack_from("<" + fmt, data, pos)[0]
        pos += struct.calcsize("<" + fmt)
        return v

    def rstr():
        nonlocal pos
        n = rd("Q")
        s = data[pos:pos + n]
        pos += n
        return s

    def value(t):
        if t == STRING:
            return rstr()
        if t == ARRAY:
            et, n = rd("I"), rd("Q")
            return (et, [value(et) for _ in range(n)])
        return rd(SCALAR[t])

    assert rd("I") == 0x46554747
    rd("I")
    rd("Q")
    n_kv = rd("Q")
    out = []
    for _ in range(n_kv):
        k = rstr().decode()
        t = rd("I")
        out.append((k, t, value(t)))
    return out


def pack_value(t, v):
    if t == STRING:
        v = v if isinstance(v, bytes) else v.encode()
        return struct.pack("<Q", len(v)) + v
    if t == ARRAY:
        et, items = v
        return struct.pack("<IQ", et, len(items)) + b"".join(pack_value(et, x) for x in items)
    return struct.pack("<" + SCALAR[t], v)


GGML = {"F32": 0, "F16": 1, "Q4_0": 2, "Q8_0": 8}


def write_gguf(path, metadata, tensors, alignment=32):
    head = struct.pack("<IIQQ", 0x46554747, 3, len(tensors), len(metadata))
    for k, t, v in metadata:
        head += pack_value(STRING, k) + struct.pack("<I", t) + pack_value(t, v)
    offset, blobs = 0, []
    for name, type_name, dims, blob in tensors:
        head += pack_value(STRING, name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        head += struct.pack("<IQ", GGML[type_name], offset)
        pad = (-len(blob)) % alignment
        blobs.append(blob + b"\0" * pad)
        offset += len(blob) + pad
    head += b"\0" * ((-len(head)) % alignment)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(head)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


# ---- the GGUF block formats: quantise as ggml's reference code does, dequantise for the reference ----
def round_away(x):
    return np.sign(x) * np.floor(np.abs(x) + 0.5)


def quantize(w, type_name):
    """Returns (bytes as stored, the float64 weights they decode to)."""
    w = np.asarray(w, dtype=np.float32)
    if type_name == "F32":
        return w.tobytes(), w.astype(np.float64)
    if type_name == "F16":
        h = w.astype(np.float16)
        return h.tobytes(), h.astype(np.float64)
    blocks = w.reshape(-1, 32)
    if type_name == "Q8_0":
        amax = np.abs(blocks).max(axis=1)
        d = amax / 127.0
        inv = np.where(d > 0, 1.0 / np.where(d > 0, d, 1), 0).astype(np.float32)
        q = round_away(blocks * inv[:, None]).astype(np.int8)
        d16 = d.astype(np.float16)
        raw = np.zeros(len(blocks), dtype=[("d", "<f2"), ("qs", "i1", 32)])
        raw["d"], raw["qs"] = d16, q
        deq = d16.astype(np.float64)[:, None] * q
        return raw.tobytes(), deq.reshape(w.shape)
    if type_name == "Q4_0":
        idx = np.abs(blocks).argmax(axis=1)
        mx = blocks[np.arange(len(blocks)), idx]
        d = (mx / -8.0).astype(np.float32)
        inv = np.where(d != 0, 1.0 / np.where(d != 0, d, 1), 0).astype(np.float32)
        q = np.minimum(15, np.trunc(blocks * inv[:, None] + np.float32(8.5))).astype(np.uint8)
        d16 = d.astype(np.float16)
        raw = np.zeros(len(blocks), dtype=[("d", "<f2"), ("qs", "u1", 16)])
        raw["d"], raw["qs"] = d16, q[:, :16] | (q[:, 16:] << 4)
        deq = d16.astype(np.float64)[:, None] * (q.astype(np.float64) - 8)
        return raw.tobytes(), deq.reshape(w.shape)
    raise ValueError(type_name)


# ---- the models ----
def make_weights(cfg, rng):
    dim, ffn, hd = cfg["dim"], cfg["ffn"], cfg["dim"] // cfg["heads"]
    kvd = cfg["kv_heads"] * hd
    g = lambda *shape, scale: (rng.standard_normal(shape) * scale).astype(np.float32)
    w = {"token_embd.weight": g(cfg["vocab"], dim, scale=1.0),
         "output_norm.weight": 1 + g(dim, scale=0.1)}
    if not cfg["tied"]:
        w["output.weight"] = g(cfg["vocab"], dim, scale=dim ** -0.5)
    for l in range(cfg["layers"]):
        p = "blk.%d." % l
        w[p + "attn_norm.weight"] = 1 + g(dim, scale=0.1)
        w[p + "attn_q.weight"] = g(dim, dim, scale=dim ** -0.5)
        w[p + "attn_k.weight"] = g(kvd, dim, scale=dim ** -0.5)
        w[p + "attn_v.weight"] = g(kvd, dim, scale=dim ** -0.5)
        w[p + "attn_output.weight"] = g(dim, dim, scale=dim ** -0.5)
        w[p + "ffn_norm.weight"] = 1 + g(dim, scale=0.1)
        w[p + "ffn_gate.weight"] = g(ffn, dim, scale=dim ** -0.5)
        w[p + "ffn_up.weight"] = g(ffn, dim, scale=dim ** -0.5)
        w[p + "ffn_down.weight"] = g(dim, ffn, scale=ffn ** -0.5)
        if cfg["arch"] == "qwen2":
            for n, size in (("q", dim), ("k", kvd), ("v", kvd)):
                w[p + "attn_%s.bias" % n] = g(size, scale=0.5)
    return w


def rope_permute(w, heads):
    """Hugging Face's Q/K row order -> llama.cpp's (pairs (i, i + hd/2) become adjacent)."""
    rows = w.shape[0]
    return w.reshape(heads, 2, rows // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def rope_unpermute(w, heads):
    rows = w.shape[0]
    return w.reshape(heads, rows // heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def reference_logits(cfg, w, tokens):
    """float64 forward pass in Hugging Face's conventions; w holds HF-layout float64 weights."""
    dim, heads, kvh = cfg["dim"], cfg["heads"], cfg["kv_heads"]
    hd, eps, T = dim // heads, cfg["eps"], len(tokens)
    rms = lambda x, g: x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * g
    inv_freq = cfg["rope_base"] ** (-np.arange(0, hd, 2) / hd)
    ang = np.arange(T)[:, None] * inv_freq[None, :]
    cos, sin = np.cos(np.concatenate([ang, ang], -1)), np.sin(np.concatenate([ang, ang], -1))

    def rope(x):  # (T, H, hd)
        rot = np.concatenate([-x[..., hd // 2:], x[..., :hd // 2]], -1)
        return x * cos[:, None, :] + rot * sin[:, None, :]

    x = w["token_embd.weight"][tokens]
    mask = np.triu(np.full((T, T), -np.inf), 1)
    for l in range(cfg["layers"]):
        p = "blk.%d." % l
        h = rms(x, w[p + "attn_norm.weight"])
        q, k, v = (h @ w[p + "attn_%s.weight" % n].T + w.get(p + "attn_%s.bias" % n, 0) for n in "qkv")
        q, k, v = rope(q.reshape(T, heads, hd)), rope(k.reshape(T, kvh, hd)), v.reshape(T, kvh, hd)
        rep = heads // kvh
        k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
        s = np.einsum("thd,shd->hts", q, k) / np.sqrt(hd) + mask
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        o = np.einsum("hts,shd->thd", s, v).reshape(T, dim)
        x = x + o @ w[p + "attn_output.weight"].T
        h = rms(x, w[p + "ffn_norm.weight"])
        gate, up = h @ w[p + "ffn_gate.weight"].T, h @ w[p + "ffn_up.weight"].T
        x = x + (gate / (1 + np.exp(-gate)) * up) @ w[p + "ffn_down.weight"].T
    x = rms(x, w["output_norm.weight"])
    out = w.get("output.weight", w["token_embd.weight"])
    return x @ out.T


def write_npy(path, a):
    tmp = path + ".tmp.npy"
    np.save(tmp, a)
    os.replace(tmp, path)


def build(out_dir, name, cfg, types, rng, with_reference=True):
    vocab_meta = [m for m in read_metadata(os.path.join(VOCAB_DIR, cfg["vocab_file"])) if m[0].startswith("tokenizer.")]
    n_vocab = len(dict((k, v) for k, t, v in vocab_meta)["tokenizer.ggml.tokens"][1])
    cfg["vocab"] = n_vocab
    weights = make_weights(cfg, rng)
    arch, hd = cfg["arch"], cfg["dim"] // cfg["heads"]
    U32, F32 = 4, 6
    meta = [("general.architecture", STRING, arch), ("general.name", STRING, name),
            (arch + ".context_length", U32, cfg["ctx"]), (arch + ".embedding_length", U32, cfg["dim"]),
            (arch + ".block_count", U32, cfg["layers"]), (arch + ".feed_forward_length", U32, cfg["ffn"]),
            (arch + ".rope.dimension_count", U32, hd), (arch + ".attention.head_count", U32, cfg["heads"]),
            (arch + ".attention.head_count_kv", U32, cfg["kv_heads"]),
            (arch + ".attention.layer_norm_rms_epsilon", F32, cfg["eps"]),
            (arch + ".rope.freq_base", F32, cfg["rope_base"])] + vocab_meta
    rng_prompt = np.random.default_rng(7)
    tokens = [int(t) for t in rng_prompt.integers(3, n_vocab, size=cfg["prompt"])]
    with open(os.path.join(out_dir, name + ".tokens"), "w") as f:
        f.write(" ".join(map(str, tokens)) + "\n")
    for type_name in types:
        tensors, stored = [], {}
        for tname, wt in weights.items():
            if arch == "llama" and tname.endswith(("attn_q.weight", "attn_k.weight")):
                wt = rope_permute(wt, cfg["heads"] if "attn_q" in tname else cfg["kv_heads"])
            # Norms and biases stay F32 (as llama.cpp's converter keeps them); matrices take the type.
            t = type_name if wt.ndim == 2 else "F32"
            blob, deq = quantize(wt, t)
            tensors.append((tname, t, list(reversed(wt.shape)), blob))
            if arch == "llama" and tname.endswith(("attn_q.weight", "attn_k.weight")):
                deq = rope_unpermute(deq, cfg["heads"] if "attn_q" in tname else cfg["kv_heads"])
            stored[tname] = deq
        meta_t = meta + [("general.file_type", U32, {"F32": 0, "F16": 1, "Q4_0": 2, "Q8_0": 7}[type_name])]
        path = os.path.join(out_dir, "%s-%s.gguf" % (name, type_name.lower()))
        write_gguf(path, meta_t, tensors)
        if with_reference:
            logits = reference_logits(cfg, stored, tokens).astype(np.float32)
            write_npy(os.path.join(out_dir, "%s-%s.logits.npy" % (name, type_name.lower())), logits)
        print("wrote", path)


TYPES = ["F32", "F16", "Q8_0", "Q4_0"]
TINY_LLAMA = dict(arch="llama", vocab_file="ggml-vocab-llama-spm.gguf", dim=256, layers=2, heads=8, kv_heads=4,
                  ffn=512, ctx=256, eps=1e-5, rope_base=10000.0, tied=True, prompt=12)
TINY_QWEN2 = dict(arch="qwen2", vocab_file="ggml-vocab-deepseek-coder.gguf", dim=256, layers=2, heads=4,
                  kv_heads=2, ffn=512, ctx=256, eps=1e-6, rope_base=1000000.0, tied=False, prompt=12)
BENCH_134M = dict(arch="llama", vocab_file="ggml-vocab-llama-spm.gguf", dim=768, layers=12, heads=12, kv_heads=12,
                  ffn=2048, ctx=2048, eps=1e-5, rope_base=10000.0, tied=False, prompt=8)


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: gen-llm-fixtures.py OUT_DIR [--bench]")
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    if "--bench" in sys.argv[2:]:
        build(out, "llama-134m", BENCH_134M, TYPES, np.random.default_rng(3), with_reference=False)
        return
    build(out, "tiny-llama", TINY_LLAMA, TYPES, np.random.default_rng(1))
    build(out, "tiny-qwen2", TINY_QWEN2, TYPES, np.random.default_rng(2))


if __name__ == "__main__":
    main()
