#!/usr/bin/env python3
"""spec-divergence.py — how far accuracy levels 1 and 2 take speculative decoding from level 3 (issue 16).

    spec-divergence.py NEBULA MODEL [options] PROMPT_FILE...

For each prompt (a file of token ids) runs `nebula generate --greedy --spec DRAFTER --dump-logits` at
levels 3, 2 and 1 (level 3 is the exact one: the plain output) and reads back, for every token, the row
of logits it was taken from.  Per level it reports, summed over the prompts:

  acceptance      drafts accepted / proposed, and tokens a verify window
  nongreedy       tokens a level's rule kept instead of the row's own token
  top1            tokens that are their row's argmax (the target's top-1; 1.0 at level 3)
  agree           tokens equal to level 3's token at the same position
  kl              mean KL(p3 || pL) over the positions both runs made: p3 the target's distribution
                  (softmax of the row) at position i of the level-3 run, pL at position i of the level-L
                  run — how far the run's own context has drifted (0 until its first non-greedy token)
  kl_accepted     the same mean over the positions where level L kept a non-greedy draft
  gap             mean over the tokens of log p(top) - log p(token) under the row it was taken from
                  (0 for a greedy token; at most -log 0.8 = 0.22 for level 2's kept drafts, -log 0.2 = 1.61
                  for level 1's): what the level gives up at the positions it accepts
  first_diff      the mean position of the first token that differs from level 3

--coverage T1,T2,... --resident DIR measures coverage mode instead (issue 16 item 4: verification with
the resident experts only, `--spec-coverage T --resident DIR`) against the exact level-3 run, per tau:
acceptance, tok/pass, the cases A/B/C and handoff rows, skipped (routed pairs left out / all of the
run's), agree and first_diff as above, top1x (tokens that are the *exact* model's argmax at their own
context: `nebula logits` on the run's own ids), klx (mean KL(p_exact || p_cov) at the same context: the
error coverage mode makes at a position) and kl (as above: the drift from the level-3 run).

--check verifies every non-greedy token of levels 1-2 against its level's rule (its row: rank within
the top-k, p/p(top) at least the ratio; at most max_per_block a window cannot be seen here: the C
unit test checks that) and exits 1 on a violation.  --json prints the numbers as one JSON object.
Options: --spec mtp|lookup|auto|oracle|second (default mtp; second: near misses by construction — an
oracle drafting each position's second-ranked token of the prompt's level-3 run), -n N (tokens, default
256), --extra "ARGS" (more nebula generate arguments, e.g. "--draft-ids F").
"""
import argparse
import array
import json
import math
import os
import re
import subprocess
import sys
import tempfile

RULES = {1: (10, 0.20), 2: (3, 0.80)}  # level: (top_k, min_ratio) — core/gen/spec.h


