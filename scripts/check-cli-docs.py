#!/usr/bin/env python3
"""Fails when docs/CLI.md and the CLI's own option definitions disagree.

For every subcommand, `cpudl <command> --help` lists its flags (CLI11 defines them once, in
src/cli/). Its section of docs/CLI.md -- every heading "`cpudl <command> ...`" and the text under it
up to the next heading of the same or a higher level -- must mention each of those flags, and every
flag in such a heading's synopsis must exist. So a flag cannot be added, renamed or dropped in the
code without the page following.

usage: check-cli-docs.py CPUDL_BINARY DOCS/CLI.md
"""
import re
import subprocess
import sys

binary, doc_path = sys.argv[1], sys.argv[2]
doc = open(doc_path).read().splitlines()


def help_text(words):
    done = subprocess.run([binary, *words, "--help"], capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(['cpudl', *words])} --help exited {done.returncode}: {done.stderr.strip()}")
    return done.stdout


def subcommands(text):
    """Names under a help text's 'Subcommands:' block."""
    names, inside = [], False
    for line in text.splitlines():
        if line.startswith("Subcommands:"):
            inside = True
            continue
        if inside:
            match = re.match(r"  ([a-z][a-z-]*)\s", line)
            if match:
                names.append(match.group(1))
            elif line.strip() and not line.startswith("  "):
                inside = False
    return names


def flags_of(text):
    """Long flags in a help text's options block, each with its short form or None (CLI11 prints
    '-m,--model' or '--model')."""
    flags = {}
    for line in text.splitlines():
        match = re.match(r"\s+(?:(-[a-zA-Z]),)?(--[a-z0-9][a-z0-9-]*)", line)
        if match and match.group(2) != "--help":
            flags[match.group(2)] = match.group(1)
    return flags


def sections(words):
    """Heading synopses and bodies of the doc sections about `cpudl <words>`."""
    found = []
    for i, line in enumerate(doc):
        heading = re.match(r"^(#+) `cpudl ([^`]*)`", line)
        if not heading:
            continue
        synopsis = heading.group(2)
        # "bench peak|gemm|conv ..." documents three commands in one section.
        head = synopsis.split(" ")
        if head[0] != words[0]:
            continue
        if len(words) > 1 and words[1] not in head[1].split("|"):
            continue
        level = len(heading.group(1))
        body = []
        for later in doc[i + 1:]:
            other = re.match(r"^(#+) ", later)
            if other and len(other.group(1)) <= level:
                break
            body.append(later)
        # The enclosing sections' introductions (flags common to several commands, such as the
        # LLM commands' -m and --threads) count too.
        for j in range(i - 1, -1, -1):
            outer = re.match(r"^(#+) ", doc[j])
            if outer and len(outer.group(1)) < level:
                level_outer = len(outer.group(1))
                for later in doc[j + 1:i]:
                    inner = re.match(r"^(#+) ", later)
                    if inner and len(inner.group(1)) > level_outer:
                        break
                    body.append(later)
                level = level_outer
        found.append((synopsis, "\n".join(body)))
    return found


top = help_text([])
commands = [[c] for c in subcommands(top)]
for c in list(commands):
    commands += [[c[0], sub] for sub in subcommands(help_text(c))]

problems = []
for words in commands:
    text = help_text(words)
    if subcommands(text) and not flags_of(text):
        continue  # a group such as `bench`: its subcommands are checked
    docs = sections(words)
    name = "cpudl " + " ".join(words)
    if not docs:
        problems.append(f"{name}: no section of {doc_path} is headed `{name} ...`")
        continue
    documented = " ".join(synopsis + "\n" + body for synopsis, body in docs)
    for flag, short in sorted(flags_of(text).items()):
        spellings = [flag] + ([short] if short else [])
        if not any(re.search(r"(?<![a-z0-9-])" + re.escape(f) + r"(?![a-z0-9-])", documented) for f in spellings):
            problems.append(f"{name}: {flag} is in --help but not in its section of {doc_path}")
    for synopsis, _ in docs:
        for flag in re.findall(r"(?<![a-z0-9-])--[a-z0-9][a-z0-9-]*", synopsis):
            if flag not in flags_of(text):
                problems.append(f"{name}: the heading `cpudl {synopsis}` names {flag}, which --help does not have")

for p in problems:
    print(p)
print(f"checked {len(commands)} commands against {doc_path}: {len(problems)} disagreements")
sys.exit(1 if problems else 0)
