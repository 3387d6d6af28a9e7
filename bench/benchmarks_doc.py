"""docs/BENCHMARKS.md sections that the peer scripts (vs_onnx.py, vs_pytorch.py) own: each between
<!-- NAME:begin --> and <!-- NAME:end -->, replaced on every run, appended under HEADING the first time."""
import os

DOC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "BENCHMARKS.md")


def write_section(name, heading, body):
    text = open(DOC).read() if os.path.exists(DOC) else ""
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    section = f"{begin}\n{body}\n{end}"
    if begin in text:
        text = text[:text.index(begin)] + section + text[text.index(end) + len(end):]
    else:
        text += f"\n## {heading}\n\n{section}\n"
    with open(DOC, "w") as f:
        f.write(text)
    print(f"wrote {DOC}")
