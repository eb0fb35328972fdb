#!/usr/bin/env bash
# test_spec.sh — speculative decoding in `nebula generate` (issue 16) on the
# CPU reference, tiny-b (GDN, QSA, PLE and an MTP block): the output is the
# plain run's, id for id, for 1,024 greedy tokens and for a sampled run —
# with the MTP block's drafts (untrained: hardly any accepted), prompt
# lookup's, and an
# oracle's (the known continuation corrupted at 0 / 15 / 50 %: windows
# accepted whole, in part, mostly not), so every rollback position is taken.
# The adaptive window grows on full acceptances and falls back on rejections.
# The counters show the loop evaluates every position once: rows evaluated
# = prompt + the windows' rows (passes + drafts), nothing evaluated again.
# --spec without an MTP block, or a bad rate, is refused.  Run by
# tests/run-tests.sh with BUILD set.  SPEC_BACKEND=cuda runs it all on the
# CUDA backend (tests/cuda/run-verify-on-gpu.sh), SPEC_MODEL / SPEC_PROMPT
# name another model with an MTP block and its prompt, SPEC_N the tokens of
# the long runs (default 1024).
set -u
. tests/lib/counted.sh
backend=${SPEC_BACKEND:-cpu}
N=${SPEC_N:-1024}
model=${SPEC_MODEL:-$tmp/b.gguf}
if [ -z "${SPEC_MODEL:-}" ]; then
    "$bin/nebula-convert" tests/fixtures/tiny-b "$model" --type f32 -q 2>"$tmp/e" || { echo "FAIL convert tiny-b: $(cat "$tmp/e")"; exit 1; }
fi
"$bin/nebula-convert" tests/fixtures/tiny-a "$tmp/a.gguf" --type f32 -q 2>"$tmp/e" || { echo "FAIL convert tiny-a: $(cat "$tmp/e")"; exit 1; }
prompt=${SPEC_PROMPT:-tests/fixtures/tiny-b/tokens.txt}
n_prompt=$(wc -w <"$prompt")
nb() { "$bin/nebula" generate --backend "$backend" --threads 2 "$@"; }
gen() { nb -m "$model" --tokens-file "$prompt" --print-ids "$@"; }
# $1 = name, $2 = the plain run's ids, $3 = stderr of the speculative run, $4 = its ids file
check_run() {
    if cmp -s "$2" "$4"; then ok "$1: the plain run's ids"; else bad "$1: ids differ from the plain run's"; fi
    python3 - "$3" "$n_prompt" "$1" <<'PY' && ok "$1: each position evaluated once" || bad "$1: $(grep speculative "$3")"
import re, sys
t = open(sys.argv[1]).read()
m = re.search(r"speculative: (\d+) passes, ([\d.]+) tokens a pass, (\d+) of (\d+) drafts accepted .*rows evaluated (\d+), replayed (\d+)", t)
passes, per, acc, drafted, rows, replayed = int(m[1]), float(m[2]), int(m[3]), int(m[4]), int(m[5]), int(m[6])
sys.exit(0 if rows == int(sys.argv[2]) + passes + drafted and replayed <= rows else 1)
PY
}
gen --greedy -n "$N" 2>/dev/null | tail -1 >"$tmp/plain.ids"
[ "$(wc -w <"$tmp/plain.ids")" = "$N" ] || bad "plain greedy: $(wc -w <"$tmp/plain.ids") ids"
gen --greedy -n "$N" --spec mtp 2>"$tmp/mtp.err" | tail -1 >"$tmp/mtp.ids"
check_run "greedy, MTP drafts" "$tmp/plain.ids" "$tmp/mtp.err" "$tmp/mtp.ids"
for r in 0 0.15 0.5; do
    gen --greedy -n "$N" --spec oracle --draft-ids "$tmp/plain.ids" --draft-corrupt $r --draft 6 2>"$tmp/o.err" | tail -1 >"$tmp/o.ids"
    check_run "greedy, oracle drafts corrupted at $r" "$tmp/plain.ids" "$tmp/o.err" "$tmp/o.ids"
    acc=$(sed -n 's/.*drafts accepted (\([0-9.]*\) %).*/\1/p' "$tmp/o.err")
    case $r in
        0) python3 -c "import sys; sys.exit(0 if $acc > 95 else 1)" && ok "rate 0: $acc % accepted" || bad "rate 0: only $acc % accepted" ;;
        0.5) python3 -c "import sys; sys.exit(0 if 2 < $acc < 40 else 1)" && ok "rate 0.5: $acc % accepted" || bad "rate 0.5: $acc % accepted" ;;
    esac
done
# the adaptive window (no --draft): full acceptances grow it to 16 (4 4 5 6 8 11 16), a bad oracle keeps it at 4
gen --greedy -n "$N" --spec oracle --draft-ids "$tmp/plain.ids" 2>"$tmp/a.err" | tail -1 >"$tmp/a.ids"
check_run "greedy, adaptive window, oracle drafts" "$tmp/plain.ids" "$tmp/a.err" "$tmp/a.ids"
grep -q "windows 4 4 5 6 8 11 16 16" "$tmp/a.err" && ok "the window grows 4 4 5 6 8 11 16 on full acceptances" ||
    bad "adaptive growth: $(grep -o 'windows.*' "$tmp/a.err" | cut -c1-80)"
