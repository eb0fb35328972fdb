#!/usr/bin/env python3
"""spec_chisq.py — speculative sampling's output distribution against plain sampling (issue 16's acceptance:
"speculative sampling at T > 0 passes a chi-square test of the output distribution against plain sampling").

    spec_chisq.py NEBULA MODEL PROMPT_IDS [-N SEEDS] [--backend cpu|cuda]

Draws the first three generated tokens of N independent runs of each sample — plain sampling (seeds 1 … N),
speculative sampling with an oracle drafting the greedy continuation in windows of 4 (seeds N+1 … 2N: other
seeds, so the two samples are independent and the test is one of distributions, not of per-seed identity),
and a negative control, the same speculative runs at another temperature (seeds 2N+1 … 3N) — and compares the
distribution of the token at positions 0, 1 and 2 (given the fixed prompt) by Pearson's chi-square
test of homogeneity, the ids whose expected count is below 5 in either sample merged into one bin.  Passes
when speculative sampling gives p > 0.001 at every position, its drafts were accepted at least sometimes, and
the control is rejected (p < 0.001 at some position): the test can fail.  Prints one line per comparison and
exits 1 on failure.
"""
import argparse
import math
import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

SAMPLING = ["--top-k", "8", "--top-p", "1"]
TEMP, CONTROL_TEMP = 0.6, 1.2


def q_gamma(a, x):
    """The regularised upper incomplete gamma Q(a, x) (Numerical Recipes' series and continued fraction)."""
    if x <= 0:
        return 1.0
    lg = math.lgamma(a)
    if x < a + 1:
        s = term = 1.0 / a
        n = a
        while abs(term) > abs(s) * 1e-15:
            n += 1
            term *= x / n
            s += term
        return 1.0 - s * math.exp(-x + a * math.log(x) - lg)
    b = x + 1 - a
    c, d = 1e300, 1 / b
    h = d
    for i in range(1, 10000):
        an = -i * (i - a)
        b += 2
        d = an * d + b
        d = 1e-300 if abs(d) < 1e-300 else d
        c = b + an / c
        c = 1e-300 if abs(c) < 1e-300 else c
        d = 1 / d
        h *= d * c
        if abs(d * c - 1) < 1e-15:
            break
    return math.exp(-x + a * math.log(x) - lg) * h


def chi2_homogeneity(xs, ys):
    """Pearson's chi-square of two samples of ids: (statistic, degrees of freedom, p)."""
    nx, ny = len(xs), len(ys)
    ids = sorted(set(xs) | set(ys))
    cx = {i: xs.count(i) for i in ids}
    cy = {i: ys.count(i) for i in ids}
    bins, other = [], [0, 0]
    for i in ids:  # expected counts under one shared distribution
        tot = cx[i] + cy[i]
        if min(tot * nx, tot * ny) / (nx + ny) >= 5:
            bins.append([cx[i], cy[i]])
        else:
            other[0] += cx[i]
            other[1] += cy[i]
    if other[0] + other[1]:
        bins.append(other)
    stat = 0.0
    for a, b in bins:
        tot = a + b
        for obs, n in ((a, nx), (b, ny)):
            e = tot * n / (nx + ny)
            stat += (obs - e) ** 2 / e
    df = len(bins) - 1
    return stat, df, (q_gamma(df / 2, stat / 2) if df > 0 else 1.0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("nebula")
    ap.add_argument("model")
    ap.add_argument("prompt")
    ap.add_argument("-N", type=int, default=400)
    ap.add_argument("--backend", default="cpu")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = [args.nebula, "generate", "-m", args.model, "--tokens-file", args.prompt, "--print-ids", "--threads", "1", "--backend", args.backend]
        greedy = subprocess.run(base + ["--greedy", "-n", "16"], capture_output=True, text=True, check=True)
        drafts = os.path.join(tmp, "greedy.ids")
        with open(drafts, "w") as f:
            f.write(greedy.stdout.strip().splitlines()[-1] + "\n")

        def one(job):
            seed, temp, spec = job
            cmd = base + ["-n", "3", "--temp", str(temp), "--seed", str(seed)] + SAMPLING
            if spec:
                cmd += ["--spec", "oracle", "--draft-ids", drafts, "--draft", "4"]
            p = subprocess.run(cmd, capture_output=True, text=True)
            if p.returncode:
                sys.exit(f"spec_chisq: {' '.join(cmd)}: {p.stderr.strip()}")
            m = re.search(r"(\d+) of (\d+) drafts accepted", p.stderr)
            return [int(x) for x in p.stdout.strip().splitlines()[-1].split()], (int(m[1]), int(m[2])) if m else (0, 0)

        N = args.N
        jobs = [(s, TEMP, False) for s in range(1, N + 1)] + [(s, TEMP, True) for s in range(N + 1, 2 * N + 1)] + \
               [(s, CONTROL_TEMP, True) for s in range(2 * N + 1, 3 * N + 1)]
        with ThreadPoolExecutor(max_workers=2) as ex:
            res = list(ex.map(one, jobs))
    plain, spec, control = res[:N], res[N:2 * N], res[2 * N:]
    acc = sum(r[1][0] for r in spec)
    drafted = sum(r[1][1] for r in spec)
    ok = True
    print(f"speculative runs: {acc} of {drafted} drafts accepted")
    if acc == 0:
        print("FAIL: no draft accepted: speculative sampling was not exercised")
        ok = False
    for name, other, want_same in (("speculative", spec, True), ("control (T %g)" % CONTROL_TEMP, control, False)):
        ps = []
        for pos in (0, 1, 2):
            stat, df, p = chi2_homogeneity([r[0][pos] for r in plain], [r[0][pos] for r in other])
            ps.append(p)
            print(f"{name} vs plain, token {pos}: chi2 {stat:.2f}, df {df}, p {p:.3g}")
        if want_same and min(ps) <= 1e-3:
            print(f"FAIL: {name}: the distribution differs from plain sampling (p <= 0.001)")
            ok = False
        if not want_same and min(ps) >= 1e-3:
            print(f"FAIL: {name}: the test did not tell another temperature apart (p >= 0.001): it cannot fail")
            ok = False
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
