#!/usr/bin/env bash
# test_spec_levels.sh — speculative decoding's accuracy levels, --spec auto
# and the counters `nebula generate` prints (issue 16 items 3, 7, 8) on the
# CPU reference, tiny-b (an MTP block): level 3 gives the plain ids, greedy
# (1,024 tokens) and sampled; on drafts built to be near misses (each
# position's second-ranked token of the plain run) level 3 accepts none and
# levels 2 and 1 accept some; every token of levels 1-2 that is not its
# row's argmax is within the level's top-k and ratio (tools/dev/
# spec-divergence.py --check, which also measures the divergence); --spec
# auto gives the plain ids, leaves lookup aside when the drafter standing in
# for the MTP block is always right, and takes it on a model whose output
# repeats (sweep-1313); level 3 with mtp and auto gives the plain ids on
# every sweep fixture with an MTP block; bad levels are refused.  Run
# by tests/run-tests.sh with BUILD set.
set -u
. tests/lib/counted.sh
"$bin/nebula-convert" tests/fixtures/tiny-b "$tmp/b.gguf" --type f32 -q 2>"$tmp/e" || { echo "FAIL convert tiny-b: $(cat "$tmp/e")"; exit 1; }
prompt=tests/fixtures/tiny-b/tokens.txt
gen() { "$bin/nebula" generate -m "$tmp/b.gguf" --tokens-file "$prompt" --print-ids --threads 2 "$@"; }
accepted() { sed -n 's/.* \([0-9]*\) of [0-9]* drafts accepted.*/\1/p' "$1"; }

gen --greedy -n 1024 2>/dev/null | tail -1 >"$tmp/plain.ids"
gen --greedy -n 1024 --spec mtp --accuracy-level 3 2>"$tmp/m3.err" | tail -1 >"$tmp/m3.ids"
cmp -s "$tmp/plain.ids" "$tmp/m3.ids" && ok "level 3, MTP drafts, 1024 greedy tokens: the plain ids" || bad "level 3 greedy: ids differ"
grep -q "accuracy level 3, 0 non-greedy drafts accepted; drafters mtp [1-9][0-9]*, lookup 0" "$tmp/m3.err" &&
    grep -q "accepted by position: 1 [0-9]*%, 2 " "$tmp/m3.err" && ok "the counters: level, drafters, acceptance by position" ||
    bad "counters: $(grep 'accuracy level' "$tmp/m3.err")"
gen --temp 0.9 --seed 5 -n 300 2>/dev/null | tail -1 >"$tmp/s.ids"
gen --temp 0.9 --seed 5 -n 300 --spec mtp --accuracy-level 3 2>/dev/null | tail -1 >"$tmp/s3.ids"
cmp -s "$tmp/s.ids" "$tmp/s3.ids" && ok "level 3, sampled (T 0.9): the plain ids" || bad "level 3 sampled: ids differ"

# Near misses: each position's second-ranked token in the plain run (the oracle's drafts).
gen --greedy -n 256 --dump-logits "$tmp/plain.f32" 2>/dev/null | tail -1 >"$tmp/p256.ids"
python3 - "$tmp/plain.f32" "$tmp/p256.ids" "$tmp/second.ids" <<'PY' || bad "second-ranked drafts: cannot build them"
import array, sys
a = array.array("f"); a.frombytes(open(sys.argv[1], "rb").read())
n = len(open(sys.argv[2]).read().split()); V = len(a) // n
out = []
for i in range(n):
    r = a[i * V:(i + 1) * V]
    out.append(sorted(range(V), key=lambda j: (-r[j], j))[1])
open(sys.argv[3], "w").write(" ".join(map(str, out)) + "\n")
PY
for L in 3 2 1; do
    gen --greedy -n 256 --spec oracle --draft-ids "$tmp/second.ids" --accuracy-level $L 2>"$tmp/o$L.err" | tail -1 >"$tmp/o$L.ids"
done
a3=$(accepted "$tmp/o3.err") a2=$(accepted "$tmp/o2.err") a1=$(accepted "$tmp/o1.err")
[ "${a3:-x}" = 0 ] && ok "second-ranked drafts: level 3 accepts none" || bad "level 3 accepted ${a3:-?} second-ranked drafts"
[ "${a2:-0}" -gt 0 ] && ok "level 2 accepts some ($a2)" || bad "level 2 accepted ${a2:-?}"
[ "${a1:-0}" -gt 0 ] && ok "level 1 accepts some ($a1)" || bad "level 1 accepted ${a1:-?}"
cmp -s "$tmp/p256.ids" "$tmp/o3.ids" && ok "level 3 with them: the plain ids" || bad "level 3 oracle: ids differ"
cmp -s "$tmp/p256.ids" "$tmp/o1.ids" && bad "level 1 kept near misses yet gave the plain ids" || ok "level 1's ids differ from the plain ones"
# Every non-greedy token within its level's rule; the measured divergence (level 3: none).
for drafts in "--spec mtp" "--spec oracle --extra=--draft-ids=$tmp/second.ids"; do
    python3 tools/dev/spec-divergence.py "$bin/nebula" "$tmp/b.gguf" "$prompt" -n 256 --check --json $drafts >"$tmp/div.json" 2>"$tmp/div.err"
    rc=$?
    python3 - "$tmp/div.json" "$rc" <<'PY' && ok "divergence ($drafts): within the rules, level 3 exact" || bad "divergence ($drafts): $(cat "$tmp/div.json" "$tmp/div.err" | tail -3)"
import json, sys
d = json.load(open(sys.argv[1]))
ok = sys.argv[2] == "0" and d["3"]["kl"] == 0 and d["3"]["top1"] == 1.0 and d["3"]["agree"] == 1.0
ok = ok and all(d[L]["violations"] == 0 for L in d) and d["1"]["nongreedy"] == d["1"]["nongreedy_seen"]
sys.exit(0 if ok else 1)
PY
done

