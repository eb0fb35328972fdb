#!/usr/bin/env bash
# The published layouts and mixes, at a tiny width (tiny-a's layer pattern,
# hidden 256 so K-quants and the IQ types fit, 64 experts top-4, one MTP
# block): each named mix of nebula-gen writes a split set (the n-gram table
# alone in shard 2) and a separate MTP file, the types follow the mix, and
# `nebula generate` runs greedy on the CPU from either shard, without --mtp
# (one log line: no MTP block) and with it (the same tokens: MTP does not
# change the trunk).  nebula-prepare takes the shards and --mtp (its experts
# and dense tensors join the trunk's).  A mismatched MTP file fails with a
# message naming the key or the block; a tensor of an unsupported type fails
# in one line naming tensor and type, in nebula and nebula-prepare.  The MTP
# file is also what nebula-convert --mtp-out writes from tiny-b.
set -u
. tests/lib/counted.sh
python3 tests/lib/tiny_gen_config.py "$tmp/tiny.json" mtp_num_hidden_layers=1
# another model's MTP file: another expert width
python3 tests/lib/tiny_gen_config.py "$tmp/wide.json" mtp_num_hidden_layers=1 moe_intermediate_size=128
cfg=$tmp/tiny.json
seq 1 12 | awk '{print ($1 * 37) % 500}' >"$tmp/prompt.txt"
run() { "$bin/nebula" generate --tokens-file "$tmp/prompt.txt" --greedy -n 6 --print-ids --threads 1 "$@"; }

# Each named mix: split set + MTP file, types as the mix says, greedy output with and without --mtp.
# want: tensor=type pairs (blk.1 is GDN, blk.3 QSA, blk.4 the MTP block).
declare -A want=(
    [ud-iq1_s]="blk.1.ffn_gate_exps.weight=iq1_s blk.0.ffn_up_exps.weight=iq2_xxs blk.1.ffn_down_exps.weight=iq4_nl blk.1.ffn_gate_shexp.weight=q8_0 blk.1.attn_qkv.weight=q4_K output.weight=q6_K token_embd.weight=q4_K blk.1.hc_attn_down.weight=f32"
    [iq2_xxs]="blk.1.ffn_gate_exps.weight=iq2_xxs blk.1.ffn_down_exps.weight=iq4_nl blk.3.attn_output.weight=q5_0 output.weight=q6_K"
    [iq2_xs]="blk.1.ffn_gate_exps.weight=iq2_xs blk.1.ffn_down_exps.weight=q2_0 blk.1.attn_qkv.weight=q4_K"
    [q2_0]="blk.1.ffn_gate_exps.weight=q2_0 blk.1.ffn_down_exps.weight=q2_0"
    [iq3_s]="blk.1.ffn_up_exps.weight=iq3_s blk.1.ffn_down_exps.weight=iq4_nl blk.1.attn_qkv.weight=q5_K"
    [q4_k_m]="blk.1.ffn_gate_exps.weight=q4_K blk.1.ffn_down_exps.weight=q5_1 blk.1.attn_qkv.weight=q6_K"
    [ud-q4_k_xl]="blk.1.ffn_gate_exps.weight=q4_K blk.0.ffn_gate_exps.weight=q5_K blk.0.ffn_down_exps.weight=q8_0 blk.1.ffn_down_exps.weight=q5_0 blk.1.ssm_out.weight=q8_0"
)
for mix in ud-iq1_s iq2_xxs iq2_xs q2_0 iq3_s q4_k_m ud-q4_k_xl; do
    d=$tmp/$mix
    mkdir -p "$d"
    if ! "$gen" "$d/m.gguf" --config "$cfg" --mix "$mix" --split --mtp-out "$d/mtp.gguf" -q 2>"$tmp/e"; then
        bad "$mix: nebula-gen: $(tail -2 "$tmp/e")"
        continue
    fi
    s1=$d/m-00001-of-00002.gguf s2=$d/m-00002-of-00002.gguf
    [ -f "$s1" ] && [ -f "$s2" ] && [ ! -e "$d/m.gguf" ] && ok || bad "$mix: no two-shard set"
    # shard 2 is the n-gram table alone; the main shard declares the MTP block without its tensors
    # (nebula-gguf info shows the whole set from any shard; its last column is the shard)
    [ "$(info "$s2" | awk 'NF == 7 && $7 == 2 {print $2}')" = per_layer_token_embd.weight ] \
        && ok || bad "$mix: shard 2 is not the table alone: $(info "$s2" | awk 'NF == 7 && $7 == 2')"
    [ "$(key_of "$s1" qwen4exp.block_count)" = 5 ] && [ "$(key_of "$s1" qwen4exp.nextn_predict_layers)" = 1 ] \
        && ! info "$s1" | grep -q " blk\.4\." && ok || bad "$mix: main shard's MTP declaration"
    [ "$(key_of "$d/mtp.gguf" qwen4exp.block_count)" = 5 ] && info "$d/mtp.gguf" | grep -q "blk.4.nextn.eh_proj.weight" \
        && ! info "$d/mtp.gguf" | grep -q " blk\.[0-3]\." && ok || bad "$mix: the MTP file"
    for pair in ${want[$mix]}; do
        got=$(type_of "$s1" "${pair%=*}")
        [ "$got" = "${pair#*=}" ] && ok || bad "$mix: ${pair%=*} is '$got', want ${pair#*=}"
    done
    [ "$(type_of "$s2" per_layer_token_embd.weight)" = iq4_nl ] && ok || bad "$mix: the n-gram table's type"
    run -m "$s2" >"$d/plain" 2>"$d/plain.err" && [ "$(tail -n 1 "$d/plain" | wc -w)" -eq 6 ] && ok \
        || bad "$mix: nebula generate from shard 2: $(tail -2 "$d/plain.err")"
    [ "$(grep -c "no MTP block" "$d/plain.err")" = 1 ] && grep -q "speculative decoding" "$d/plain.err" && ok \
        || bad "$mix: no 'no MTP block' line: $(cat "$d/plain.err")"
    run -m "$s1" --mtp "$d/mtp.gguf" >"$d/mtp" 2>"$d/mtp.err" && ok || bad "$mix: with --mtp: $(tail -2 "$d/mtp.err")"
    grep -q "MTP block blk.4 from $d/mtp.gguf" "$d/mtp.err" && ok || bad "$mix: the MTP line: $(cat "$d/mtp.err")"
    [ "$(tail -n 1 "$d/plain")" = "$(tail -n 1 "$d/mtp")" ] && ok || bad "$mix: --mtp changed the greedy tokens"