gen --greedy -n 200 --spec oracle --draft-ids "$tmp/plain.ids" --draft-corrupt 1 2>"$tmp/a.err" | tail -1 >"$tmp/a.ids"
grep -q "windows 4 4 4 4 4 4 4 4 4 4 4 4" "$tmp/a.err" && ok "every first draft rejected: the window stays at 4" ||
    bad "adaptive floor: $(grep -o 'windows.*' "$tmp/a.err" | cut -c1-80)"
# prompt lookup: drafts from the context itself; a prompt that repeats gives it something to find
gen --greedy -n "$N" --spec lookup 2>"$tmp/l.err" | tail -1 >"$tmp/l.ids"
check_run "greedy, prompt lookup" "$tmp/plain.ids" "$tmp/l.err" "$tmp/l.ids"
for i in 1 2 3 4 5 6; do echo "7 19 3 88 41 5 23 61 2 17"; done >"$tmp/rep.txt"
nb -m "$model" --tokens-file "$tmp/rep.txt" --print-ids --greedy -n 64 2>/dev/null | tail -1 >"$tmp/rp.ids"
nb -m "$model" --tokens-file "$tmp/rep.txt" --print-ids --greedy -n 64 --spec lookup \
    2>"$tmp/rl.err" | tail -1 >"$tmp/rl.ids"
cmp -s "$tmp/rp.ids" "$tmp/rl.ids" && ok "lookup on a repeating prompt: the plain run's ids" || bad "lookup on a repeating prompt: ids differ"
drafted=$(sed -n 's/.* of \([0-9]*\) drafts accepted.*/\1/p' "$tmp/rl.err")
# Lookup must draft when a pass's context ends in an id seen before in it (gen_lookup_drafts matches down to one id):
# on a small vocabulary (tiny-b's) the greedy run repeats ids at once; a random model over a 248K vocabulary may
# never, and then there is nothing to find (the ids above are still checked).
must=$(python3 - "$tmp/rep.txt" "$tmp/rp.ids" <<'PY'
import sys
ctx = open(sys.argv[1]).read().split()
gen = open(sys.argv[2]).read().split()
hit = 0
for t in gen[:-1]:  # the pass after each generated id but the last
    ctx.append(t)
    hit += ctx[-1] in ctx[:-1]
print(hit)
PY
)
if [ "${must:-0}" -gt 0 ]; then
    [ "${drafted:-0}" -gt 0 ] && ok "lookup finds drafts in a repeating prompt ($drafted; $must passes had a match)" ||
        bad "lookup drafted nothing though $must passes' contexts ended in an id seen before: $(grep speculative "$tmp/rl.err")"
else
    [ "${drafted:-0}" = 0 ] && ok "lookup drafts nothing where no pass's context ends in an id seen before" ||
        bad "lookup drafted $drafted with no id repeated in the context"
fi
gen --temp 0.9 --seed 11 -n 300 2>/dev/null | tail -1 >"$tmp/sampled.ids"
gen --temp 0.9 --seed 11 -n 300 --spec oracle --draft-ids "$tmp/sampled.ids" --draft-corrupt 0.3 2>"$tmp/s.err" | tail -1 >"$tmp/s.ids"
check_run "sampled (T 0.9), oracle drafts" "$tmp/sampled.ids" "$tmp/s.err" "$tmp/s.ids"
gen --temp 0.9 --seed 11 -n 300 --spec mtp 2>"$tmp/sm.err" | tail -1 >"$tmp/sm.ids"
check_run "sampled (T 0.9), MTP drafts" "$tmp/sampled.ids" "$tmp/sm.err" "$tmp/sm.ids"
nb -m "$tmp/a.gguf" --tokens-file tests/fixtures/tiny-a/tokens.txt -n 4 --spec mtp 2>"$tmp/e" >/dev/null
[ $? = 2 ] && grep -q "MTP block" "$tmp/e" && ok "--spec mtp without an MTP block: refused" || bad "no-MTP refusal: $(cat "$tmp/e")"
gen -n 4 --spec oracle 2>"$tmp/e" >/dev/null
[ $? = 2 ] && grep -q -- "--draft-ids" "$tmp/e" && ok "--spec oracle without ids: refused" || bad "oracle refusal: $(cat "$tmp/e")"
gen -n 4 --spec oracle --draft-ids "$tmp/plain.ids" --draft-corrupt 2 2>"$tmp/e" >/dev/null
[ $? = 2 ] && grep -q "rate in" "$tmp/e" && ok "a bad --draft-corrupt: refused" || bad "rate refusal: $(cat "$tmp/e")"
verdict "test_spec ($backend)"
