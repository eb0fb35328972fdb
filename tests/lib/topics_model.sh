# topics_model.sh — sourced by the tests that need a model with topic drift
# (tests/tools/test_topics.sh, test_adaptive_slots.sh) once bin is set:
# topics_config OUT writes a config of the released layer pattern at hidden
# 256, 2 layers, 64 experts top-4, vocabulary 4096; topics_gen OUT ARGS...
# makes a q8_0 model of it with nebula-gen (no MTP).
topics_config() {
    python3 - conf/qwen3.8-flash-next.config.json "$1" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
t = c["text_config"]
t.update(vocab_size=4096, hidden_size=256, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=64,
         linear_key_head_dim=32, linear_value_head_dim=32, linear_num_key_heads=2, linear_num_value_heads=4,
         num_experts=64, num_experts_per_tok=4, moe_intermediate_size=256, shared_expert_intermediate_size=256,
         hc_lowrank=16, ple_embed_dim=256, ple_layer_ids=[1], ngram_vocab_size_base=1000, heads_per_ngram=2,
         split_ngram_parts=4, indexer_head_dim=32, indexer_budget=64, bos_token_id=4000, eos_token_id=4000)
c["image_token_id"] = 4001
json.dump(c, open(sys.argv[2], "w"))
PY
}
topics_gen() { # $1 = the config, $2 = the GGUF, then nebula-gen's options
    local cfg=$1 out=$2
    shift 2
    "$bin/nebula-gen" "$out" "$@" --config "$cfg" --mix q8_0 --no-mtp --threads 2 -q
}
