#!/usr/bin/env python3
"""Fails when motley's includes form a cycle (issue #49: every dependency points one way).

Two levels are checked over src/ (tests, *_test.cc, are left out: a test may include anything):
  - folders: src/<layer> and, under src/runtime, each part (executor, train, comm, ...) is one
    node; an include from one to another is an edge;
  - files: a header and its source (foo.h, foo.cc) are one node.
Any strongly connected component with more than one node is printed with the includes that tie
it, and the script exits 1.

  scripts/check-include-cycles.py [SRC_DIR]
"""
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def sources(src):
    for root, _, files in os.walk(src):
        for f in files:
            if f.endswith((".h", ".cc")) and not f.endswith("_test.cc"):
                yield os.path.join(root, f)


def folder_of(path):
    # "core/units.h" -> "core"; "runtime/train/trainer.h" -> "runtime/train"
    parts = path.split("/")
    return "/".join(parts[:2]) if parts[0] == "runtime" and len(parts) > 2 else parts[0]


def unit_of(path):
    return os.path.splitext(path)[0]


def components(graph):
    """Tarjan's strongly connected components (iterative)."""
    index, low, on_stack, stack, out = {}, {}, set(), [], []
    counter = [0]
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, it = work[-1]
            advanced = False
            for nxt in it:
                if nxt not in graph:
                    continue
                if nxt not in index:
                    index[nxt] = low[nxt] = counter[0]
                    counter[0] += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    n = stack.pop()
                    on_stack.discard(n)
                    comp.append(n)
                    if n == node:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "src")
    src = os.path.normpath(src)
    edges = []  # (from file, to file), both relative to src
    for path in sources(src):
        rel = os.path.relpath(path, src)
        with open(path, encoding="utf-8") as f:
            for target in INCLUDE.findall(f.read()):
                if os.path.exists(os.path.join(src, target)):
                    edges.append((rel, target))
    failed = False
    for level, key in (("folders", folder_of), ("files", unit_of)):
        graph, why = {}, {}
        for a, b in edges:
            ka, kb = key(a), key(b)
            graph.setdefault(ka, set())
            graph.setdefault(kb, set())
            if ka != kb:
                graph[ka].add(kb)
                why.setdefault((ka, kb), f"{a} includes {b}")
        for comp in components(graph):
            failed = True
            print(f"include cycle among {level}: {', '.join(comp)}")
            members = set(comp)
            for (ka, kb), line in sorted(why.items()):
                if ka in members and kb in members:
                    print(f"  {line}")
    if failed:
        print("Move the type both sides need into a header of its own below them (docs/architecture.md).")
        return 1
    print(f"no include cycle among {len({folder_of(a) for a, _ in edges})} folders and their files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