done

# nebula-prepare: shards and --mtp; another MTP file (or none) is another preparation.
d=$tmp/iq2_xs
if [ -f "$d/mtp.gguf" ]; then
    "$bin/nebula-prepare" "$d/m-00001-of-00002.gguf" "$tmp/prep" --mtp "$d/mtp.gguf" -q 2>"$tmp/e" && ok \
        || bad "nebula-prepare --mtp: $(tail -2 "$tmp/e")"
    [ "$(key_of "$tmp/prep/dense.gguf" qwen4exp.block_count)" = 5 ] && info "$tmp/prep/dense.gguf" | grep -q "blk.4.nextn.eh_proj" \
        && ! info "$tmp/prep/dense.gguf" | grep -q "blk.4.ffn_gate_exps" && ok || bad "dense.gguf lacks the MTP block"
    grep -q '"mtp"' "$tmp/prep/manifest.json" && ok || bad "manifest.json does not record the MTP file"
    python3 -c "import json,sys; p=json.load(open(sys.argv[1])); sys.exit(len(p['layers']) != 5)" "$tmp/prep/placement.json" \
        && ok || bad "placement.json does not place the MTP block's experts"
    "$bin/nebula-prepare" "$d/m-00001-of-00002.gguf" "$tmp/prep" 2>&1 | grep -q "input differs" && ok \
        || bad "dropping --mtp did not rebuild the preparation"
fi

# Mismatches: an MTP file of another model (another trunk length, another expert width).
"$gen" "$tmp/l3.gguf" --config "$cfg" --layers 3 --mix q8_0 --mtp-out "$tmp/mtp3.gguf" -q || bad "3-layer model"
"$gen" "$tmp/w.gguf" --config "$tmp/wide.json" --mix q8_0 --mtp-out "$tmp/mtpw.gguf" -q || bad "wide model"
main=$tmp/q2_0/m-00001-of-00002.gguf
run -m "$main" --mtp "$tmp/mtp3.gguf" >/dev/null 2>"$tmp/e"
[ $? -eq 2 ] && grep -q "MTP file $tmp/mtp3.gguf: its MTP block is blk.3" "$tmp/e" && [ "$(wc -l <"$tmp/e")" = 1 ] && ok \
    || bad "MTP file of a 3-layer model: '$(cat "$tmp/e")'"
