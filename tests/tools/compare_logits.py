#!/usr/bin/env python3
"""compare_logits.py OURS.f32 REF.f32 VOCAB [--gap GAP.f32] [--tol 2e-4]

Row-by-row parity of two [tokens x vocab] float32 logit files (MODEL.md "Parity method"):
max|ours - ref| must be <= tol * max|ref|, and the argmax must agree on every row whose
reference top-2 gap exceeds 1e-3 (near-ties are listed, never hidden).  Standard library only."""
import array
import sys


def load(path):
    a = array.array("f")
    with open(path, "rb") as f:
        a.frombytes(f.read())
    if sys.byteorder != "little":
        a.byteswap()
    return a


def main():
    args = sys.argv[1:]
    tol, gap_path = 2e-4, None
    if "--tol" in args:
        i = args.index("--tol"); tol = float(args[i + 1]); del args[i:i + 2]
    if "--gap" in args:
        i = args.index("--gap"); gap_path = args[i + 1]; del args[i:i + 2]
    ours, ref, vocab = load(args[0]), load(args[1]), int(args[2])
    if len(ours) != len(ref) or len(ref) % vocab:
        sys.exit(f"size mismatch: {len(ours)} vs {len(ref)} values (vocab {vocab})")
    rows = len(ref) // vocab
    gaps = load(gap_path) if gap_path else None
    max_ref = max(abs(x) for x in ref)
    worst, worst_row, disagree, ties = 0.0, -1, [], []
    for r in range(rows):
        o, f = ours[r * vocab:(r + 1) * vocab], ref[r * vocab:(r + 1) * vocab]
        d = max(abs(x - y) for x, y in zip(o, f))
        if d > worst:
            worst, worst_row = d, r
        ao, af = max(range(vocab), key=o.__getitem__), max(range(vocab), key=f.__getitem__)
        if ao != af:
            gap = gaps[r] if gaps else sorted(f)[-1] - sorted(f)[-2]
            (disagree if gap > 1e-3 else ties).append((r, ao, af, gap))
    print(f"{rows} rows: max|d| = {worst:.3g} at row {worst_row} = {worst / max_ref:.3g} * max|ref| "
          f"(bound {tol:g}); argmax disagreements {len(disagree)}, near-ties {len(ties)}")
    for t in ties:
        print(f"  near-tie row {t[0]}: ours {t[1]}, ref {t[2]}, gap {t[3]:.2g}")
    for t in disagree[:10]:
        print(f"  DISAGREE row {t[0]}: ours {t[1]}, ref {t[2]}, gap {t[3]:.3g}")
    sys.exit(0 if worst <= tol * max_ref and not disagree else 1)


if __name__ == "__main__":
    main()
