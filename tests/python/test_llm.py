# cpudl.llm.Model against `cpudl generate` and `cpudl tokenize` on the tiny test models: greedy text,
# streaming, chat completions, Ctrl-C-free cancellation and bad input.
import json
import os
import subprocess
import sys

import pytest

import cpudl


@pytest.fixture(scope="module")
def model_path(llm_fixtures):
    return llm_fixtures / "tiny-llama-q8_0.gguf"


@pytest.fixture(scope="module")
def model(model_path):
    return cpudl.llm.Model(model_path, n_ctx=256, threads=1)


def cli(binary, *args):
    return subprocess.run([str(binary), *args], check=True, capture_output=True, text=True).stdout


def test_greedy_generation_matches_the_cli(model, model_path, cpudl_binary):
    out = json.loads(cli(cpudl_binary, "generate", "-m", str(model_path), "--ctx", "256", "-t", "1", "-p",
                         "Once upon a time", "-n", "24", "--temp", "0", "--json"))
    text = model.generate("Once upon a time", max_tokens=24, temperature=0)
    assert text == out["text"]
    completion = model.create_completion("Once upon a time", max_tokens=24, temperature=0)
    assert completion["choices"][0]["text"] == out["text"]
    assert completion["usage"]["completion_tokens"] == len(out["token_ids"])
    assert completion["usage"]["prompt_tokens"] == out["prompt_tokens"]


def test_streaming_gives_the_same_text(model):
    whole = model.generate("The little dog", max_tokens=20, temperature=0)
    pieces = list(model.generate("The little dog", max_tokens=20, temperature=0, stream=True))
    assert "".join(pieces) == whole and len(pieces) > 1


def test_abandoned_stream_frees_the_model(model):
    stream = model.generate("The little dog", max_tokens=200, temperature=0, stream=True)
    next(stream)
    del stream  # cancels and joins the generation
    assert model.generate("The little dog", max_tokens=5, temperature=0) == \
        model.generate("The little dog", max_tokens=5, temperature=0)


def test_tokenize_matches_the_cli(model, model_path, cpudl_binary):
    ids = [int(t) for t in cli(cpudl_binary, "tokenize", "-m", str(model_path), "Hello world, again").split()]
    assert model.tokenize("Hello world, again") == ids
    assert model.detokenize(ids[1:]).strip() == "Hello world, again"


def test_sampling_is_seeded(model):
    a = model.generate("A cat", max_tokens=16, temperature=1.0, seed=5)
    b = model.generate("A cat", max_tokens=16, temperature=1.0, seed=5)
    assert a == b


def test_stop_strings_end_generation(model):
    text = model.generate("Once upon a time", max_tokens=24, temperature=0)
    if len(text) > 4:
        stop = text[2:4]
        cut = model.generate("Once upon a time", max_tokens=24, temperature=0, stop=[stop])
        assert cut == text[:text.index(stop)]


def test_chat_completion_has_openais_shape(model):
    r = model.create_chat_completion(messages=[{"role": "system", "content": "Be brief."},
                                               {"role": "user", "content": "Hi"}], max_tokens=8, temperature=0)
    assert r["object"] == "chat.completion"
    assert r["choices"][0]["message"]["role"] == "assistant"
    assert r["choices"][0]["finish_reason"] in ("stop", "length")
    chunks = list(model.create_chat_completion(messages=[{"role": "user", "content": "Hi"}], max_tokens=8,
                                               temperature=0, stream=True))
    assert chunks[-1]["choices"][0]["finish_reason"] in ("stop", "length")


def test_bad_llm_input(model, tmp_path):
    with pytest.raises(FileNotFoundError):
        cpudl.llm.Model(tmp_path / "missing.gguf")
    (tmp_path / "junk.gguf").write_bytes(b"GGUF\x03\x00\x00\x00garbage")
    with pytest.raises(RuntimeError, match="junk.gguf"):
        cpudl.llm.Model(tmp_path / "junk.gguf")
    with pytest.raises(ValueError, match="context holds 256"):
        model.generate(" word" * 400, max_tokens=1)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        model.generate([1, 10 ** 8], max_tokens=1)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        model.detokenize([-5])
    with pytest.raises(TypeError):
        model.generate(3.5)
    with pytest.raises(ValueError, match="'role' and 'content'"):
        model.create_chat_completion(messages=[{"content": "no role"}])


CTRL_C_SCRIPT = r"""
import json, os, signal, sys, threading, time
import cpudl
m = cpudl.llm.Model(sys.argv[1], threads=1)
slow = dict(max_tokens=250, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=1)  # full-vocabulary sampling: ~1 s
start = time.perf_counter()
m.generate("Once", **slow)
whole = time.perf_counter() - start
result = {"whole": whole}
for mode in ("call", "stream"):
    threading.Timer(whole / 4, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
    start = time.perf_counter()
    try:
        if mode == "call":
            m.generate("Once", **slow)
        else:
            for _ in m.generate("Once", stream=True, **slow):
                pass
        result[mode] = None
    except KeyboardInterrupt:
        result[mode] = time.perf_counter() - start
result["after"] = m.generate("Once", max_tokens=8, temperature=0)
print(json.dumps(result))
"""


def test_ctrl_c_interrupts_a_generation_cleanly(model, model_path):
    out = subprocess.run([sys.executable, "-c", CTRL_C_SCRIPT, str(model_path)], capture_output=True, text=True,
                         timeout=120, env=dict(os.environ))
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout)
    for mode in ("call", "stream"):
        assert r[mode] is not None, f"{mode}: Ctrl-C did not interrupt"
        assert r[mode] < r["whole"] * 0.75, f"{mode}: stopped after {r[mode]:.2f} s of {r['whole']:.2f} s"
    assert r["after"] == model.generate("Once", max_tokens=8, temperature=0)
