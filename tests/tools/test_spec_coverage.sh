#!/usr/bin/env bash
# test_spec_coverage.sh — speculative decoding's coverage mode (issue 16
# item 4) on the CPU reference, tiny-b: exact mode (the default) computes
# every routed expert — experts computed = k × MoE layers × rows evaluated,
# none skipped, no case counted — and so does tau 1 (the plain ids); with
# half the experts resident (nebula-prepare's VRAM tier) tau 0.5 leaves
# pairs out (computed + skipped = k × layers × rows), counts the cases A/B/C
# (one a pass) and handoff rows, and an all-resident placement changes
# nothing; bad values and missing companions are refused.  Run by
# tests/run-tests.sh with BUILD set.
set -u
. tests/lib/counted.sh
"$bin/nebula-convert" tests/fixtures/tiny-b "$tmp/b.gguf" --type f32 -q 2>"$tmp/e" || { echo "FAIL convert tiny-b: $(cat "$tmp/e")"; exit 1; }
prompt=tests/fixtures/tiny-b/tokens.txt
gen() { "$bin/nebula" generate -m "$tmp/b.gguf" --tokens-file "$prompt" --print-ids --threads 2 --greedy -n 128 "$@"; }
# "computed skipped all A B C handoff passes" from a run's stderr
counts() {
    sed -n 's/.*experts computed \([0-9]*\), skipped \([0-9]*\), of k x MoE layers x rows \([0-9]*\); coverage cases A \([0-9]*\), B \([0-9]*\), C \([0-9]*\), handoff rows \([0-9]*\).*/\1 \2 \3 \4 \5 \6 \7/p' "$1"
    sed -n 's/.*speculative: \([0-9]*\) passes,.*/\1/p' "$1"
}
blob=$("$bin/nebula-prepare" "$tmp/b.gguf" "$tmp/probe" --vram-budget all --ram-budget 0 -q &&
    python3 -c "import json; d=json.load(open('$tmp/probe/placement.json')); print(d['layers'][0]['blob_bytes'], d['model']['vram_fixed_bytes'])")
set -- $blob
"$bin/nebula-prepare" "$tmp/b.gguf" "$tmp/half" --vram-budget $(($2 + 18 * $1)) --ram-budget all -q && ok || bad "prepare half-VRAM"
python3 -c "import json,sys; t=json.load(open('$tmp/half/placement.json'))['totals']; sys.exit(not (t['vram']['experts'] == 18 and t['ram']['experts'] == 18))" \
    && ok || bad "the half placement: not 18 VRAM + 18 RAM experts"

gen 2>/dev/null | tail -1 >"$tmp/plain.ids"
gen --spec mtp 2>"$tmp/x.err" | tail -1 >"$tmp/x.ids"
cmp -s "$tmp/plain.ids" "$tmp/x.ids" && ok || bad "exact mode: ids differ from the plain run"
set -- $(counts "$tmp/x.err")
[ $# -eq 8 ] && [ "$1" = "$3" ] && [ "$2" = 0 ] && [ "$4$5$6$7" = 0000 ] && [ "$3" -gt 0 ] && ok "exact mode: $1 experts computed = k x layers x rows, none skipped" ||
    bad "exact mode's counters: $*"
# the same identity from the model: k = 3, 5 trunk MoE layers, rows = the evaluated ones
rows=$(sed -n 's/.*rows evaluated \([0-9]*\),.*/\1/p' "$tmp/x.err")
[ "${1:-x}" = "$((3 * 5 * ${rows:-0}))" ] && ok || bad "exact mode: $1 computed, not 3 x 5 x ${rows:-?} rows"

gen --spec mtp --spec-coverage 1 --resident "$tmp/half" 2>"$tmp/t1.err" | tail -1 >"$tmp/t1.ids"
cmp -s "$tmp/plain.ids" "$tmp/t1.ids" && ok "tau 1: the plain ids" || bad "tau 1: ids differ"
set -- $(counts "$tmp/t1.err")
[ $# -eq 8 ] && [ "$2" = 0 ] && [ "$1" = "$3" ] && ok || bad "tau 1 skipped pairs: $*"

gen --spec mtp --spec-coverage 0.5 --resident "$tmp/half" 2>"$tmp/h.err" | tail -1 >"$tmp/h.ids"
set -- $(counts "$tmp/h.err")
if [ $# -eq 8 ]; then
    [ "$2" -gt 0 ] && [ $(($1 + $2)) -eq "$3" ] && ok "tau 0.5, half resident: $2 pairs skipped, computed + skipped = all" ||
        bad "tau 0.5: computed $1 + skipped $2 != $3 (or none skipped)"
    [ $(($4 + $5 + $6)) -eq "$8" ] && ok "cases A $4 + B $5 + C $6 = the $8 passes" || bad "cases $4/$5/$6 of $8 passes"
    [ "$7" -gt 0 ] && [ "$5" -gt 0 ] && ok || bad "tau 0.5: no handoff row or case B ($7, $5)"
else
    bad "tau 0.5: no counters ($(tail -3 "$tmp/h.err"))"
fi
gen --spec oracle --draft-ids "$tmp/plain.ids" --spec-coverage 0.3 --resident "$tmp/half" 2>"$tmp/o.err" >/dev/null
set -- $(counts "$tmp/o.err")
[ $# -eq 8 ] && [ "$4" -gt 0 ] && [ "$6" -gt 0 ] && ok "oracle drafts, tau 0.3: cases A ($4) and C ($6) both seen" || bad "oracle, tau 0.3: cases $*"
"$bin/nebula-prepare" "$tmp/b.gguf" "$tmp/all" --vram-budget all --ram-budget 0 -q
gen --spec mtp --spec-coverage 0.5 --resident "$tmp/all" 2>"$tmp/a.err" | tail -1 >"$tmp/a.ids"
set -- $(counts "$tmp/a.err")
cmp -s "$tmp/plain.ids" "$tmp/a.ids" && [ $# -eq 8 ] && [ "$2" = 0 ] && [ "$7" = 0 ] && ok "every expert resident: nothing skipped, the plain ids" ||
    bad "all resident: $*"

# refused: out of range, without --spec, without --resident, a bad directory, --resident alone
for args in "--spec mtp --spec-coverage 0 --resident $tmp/half" "--spec mtp --spec-coverage 1.5 --resident $tmp/half" \
    "--spec mtp --spec-coverage x --resident $tmp/half" "--spec-coverage 0.9 --resident $tmp/half" "--spec mtp --spec-coverage 0.9" \
    "--spec mtp --spec-coverage on --resident $tmp/nothing" "--spec mtp --resident $tmp/half"; do
    gen $args >/dev/null 2>"$tmp/r.err"
    [ $? -eq 2 ] && [ -s "$tmp/r.err" ] && ok || bad "not refused with a message: $args"
done
verdict test_spec_coverage
