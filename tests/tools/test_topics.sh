#!/usr/bin/env bash
# test_topics.sh — issue 15 item 5's synthetic routing with topic drift, at a
# small width: nebula-gen --topics (a config of the released layer pattern at
# hidden 256, 2 layers, 64 experts top-4, vocabulary 4096), a topic-switching
# campaign (tools/bench/topic-campaign.py), `nebula hotlist --routes`, and
# tools/bench/cache-sim.py on the routes:
#   - the routes file has a line per layer and token with the k experts, and
#     its counts agree with the hotlist TSV;
#   - with topics, a cache that follows the topic (the per-segment ideal)
#     beats the static placement by far more than without topics (the same
#     campaign on the same model but --topics 0): the drift is real;
#   - the GGUF records the topic model (nebula.synthetic.topics);
#   - bad values are refused.
set -u
BUILD=${BUILD:-build}
bin=$BUILD/bin
tmp=$(mktemp -d /tmp/nbtopics.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail=0 n=0
ok() { n=$((n + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); n=$((n + 1)); }

. tests/lib/topics_model.sh
topics_config "$tmp/cfg.json"
gen() { topics_gen "$tmp/cfg.json" "$@"; }
gen "$tmp/topics.gguf" --topics 8 --topic-router 4 --topic-share 0.15 && ok || bad "nebula-gen --topics"
gen "$tmp/plain.gguf" --topics 0 && ok || bad "nebula-gen --topics 0"
"$bin/nebula-gguf" info --key nebula.synthetic.topics "$tmp/topics.gguf" 2>/dev/null | grep -qx 8 && ok \
    || bad "nebula.synthetic.topics: $("$bin/nebula-gguf" info --key nebula.synthetic.topics "$tmp/topics.gguf" 2>&1)"
"$bin/nebula-gguf" info --key nebula.synthetic.topics "$tmp/plain.gguf" >/dev/null 2>&1 && bad "--topics 0 wrote topic keys" || ok
gen "$tmp/x.gguf" --topics -1 2>/dev/null && bad "--topics -1 accepted" || ok
gen "$tmp/x.gguf" --topics 4 --topic-share 1.5 2>/dev/null && bad "--topic-share 1.5 accepted" || ok

python3 tools/bench/topic-campaign.py --vocab 4096 --topics 8 --segments 8 --length 48 --reserved 128 >"$tmp/camp.txt"
[ "$(wc -l <"$tmp/camp.txt")" = 8 ] && [ "$(wc -w <"$tmp/camp.txt")" = 384 ] && ok || bad "campaign: $(wc -lw <"$tmp/camp.txt")"
python3 - "$tmp/camp.txt" <<'PY' && ok || bad "campaign: a segment mixes topics or repeats the last one"
import sys
last = None
for line in open(sys.argv[1]):
    t = {int(x) % 8 for x in line.split()}
    if len(t) != 1 or t == last: sys.exit(1)
    last = t
PY
for m in topics plain; do
    "$bin/nebula" hotlist -m "$tmp/$m.gguf" --prompts "$tmp/camp.txt" --ids --out "$tmp/$m.tsv" --routes "$tmp/$m.routes" \
        --threads 2 2>"$tmp/$m.err" && ok || bad "hotlist --routes ($m): $(tail -2 "$tmp/$m.err")"
done
python3 - "$tmp/topics.routes" "$tmp/topics.tsv" <<'PY' && ok || bad "routes file against the hotlist"
import collections, sys
lines = [l.split() for l in open(sys.argv[1])]
assert len(lines) == 2 * 384, len(lines)
per = collections.Counter()
for l in lines:
    assert len(l) == 2 + 4, l
    for e in l[2:]: per[(int(l[0]), int(e))] += 1
assert sorted({int(l[1]) for l in lines if l[0] == "0"}) == list(range(384))
tsv = [l.split("\t") for l in open(sys.argv[2]).read().splitlines()[1:]]
for layer, expert, count, _ in tsv:
    assert per[(int(layer), int(expert))] == int(count), (layer, expert, count)
PY
gap() { python3 tools/bench/cache-sim.py "$1" --slots 8 --window 48 --json | python3 -c "import json,sys; h=json.load(sys.stdin)['hit_rate']; print('%.4f %.4f %.4f' % (h['ideal']['mean'] - h['static']['mean'], h['static']['mean'], h['ideal']['mean']))"; }
read -r g_t s_t i_t <<<"$(gap "$tmp/topics.routes")"
read -r g_p s_p i_p <<<"$(gap "$tmp/plain.routes")"
echo "8 of 64 experts cached: topics static $s_t ideal $i_t (gap $g_t); no topics static $s_p ideal $i_p (gap $g_p)"
python3 -c "import sys; sys.exit(not (float('$g_t') > float('$g_p') + 0.10))" && ok \
    || bad "the topics do not make routing follow the context: gap $g_t with, $g_p without"
python3 tools/bench/cache-sim.py "$tmp/topics.routes" 2>/dev/null && bad "cache-sim without --slots ran" || ok
echo "test_topics: $((n - fail)) of $n checks passed"
[ "$fail" -eq 0 ]
