#!/usr/bin/env python3
"""cache-sim.py — VRAM hit rates of expert caches replayed on a campaign's routes (issue 15 items 3 and 5).

Reads `nebula hotlist --routes FILE` (a line per layer and token: layer, token, the k experts) and replays
every layer's selections against caches of N experts per layer:

  static    the N experts the profile counts most (the placement nebula-prepare makes from a hotlist);
            the profile is --profile FILE's routes, or the replayed routes themselves (an upper bound for a
            static placement: it knows the whole campaign)
  adaptive  issue 15's adaptive cache, engine/slot_policy.h's rule (the gpu-worker's): per-expert use counts
            decayed by --decay each token; every --every tokens up to --swaps of the hottest non-resident
            experts replace the coldest resident ones when hotter by more than --hysteresis (ties: the
            lower expert id; the copies happen between steps: a swap counts from the next token)
  lru       least recently used, filled on every miss (a copy on the critical path: a bound, not a design)
  ideal     the best N for each window of --window tokens, known in advance: the most any cache that
            changes only between windows can reach (with windows of a topic's length, the "ideal
            adaptive cache" of issue 15 item 5)

A selection is a hit when its expert is resident at that token.  Prints one table (hit rate per policy,
the mean over layers, and the range over layers) or --json.  Standard library only.
"""
import argparse
import json
import sys
from collections import Counter, OrderedDict, defaultdict


def read_routes(path):
    """{layer: [tuple of experts per token, in token order]}"""
    by_layer = defaultdict(dict)
    with open(path) as f:
        for n, line in enumerate(f, 1):
            p = line.split()
            if len(p) < 3:
                sys.exit(f"cache-sim: {path}:{n}: want 'layer token expert...', got {line.strip()!r}")
            by_layer[int(p[0])][int(p[1])] = tuple(int(e) for e in p[2:])
    out = {}
    for layer, toks in by_layer.items():
        if sorted(toks) != list(range(len(toks))):
            sys.exit(f"cache-sim: {path}: layer {layer}'s tokens are not 0..{len(toks) - 1}")
        out[layer] = [toks[t] for t in range(len(toks))]
    return out


def hits_static(seq, n, profile):
    keep = top(profile, n)
    return sum(e in keep for row in seq for e in row)


def top(rows, n):
    """the n experts rows select most (ties: the lower id)"""
    c = Counter(e for row in rows for e in row)
    return set(sorted(c, key=lambda e: (-c[e], e))[:n])


def hits_adaptive(seq, n, decay, every, swaps, hysteresis=0.0, start=None):
    """engine/slot_policy.h's rule (tests/engine/test_slot_policy.c checks that both give the same hits).  start: the
    resident set at token 0 (the gpu-worker's: the placement's slots), else a cold start (the first round's top n)."""
    score = defaultdict(float)
    res = set(start) if start is not None else top(seq[:every], n)
    hits = 0
    for t, row in enumerate(seq):
        hits += sum(e in res for e in row)  # the last round's swaps count from this token
        for e in list(score):
            score[e] *= decay
        for e in row:
            score[e] += 1.0
        if (t + 1) % every == 0:
            out = sorted((e for e in score if e not in res and score[e] > 0), key=lambda e: (-score[e], e))[:swaps]
            while out and len(res) < n:  # free slots first (a cold start holds fewer than n)
                res.add(out.pop(0))
            cold = sorted(res, key=lambda e: (score.get(e, 0.0), e))
            for hot, c in zip(out, cold):
                if not score[hot] > score.get(c, 0.0) + hysteresis:
                    break
                res.discard(c)
                res.add(hot)
    return hits


def hits_lru(seq, n):
    cache = OrderedDict()
    hits = 0
    for row in seq:
        for e in row:
            if e in cache:
                hits += 1
                cache.move_to_end(e)
            else:
                cache[e] = True
                if len(cache) > n:
                    cache.popitem(last=False)
    return hits


def hits_ideal(seq, n, window):
    hits = 0
    for w0 in range(0, len(seq), window):
        part = seq[w0:w0 + window]
        hits += sum(c for _, c in Counter(e for row in part for e in row).most_common(n))
    return hits


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("routes", help="nebula hotlist --routes output")
    ap.add_argument("--slots", type=int, required=True, help="experts per layer in the cache (N)")
    ap.add_argument("--profile", help="routes of another campaign for the static placement (default: the replayed ones)")
    ap.add_argument("--decay", type=float, default=0.98, help="adaptive: the counts' decay per token (default 0.98)")
    ap.add_argument("--every", type=int, default=8, help="adaptive: tokens between swap rounds (default 8)")
    ap.add_argument("--swaps", type=int, default=4, help="adaptive: experts swapped per round at most (default 4)")
    ap.add_argument("--hysteresis", type=float, default=0.0, help="adaptive: a swap needs the count to exceed the"
                    " resident's by more (default 0; the gpu-worker's slots.hysteresis defaults to 0.5)")
    ap.add_argument("--start", choices=("cold", "static"), default="cold", help="adaptive: start from the first round's"
                    " top N (cold, default) or from the static placement's N (static: what the gpu-worker does)")
    ap.add_argument("--window", type=int, default=128, help="ideal: tokens per window (default 128)")
    ap.add_argument("--layers", help="only these layers, comma-separated (default all)")
    ap.add_argument("--json", action="store_true", help="one JSON object instead of the table")
    a = ap.parse_args()
    routes = read_routes(a.routes)
    prof = read_routes(a.profile) if a.profile else routes
    layers = sorted(routes) if not a.layers else [int(x) for x in a.layers.split(",")]
    rate = defaultdict(list)
    hits = defaultdict(list)
    for layer in layers:
        seq = routes[layer]
        sel = sum(len(r) for r in seq)
        for p, h in (("static", hits_static(seq, a.slots, prof.get(layer, []))),
                     ("adaptive", hits_adaptive(seq, a.slots, a.decay, a.every, a.swaps, a.hysteresis,
                                                top(prof.get(layer, []), a.slots) if a.start == "static" else None)),
                     ("lru", hits_lru(seq, a.slots)), ("ideal", hits_ideal(seq, a.slots, a.window))):
            hits[p].append(h)
            rate[p].append(h / sel)
    tokens = len(routes[layers[0]])
    res = {p: {"mean": sum(v) / len(v), "min": min(v), "max": max(v)} for p, v in rate.items()}
    if a.json:
        print(json.dumps({"slots": a.slots, "layers": len(layers), "tokens": tokens, "hit_rate": res,
                          "per_layer": {p: v for p, v in rate.items()},
                          "hits_per_layer": {p: v for p, v in hits.items()}, "layer_ids": layers}))
        return
    print(f"{len(layers)} layers, {tokens} tokens, {a.slots} experts per layer cached"
          f" (static profile: {'--profile' if a.profile else 'the replayed campaign'})")
    print("| policy | hit rate (mean of layers) | min | max |")
    print("|---|---:|---:|---:|")
    for p in ("static", "adaptive", "lru", "ideal"):
        r = res[p]
        print(f"| {p} | {100 * r['mean']:.1f} % | {100 * r['min']:.1f} % | {100 * r['max']:.1f} % |")


if __name__ == "__main__":
    main()
