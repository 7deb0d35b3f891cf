#!/usr/bin/env python3
"""Time to a target loss, synchronous training against islands (issue #52 item 4).

Puts two measurements together: the validation curves of a synchronous run and an islands run at
equal tokens a step (bench/islands_loss.sh with KEEP=DIR keeps their metrics), and the tokens/s each
plan measured over the slow link (bench/islands_hosts.sh). Each curve's steps become seconds at its
plan's measured tokens/s; the target is the islands' final validation loss (the synchronous run
reaches it too, sooner in tokens); the time to it is where each curve first reaches it, linear
between validations.

    bench/islands_time_to_loss.py SYNC.jsonl ISLANDS.jsonl TOKENS_A_STEP SYNC_TOK_S ISLANDS_TOK_S LABEL PLOT.svg

Prints one markdown table and writes the curves (validation loss against minutes) as an SVG.
"""
import json
import sys


def curve(path):
    return sorted((j["step"], j["val_loss"]) for j in map(json.loads, open(path)) if "val_loss" in j)


def steps_to(points, loss):
    """The first step at which a validation curve reaches `loss`, linear between its points."""
    for (s0, v0), (s1, v1) in zip(points, points[1:]):
        if v0 >= loss >= v1:
            return s0 + (s1 - s0) * (v0 - loss) / (v0 - v1) if v0 != v1 else s1
    return None


def main():
    sync_path, islands_path, tokens, sync_rate, islands_rate, label, plot = sys.argv[1:8]
    tokens, sync_rate, islands_rate = float(tokens), float(sync_rate), float(islands_rate)
    runs = [("synchronous (best plan)", curve(sync_path), sync_rate),
            (label, curve(islands_path), islands_rate)]
    target = runs[1][1][-1][1]
    print(f"Target: the islands' final validation loss, {target:.4f}.")
    print()
    print("| run | tokens/s (measured over the link) | steps to the target | time to the target | final loss |")
    print("|---|---|---|---|---|")
    times = []
    for name, points, rate in runs:
        s = steps_to(points, target)
        t = None if s is None else s * tokens / rate
        times.append(t)
        print(f"| {name} | {rate:,.0f} | {'not reached' if s is None else f'{s:.0f}'} | "
              f"{'not reached' if t is None else f'{t:,.0f} s'} | {points[-1][1]:.4f} |")
    if None not in times:
        print()
        print(f"The islands reach the target {times[0] / times[1]:.2f}x sooner.")
    # The curves by hand (no plotting library on the machine): minutes against validation loss.
    w, h, m = 640, 360, 55
    minutes = [[(s * tokens / rate / 60, v) for s, v in points if s > 0] for _, points, rate in runs]
    end = max(t for c in minutes for t, _ in c)
    lo = min(v for c in minutes for _, v in c) * 0.97
    hi = max(v for c in minutes for _, v in c) * 1.03
    x = lambda t: m + (w - 2 * m) * t / end
    y = lambda v: h - m - (h - 2 * m) * (v - lo) / (hi - lo)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">',
           f'<line x1="{m}" y1="{h-m}" x2="{w-m}" y2="{h-m}" stroke="#999"/>'
           f'<line x1="{m}" y1="{m}" x2="{m}" y2="{h-m}" stroke="#999"/>',
           f'<text x="{w/2}" y="{h-15}" text-anchor="middle">minutes, at each plan\'s tokens/s measured over the link</text>',
           f'<text x="15" y="{h/2}" transform="rotate(-90 15 {h/2})" text-anchor="middle">validation loss</text>',
           f'<line x1="{m}" y1="{y(target):.1f}" x2="{w-m}" y2="{y(target):.1f}" stroke="#bbb" stroke-dasharray="4 3"/>',
           f'<text x="{w-m}" y="{y(target)-4:.1f}" text-anchor="end" fill="#777">target {target:.3f}</text>']
    for v in (lo, (lo + hi) / 2, hi):
        out.append(f'<text x="{m-5}" y="{y(v)+4:.1f}" text-anchor="end">{v:.2f}</text>')
    for k in range(5):
        t = end * k / 4
        out.append(f'<text x="{x(t):.1f}" y="{h-m+15}" text-anchor="middle">{t:.1f}</text>')
    for i, ((name, _, _), c) in enumerate(zip(runs, minutes)):
        color = ["#222222", "#1f77b4"][i]
        pts = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in c)
        out.append(f'<polyline fill="none" stroke="{color}" stroke-width="2" points="{pts}"/>')
        out.append(f'<text x="{w-m-230}" y="{m+15*i}" fill="{color}">{name}</text>')
    out.append("</svg>")
    open(plot, "w").write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
