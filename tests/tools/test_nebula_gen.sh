#!/usr/bin/env bash
# nebula-gen on a tiny config (tiny-a's layer pattern, hidden 256 so K-quants
# fit, 64 experts top-4): the GGUF loads with nebula-gguf info and generates
# with nebula generate; tensor types follow the chosen mix; --layers,
# --ngram-base and --seed do what they say; the router skew measurably
# concentrates routing (nebula hotlist + tools/bench/hotlist-curve.py: the
# hottest 16.7 % of experts take a larger share than without skew, and more
# with a larger skew); --dry-run's byte counts equal the file's; bad
# arguments exit 2 with a message.  The pooled rows (the default) against the
# exact path (--exact-rows): every value decodes finite, each tensor's std and
# range stay near the exact path's, the f32 tensors (routers, norms) are the
# same; the bytes depend on the seed only, not on the thread count; the model
# gives finite logits.
set -u
. tests/lib/counted.sh

python3 tests/lib/tiny_gen_config.py "$tmp/tiny.json"
cfg=$tmp/tiny.json

# Arguments.
"$gen" --help | grep -q "q4_k_m" && ok || bad "--help lists no mixes"
"$gen" >/dev/null 2>"$tmp/e"; [ $? -eq 2 ] && grep -q "OUT.gguf" "$tmp/e" && ok || bad "no output: want exit 2 and a message, got '$(cat "$tmp/e")'"
"$gen" "$tmp/x.gguf" --config "$cfg" --mix q3_weird 2>"$tmp/e"; [ $? -eq 2 ] && grep -q "unknown --mix" "$tmp/e" && ok || bad "bad --mix: '$(cat "$tmp/e")'"
"$gen" "$tmp/x.gguf" --config "$cfg" --layers 0 2>"$tmp/e"; [ $? -eq 2 ] && grep -q -- "--layers" "$tmp/e" && ok || bad "--layers 0: '$(cat "$tmp/e")'"
"$gen" "$tmp/x.gguf" --config "$cfg" --layers two 2>"$tmp/e"; [ $? -eq 2 ] && ok || bad "--layers two accepted"
"$gen" "$tmp/x.gguf" --config "$cfg" --skew -1 2>"$tmp/e"; [ $? -eq 2 ] && ok || bad "--skew -1 accepted"
"$gen" "$tmp/x.gguf" --config "$cfg" --seed -1 2>"$tmp/e"; [ $? -eq 2 ] && grep -q -- "--seed" "$tmp/e" && ok || bad "--seed -1 accepted"
"$gen" "$tmp/x.gguf" --config "$tmp/none.json" 2>"$tmp/e"; [ $? -eq 2 ] && grep -q "cannot read the config" "$tmp/e" && ok || bad "missing config: '$(cat "$tmp/e")'"
"$gen" "$tmp/x.gguf" --config "$cfg" --layers 9 -q 2>"$tmp/e"; [ $? -eq 1 ] && grep -qi "layers" "$tmp/e" && ok || bad "--layers past the config: '$(cat "$tmp/e")'"
[ ! -e "$tmp/x.gguf" ] && [ ! -e "$tmp/x.gguf.tmp" ] && ok || bad "a failed run left a file"

# Default mix (q4_k_m), 3 of the 4 layers: loads, types follow the mix, generates.
"$gen" "$tmp/m.gguf" --config "$cfg" --layers 3 2>"$tmp/log" && ok || bad "nebula-gen: $(tail -3 "$tmp/log")"
grep -q "100% done\|wrote" "$tmp/log" && grep -q "experts gate/up" "$tmp/log" && ok || bad "no summary/progress: $(head -3 "$tmp/log")"
info "$tmp/m.gguf" >/dev/null && ok || bad "nebula-gguf info cannot read the model"
[ "$(key_of "$tmp/m.gguf" qwen4exp.block_count)" = 3 ] && ok || bad "block_count $(key_of "$tmp/m.gguf" qwen4exp.block_count), want 3"
[ "$(key_of "$tmp/m.gguf" qwen4exp.expert_count)" = 64 ] && ok || bad "expert_count"
[ "$(key_of "$tmp/m.gguf" nebula.synthetic.mix)" = '"q4_k_m"' ] && ok || bad "nebula.synthetic.mix key"
want="blk.0.ffn_gate_exps.weight=q4_K blk.0.ffn_up_exps.weight=q4_K blk.0.ffn_down_exps.weight=q5_1
blk.0.attn_qkv.weight=q6_K blk.0.ffn_gate_inp.weight=f32 blk.0.ssm_norm.weight=f32 token_embd.weight=q6_K
per_layer_token_embd.weight=iq4_nl output.weight=q6_K"
for pair in $want; do
    got=$(type_of "$tmp/m.gguf" "${pair%=*}")
    [ "$got" = "${pair#*=}" ] && ok || bad "q4_k_m: ${pair%=*} is '$got', want ${pair#*=}"
