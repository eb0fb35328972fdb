#!/usr/bin/env python3
"""Routing concentration from `nebula hotlist` TSVs: per layer, the share of all top-k selections
that fall on the 10 % most selected experts (ceil(0.1·E)), one column per file.
usage: routing_share.py HOTLIST.tsv [HOTLIST2.tsv ...]"""
import collections
import math
import sys


def share(path):
    per = collections.defaultdict(list)
    for line in open(path):
        f = line.rstrip("\n").split("\t")
        if len(f) >= 3 and f[0].isdigit() and f[2].isdigit():
            per[int(f[0])].append(int(f[2]))
    out = {}
    for layer, c in sorted(per.items()):
        c.sort(reverse=True)
        k = max(1, math.ceil(0.1 * len(c)))
        out[layer] = sum(c[:k]) / max(sum(c), 1)
    return out


def main():
    cols = [share(p) for p in sys.argv[1:]]
    print("layer\t" + "\t".join(sys.argv[1:]))
    for layer in sorted(cols[0]):
        print(f"{layer}\t" + "\t".join(f"{c.get(layer, float('nan')):.4f}" for c in cols))


if __name__ == "__main__":
    main()