# --spec auto: the plain ids; an always-right stand-in for the MTP block leaves lookup aside.
gen --greedy -n 512 --spec auto 2>"$tmp/a.err" | tail -1 >"$tmp/a.ids"
python3 - "$tmp/plain.ids" "$tmp/a.ids" <<'PY' && ok "auto: the plain ids" || bad "auto: ids differ"
import sys
a, b = open(sys.argv[1]).read().split(), open(sys.argv[2]).read().split()
sys.exit(0 if len(b) == 512 and a[:512] == b else 1)
PY
grep -q "drafters mtp [1-9][0-9]*, lookup [0-9]*" "$tmp/a.err" && grep -q "auto: lookup chosen in" "$tmp/a.err" &&
    ok "auto prints its drafters and rates" || bad "auto's counters: $(grep -i 'auto\|drafters' "$tmp/a.err")"
gen --greedy -n 512 --spec auto --draft-ids "$tmp/plain.ids" 2>"$tmp/ao.err" | tail -1 >"$tmp/ao.ids"
python3 - "$tmp/ao.err" <<'PY' && ok "auto: an always-right MTP stand-in wins over lookup" || bad "auto chose lookup: $(grep 'auto:' "$tmp/ao.err")"
import re, sys
m = re.search(r"lookup chosen in (\d+) of the (\d+) passes", open(sys.argv[1]).read())
chosen, offered = int(m[1]), int(m[2])
sys.exit(0 if offered >= 8 and chosen <= offered // 4 else 1)
PY
grep -q "(100.0 %)\|(9[0-9].[0-9] %)" "$tmp/ao.err" && ok "and its drafts are accepted" || bad "stand-in acceptance: $(grep 'drafts accepted' "$tmp/ao.err")"
# A model whose greedy output repeats (sweep-1313: lookup's drafts are nearly all accepted, its untrained MTP
# block's none): auto takes lookup, and the ids stay the plain ones.
sw=tests/fixtures/sweep/sweep-1313
"$bin/nebula-convert" "$sw" "$tmp/sw.gguf" --type f32 -q 2>"$tmp/e" || bad "convert sweep-1313: $(cat "$tmp/e")"
sgen() { "$bin/nebula" generate -m "$tmp/sw.gguf" --tokens-file "$sw/tokens.txt" --print-ids --threads 2 --greedy -n 300 "$@"; }
sgen 2>/dev/null | tail -1 >"$tmp/sw.ids"
sgen --spec auto 2>"$tmp/sa.err" | tail -1 >"$tmp/sa.ids"
cmp -s "$tmp/sw.ids" "$tmp/sa.ids" && ok "auto on a repeating model: the plain ids" || bad "auto on sweep-1313: ids differ"
python3 - "$tmp/sa.err" <<'PY' && ok "auto on a repeating model: lookup chosen" || bad "auto left lookup aside: $(grep 'auto:' "$tmp/sa.err")"
import re, sys
m = re.search(r"lookup chosen in (\d+) of the (\d+) passes", open(sys.argv[1]).read())
chosen, offered = int(m[1]), int(m[2])
sys.exit(0 if offered >= 50 and chosen >= offered * 4 // 5 else 1)
PY

# Every sweep fixture with an MTP block: --spec mtp and --spec auto at level 3 give the plain ids (256 greedy tokens).
for f in tests/fixtures/sweep/*/; do
    grep -q '"mtp_num_hidden_layers": *[1-9]' "$f/config.json" || continue
    d=$(basename "$f")
    "$bin/nebula-convert" "$f" "$tmp/f.gguf" --type f32 -q 2>"$tmp/e" || { bad "convert $d: $(cat "$tmp/e")"; continue; }
    fgen() { "$bin/nebula" generate -m "$tmp/f.gguf" --tokens-file "$f/tokens.txt" --print-ids --threads 2 --greedy -n 256 "$@" 2>/dev/null | tail -1; }
    want=$(fgen)
    for s in mtp auto; do
        [ -n "$want" ] && [ "$(fgen --spec $s --accuracy-level 3)" = "$want" ] && ok "$d, --spec $s: the plain ids" || bad "$d, --spec $s: ids differ"
    done
done
"$bin/nebula-convert" tests/fixtures/tiny-a "$tmp/a.gguf" --type f32 -q 2>"$tmp/e" || bad "convert tiny-a: $(cat "$tmp/e")"
"$bin/nebula" generate -m "$tmp/a.gguf" --tokens-file tests/fixtures/tiny-a/tokens.txt -n 4 --spec auto 2>"$tmp/e" >/dev/null
[ $? = 2 ] && grep -q "MTP block" "$tmp/e" && ok "--spec auto without an MTP block: refused" || bad "auto no-MTP: $(cat "$tmp/e")"
gen -n 4 --spec mtp --accuracy-level 4 2>"$tmp/e" >/dev/null
[ $? = 2 ] && grep -q -- "--accuracy-level" "$tmp/e" && ok "--accuracy-level 4: refused" || bad "level 4: $(cat "$tmp/e")"
gen -n 4 --spec mtp --accuracy-level 0 2>"$tmp/e" >/dev/null
[ $? = 2 ] && ok "--accuracy-level 0: refused" || bad "level 0: $(cat "$tmp/e")"
"$bin/nebula" generate --server "$tmp" --tokens-file "$prompt" --accuracy-level 2 2>"$tmp/e" >/dev/null
[ $? = 2 ] && grep -q "local run" "$tmp/e" && ok "--accuracy-level with --server: refused (the API takes it per request)" || bad "server: $(cat "$tmp/e")"
verdict test_spec_levels
