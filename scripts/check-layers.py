#!/usr/bin/env python3
"""Fails when a file under src/ includes a header of a higher layer.

The layers are the table under "## Layers" in docs/ARCHITECTURE.md (lowest first): the check reads
that table, so the documentation and the rule cannot disagree. A layer may include its own headers
and those of any layer below it. Headers are "folder/name.h" under src/ (the folder names the
layer) or "cpudl/name.h" (public headers, listed in the table's last column).

usage: check-layers.py [REPO_ROOT]
"""
import pathlib
import re
import sys

root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent.parent)
doc = (root / "docs" / "ARCHITECTURE.md").read_text()
section = re.search(r"^## Layers\n(.*?)(?=^## )", doc, re.S | re.M)
if not section:
    sys.exit("docs/ARCHITECTURE.md: no '## Layers' section")

rank_of_folder, rank_of_public, names = {}, {}, {}
for line in section.group(1).splitlines():
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    if len(cells) != 4 or not cells[0].isdigit():
        continue
    rank = int(cells[0])
    names[rank] = cells[1]
    for folder in re.findall(r"`src/([a-z_]+)/`", cells[2]):
        rank_of_folder[folder] = rank
    for header in re.findall(r"`(cpudl/[a-z_]+\.h)`", cells[3]):
        rank_of_public[header] = rank
if not rank_of_folder:
    sys.exit("docs/ARCHITECTURE.md: the '## Layers' table lists no folders")

include = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
problems, checked = [], 0
for path in sorted((root / "src").rglob("*")):
    if path.suffix not in (".h", ".cpp", ".inl") or not path.is_file():
        continue
    folder = path.relative_to(root / "src").parts[0]
    if folder not in rank_of_folder:
        problems.append(f"src/{folder}/: a folder the layer table does not list")
        continue
    own = rank_of_folder[folder]
    for number, text in enumerate(path.read_text(errors="replace").splitlines(), 1):
        match = include.match(text)
        if not match:
            continue
        checked += 1
        target = match.group(1)
        top = target.split("/")[0]
        rank = rank_of_public.get(target) if top == "cpudl" else rank_of_folder.get(top)
        if rank is None:
            if top == "cpudl" or "/" in target:
                problems.append(f"{path.relative_to(root)}:{number}: {target} is in no layer of the table")
            continue  # a header beside the file ("tile.inl")
        if rank > own:
            problems.append(f"{path.relative_to(root)}:{number}: includes {target} ({names[rank]}, layer {rank}) "
                            f"from {names[own]} (layer {own})")

problems = sorted(set(problems))
for p in problems:
    print(p)
print(f"checked {checked} includes under src/ against {len(names)} layers: {len(problems)} pointing up")
sys.exit(1 if problems else 0)