def rows(path, n_vocab):
    a = array.array("f")
    with open(path, "rb") as f:
        a.frombytes(f.read())
    if sys.byteorder != "little":
        a.byteswap()
    return [a[i * n_vocab:(i + 1) * n_vocab] for i in range(len(a) // n_vocab)]


def softmax(r):
    m = max(r)
    e = [math.exp(x - m) for x in r]
    s = sum(e)
    return [x / s for x in e]


def argmax(r):
    best = 0
    for i, x in enumerate(r):
        if x > r[best]:
            best = i
    return best


def rank_ratio(r, d):
    top = max(r)
    rank = 1 + sum(1 for i, x in enumerate(r) if x > r[d] or (x == r[d] and i < d))
    return rank, math.exp(r[d] - top)


def kl(p, q):
    return sum(a * (math.log(a) - math.log(max(b, 1e-30))) for a, b in zip(p, q) if a > 0)


def second_ranked(dump, n_tokens, path):
    """The oracle ids of --spec second: each row's second-ranked token."""
    n_vocab = os.path.getsize(dump) // 4 // n_tokens
    out = [sorted(range(n_vocab), key=lambda j: (-r[j], j))[1] for r in rows(dump, n_vocab)]
    with open(path, "w") as f:
        f.write(" ".join(map(str, out)) + "\n")


def run(args, prompt, level, tmp, spec=None):
    dump = os.path.join(tmp, f"l{level}.f32")
    spec = spec or (["--spec", "oracle", "--draft-ids", os.path.join(tmp, "second.ids")] if args.spec == "second" else ["--spec", args.spec])
    cmd = [args.nebula, "generate", "-m", args.model, "--tokens-file", prompt, "--print-ids", "--greedy", "-n", str(args.n),
           "--threads", "2", "--accuracy-level", str(level), "--dump-logits", dump] + spec + args.extra.split()
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode:
        sys.exit(f"spec-divergence: {' '.join(cmd)}: {p.stderr.strip()}")
    ids = [int(x) for x in p.stdout.strip().splitlines()[-1].split()]
    m = re.search(r"(\d+) passes, ([\d.]+) tokens a pass, (\d+) of (\d+) drafts accepted", p.stderr)
    ng = re.search(r"(\d+) non-greedy drafts accepted", p.stderr)
    return ids, dump, [int(m[1]), int(m[3]), int(m[4]), int(ng[1])] if m and ng else [0, 0, 0, 0]


def coverage(args, taus):
    """Coverage mode against the exact run (--coverage): one row per tau."""
    keys = ("passes", "accepted", "drafted", "tokens", "agree", "first", "top1x", "klx", "kl", "n_kl", "skipped", "all",
            "case_a", "case_b", "case_c", "handoff")
    tot = {t: dict.fromkeys(keys, 0) for t in taus}
    with tempfile.TemporaryDirectory() as tmp:
        for prompt in args.prompts:
            ids3, d3, _ = run(args, prompt, 3, tmp)
            n_vocab = os.path.getsize(d3) // 4 // max(len(ids3), 1)
            r3 = rows(d3, n_vocab)
            prompt_ids = open(prompt).read().split()
            for tau in taus:
                spec = (["--spec", "oracle", "--draft-ids", os.path.join(tmp, "second.ids")] if args.spec == "second" else ["--spec", args.spec])
                dump = os.path.join(tmp, "cov.f32")
                cmd = [args.nebula, "generate", "-m", args.model, "--tokens-file", prompt, "--print-ids", "--greedy", "-n", str(args.n),
                       "--threads", "2", "--dump-logits", dump, "--spec-coverage", str(tau), "--resident", args.resident] + spec + args.extra.split()
                p = subprocess.run(cmd, capture_output=True, text=True)
                if p.returncode:
                    sys.exit(f"spec-divergence: {' '.join(cmd)}: {p.stderr.strip()}")
                ids = [int(x) for x in p.stdout.strip().splitlines()[-1].split()]
                m = re.search(r"(\d+) passes, ([\d.]+) tokens a pass, (\d+) of (\d+) drafts accepted", p.stderr)
                e = re.search(r"experts computed (\d+), skipped (\d+), of k x MoE layers x rows (\d+); coverage cases A (\d+), B (\d+), "
                              r"C (\d+), handoff rows (\d+)", p.stderr)
                t = tot[tau]
                t["passes"] += int(m[1]); t["accepted"] += int(m[3]); t["drafted"] += int(m[4])
                t["skipped"] += int(e[2]); t["all"] += int(e[3])
                for key, g in zip(("case_a", "case_b", "case_c", "handoff"), (4, 5, 6, 7)):
                    t[key] += int(e[g])
                rc = rows(dump, n_vocab)
                ctx = os.path.join(tmp, "ctx.ids")  # the exact model at the run's own contexts
                with open(ctx, "w") as f:
                    f.write(" ".join(prompt_ids + [str(x) for x in ids[:-1]]) + "\n")
                full = os.path.join(tmp, "exact.f32")
                q = subprocess.run([args.nebula, "logits", "-m", args.model, "--tokens-file", ctx, "--out", full, "--threads", "2"],
                                   capture_output=True, text=True)
                if q.returncode:
                    sys.exit(f"spec-divergence: nebula logits: {q.stderr.strip()}")
                rx = rows(full, n_vocab)[len(prompt_ids) - 1:]
                t["tokens"] += len(ids)
                t["first"] += next((i for i, (a, b) in enumerate(zip(ids, ids3)) if a != b), min(len(ids), len(ids3)))
                for i, tok in enumerate(ids):
                    t["agree"] += i < len(ids3) and ids3[i] == tok
                    t["top1x"] += argmax(rx[i]) == tok
                    px = softmax(rx[i])
                    t["klx"] += kl(px, softmax(rc[i]))
                    if i < len(r3):
                        t["kl"] += kl(softmax(r3[i]), px)
                        t["n_kl"] += 1
    out = {}
    for tau in taus:
        t = tot[tau]
        n = max(t["tokens"], 1)
        out[str(tau)] = dict(acceptance=t["accepted"] / max(t["drafted"], 1), tokens_per_pass=(t["tokens"] - len(args.prompts)) / max(t["passes"], 1),
                             cases=[t["case_a"], t["case_b"], t["case_c"]], handoff_rows=t["handoff"], skipped=t["skipped"] / max(t["all"], 1),
                             agree=t["agree"] / n, first_diff=t["first"] / len(args.prompts), top1x=t["top1x"] / n, klx=t["klx"] / n,
                             kl=t["kl"] / max(t["n_kl"], 1))
    if args.json:
        print(json.dumps(out))
    else:
        print(f"{'tau':>5} {'accept':>8} {'tok/pass':>8} {'A/B/C':>14} {'handoff':>7} {'skipped':>7} {'agree':>7} {'first_diff':>10} {'top1x':>7} {'klx':>9} {'kl':>9}")
        for tau in taus:
            o = out[str(tau)]
            print(f"{tau:>5} {o['acceptance']:>8.4f} {o['tokens_per_pass']:>8.3f} {'/'.join(map(str, o['cases'])):>14} {o['handoff_rows']:>7} "
                  f"{o['skipped']:>7.4f} {o['agree']:>7.4f} {o['first_diff']:>10.1f} {o['top1x']:>7.4f} {o['klx']:>9.5f} {o['kl']:>9.5f}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("nebula")
    ap.add_argument("model")
    ap.add_argument("prompts", nargs="+")
    ap.add_argument("--spec", default="mtp")
    ap.add_argument("-n", type=int, default=256)
    ap.add_argument("--extra", default="")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--coverage", default="")
    ap.add_argument("--resident", default="")
    args = ap.parse_args()
    if args.coverage:
        if not args.resident:
            sys.exit("spec-divergence: --coverage needs --resident DIR")
        if args.spec == "second":
            sys.exit("spec-divergence: --coverage takes mtp, lookup, auto or oracle drafts")
        return coverage(args, [float(x) for x in args.coverage.split(",")])
    tot = {L: dict(passes=0, accepted=0, drafted=0, nongreedy=0, tokens=0, top1=0, agree=0, kl=0.0, kl_n=0, kla=0.0,
                   kla_n=0, first=0, violations=0, gap=0.0) for L in (3, 2, 1)}
    with tempfile.TemporaryDirectory() as tmp:
        for prompt in args.prompts:
            if args.spec == "second":  # the plain run's rows first: the drafts are made of them
                ids0, d0, _ = run(args, prompt, 3, tmp, spec=["--spec", "off"])
                second_ranked(d0, len(ids0), os.path.join(tmp, "second.ids"))
            ids3, d3, c3 = run(args, prompt, 3, tmp)
            r3 = None
            for L in (3, 2, 1):
                ids, dump, c = (ids3, d3, c3) if L == 3 else run(args, prompt, L, tmp)
                if r3 is None:
                    n_vocab = os.path.getsize(d3) // 4 // max(len(ids3), 1)
                    r3 = rows(d3, n_vocab)
                rl = r3 if L == 3 else rows(dump, n_vocab)
                t = tot[L]
                for key, v in zip(("passes", "accepted", "drafted", "nongreedy"), c):
                    t[key] += v
                t["tokens"] += len(ids)
                first = next((i for i, (a, b) in enumerate(zip(ids, ids3)) if a != b), min(len(ids), len(ids3)))
                t["first"] += first
                for i, tok in enumerate(ids):
                    if i >= len(rl):
                        break
                    greedy = argmax(rl[i]) == tok
                    t["gap"] += max(rl[i]) - rl[i][tok]  # log-softmax difference = logit difference
                    t["top1"] += greedy
                    t["agree"] += i < len(ids3) and ids3[i] == tok
                    if i < len(r3):
                        k = kl(softmax(r3[i]), softmax(rl[i])) if L != 3 else 0.0
                        t["kl"] += k
                        t["kl_n"] += 1
                        if not greedy:
                            t["kla"] += k
                            t["kla_n"] += 1
                    if not greedy and L != 3 and args.check:
                        rank, ratio = rank_ratio(rl[i], tok)
                        top_k, min_ratio = RULES[L]
                        if rank > top_k or ratio < min_ratio - 1e-6:
                            t["violations"] += 1
                            print(f"VIOLATION level {L} {prompt} token {i}: id {tok} rank {rank} ratio {ratio:.4f}")
                    if not greedy and L == 3:
                        t["violations"] += 1
                        print(f"VIOLATION level 3 {prompt} token {i}: id {tok} is not its row's argmax")
    out = {}
    for L in (3, 2, 1):
        t = tot[L]
        out[L] = dict(acceptance=t["accepted"] / max(t["drafted"], 1), tokens_per_pass=(t["tokens"] - len(args.prompts)) / max(t["passes"], 1),
                      accepted=t["accepted"], drafted=t["drafted"], nongreedy=t["nongreedy"], top1=t["top1"] / max(t["tokens"], 1),
                      agree=t["agree"] / max(t["tokens"], 1), kl=t["kl"] / max(t["kl_n"], 1), kl_accepted=t["kla"] / max(t["kla_n"], 1),
                      nongreedy_seen=t["kla_n"], gap=t["gap"] / max(t["tokens"], 1), first_diff=t["first"] / len(args.prompts), violations=t["violations"])
    if args.json:
        print(json.dumps(out))
    else:
        print(f"{'level':>5} {'accept':>8} {'tok/pass':>8} {'nongreedy':>9} {'top1':>7} {'agree':>7} {'kl':>9} {'kl_acc':>9} {'gap':>8} {'first_diff':>10}")
        for L in (3, 2, 1):
            o = out[L]
            print(f"{L:>5} {o['acceptance']:>8.4f} {o['tokens_per_pass']:>8.3f} {o['nongreedy']:>9} {o['top1']:>7.4f} {o['agree']:>7.4f} "
                  f"{o['kl']:>9.5f} {o['kl_accepted']:>9.5f} {o['gap']:>8.5f} {o['first_diff']:>10.1f}")
    sys.exit(1 if args.check and any(out[L]["violations"] for L in out) else 0)


if __name__ == "__main__":
    main()