done
"$gen" "$tmp/q5.gguf" --config "$cfg" --layers 4 --mix q5_k_m -q && ok || bad "nebula-gen --mix q5_k_m"
for pair in blk.3.ffn_gate_exps.weight=q5_K blk.3.ffn_down_exps.weight=q8_0 blk.3.attn_q.weight=q8_0 \
            blk.3.indexer.q_proj.weight=bf16 per_layer_token_embd.weight=q5_1; do
    got=$(type_of "$tmp/q5.gguf" "${pair%=*}")
    [ "$got" = "${pair#*=}" ] && ok || bad "q5_k_m: ${pair%=*} is '$got', want ${pair#*=}"
done
seq 1 24 | awk '{print ($1 * 37) % 500}' >"$tmp/prompt.txt"
"$bin/nebula" generate -m "$tmp/m.gguf" --tokens-file "$tmp/prompt.txt" --greedy -n 8 --print-ids >"$tmp/out" 2>"$tmp/e" \
    && [ "$(tail -n 1 "$tmp/out" | wc -w)" -ge 8 ] && ok || bad "nebula generate on the model: $(tail -2 "$tmp/e")"
"$bin/nebula" generate -m "$tmp/q5.gguf" --tokens-file "$tmp/prompt.txt" --greedy -n 4 >/dev/null 2>"$tmp/e" && ok \
    || bad "nebula generate on the q5_k_m model: $(tail -2 "$tmp/e")"

# Pooled rows against the exact path, tensor by tensor (nebula-gguf stats decodes every row).
"$gen" "$tmp/ex.gguf" --config "$cfg" --layers 3 --exact-rows -q && ok || bad "nebula-gen --exact-rows"
for m in m q5 ex; do
    "$bin/nebula-gguf" stats "$tmp/$m.gguf" >"$tmp/$m.stats" && ok \
        || bad "nebula-gguf stats $m.gguf: $(awk -F'\t' 'NR > 1 && $8 != 0' "$tmp/$m.stats" | head -3)"
done
python3 - "$tmp/m.stats" "$tmp/ex.stats" >"$tmp/e" <<'PY' && ok || bad "pooled rows vs --exact-rows: $(head -5 "$tmp/e")"
import csv, sys
pooled, exact = ({r["name"]: r for r in csv.DictReader(open(f), delimiter="\t")} for f in sys.argv[1:])
bad = [] if pooled.keys() == exact.keys() else ["tensor lists differ"]
for name, e in exact.items():
    p = pooled[name]
    if e["type"] == "f32":  # routers, norms, conv kernels: the exact path's values
        if p != e: bad.append(f"{name}: {p} vs {e}")
        continue
    ps, es = float(p["std"]), float(e["std"])
    prange, erange = (max(abs(float(r["min"])), abs(float(r["max"]))) for r in (p, e))
    if not (es / 1.25 <= ps <= es * 1.25 and prange <= 1.5 * erange):
        bad.append(f"{name}: std {ps:g} vs {es:g}, max |v| {prange:g} vs {erange:g}")
print("\n".join(bad))
sys.exit(bool(bad))
PY

# nebula logits over the 24-token prompt: finite, not all zero.
"$bin/nebula" logits -m "$tmp/m.gguf" --tokens-file "$tmp/prompt.txt" --out "$tmp/logits.f32" 2>"$tmp/e" && ok \
    || bad "nebula logits: $(tail -2 "$tmp/e")"
python3 -c "import array, math, sys; a = array.array('f', open(sys.argv[1], 'rb').read()); sys.exit(not (len(a) == 24 * 512 and all(map(math.isfinite, a)) and max(map(abs, a)) > 0))" \
    "$tmp/logits.f32" && ok || bad "logits not finite (or empty) on the pooled model"

