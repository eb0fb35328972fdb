#!/usr/bin/env python3
"""llamacpp_parity.py FIXTURE_DIR LLAMACPP_OUT NEBULA_GREEDY.txt — transformers, Nebula and
llama.cpp on one fixture, token by token (docs/PARITY.md, "llama.cpp as a peer").

The one documented difference: a QSA query at position p in llama.cpp attends the top
indexer_top_k + ratio - 1 cells of the per-cell block scores, whatever the tail's length;
transformers (and Nebula) attend the top budget/ratio whole blocks plus the incomplete tail.
The two sets are the same exactly when every complete block is visible (B = ⌊(p+1)/r⌋ ≤
budget/r) or the tail holds r - 1 tokens; elsewhere llama.cpp also attends r - 1 - tail
tokens of the next-best block.  So, with "agree(p)" that rule:
  - Nebula's greedy ids equal transformers' (all of them);
  - llama.cpp's next-token log-probabilities equal transformers' within TOL at every
    position where agree(p), over the whole sequence and along transformers' greedy path;
  - at the first position where not agree(p) they differ by more than TOL (the difference is
    still there: if llama.cpp changes its rule, this fails and the page must change);
  - llama.cpp's greedy ids equal transformers' up to the first step whose argmax on
    transformers' path differs, and differ there, and that step's position is not agree(p).
The only expected ids are the fixture's own (transformers').  Standard library only."""
import json
import math
import os
import sys

TOL = 2e-3      # log-probability, absolute: llama.cpp in fp32 vs transformers in fp64
FLOOR = -15.0   # tokens less likely than e^-15 are left out (fp32 probabilities lose digits)


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare_logits import load  # noqa: E402  (float32 little-endian files, as compare_logits reads them)


def log_softmax(row):
    m = max(row)
    s = math.log(sum(math.exp(x - m) for x in row))
    return [x - m - s for x in row]


def argmax(row):
    return max(range(len(row)), key=row.__getitem__)


def main():
    fx, out, neb_path = sys.argv[1:4]
    name = os.path.basename(fx.rstrip("/"))
    cfg = json.load(open(os.path.join(fx, "config.json")))
    cfg = cfg.get("text_config", cfg)
    V = cfg["vocab_size"]
    qsa = "qwen_sparse_attention" in cfg["layer_types"] or "full_attention" in cfg["layer_types"]
    r, budget = cfg["indexer_compress_ratio"], cfg["indexer_budget"]
    man = json.load(open(os.path.join(fx, "manifest.json")))
    prefix = man["checks"]["greedy"]["prefix_len"] if "prefix_len" in man["checks"]["greedy"] else man["prefix_len"]

    def agree(p):
        blocks, tail = (p + 1) // r, (p + 1) % r
        return not qsa or blocks <= budget // r or tail == r - 1

    ids = lambda p: [int(x) for x in open(p).read().split()]
    want, neb, lc = ids(os.path.join(fx, "greedy.txt")), ids(neb_path), ids(os.path.join(out, "greedy.txt"))
    fails = []
    if neb != want:
        fails.append(f"Nebula's greedy ids differ from transformers':\n  nebula       {neb}\n  transformers {want}")

    def rows(ref_path, got_path, first_pos):
        ref, got = load(ref_path), load(got_path)
        n = len(ref) // V
        if len(got) != len(ref):
            sys.exit(f"{name}: {got_path}: {len(got)} values, want {len(ref)}")
        for i in range(n):
            lr = log_softmax(ref[i * V:(i + 1) * V])
            lg = got[i * V:(i + 1) * V]
            d = max(abs(a - b) for a, b in zip(lr, lg) if a > FLOOR)
            yield first_pos + i, d, argmax(lr), argmax(lg)

    summary = []
    for what, ref_path, got_path, p0 in (("sequence", "logits.f32", "full.f32", 0),
                                         ("greedy path", "greedy_logits.f32", "forced.f32", prefix - 1)):
        same, worst, first_diff, n_diff, lc_path_argmax = 0, 0.0, None, 0, []
        for p, d, ar, ag in rows(os.path.join(fx, ref_path), os.path.join(out, got_path), p0):
            lc_path_argmax.append(ag)
            if agree(p):
                same += 1
                worst = max(worst, d)
                if d > TOL:
                    fails.append(f"{what}: position {p}: llama.cpp's log-probabilities differ from transformers' "
                                 f"by {d:.3g} where the QSA token sets agree")
            else:
                n_diff += 1
                if first_diff is None:
                    first_diff = (p, d)
        if first_diff and first_diff[1] <= TOL:
            fails.append(f"{what}: position {first_diff[0]}: llama.cpp now agrees with transformers (|Δ| "
                         f"{first_diff[1]:.3g}) where its QSA width should differ: docs/PARITY.md is out of date")
        summary.append(f"{what}: {same} positions where the QSA sets agree, max |Δ| {worst:.2g}; {n_diff} where they "
                       + (f"differ, first at position {first_diff[0]} (|Δ| {first_diff[1]:.3g})" if first_diff else "differ"))
        if what == "greedy path":
            k_pred = next((k for k, a in enumerate(lc_path_argmax) if a != want[k]), None)

    k_got = next((k for k in range(len(want)) if k >= len(lc) or lc[k] != want[k]), None)
    if k_got != k_pred:
        fails.append(f"llama.cpp's greedy ids leave transformers' at step {k_got}, but its own log-probabilities on "
                     f"transformers' path first pick another id at step {k_pred}")
    elif k_pred is not None and agree(prefix - 1 + k_pred):
        fails.append(f"llama.cpp's greedy ids leave transformers' at step {k_pred} (position {prefix - 1 + k_pred}), "
                     f"where the QSA token sets agree: a difference docs/PARITY.md does not explain")
    g = (f"llama.cpp's greedy = transformers' for all {len(want)} ids" if k_pred is None else
         f"llama.cpp's greedy = transformers' for {k_pred} of {len(want)} ids, then {lc[k_pred]} for "
         f"{want[k_pred]} at position {prefix - 1 + k_pred} (QSA tail {(prefix + k_pred) % r} of {r})")
    print(f"{name}: Nebula's greedy = transformers' ({len(neb)} ids); {g}")
    for s in summary:
        print(f"{name}:   {s}")
    for f in fails:
        print(f"{name}: FAIL: {f}")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
