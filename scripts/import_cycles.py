#!/usr/bin/env python3
"""Import cycles between the files of one crate's src/.

Reads every `crate::…`, `super::…` and `self::…` path in each .rs file (comments and string literals
left out; `use` trees with braces expanded), resolves each to the file of the longest module
prefix it names, builds the file graph and prints its strongly connected components.
Paths through a child module the file declares (`use client::X` in `llm/mod.rs`) count
too; `mod x;` declarations themselves are not edges: a parent declaring a child does not
use it.

    python3 scripts/import_cycles.py [SRC_DIR] [--file actors/src/protocol.rs] [--modules] [-v] [--check]

`--modules` also folds each file into its top-level module (`tools/bash.rs` → `tools`) and
prints the cycles between modules. Paths are printed relative to SRC_DIR. `--check` prints
the same and exits 1 when `--modules` finds a cycle between modules or the `--file` file is
in a cycle of files (scripts/check_rules.sh keeps both); without it the exit is 0.
"""
import os
import re
import sys


def strip(text):
    """Comments and string/char literals out, newlines kept."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
        elif c == "r" and re.match(r'r#*"', text[i:i + 20]) and not (i and (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'r(#*)"', text[i:])
            end = text.find('"' + m.group(1), i + len(m.group(0)))
            i = n if end < 0 else end + 1 + len(m.group(1))
            out.append('""')
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append('""')
            i = j + 1
        elif c == "'" and re.match(r"'(\\.|[^\\'])'|'\\u\{[0-9a-fA-F]+\}'|'\\x[0-9a-fA-F]{2}'", text[i:]):
            m = re.match(r"'(\\.|[^\\'])'|'\\u\{[0-9a-fA-F]+\}'|'\\x[0-9a-fA-F]{2}'", text[i:])
            out.append("' '")
            i += len(m.group(0))
        else:
            out.append(c)
            i += 1
    return "".join(out)


def expand(tree):
    """`a::{b, c::{d, e}}` → ['a::b', 'a::c::d', 'a::c::e']."""
    tree = re.sub(r"\s+", "", tree)
    depth = 0
    for k, ch in enumerate(tree):
        if ch == "{" and depth == 0:
            prefix, inner = tree[:k], tree[k + 1:tree.rfind("}")]
            parts, d, start = [], 0, 0
            for m, ch2 in enumerate(inner):
                if ch2 == "{":
                    d += 1
                elif ch2 == "}":
                    d -= 1
                elif ch2 == "," and d == 0:
                    parts.append(inner[start:m])
                    start = m + 1
            parts.append(inner[start:])
            return [p for part in parts if part for p in expand(prefix + part)]
        depth += ch == "{"
    return [re.sub(r"::(self|\*)$", "", tree.split(" as ")[0])]


def module_of(path, src):
    rel = os.path.relpath(path, src)[:-3].split(os.sep)
    if rel[-1] in ("mod", "lib", "main"):
        rel = rel[:-1]
    return tuple(rel)


def strongly_connected(edges):
    """The cycles of a graph: its SCCs of more than one node, largest first (Tarjan)."""
    index, low, stack, on, sccs, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            sccs.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return sorted((c for c in sccs if len(c) > 1), key=len, reverse=True)


def main():
    args = sys.argv[1:]
    verbose = "-v" in args
    modules = "--modules" in args
    check = "--check" in args
    broken = False
    focus = None
    if "--file" in args:
        focus = os.path.normpath(args[args.index("--file") + 1])
    positional = [a for k, a in enumerate(args) if not a.startswith("-") and (k == 0 or args[k - 1] != "--file")]
    src = positional[0] if positional else "actors/src"
    files = {}
    for root, _, names in os.walk(src):
        for name in names:
            if name.endswith(".rs"):
                path = os.path.join(root, name)
                files[module_of(path, src)] = os.path.relpath(path, src)
    edges = {f: set() for f in files.values()}
    for mod, path in files.items():
        text = strip(open(os.path.join(src, path), encoding="utf-8").read())
        children = re.findall(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+([a-z_0-9]+)\s*;", text, re.M)
        heads = "|".join(["crate", "super", "self"] + children)
        # `use` statements whole (they may hold braces and newlines), then any other path.
        use_re = rf"\b(?:pub(?:\([^)]*\))?\s+)?use\s+((?:{heads})::[^;]*);"
        uses = re.findall(use_re, text)
        rest = re.sub(use_re, "", text)
        refs = [p for u in uses for p in expand(u)]
        refs += re.findall(rf"(?<![\w:])((?:{heads})(?:::(?:super|[A-Za-z_][A-Za-z0-9_]*))+)", rest)
        for ref in refs:
            segs = ref.split("::")
            if segs[0] == "crate":
                base, segs = (), segs[1:]
            else:
                base = mod
                if segs[0] == "self":
                    segs = segs[1:]
                while segs and segs[0] == "super":
                    base, segs = base[:-1], segs[1:]
            target = base + tuple(segs)
            while target not in files and target:
                target = target[:-1]
            if target in files and files[target] != path:
                edges[path].add(files[target])
    cycles = strongly_connected(edges)
    print(f"files: {len(files)}  edges: {sum(map(len, edges.values()))}")
    print(f"file cycles (SCCs of more than one file): {len(cycles)}, largest {len(cycles[0]) if cycles else 1} files")
    for c in cycles:
        print(f"  {len(c)}: " + (" ".join(c) if verbose or len(c) <= 12 else " ".join(c[:12]) + " …"))
    if focus:
        focus = os.path.relpath(focus, src) if focus.startswith(os.path.normpath(src) + os.sep) else focus
        hit = [c for c in cycles if focus in c]
        print(f"{focus} in a cycle: {'yes, with ' + str(len(hit[0]) - 1) + ' other files' if hit else 'no'}")
        broken = broken or bool(hit)
        print(f"{focus} imports: {' '.join(sorted(edges.get(focus, ()))) or 'nothing from crate::'}")
    if modules:
        top = {f: f.split(os.sep)[0].removesuffix(".rs") for f in edges}
        medges = {m: set() for m in top.values()}
        for f, targets in edges.items():
            medges[top[f]].update(top[t] for t in targets if top[t] != top[f])
        mcycles = strongly_connected(medges)
        print(f"top-level modules: {len(medges)}; module cycles: {len(mcycles)}, largest {len(mcycles[0]) if mcycles else 1} modules")
        for c in mcycles:
            print(f"  {len(c)}: " + " ".join(c))
        broken = broken or bool(mcycles)
    return 1 if check and broken else 0


if __name__ == "__main__":
    sys.exit(main())
