#!/usr/bin/env bash
# The `nebula` command line against the transformers fixtures: full-sequence
# logits (parity bound of MODEL.md), greedy generation from the fixture
# prefix equal to transformers' cached greedy generate, text and chat prompts
# through the fixture tokenizer, and the exit-2 errors a user can fix.
set -u
BUILD=${BUILD:-build}
neb=$BUILD/bin/nebula conv=$BUILD/bin/nebula-convert
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail=0 n=0
ok() { n=$((n + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); n=$((n + 1)); }

for fx in tiny-a tiny-b; do
    dir=tests/fixtures/$fx
    "$conv" "$dir" "$tmp/$fx.gguf" --type f32 -q || { bad "$fx: convert"; continue; }
    vocab=$(python3 -c "import json; print(json.load(open('$dir/config.json'))['vocab_size'])")
    # Logits of the whole sequence, in two prefill chunk sizes.
    for chunk in 512 37; do
        "$neb" logits -m "$tmp/$fx.gguf" --tokens-file "$dir/tokens.txt" --out "$tmp/l.f32" --chunk $chunk 2>/dev/null \
            && ok || bad "$fx: nebula logits --chunk $chunk"
        python3 tests/tools/compare_logits.py "$tmp/l.f32" "$dir/logits.f32" "$vocab" --gap "$dir/top2_gap.f32" \
            && ok || bad "$fx: logits parity (chunk $chunk)"
    done
    # Greedy from the fixture prefix equals transformers' greedy generate with the cache.
    prefix=$(grep -o '"prefix_len": *[0-9]*' "$dir/manifest.json" | grep -o '[0-9]*$')
    want=$(cat "$dir/greedy.txt")
    n_new=$(wc -w <"$dir/greedy.txt")
    tr -s ' \n' '\n' <"$dir/tokens.txt" | head -n "$prefix" >"$tmp/prefix.txt"
    got=$("$neb" generate -m "$tmp/$fx.gguf" --tokens-file "$tmp/prefix.txt" -n "$n_new" --greedy --print-ids 2>/dev/null | tail -n 1)
    [ "$n_new" -ge 24 ] && ok || bad "$fx: greedy reference has only $n_new tokens"
    [ "$got" = "$(echo $want)" ] && ok || bad "$fx: greedy ids differ:
  got  $got
  want $(echo $want)"
done

# Text prompts, chat and tokenize need a tokenizer: tiny-a ships a tiny BPE one.
"$neb" tokenize -m "$tmp/tiny-a.gguf" "<|im_start|>user Hello" >"$tmp/ids" && ok || bad "tokenize"
[ "$(cut -d' ' -f1 "$tmp/ids")" = 501 ] && ok || bad "special token not matched whole: $(cat "$tmp/ids")"
"$neb" generate -m "$tmp/tiny-a.gguf" --chat "Hello" -n 8 --seed 1 --print-ids >"$tmp/a" 2>/dev/null && ok || bad "chat generate"
"$neb" generate -m "$tmp/tiny-a.gguf" --chat "Hello" -n 8 --seed 1 --print-ids >"$tmp/b" 2>/dev/null
cmp -s "$tmp/a" "$tmp/b" && ok || bad "same seed, different output"
"$neb" generate -m "$tmp/tiny-a.gguf" -p "The quick brown fox" -n 4 --temp 0.8 --top-k 5 --top-p 0.9 --min-p 0.01 \
    --presence-penalty 0.5 >/dev/null 2>&1 && ok || bad "sampling flags"

# Hotlist campaign: every expert of every layer once; counts add up to tokens × layers × top-k.
printf 'What is the capital of France?\n# a comment\n\nTell me a story.\n' >"$tmp/prompts.txt"
"$neb" hotlist -m "$tmp/tiny-a.gguf" --prompts "$tmp/prompts.txt" --out "$tmp/hot.tsv" --gen 3 2>"$tmp/hl" && ok || bad "hotlist"
tokens=$(grep -o '[0-9]* tokens' "$tmp/hl" | grep -o '[0-9]*')
[ "$(head -1 "$tmp/hot.tsv")" = "$(printf 'layer\texpert\tcount\tmean_weight')" ] && ok || bad "hotlist header"
[ "$(tail -n +2 "$tmp/hot.tsv" | wc -l)" -eq $((4 * 8)) ] && ok || bad "hotlist rows: want 4 layers x 8 experts"
[ "$(awk 'NR > 1 {s += $3} END {print s}' "$tmp/hot.tsv")" -eq $((tokens * 4 * 2)) ] && ok || bad "hotlist counts != $tokens tokens x 4 layers x top-2"
awk 'NR > 1 && $3 > 0 && ($4 <= 0 || $4 > 1) {exit 1}' "$tmp/hot.tsv" && ok || bad "hotlist mean weights outside (0, 1]"
head -c 300 tests/fixtures/tiny-b/tokens.txt | awk '{NF--; print}' >"$tmp/ids.txt"
"$neb" hotlist -m "$tmp/tiny-b.gguf" --prompts "$tmp/ids.txt" --ids --out "$tmp/hot-b.tsv" 2>/dev/null && ok || bad "hotlist --ids"

# Errors a user can fix: one line, exit 2.
expect2() { local what=$1; shift; "$@" >/dev/null 2>"$tmp/e"; local rc=$?
    [ $rc -eq 2 ] && [ -s "$tmp/e" ] && ok || bad "$what: exit $rc, message '$(head -c 200 "$tmp/e")'"; }
expect2 "no command" "$neb"
expect2 "unknown command" "$neb" frobnicate
expect2 "missing model" "$neb" generate -m "$tmp/none.gguf" -p hi
echo "not a gguf" >"$tmp/bad.gguf"
expect2 "corrupt model" "$neb" generate -m "$tmp/bad.gguf" -p hi
expect2 "bad flag" "$neb" generate -m "$tmp/tiny-a.gguf" -p hi --temp lots
expect2 "two prompts" "$neb" generate -m "$tmp/tiny-a.gguf" -p hi --chat hi
expect2 "prompt over context" "$neb" generate -m "$tmp/tiny-a.gguf" --tokens-file tests/fixtures/tiny-a/tokens.txt --ctx 64
expect2 "id out of vocab" "$neb" logits -m "$tmp/tiny-a.gguf" --tokens-file <(echo 1 2 99999) --out "$tmp/x.f32"
expect2 "text without tokenizer" "$neb" generate -m "$tmp/tiny-b.gguf" -p hi
expect2 "think flag" "$neb" generate -m "$tmp/tiny-a.gguf" --chat hi --think maybe
grep -q "context holds 64" <("$neb" generate -m "$tmp/tiny-a.gguf" --tokens-file tests/fixtures/tiny-a/tokens.txt --ctx 64 2>&1) \
    && ok || bad "context message"
"$neb" generate --help | grep -q -- "--tokens-file" && ok || bad "generate --help"

echo "$((n - fail)) passed, $fail failed"
[ "$fail" -eq 0 ]
