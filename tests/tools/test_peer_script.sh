#!/usr/bin/env bash
# test_peer_script.sh — tools/bench/peer-llamacpp.sh's bench arguments, with a
# stand-in llama-bench (a script printing llama-bench's JSON): --ubatch gives
# one prefill row per micro-batch size (-ub N, and -b N past 2048; "default"
# passes neither), decode runs once per prompt, --llama-args reach every run,
# and a bad --ubatch or --prompts is refused before anything runs.  Run by
# tests/run-tests.sh; needs no llama.cpp build.
set -u
fails=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fails=$((fails + 1)); }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/lc/build-cpu/bin"
cat >"$tmp/lc/build-cpu/bin/llama-bench" <<'SH'
#!/usr/bin/env bash
echo "$*" >>"$(dirname "$0")/calls"
echo '[{"samples_ts": [100.0, 110.0], "build_commit": "stand-in", "cpu_info": "cpu", "gpu_info": ""}]'
SH
chmod +x "$tmp/lc/build-cpu/bin/llama-bench"
: >"$tmp/m.gguf"
S=tools/bench/peer-llamacpp.sh
out=$(bash $S bench --dir "$tmp/lc" -m "$tmp/m.gguf" --backend cpu --prompts 64,128 --gen 4 --reps 1 \
    --ubatch default,512,4096 --llama-args "-fa 1" 2>"$tmp/err") || bad "bench with a stand-in llama-bench: $(tail -2 "$tmp/err")"
calls=$tmp/lc/build-cpu/bin/calls
[ "$(grep -c -- '-n 4 -d' "$calls")" = 2 ] && ok "decode once per prompt" || bad "decode runs: $(grep -c -- '-n 4 -d' "$calls")"
[ "$(grep -c -- '-n 0' "$calls")" = 6 ] && ok "prefill once per prompt and micro-batch" || bad "prefill runs: $(grep -c -- '-n 0' "$calls")"
grep -q -- '-ub 4096 -b 4096 -p 128 -n 0' "$calls" && ok "-ub 4096 brings -b 4096" || bad "no '-ub 4096 -b 4096' run"
grep -- '-ub 512 ' "$calls" | grep -q -- '-b ' && bad "-ub 512 should not set -b" || ok "-ub 512 alone"
[ "$(grep -c -- '-fa 1' "$calls")" = 8 ] && ok "--llama-args in every run" || bad "--llama-args in $(grep -c -- '-fa 1' "$calls") of 8 runs"
[ "$(grep -c '^| llama.cpp cpu' <<<"$out")" = 6 ] && ok "six rows" || bad "rows: $(grep -c '^| llama.cpp cpu' <<<"$out")"
grep -q -- '-ub 4096 -b 4096) | 128 | 105.0' <<<"$out" && ok "the row names its micro-batch, the median prefill" || bad "row: $(grep 4096 <<<"$out" | head -1)"
: >"$calls"
bash $S bench --dir "$tmp/lc" -m "$tmp/m.gguf" --backend cpu --ubatch 512,big 2>"$tmp/err" >/dev/null
[ $? = 2 ] && grep -q -- '--ubatch wants' "$tmp/err" && [ ! -s "$calls" ] && ok "a bad --ubatch is refused" || bad "bad --ubatch: $(cat "$tmp/err")"
bash $S bench --dir "$tmp/lc" -m "$tmp/m.gguf" --backend cpu --prompts 5x 2>"$tmp/err" >/dev/null
[ $? = 2 ] && [ ! -s "$calls" ] && ok "a bad --prompts is refused" || bad "bad --prompts: $(cat "$tmp/err")"
dry=$(bash $S bench --dir "$tmp/lc" -m "$tmp/m.gguf" --backend cpu --prompts 64 --gen 4 --ubatch 2048 --dry-run)
[ ! -s "$calls" ] && grep -q -- '-ub 2048 -p 64 -n 0' <<<"$dry" && ok "--dry-run prints, runs nothing" || bad "dry run: $dry"
echo "$fails failed"
[ "$fails" -eq 0 ]
