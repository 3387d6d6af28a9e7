"""Llama-family language models from GGUF files (F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K), with
llama-cpp-python's call shapes: Model(path).generate(...), create_chat_completion(messages=...)."""
from __future__ import annotations

import os
import time
import uuid
from typing import Dict, Iterator, List, Optional, Sequence, Union

from . import _cpudl


class Model:
    """A GGUF model, memory-mapped, with one context of n_ctx tokens (one generation at a time).

    ``n_ctx`` None: 2048, or the model's trained context length when that is shorter.
    ``threads``: compute threads of this model's generations (None: the process default).
    ``cache_type``: the KV cache's element type, "f16", "f32" or "q8_0"."""

    def __init__(self, path: str, n_ctx: Optional[int] = None, threads: Optional[int] = None,
                 cache_type: str = "f16") -> None:
        path = os.fspath(path)
        if not os.path.exists(path):
            raise FileNotFoundError(f"{path}: cannot open (No such file or directory)")
        self._model = _cpudl._LlmModel(path, n_ctx or 0, threads, cache_type)
        self.path = path

    @property
    def n_ctx(self) -> int:
        return self._model.n_ctx

    @property
    def metadata(self) -> dict:
        """Architecture, name, weight type and sizes from the GGUF header."""
        return self._model.metadata

    def tokenize(self, text: str, add_bos: bool = True, special: bool = True) -> List[int]:
        """Token ids of ``text``; ``special``: control tokens written in the text become those tokens."""
        return self._model.tokenize(text, add_bos, special)

    def detokenize(self, ids: Sequence[int]) -> str:
        """The text of ``ids`` (bytes that are not UTF-8 become U+FFFD)."""
        return self._model.detokenize(list(ids))

    def _request(self, prompt, max_tokens, temperature, top_k, top_p, min_p, repeat_penalty, seed, stop, add_bos):
        if isinstance(stop, str):
            stop = [stop]
        if not isinstance(prompt, (str, list, tuple)):
            raise TypeError(f"generate: the prompt is a str or a list of token ids, not {type(prompt).__name__}")
        return self._model._request(prompt if isinstance(prompt, str) else list(prompt), max_tokens, temperature,
                                    top_k, top_p, min_p, repeat_penalty, seed, list(stop or []), add_bos)

    def generate(self, prompt: Union[str, Sequence[int]], max_tokens: int = 128, temperature: float = 0.8,
                 top_k: int = 40, top_p: float = 0.95, min_p: float = 0.05, repeat_penalty: float = 1.0,
                 seed: Optional[int] = None, stop: Union[str, Sequence[str], None] = None, stream: bool = False,
                 add_bos: bool = True) -> Union[str, Iterator[str]]:
        """Text generated after ``prompt`` (text, or token ids); with stream=True, an iterator of
        pieces as they are produced. temperature 0 is greedy; ``stop`` strings end generation and
        are not part of the text; seed None draws one at random."""
        request = self._request(prompt, max_tokens, temperature, top_k, top_p, min_p, repeat_penalty, seed, stop,
                                add_bos)
        if stream:
            return self._model._stream(request)
        return self._model._generate(request).text

    def create_completion(self, prompt: Union[str, Sequence[int]], max_tokens: int = 128, temperature: float = 0.8,
                          top_k: int = 40, top_p: float = 0.95, min_p: float = 0.05, repeat_penalty: float = 1.0,
                          seed: Optional[int] = None, stop: Union[str, Sequence[str], None] = None) -> dict:
        """OpenAI's text-completion object, as llama-cpp-python returns it."""
        request = self._request(prompt, max_tokens, temperature, top_k, top_p, min_p, repeat_penalty, seed, stop, True)
        c = self._model._generate(request)
        return self._response("text_completion", {"text": c.text}, c)

    def create_chat_completion(self, messages: List[Dict[str, str]], max_tokens: int = 512,
                               temperature: float = 0.8, top_k: int = 40, top_p: float = 0.95, min_p: float = 0.05,
                               repeat_penalty: float = 1.0, seed: Optional[int] = None,
                               stop: Union[str, Sequence[str], None] = None, stream: bool = False):
        """OpenAI's chat-completion object (or, with stream=True, its chunks), as llama-cpp-python
        returns it. The prompt is formatted with the model's chat template family (ChatML, Llama 2,
        Llama 3, Phi-3)."""
        if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
            raise TypeError("create_chat_completion: messages is a list of {'role': ..., 'content': ...} dicts")
        prompt = self._model._format_chat([{k: str(v) for k, v in m.items()} for m in messages])
        request = self._request(prompt, max_tokens, temperature, top_k, top_p, min_p, repeat_penalty, seed, stop, True)
        if stream:
            return self._chat_chunks(request)
        c = self._model._generate(request)
        return self._response("chat.completion", {"message": {"role": "assistant", "content": c.text}}, c)

    def _chat_chunks(self, request) -> Iterator[dict]:
        ident, created = "chatcmpl-" + uuid.uuid4().hex, int(time.time())
        stream = self._model._stream(request)
        first = True
        for piece in stream:
            delta = {"role": "assistant", "content": piece} if first else {"content": piece}
            first = False
            yield {"id": ident, "object": "chat.completion.chunk", "created": created, "model": self.path,
                   "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
        yield {"id": ident, "object": "chat.completion.chunk", "created": created, "model": self.path,
               "choices": [{"index": 0, "delta": {}, "finish_reason": stream.result.finish_reason}]}

    def _response(self, kind: str, choice: dict, c) -> dict:
        completion_tokens = len(c.token_ids)
        return {
            "id": ("chatcmpl-" if kind.startswith("chat") else "cmpl-") + uuid.uuid4().hex,
            "object": kind,
            "created": int(time.time()),
            "model": self.path,
            "choices": [{"index": 0, **choice, "finish_reason": c.finish_reason}],
            "usage": {"prompt_tokens": c.prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": c.prompt_tokens + completion_tokens},
        }
