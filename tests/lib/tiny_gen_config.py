"""tiny_gen_config.py OUT [KEY=VALUE ...] — a config.json for nebula-gen at a
tiny width: tiny-a's layer pattern, hidden 256 so K-quants and the IQ types
fit, 64 experts top-4, expert width 64; KEY=VALUE (JSON values) on top."""
import json
import sys

c = json.load(open("tests/fixtures/tiny-a/config.json"))
c.update(hidden_size=256, num_experts=64, num_experts_per_tok=4, moe_intermediate_size=64,
         shared_expert_intermediate_size=64, ple_embed_dim=256)
for kv in sys.argv[2:]:
    k, v = kv.split("=", 1)
    c[k] = json.loads(v)
json.dump(c, open(sys.argv[1], "w"))
