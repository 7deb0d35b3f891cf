#!/usr/bin/env python3
"""Where a traced step's time goes, from `motley train --trace` (Chrome trace, simulator format).

On a GPU the runtime times a traced step with device events, so the compute stream's spans are
what the GPU did (an op's span includes its waits for copies) and the h2d/d2h spans are the
copies themselves. For each trace: the step, each stream's busy time, the time by op kind, the
compute stream's idle gaps (the GPU waiting on the host or on nothing), and the longest ops.
Given two traces (e.g. offload off, then on), also the op kinds whose time grew the most.

  bench/gpu/trace_summary.py TRACE.json [OTHER.json]
"""
import collections
import json
import sys


def load(path):
    events = json.load(open(path))["traceEvents"]
    streams = {e["tid"]: e["args"]["name"] for e in events if e.get("name") == "thread_name" and e["pid"] == 0}
    spans = [e for e in events if e.get("ph") == "X" and e["pid"] == 0]
    return streams, spans


def busy_ms(spans):
    total, end = 0.0, float("-inf")
    for s in sorted(spans, key=lambda s: s["ts"]):
        a, b = s["ts"], s["ts"] + s["dur"]
        if b > end:
            total += b - max(a, end)
            end = b
    return total / 1e3


def summarize(path):
    streams, spans = load(path)
    step = (max(s["ts"] + s["dur"] for s in spans) - min(s["ts"] for s in spans)) / 1e3
    print(f"== {path}: step {step:.1f} ms, {len(spans)} ops (rank 0)")
    for tid, name in sorted(streams.items()):
        mine = [s for s in spans if s["tid"] == tid]
        if mine:
            print(f"  {name:8s} busy {busy_ms(mine):8.1f} ms over {len(mine)} ops")
    by_kind = collections.defaultdict(float)
    for s in spans:
        by_kind[s["cat"]] += s["dur"] / 1e3
    print("  by kind (ms): " + ", ".join(f"{k} {v:.1f}" for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1])))
    compute_tid = next((t for t, n in streams.items() if n == "compute"), 0)
    compute = sorted((s for s in spans if s["tid"] == compute_tid), key=lambda s: s["ts"])
    gaps = []
    for a, b in zip(compute, compute[1:]):
        gap = b["ts"] - (a["ts"] + a["dur"])
        if gap > 0:
            gaps.append((gap / 1e3, a["name"], b["name"]))
    print(f"  compute idle: {sum(g for g, _, _ in gaps):.1f} ms in {len(gaps)} gaps; largest:")
    for g, a, b in sorted(gaps, reverse=True)[:8]:
        print(f"    {g:7.2f} ms  after {a:24s} before {b}")
    print("  longest ops:")
    for s in sorted(spans, key=lambda s: -s["dur"])[:10]:
        print(f"    {s['dur'] / 1e3:7.2f} ms  {streams.get(s['tid'], '?'):8s} {s['name']}")
    return by_kind


def main():
    kinds = [summarize(p) for p in sys.argv[1:3]]
    if len(kinds) == 2:
        grew = {k: kinds[1].get(k, 0) - kinds[0].get(k, 0) for k in set(kinds[0]) | set(kinds[1])}
        print("== second minus first, by kind (ms): " +
              ", ".join(f"{k} {v:+.1f}" for k, v in sorted(grew.items(), key=lambda kv: -abs(kv[1]))))


if __name__ == "__main__":
    main()