run -m "$main" --mtp "$tmp/mtpw.gguf" >/dev/null 2>"$tmp/e"
[ $? -eq 2 ] && grep -q "expert_feed_forward_length is 128, the model's is 64" "$tmp/e" && ok \
    || bad "MTP file of another expert width: '$(cat "$tmp/e")'"
run -m "$main" --mtp "$tmp/none.gguf" >/dev/null 2>"$tmp/e"
[ $? -eq 2 ] && grep -q "MTP file $tmp/none.gguf" "$tmp/e" && ok || bad "missing MTP file: '$(cat "$tmp/e")'"
"$bin/nebula-prepare" "$main" "$tmp/prep2" --mtp "$tmp/mtp3.gguf" -q 2>"$tmp/e"
[ $? -ne 0 ] && grep -q "its MTP block is blk.3" "$tmp/e" && ok || bad "nebula-prepare, mismatched MTP: '$(cat "$tmp/e")'"
"$gen" "$tmp/x.gguf" --config "$cfg" --no-mtp --mtp-out "$tmp/x-mtp.gguf" -q 2>"$tmp/e"
[ $? -eq 2 ] && grep -q -- "--mtp-out" "$tmp/e" && ok || bad "--no-mtp with --mtp-out: '$(cat "$tmp/e")'"

# An unsupported tensor type (an f32 norm's type id rewritten to i32, same bytes): one line naming it.
cp "$tmp/l3.gguf" "$tmp/i32.gguf"
python3 - "$tmp/i32.gguf" blk.1.ssm_norm.weight 26 <<'PY'
import struct, sys
path, name, tid = sys.argv[1], sys.argv[2].encode(), int(sys.argv[3])
b = bytearray(open(path, "rb").read())
i = b.find(struct.pack("<Q", len(name)) + name) + 8 + len(name)
nd = struct.unpack_from("<I", b, i)[0]
struct.pack_into("<I", b, i + 4 + 8 * nd, tid)
open(path, "wb").write(b)
PY
run -m "$tmp/i32.gguf" >/dev/null 2>"$tmp/e"
[ $? -eq 2 ] && [ "$(wc -l <"$tmp/e")" = 1 ] && grep -q "blk.1.ssm_norm.weight: type i32 (26) cannot be dequantized" "$tmp/e" \
    && ok || bad "unsupported type in nebula: '$(cat "$tmp/e")'"
"$bin/nebula-prepare" "$tmp/i32.gguf" "$tmp/prep3" -q 2>"$tmp/e"
[ $? -ne 0 ] && [ "$(wc -l <"$tmp/e")" = 1 ] && grep -q "blk.1.ssm_norm.weight: type i32" "$tmp/e" && ok \
    || bad "unsupported type in nebula-prepare: '$(cat "$tmp/e")'"

# nebula-convert writes the same layouts from a checkpoint with an MTP block (tiny-b).
"$bin/nebula-convert" tests/fixtures/tiny-b "$tmp/tb.gguf" --type f32 --split --mtp-out "$tmp/tb-mtp.gguf" -q --threads 1 \
    && ok || bad "nebula-convert --split --mtp-out"
"$bin/nebula-convert" tests/fixtures/tiny-b "$tmp/tb-one.gguf" --type f32 -q --threads 1 || bad "nebula-convert tiny-b"
run -m "$tmp/tb-one.gguf" >"$tmp/one" 2>/dev/null && run -m "$tmp/tb-00002-of-00002.gguf" --mtp "$tmp/tb-mtp.gguf" >"$tmp/two" 2>"$tmp/e" \
    && [ "$(tail -n 1 "$tmp/one")" = "$(tail -n 1 "$tmp/two")" ] && ok || bad "tiny-b split + MTP file vs one file: $(tail -2 "$tmp/e")"

verdict test_nebula_layouts
