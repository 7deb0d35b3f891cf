"""Sweep the global batch size and see what each buys: motley plans every size on a cluster and
simulates the step; the table (and, with matplotlib installed, a plot) shows tokens/s per size.

    PYTHONPATH=build/python /usr/bin/python3 python/examples/sweep_batch.py \
        --cluster zorse-a --model llama-13b --seq-len 2048 --out sweep.png
"""
import argparse

import motley


def sweep(cluster, model, seq_len, sequences, strategy="auto"):
    rows = []
    for n in sequences:
        r = motley.plan(cluster, model, seq_len=seq_len, global_batch_tokens=n * seq_len, strategy=strategy)
        rows.append((n, r))
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cluster", default="zorse-a")
    p.add_argument("--model", default="llama-13b")
    p.add_argument("--seq-len", type=int, default=2048)
    p.add_argument("--sequences", type=int, nargs="+", default=[64, 128, 256, 512, 1024])
    p.add_argument("--strategy", default="auto")
    p.add_argument("--out", default="", help="write the plot here (needs matplotlib)")
    args = p.parse_args()

    rows = sweep(args.cluster, args.model, args.seq_len, args.sequences, args.strategy)
    print(f"{'sequences':>10} {'strategy':>15} {'step':>10} {'tokens/s':>10}")
    for n, r in rows:
        if r.get("error"):
            print(f"{n:>10} {'-':>15} {'-':>10} {'-':>10}  {r['error']}")
        else:
            print(f"{n:>10} {r['strategy']:>15} {r['step_time_s']:>9.2f}s {r['tokens_per_s']:>10.0f}")
    if args.out:
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            print("matplotlib is not installed: no plot (apt-get install python3-matplotlib)")
            return
        fitted = [(n, r["tokens_per_s"]) for n, r in rows if not r.get("error")]
        plt.plot([n for n, _ in fitted], [t for _, t in fitted], marker="o")
        plt.xscale("log", base=2)
        plt.xlabel("global batch (sequences)")
        plt.ylabel("simulated tokens/s")
        plt.title(f"{args.model} on {args.cluster}")
        plt.savefig(args.out, dpi=120, bbox_inches="tight")
        print(f"plot: {args.out}")


if __name__ == "__main__":
    main()
