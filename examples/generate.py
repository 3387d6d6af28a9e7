#!/usr/bin/env python3
"""Text from a GGUF language model with cpudl's Python API (llama-cpp-python's call shapes).

    PYTHONPATH=build/python /usr/bin/python3 examples/generate.py model.gguf "Once upon a time"

Streams a completion as it is generated, then asks a chat question through the model's chat
template. Ctrl-C stops a generation cleanly.
"""
import sys

import cpudl


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: generate.py MODEL.gguf [PROMPT]")
    model = cpudl.llm.Model(sys.argv[1])
    prompt = sys.argv[2] if len(sys.argv) > 2 else "Once upon a time"
    print(prompt, end="", flush=True)
    for piece in model.generate(prompt, max_tokens=64, temperature=0.8, seed=0, stream=True):
        print(piece, end="", flush=True)
    print()
    reply = model.create_chat_completion(messages=[{"role": "user", "content": "Name three colours."}],
                                         max_tokens=48, temperature=0)
    print("chat:", reply["choices"][0]["message"]["content"].strip())
    print("usage:", reply["usage"])


if __name__ == "__main__":
    main()
