#!/usr/bin/env bash
# Every sweep fixture (tests/fixtures/sweep, made by make_sweep.py: random
# legal configurations and issue 11's cases) through the four-process
# pipeline with a mixed RAM/SSD placement: about half of each layer's experts
# in the RAM arena, the rest on SSD (paged by the ssd-pager), and the n-gram
# table on SSD for every other fixture.  The greedy ids equal transformers'
# (greedy.txt) and the single-process CLI's, and the logits every token was
# chosen from equal the CLI's bit for bit; shutdown leaves no /dev/shm object.
# A fixture that keeps QSA boundary ties has no transformers greedy to hold to
# (docs/PARITY.md): it is held to the CLI only.  The trap kills what this test
# started and removes the instance's /dev/shm objects.
set -u
BUILD=${BUILD:-build}
bin=$BUILD/bin
. tests/lib/pipeline.sh
fixtures=$(ls -d tests/fixtures/sweep/*/ 2>/dev/null | sed 's:/$::')
[ -n "$fixtures" ] || { echo "FAIL: no fixture under tests/fixtures/sweep"; exit 1; }
i=0
for fx in $fixtures; do
    name=$(basename "$fx") i=$((i + 1)) run=$tmp/run-$name
    model=$tmp/$name.gguf prep=$tmp/prep-$name
    "$bin/nebula-convert" "$fx" "$model" --type f32 -q || { bad "$name: convert"; continue; }
    prefix=$(python3 -c "import json; print(json.load(open('$fx/manifest.json'))['checks']['greedy']['prefix_len'])")
    n_new=$(wc -w <"$fx/greedy.txt")
    tr -s ' \n' '\n' <"$fx/tokens.txt" | head -n "$prefix" >"$tmp/$name.prefix"
    ties=$(python3 -c "import json; print(sum(len(q.get('boundary_tie_rows', [])) for q in json.load(open('$fx/manifest.json'))['checks']['qsa']))")
    "$bin/nebula" generate -m "$model" --tokens-file "$tmp/$name.prefix" --greedy -n "$n_new" --print-ids \
        --dump-logits "$tmp/$name.local.logits" >"$tmp/$name.local" 2>"$tmp/$name.err" || { bad "$name: CLI: $(tail -1 "$tmp/$name.err")"; continue; }
    if [ "$ties" -eq 0 ]; then
        [ "$(tail -n 1 "$tmp/$name.local")" = "$(echo $(cat "$fx/greedy.txt"))" ] && ok || bad "$name: CLI greedy differs from transformers'"
    fi
    # Half of each layer's experts in RAM: the arena budget is half the blobs.
    "$bin/nebula-prepare" "$model" "$prep" --vram-budget 0 --ram-budget 0 -q || { bad "$name: prepare (sizing)"; continue; }
    half=$(python3 -c "import json; d=json.load(open('$prep/placement.json')); print(sum(l['blob_bytes'] * (len(l['ram']) + len(l['ssd'])) for l in d['layers']) // 2)")
    ple=ram; [ $((i % 2)) -eq 0 ] && ple=ssd
    rm -rf "$prep"
    "$bin/nebula-prepare" "$model" "$prep" --vram-budget 0 --ram-budget "$half" --ple-tier "$ple" -q || { bad "$name: prepare"; continue; }
    python3 -c "import json,sys; t=json.load(open('$prep/placement.json'))['totals']; sys.exit(not (t['ram']['experts'] > 0 and t['ssd']['experts'] > 0))" \
        && ok || bad "$name: the placement is not mixed RAM/SSD"
    "$bin/nebula-coordinator" --model "$model" --prepared "$prep" --runtime "$run" --threads 2 --http 127.0.0.1:0 \
        2>"$tmp/$name.coord" &
    coord_pid=$!
    wait_status "all(w['state'] == 'ready' for w in d['workers'])"
    inst=$(ctl --json status 2>/dev/null | json "d['instance']")
    note_pids
    "$bin/nebula" generate --server "$run" --tokens-file "$tmp/$name.prefix" --greedy -n "$n_new" --print-ids \
        --dump-logits "$tmp/$name.server.logits" >"$tmp/$name.server" 2>>"$tmp/$name.err" \
        && cmp -s "$tmp/$name.server" "$tmp/$name.local" && ok \
        || bad "$name ($ple PLE): pipeline greedy differs from the CLI's: $(tail -n 1 "$tmp/$name.server") $(tail -2 "$tmp/$name.err")"
    cmp -s "$tmp/$name.server.logits" "$tmp/$name.local.logits" && ok || bad "$name: pipeline logits differ from the CLI's"
    ctl shutdown >/dev/null && wait "$coord_pid" && ok || bad "$name: shutdown: $(tail -3 "$tmp/$name.coord")"
    coord_pid=
    [ "$(ls /dev/shm | grep -c "^nebula-$inst-")" -eq 0 ] && ok || bad "$name: /dev/shm objects left"
done
echo "test_sweep_pipeline: $((n - fail)) of $n checks passed over $i fixtures"
[ "$fail" -eq 0 ]
