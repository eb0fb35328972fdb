#!/usr/bin/env python3
"""hotlist-curve.py — how concentrated a model's routing is, from `nebula hotlist` TSVs.

For each budget of VRAM slots per layer (a fraction of the layer's experts), a static
hotlist keeps that layer's most-picked experts; the hit rate is the share of routed
selections that land on them.  With one TSV the ranking and the measurement use the
same tokens (in-sample); with two, the first TSV ranks and the second is measured
(held-out, as MODEL.md's calibration target is stated: 16.7 % of each layer's
experts → about 65 % of activations).

usage: hotlist-curve.py RANK.tsv [MEASURE.tsv] [--fractions 0.05,0.1,...] [--json]
Prints a Markdown table (or one JSON object with --json); python3 stdlib only.
"""
import argparse
import json
import sys


def load(path):
    counts = {}
    try:
        with open(path) as f:
            header = f.readline().rstrip("\n").split("\t")
            if header[:3] != ["layer", "expert", "count"]:
                sys.exit(f"hotlist-curve: {path}: not a `nebula hotlist` TSV (header {header[:3]})")
            for n, line in enumerate(f, 2):
                parts = line.split("\t")
                if len(parts) < 3:
                    sys.exit(f"hotlist-curve: {path}:{n}: expected layer, expert, count")
                layer, expert, count = int(parts[0]), int(parts[1]), int(parts[2])
                counts.setdefault(layer, {})[expert] = count
    except OSError as e:
        sys.exit(f"hotlist-curve: cannot read {path}: {e.strerror}")
    except ValueError as e:
        sys.exit(f"hotlist-curve: {path}: {e}")
    if not counts:
        sys.exit(f"hotlist-curve: {path} has no rows")
    return counts


def curve(rank, measure, fractions):
    """Per fraction: (slots per layer, mean over layers of the hit rate, min, max)."""
    rows = []
    for frac in fractions:
        rates, slots = [], 0
        for layer, ranked in sorted(rank.items()):
            got = measure.get(layer, {})
            total = sum(got.values())
            if total == 0:
                continue
            slots = max(1, round(frac * len(ranked)))
            # Most-picked first; ties by expert id, as nebula-prepare breaks them.
            hot = sorted(ranked, key=lambda e: (-ranked[e], e))[:slots]
            rates.append(sum(got.get(e, 0) for e in hot) / total)
        if not rates:
            sys.exit("hotlist-curve: no layer has routed selections")
        rows.append((frac, slots, sum(rates) / len(rates), min(rates), max(rates)))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("rank")
    ap.add_argument("measure", nargs="?")
    ap.add_argument("--fractions", default="0.05,0.1,0.167,0.25,0.333,0.5")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    try:
        fractions = [float(x) for x in a.fractions.split(",")]
    except ValueError:
        sys.exit(f"hotlist-curve: --fractions wants numbers: {a.fractions}")
    if any(not 0 < f <= 1 for f in fractions):
        sys.exit("hotlist-curve: fractions must be in (0, 1]")
    rank = load(a.rank)
    measure = load(a.measure) if a.measure else rank
    rows = curve(rank, measure, fractions)
    picks = sum(sum(v.values()) for v in measure.values())
    if a.json:
        print(json.dumps({"held_out": bool(a.measure), "layers": len(measure), "selections": picks,
                          "curve": [{"fraction": f, "slots_per_layer": s, "hit_rate": r, "min": lo, "max": hi}
                                    for f, s, r, lo, hi in rows]}))
        return
    print(f"{'held-out' if a.measure else 'in-sample'}: {len(measure)} layers, {picks} routed selections")
    print()
    print("| slots per layer | fraction of experts | hit rate (mean over layers) | min–max |")
    print("|---:|---:|---:|---:|")
    for f, s, r, lo, hi in rows:
        print(f"| {s} | {100 * f:.1f} % | {100 * r:.1f} % | {100 * lo:.1f}–{100 * hi:.1f} % |")


if __name__ == "__main__":
    main()
