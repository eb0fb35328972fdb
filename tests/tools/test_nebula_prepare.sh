#!/usr/bin/env bash
# nebula-prepare from the command line: the prepared directory of the tiny
# fixture (f32 and q8_0) opens with nebula-gguf and `sha256sum -c`, dense.gguf
# lacks exactly the expert and table tensors, a re-run verifies and touches
# nothing, corrupt or missing parts are rebuilt, a crash and a Ctrl-C in the
# middle of experts.bin resume to the same bytes, a changed input rebuilds,
# hotlists are copied or refused with a reason, --ple-tier is recorded and
# kept by a re-run, and the exit codes: 0 ok,
# 1 input/I/O error, 2 usage error, 130 interrupted.  (test_prepare.c checks
# the bytes of every output against the input.)
set -u
BUILD=${BUILD:-build}
prep=$BUILD/bin/nebula-prepare conv=$BUILD/bin/nebula-convert info=$BUILD/bin/nebula-gguf
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail=0 n=0
ok() { n=$((n + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); n=$((n + 1)); }
has() { grep -q -- "$2" "$1" && ok || bad "$3: no '$2' in $(basename "$1"): $(head -c 600 "$1")"; }
hasnt() { grep -q -- "$2" "$1" && bad "$3: '$2' in $(basename "$1")" || ok; }
status() { # $1 = expected exit code, rest = nebula-prepare arguments; stderr in $tmp/err
    local want=$1; shift
    ("$prep" "$@"; exit $?) >"$tmp/out" 2>"$tmp/err"; local rc=$? # (a subshell: its "Killed" goes to err)
    [ "$rc" -eq "$want" ] && ok || bad "nebula-prepare $*: exit $rc, expected $want: $(tail -n 3 "$tmp/err")"
}
stamps() { (cd "$1" && stat -c '%n %s %Y.%y' * | sort); }
sums_ok() { (cd "$1" && sha256sum --quiet -c checksums.sha256) >/dev/null 2>&1 && ok || bad "sha256sum -c in $1"; }
tensors() { "$info" info "$1" | awk '/^tensors:/ {t=1; next} t && $1 ~ /^[0-9]+$/ {print $2}' | sort; }
experts_of() { tensors "$1" | grep -E '^(blk\.[0-9]+\.ffn_(gate|up|down|gate_up)_exps\.weight|per_layer_token_embd\.weight)$'; }

[ -x "$prep" ] || { echo "FAIL: $prep not built"; exit 1; }
"$conv" tests/fixtures/tiny-a "$tmp/a-f32.gguf" --type f32 -q || { echo "FAIL: conversion"; exit 1; }
"$conv" tests/fixtures/tiny-a "$tmp/a-q8.gguf" --type q8_0 -q || { echo "FAIL: conversion"; exit 1; }

for ty in f32 q8; do
    in=$tmp/a-$ty.gguf out=$tmp/p-$ty
    status 0 "$in" "$out"
    for f in dense.gguf experts.bin experts.idx ple.bin hotlist.tsv placement.json manifest.json checksums.sha256; do
        [ -s "$out/$f" ] && ok || bad "$ty: $f missing"
    done
    "$info" info "$out/dense.gguf" >"$tmp/info.txt" && ok || bad "$ty: nebula-gguf info dense.gguf"
    has "$tmp/info.txt" 'nebula.prepared.experts_sha256' "$ty: dense.gguf names its experts"
    has "$tmp/info.txt" 'general.architecture *= "qwen4exp"' "$ty: keys copied"
    # dense = input minus exactly the routed experts (gate, up, down of 4 layers) and the table.
    comm -23 <(tensors "$in") <(tensors "$out/dense.gguf") >"$tmp/gone"
    diff "$tmp/gone" <(experts_of "$in") >/dev/null && ok || bad "$ty: dropped tensors: $(tr '\n' ' ' <"$tmp/gone")"
    [ "$(wc -l <"$tmp/gone")" -eq 13 ] && ok || bad "$ty: expected 12 expert tensors + the table to go"
    [ -z "$(comm -13 <(tensors "$in") <(tensors "$out/dense.gguf"))" ] && ok || bad "$ty: dense.gguf has new tensors"
    sums_ok "$out"
    [ "$(wc -l <"$out/checksums.sha256")" -eq 7 ] && ok || bad "$ty: checksums.sha256 should list 7 files"
    has "$tmp/err" "hotlist.tsv: written: neutral" "$ty: the neutral hotlist is announced"
    has "$out/hotlist.tsv" '^# neutral hotlist' "$ty: the neutral hotlist says so"
    [ "$(grep -c -P '^\d+\t\d+\t0\t0$' "$out/hotlist.tsv")" -eq 32 ] && ok || bad "$ty: 4 layers x 8 experts, all 0"
    # -q is quiet; output to a file has no carriage returns.
    hasnt "$tmp/err" $'\r' "$ty: no bar when stderr is not a terminal"
done
in=$tmp/a-q8.gguf out=$tmp/p-q8
cp -a "$out" "$tmp/golden"

# A re-run verifies everything and changes nothing.
stamps "$out" >"$tmp/before"
status 0 "$in" "$out"
for f in manifest.json experts.idx experts.bin ple.bin dense.gguf hotlist.tsv placement.json; do
    has "$tmp/err" "$f: verified" "re-run"
done
hasnt "$tmp/err" ": written" "re-run writes nothing"
stamps "$out" >"$tmp/after"
diff "$tmp/before" "$tmp/after" >/dev/null && ok || bad "re-run changed files: $(diff "$tmp/before" "$tmp/after" | head -4)"
status 0 "$in" "$out" -q
[ ! -s "$tmp/err" ] && ok || bad "-q should print nothing: $(head -2 "$tmp/err")"

# A corrupt experts.bin is detected and rebuilt; nothing else is rewritten.
printf '\xa5' | dd of="$out/experts.bin" bs=1 seek=20000 conv=notrunc status=none
(cd "$out" && sha256sum --quiet -c checksums.sha256) >/dev/null 2>&1 && bad "corruption not visible to sha256sum" || ok
status 0 "$in" "$out"
has "$tmp/err" "experts.bin: checksum mismatch" "corrupt experts.bin detected"
has "$tmp/err" "experts.bin: written" "corrupt experts.bin rebuilt"
has "$tmp/err" "dense.gguf: verified" "dense.gguf kept"
cmp -s "$out/experts.bin" "$tmp/golden/experts.bin" && ok || bad "rebuilt experts.bin differs"
sums_ok "$out"
# Truncated ple.bin, deleted dense.gguf, edited placement.json: each rebuilt alone.
truncate -s 8192 "$out/ple.bin"; rm "$out/dense.gguf"; echo " " >>"$out/placement.json"
status 0 "$in" "$out"
has "$tmp/err" "ple.bin: written" "truncated ple.bin rebuilt"
has "$tmp/err" "dense.gguf: written" "missing dense.gguf rebuilt"
has "$tmp/err" "placement.json: written" "edited placement.json rebuilt"
has "$tmp/err" "experts.bin: verified" "experts.bin kept"
for f in ple.bin dense.gguf placement.json checksums.sha256; do
    cmp -s "$out/$f" "$tmp/golden/$f" && ok || bad "rebuilt $f differs from the first run's"
done

# A crash in the middle of experts.bin (after the header and 2 layers) resumes to the same bytes.
status 137 "$in" "$tmp/crash" --test-kill-after-units 3
[ -e "$tmp/crash/experts.bin.tmp" ] && [ -e "$tmp/crash/experts.bin.state" ] && [ ! -e "$tmp/crash/experts.bin" ] &&
    ok || bad "a crash should leave experts.bin.tmp and .state only: $(ls "$tmp/crash" | tr '\n' ' ')"
has "$tmp/crash/experts.bin.state" '^done 3 ' "the state records header + 2 layers"
grep -q experts.bin "$tmp/crash/checksums.sha256" && bad "an unfinished part is listed in checksums" || ok
status 0 "$in" "$tmp/crash"
has "$tmp/err" "experts.bin: resuming: checking the 3 units" "resume announced"
has "$tmp/err" "2 of 4 layers were already written" "resumed after layer 1"
for f in experts.bin experts.idx ple.bin dense.gguf placement.json hotlist.tsv checksums.sha256; do
    cmp -s "$tmp/crash/$f" "$tmp/golden/$f" && ok || bad "resumed $f differs"
done
ls "$tmp/crash" | grep -qE '\.(tmp|state)$' && bad "leftovers after resume: $(ls "$tmp/crash")" || ok
# A resume point whose bytes were damaged: rewritten from the first bad chunk.
status 137 "$in" "$tmp/crash2" --test-kill-after-units 3
printf '\x00\x01' | dd of="$tmp/crash2/experts.bin.tmp" bs=1 seek=5000 conv=notrunc status=none
status 0 "$in" "$tmp/crash2"
has "$tmp/err" "differs from the input at byte 4096 (unit 1)" "damaged partial file detected"
cmp -s "$tmp/crash2/experts.bin" "$tmp/golden/experts.bin" && ok || bad "repaired experts.bin differs"
# Ctrl-C: exit 130, state kept, the same command finishes the job.
status 130 "$in" "$tmp/int" --test-interrupt-after-units 2
has "$tmp/err" "run the same command again to resume" "interrupt message"
status 0 "$in" "$tmp/int"
has "$tmp/err" "resuming" "resume after Ctrl-C"
cmp -s "$tmp/int/experts.bin" "$tmp/golden/experts.bin" && ok || bad "experts.bin after Ctrl-C differs"
sums_ok "$tmp/int"

# A changed input (new mtime) rebuilds every part, and the result is complete.
cp -a "$in" "$tmp/moved.gguf"; touch -d '2001-01-01' "$tmp/moved.gguf"
status 0 "$tmp/moved.gguf" "$out"
has "$tmp/err" "input differs" "changed input detected"
has "$tmp/err" "experts.bin: written" "changed input rebuilds"
sums_ok "$out"
python3 -c "import json,sys; p=json.load(open(sys.argv[1])); sys.exit(sum(len(l[t]) for l in p['layers'] for t in ('vram','ram','ssd')) != 32)" \
    "$out/placement.json" && ok || bad "placement after a rebuild must cover the 32 experts"

# Hotlists: a valid one is copied byte for byte and kept on re-runs; bad ones are refused (exit 2).
{ echo "# campaign"; for l in 0 1 2 3; do for e in 7 6 5 4 3 2 1 0; do printf '%d\t%d\t%d\t0.%d\n' $l $e $((e * 10)) $e; done; done; } >"$tmp/hot.tsv"
status 0 "$in" "$out" --hotlist "$tmp/hot.tsv" --vram-budget all
cmp -s "$tmp/hot.tsv" "$out/hotlist.tsv" && ok || bad "hotlist.tsv is not a copy of --hotlist"
status 0 "$in" "$out"
has "$tmp/err" "hotlist.tsv: verified" "a measured hotlist is kept without --hotlist"
python3 -c "import json,sys; p=json.load(open(sys.argv[1])); sys.exit(p['layers'][2]['vram'] != [7,6,5,4,3,2,1,0])" \
    "$out/placement.json" && ok || bad "ranking by count: $(grep -m1 '"vram"' "$out/placement.json")"
badhot() { # $1 = description, $2 = expected message; hotlist text on stdin
    cat >"$tmp/bad.tsv"
    status 2 "$in" "$out" --hotlist "$tmp/bad.tsv"
    has "$tmp/err" "$2" "$1"
}
grep -v -P '^2\t5\t' "$tmp/hot.tsv" | badhot "missing row" "missing (first: layer 2 expert 5)"
{ cat "$tmp/hot.tsv"; printf '1\t3\t5\t0.5\n'; } | badhot "duplicate row" "listed twice"
sed 's/^0\t0\t0\t0.0$/0\t0\t0\t1.5/' "$tmp/hot.tsv" | badhot "weight out of range" "not a number in \[0, 1\]"
{ cat "$tmp/hot.tsv"; printf '9\t0\t1\t0.5\n'; } | badhot "unknown layer" "layer 9 has no routed experts"
printf 'layer\texpert\tcount\n' | badhot "three columns" "expected 4 columns"
cmp -s "$tmp/hot.tsv" "$out/hotlist.tsv" && ok || bad "a refused hotlist must not replace the good one"
status 2 "$in" "$out" --hotlist "$tmp/none.tsv"

# --ple-tier: recorded in placement.json (request.ple_tier), kept by a re-run
# that leaves it out, changed by one that gives it.
status 0 "$in" "$out" --ple-tier ssd
has "$out/placement.json" '"ple_tier":[[:space:]]*"ssd"' "--ple-tier ssd"
status 0 "$in" "$out"
has "$out/placement.json" '"ple_tier":[[:space:]]*"ssd"' "a re-run without --ple-tier"
status 0 "$in" "$out" --ple-tier ram
has "$out/placement.json" '"ple_tier":[[:space:]]*"ram"' "--ple-tier ram"
cp "$out/placement.json" "$tmp/placement-ram.json"
# vram: the table on the GPU counts in the plan's dense weights; ram and ssd
# leave it in host memory (the gpu-worker's gw_ple_host), so they do not.
status 0 "$in" "$out" --ple-tier vram
has "$out/placement.json" '"ple_tier":[[:space:]]*"vram"' "--ple-tier vram"
python3 -c "
import json, sys
r, v = (json.load(open(f))['model']['vram_dense_bytes'] for f in sys.argv[1:])
sys.exit(0 if v > r else 1)" "$tmp/placement-ram.json" "$out/placement.json" && ok \
    || bad "--ple-tier vram: the dense weights on the device do not include the n-gram table"
status 2 "$in" "$out" --ple-tier gpu
status 0 "$in" "$out" --ple-tier ram

# Usage and input errors.
status 0 --help; has "$tmp/out" "usage: nebula-prepare MODEL.gguf OUTDIR" "--help"
status 2
status 2 "$in"
status 2 "$in" "$out" --bogus
status 2 "$in" "$out" --vram-budget 12X
status 2 "$in" "$out" --ram-budget -1G
status 2 "$in" "$out" --early-quota 1.5
status 2 "$in" "$out" --mtp-experts sometimes
status 2 "$in" "$out" --ple-tier nvme
status 2 "$in" "$out" --vram-budget 1K
has "$tmp/err" "less than the dense weights" "VRAM budget below the dense part"
status 1 "$tmp/none.gguf" "$tmp/x"
head -c 3000 "$in" >"$tmp/cut.gguf"
status 1 "$tmp/cut.gguf" "$tmp/x"
has "$tmp/err" "cut.gguf" "a truncated input is named"
status 1 tests/fuzz/corpus/gguf/every-type.gguf "$tmp/x"
: >"$tmp/file"
status 1 "$in" "$tmp/file"
has "$tmp/err" "not a directory" "OUTDIR is a file"

# On a terminal the progress is a bar redrawn in place.
if command -v script >/dev/null 2>&1; then
    script -qec "$prep $in $tmp/tty" /dev/null >"$tmp/tty.txt" 2>&1
    has "$tmp/tty.txt" $'\r' "terminal: the bar is redrawn in place"
    has "$tmp/tty.txt" "experts.bin \[" "terminal: a bar"
fi

echo "$((n - fail)) passed, $fail failed"
[ "$fail" -eq 0 ]