# --dry-run: the byte budget without a file, equal to what the file holds.
"$gen" --dry-run --config "$cfg" --layers 3 >"$tmp/dry.json" 2>"$tmp/e" && ok || bad "--dry-run: $(cat "$tmp/e")"
have=$(info "$tmp/m.gguf" | awk '$2 ~ /\.weight$|\.bias$|ssm_a$/ && $6 ~ /^[0-9]+$/ {s += $6} END {print s}')
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); sys.exit(not (d['total_bytes'] == int(sys.argv[2]) and d['layers'] == 3 and d['experts_used'] == 4 and d['expert_bytes'] > 0 and d['dense_bytes'] + d['expert_bytes'] + d['ple_table_bytes'] == d['total_bytes']))" \
    "$tmp/dry.json" "$have" && ok || bad "--dry-run bytes $(cat "$tmp/dry.json") vs the file's $have"

# --seed: the same seed makes the same file whatever the thread count, another one another file.
"$gen" "$tmp/m2.gguf" --config "$cfg" --layers 3 --threads 1 -q && "$gen" "$tmp/m3.gguf" --config "$cfg" --layers 3 --threads 3 -q \
    && [ "$(sha256sum <"$tmp/m.gguf")" = "$(sha256sum <"$tmp/m2.gguf")" ] && cmp -s "$tmp/m.gguf" "$tmp/m3.gguf" && ok \
    || bad "same seed, different file (default threads, --threads 1, --threads 3)"
"$gen" "$tmp/s2.gguf" --config "$cfg" --layers 3 --seed 2 -q && ! cmp -s "$tmp/m.gguf" "$tmp/s2.gguf" && ok || bad "--seed 2 made the same file"

# --ngram-base sizes the PLE table: 4 heads of primes >= 1000.
rows() { info "$1" | awk '$2 == "per_layer_token_embd.weight" {split($4, d, "×"); print d[2]}'; }
"$gen" "$tmp/ng.gguf" --config "$cfg" --layers 3 --ngram-base 1000 -q || bad "--ngram-base 1000"
r0=$(rows "$tmp/m.gguf") r1=$(rows "$tmp/ng.gguf")
[ -n "$r1" ] && [ "$r1" -ge 4000 ] && [ "$r1" -lt 4200 ] && [ "$r0" -lt 1000 ] && ok || bad "PLE rows: $r0 as configured, $r1 with --ngram-base 1000"

# The skew concentrates routing: share of the hottest 16.7 % of experts per layer.
awk 'BEGIN { s = 7; for (p = 0; p < 30; p++) { l = ""; n = 20 + (p * 13) % 40;
     for (i = 0; i < n; i++) { s = (s * 1103515245 + 12345) % 2147483648; l = l " " int(s / 65536) % 512 } print l } }' >"$tmp/campaign.txt"
share() { # $1 = skew
    "$gen" "$tmp/k$1.gguf" --config "$cfg" --layers 2 --skew "$1" -q &&
        "$bin/nebula" hotlist -m "$tmp/k$1.gguf" --ids --prompts "$tmp/campaign.txt" --out "$tmp/k$1.tsv" 2>/dev/null &&
        python3 tools/bench/hotlist-curve.py "$tmp/k$1.tsv" --fractions 0.167 --json |
        python3 -c "import json, sys; print(json.load(sys.stdin)['curve'][0]['hit_rate'])"
}
flat=$(share 0) def=$(share 0.38) steep=$(share 1.5)
python3 -c "import sys; f, d, s = map(float, sys.argv[1:]); sys.exit(not (d >= f + 0.10 and s >= d + 0.10))" "$flat" "$def" "$steep" \
    && ok || bad "skew does not concentrate routing: hottest 16.7% take $flat (skew 0), $def (0.38), $steep (1.5)"
echo "hottest 16.7% of experts per layer take: skew 0 $flat, skew 0.38 $def, skew 1.5 $steep"
python3 tools/bench/hotlist-curve.py "$tmp/k0.38.tsv" "$tmp/kbad.tsv" >/dev/null 2>"$tmp/e"; [ $? -ne 0 ] && grep -q "cannot read" "$tmp/e" && ok \
    || bad "hotlist-curve.py on a missing file: '$(cat "$tmp/e")'"

echo "$((n - fail)) passed, $fail failed"
[ "$fail" -eq 0 ]
