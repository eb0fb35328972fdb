#!/usr/bin/env bash
# nebula-convert from the command line: the acceptance listing through
# nebula-gguf info, exit codes, clear errors, no half-written output.
set -u
BUILD=${BUILD:-build}
conv=$BUILD/bin/nebula-convert info=$BUILD/bin/nebula-gguf
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail=0 n=0
ok() { n=$((n + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); n=$((n + 1)); }
has() { grep -q -- "$2" "$1" && ok || bad "$3: no '$2' in $(basename "$1")"; }

"$conv" tests/fixtures/tiny-a "$tmp/x.gguf" --type f32 -q && ok || bad "tiny-a f32 conversion"
"$info" info "$tmp/x.gguf" >"$tmp/info.txt" && ok || bad "nebula-gguf info"
has "$tmp/info.txt" 'general.architecture *= "qwen4exp"' "architecture"
for key in qwen4exp.block_count qwen4exp.embedding_length qwen4exp.attention.head_count_kv \
           qwen4exp.rope.dimension_sections qwen4exp.expert_count qwen4exp.expert_shared_feed_forward_length \
           qwen4exp.ssm.group_count qwen4exp.ssm.time_step_rank qwen4exp.full_attention_interval \
           qwen4exp.hyper_connection.count qwen4exp.hyper_connection.low_rank qwen4exp.attention.indexer.top_k \
           qwen4exp.attention.compress_ratios qwen4exp.ple.layers qwen4exp.ple.layer_multipliers \
           qwen4exp.ple.head_offsets qwen4exp.ple.head_vocab_sizes qwen4exp.ple.eos_token_id \
           qwen4exp.embedding_length_per_layer_input; do
    has "$tmp/info.txt" " $key " "key"
done
for t in blk.0.hc_attn_down.weight blk.2.hc_ffn_inject.weight per_layer_token_embd.weight \
         blk.3.indexer.q_proj.weight blk.3.indexer.k_proj.weight output_hc_norm.weight blk.1.ple_key.weight \
         blk.0.ssm_a blk.0.ssm_conv1d.weight blk.3.ffn_gate_exps.weight; do
    has "$tmp/info.txt" " $t " "tensor"
done
has "$tmp/info.txt" 'arr\[u64\] *qwen4exp.ple.layer_multipliers' "u64 multipliers"

# MTP block and the released layout.
"$conv" tests/fixtures/tiny-b-vl "$tmp/vl.gguf" --type bf16 -q && ok || bad "tiny-b-vl conversion"
"$info" info "$tmp/vl.gguf" >"$tmp/vl.txt"
has "$tmp/vl.txt" 'blk.5.nextn.eh_proj.weight' "MTP tensor"
has "$tmp/vl.txt" 'qwen4exp.nextn_predict_layers *= 1' "MTP key"
grep -q 'visual' "$tmp/vl.txt" && bad "vision tensors leaked into the GGUF" || ok
"$conv" tests/fixtures/tiny-b-vl "$tmp/nomtp.gguf" --no-mtp -q && ok || bad "--no-mtp"
"$info" info "$tmp/nomtp.gguf" | grep -q nextn && bad "--no-mtp kept MTP tensors" || ok

# Usage errors exit 2; bad input exits 1 with a message and leaves no file.
"$conv" >/dev/null 2>&1; [ $? -eq 2 ] && ok || bad "no arguments should exit 2"
"$conv" tests/fixtures/tiny-a "$tmp/y.gguf" --type q3 2>"$tmp/e"; [ $? -eq 2 ] && ok || bad "bad --type should exit 2"
has "$tmp/e" "unknown --type" "bad --type message"
"$conv" --help | grep -q 'usage: nebula-convert' && ok || bad "--help"
"$conv" "$tmp/nowhere" "$tmp/z.gguf" 2>"$tmp/e"; [ $? -eq 1 ] && ok || bad "missing dir should exit 1"
has "$tmp/e" "config.json" "missing dir message"
# A checkpoint missing one tensor: the message names it, nothing is left behind.
mkdir "$tmp/broken" && cp tests/fixtures/tiny-b/config.json tests/fixtures/tiny-b/*.safetensors "$tmp/broken/"
sed 's/"model.layers.1.self_attn.k_proj.weight"/"model.layers.1.self_attn.k_proj.weight.gone"/' \
    tests/fixtures/tiny-b/model.safetensors.index.json >"$tmp/broken/model.safetensors.index.json"
"$conv" "$tmp/broken" "$tmp/b.gguf" -q 2>"$tmp/e"; rc=$?
[ $rc -ne 0 ] && ok || bad "broken checkpoint should fail"
grep -q 'k_proj' "$tmp/e" && ok || bad "message should name the tensor: $(cat "$tmp/e")"
[ ! -e "$tmp/b.gguf" ] && [ ! -e "$tmp/b.gguf.tmp" ] && ok || bad "a failed conversion left a file"
# A config.json that contradicts the weights: the shape error names the tensor.
mkdir "$tmp/shape" && cp tests/fixtures/tiny-a/model.safetensors "$tmp/shape/"
sed 's/"moe_intermediate_size": 32/"moe_intermediate_size": 40/' tests/fixtures/tiny-a/config.json >"$tmp/shape/config.json"
"$conv" "$tmp/shape" "$tmp/s.gguf" -q 2>"$tmp/e"; [ $? -eq 1 ] && ok || bad "shape mismatch should exit 1"
has "$tmp/e" "shape" "shape mismatch message"

# A synthetic model has the layout of a converted one: same names, types, shapes.
"$conv" --synthetic tests/fixtures/tiny-b/config.json "$tmp/syn.gguf" --type f32 -q && ok || bad "synthetic model"
"$conv" tests/fixtures/tiny-b "$tmp/real.gguf" --type f32 -q && ok || bad "tiny-b f32"
table() { "$info" info "$1" | awk '/^tensors:/ {t=1; next} t && NF >= 4 && $1 ~ /^[0-9]+$/ {print $2, $3, $4}' | sort; }
diff <(table "$tmp/syn.gguf") <(table "$tmp/real.gguf") >"$tmp/d" && ok || bad "synthetic layout differs: $(head -5 "$tmp/d")"
[ "$(table "$tmp/syn.gguf" | wc -l)" -gt 100 ] && ok || bad "synthetic table too small"
"$conv" --synthetic tests/fixtures/tiny-a/config.json "$tmp/syn2.gguf" --layers 2 --seed 7 -q && ok || bad "--layers 2"
"$info" info --key qwen4exp.block_count "$tmp/syn2.gguf" | grep -q '^2$' && ok || bad "--layers 2 block_count"
"$conv" tests/fixtures/tiny-a "$tmp/l.gguf" --layers 2 2>/dev/null; [ $? -eq 2 ] && ok || bad "--layers without --synthetic should exit 2"

# Configurations transformers refuses (Qwen4ExpTextConfig's validate_architecture) are refused
# too, naming the rule, and nothing is written.  tiny-a: 4 layers, QSA at layer 4 (1-based).
illegal() { # $1 = what, $2 = python edit of the config dict c, $3 = words the message must have
    local d=$tmp/illegal-$n
    mkdir -p "$d" && cp tests/fixtures/tiny-a/model.safetensors "$d/"
    python3 -c "import json,sys; c=json.load(open('tests/fixtures/tiny-a/config.json')); $2; json.dump(c, open('$d/config.json','w'))"
    "$conv" "$d" "$d/out.gguf" -q 2>"$tmp/e"; local rc=$?
    [ $rc -eq 1 ] && grep -q -- "$3" "$tmp/e" && [ ! -e "$d/out.gguf" ] && ok || bad "$1: exit $rc, '$(cat "$tmp/e")'"
}
illegal "hc_count 1" "c['hc_count'] = 1" "more than one hyper-connection stream"
illegal "PLE on a QSA layer" "c['ple_layer_ids'] = [4]" "linear_attention (GDN) layers only"
illegal "budget not a multiple of the ratio" "c['indexer_budget'] = 18" "indexer_budget 18 is not a positive multiple"
illegal "rotary dims over the indexer head" "c['indexer_head_dim'] = 4" "exceed indexer_head_dim 4"
illegal "PLE width not a multiple of its heads" "c['ple_embed_dim'] = 66" "ple_embed_dim 66 is not a multiple"
illegal "two indexer key heads" "c['indexer_kv_heads'] = 2" "indexer_kv_heads 2"
# The GDN output gate travels as Nebula's key ssm.output_gate (sigmoid for the released model).
has "$tmp/info.txt" 'qwen4exp.ssm.output_gate *= "sigmoid"' "output gate key"
mkdir -p "$tmp/silu" && cp tests/fixtures/tiny-a/model.safetensors "$tmp/silu/"
sed 's/"output_gate_type": "sigmoid"/"output_gate_type": "silu"/' tests/fixtures/tiny-a/config.json >"$tmp/silu/config.json"
"$conv" "$tmp/silu" "$tmp/silu.gguf" -q && "$info" info "$tmp/silu.gguf" | grep -q 'qwen4exp.ssm.output_gate *= "silu"' && ok \
    || bad "a silu-gated checkpoint: no ssm.output_gate silu"

echo "$((n - fail)) passed, $fail failed"
[ "$fail" -eq 0 ]
