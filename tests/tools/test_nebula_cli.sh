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
# With an MTP block (tiny-b's) its layer is counted too: the block behind each
# step, a row for every token but each prompt's first; the counts do not
# depend on how the steps are cut (the rows pair across chunk boundaries).
printf '%s\n' "$(head -c 200 tests/fixtures/tiny-b/tokens.txt | awk '{NF--; print}')" >>"$tmp/ids.txt"
k_b=$(python3 -c "import json; print(json.load(open('tests/fixtures/tiny-b/config.json'))['num_experts_per_tok'])")
L_b=$(python3 -c "import json; print(json.load(open('tests/fixtures/tiny-b/config.json'))['num_hidden_layers'])")
for c in 512 7; do
    "$neb" hotlist -m "$tmp/tiny-b.gguf" --prompts "$tmp/ids.txt" --ids --out "$tmp/hot-m$c.tsv" --chunk $c --gen 2 2>"$tmp/hl" ||
        bad "hotlist with the MTP block (--chunk $c)"
done
tokens=$(grep -o '[0-9]* tokens' "$tmp/hl" | grep -o '[0-9]*')
awk -v L="$L_b" -v k="$k_b" -v t="$tokens" 'NR > 1 { s[$1] += $3; n = $1 > n ? $1 : n }
    END { for (l = 0; l < L; l++) if (s[l] != t * k) exit 1; exit !(n == L && s[L] == (t - 2) * k) }' "$tmp/hot-m512.tsv" && ok ||
    bad "hotlist with MTP: want $L_b trunk layers of $tokens x $k_b and layer $L_b (MTP) of ($tokens - 2 prompts) x $k_b: $(awk 'NR > 1 { s[$1] += $3 } END { for (l in s) printf "%s:%s ", l, s[l] }' "$tmp/hot-m512.tsv")"
cmp -s <(cut -f1-3 "$tmp/hot-m512.tsv") <(cut -f1-3 "$tmp/hot-m7.tsv") && ok || bad "hotlist with MTP: counts depend on --chunk"

# --layers L: the first L layers then the head, on a synthetic model (seeded by
# tensor name, so a model converted with only L layers has the same ones):
# equal to that model's logits bit for bit, to the full run when L = all, and
# not to the full run otherwise; the n-gram layer (index 2 here) and the MTP
# block are dropped when not among them.
for l in 5 3 2; do
    "$conv" --synthetic tests/fixtures/tiny-b/config.json "$tmp/syn$l.gguf" --layers $l $([ $l = 5 ] || echo --no-mtp) -q ||
        bad "synthetic convert --layers $l"
    "$neb" logits -m "$tmp/syn$l.gguf" --tokens-file "$tmp/prefix.txt" --out "$tmp/syn$l.f32" 2>/dev/null || bad "logits of syn$l"
done
for l in 2 3 5; do
    "$neb" logits -m "$tmp/syn5.gguf" --layers $l --tokens-file "$tmp/prefix.txt" --out "$tmp/first$l.f32" 2>"$tmp/e" && ok ||
        bad "logits --layers $l: $(cat "$tmp/e")"
    cmp -s "$tmp/first$l.f32" "$tmp/syn$l.f32" && ok || bad "logits --layers $l differ from a model of $l layers"
done
grep -q "the first 5 of 5 layers, then the head (no MTP block)" "$tmp/e" && ok || bad "--layers 5: $(cat "$tmp/e")"
cmp -s "$tmp/first2.f32" "$tmp/syn5.f32" && bad "logits --layers 2 equal the full model's" || ok
"$neb" logits -m "$tmp/syn5.gguf" --layers 2 --tokens-file "$tmp/prefix.txt" --out "$tmp/x.f32" 2>&1 | grep -q "the n-gram layer is not among them" &&
    ok || bad "--layers 2 does not say the n-gram layer is left out"

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
expect2 "--layers past the model" "$neb" logits -m "$tmp/syn5.gguf" --layers 6 --tokens-file "$tmp/prefix.txt" --out "$tmp/x.f32"
grep -q "the model has 5 layers (give 1 to 5), not 6" "$tmp/e" && ok || bad "--layers 6: $(cat "$tmp/e")"
expect2 "--layers 0" "$neb" logits -m "$tmp/syn5.gguf" --layers 0 --tokens-file "$tmp/prefix.txt" --out "$tmp/x.f32"
expect2 "id out of vocab" "$neb" logits -m "$tmp/tiny-a.gguf" --tokens-file <(echo 1 2 99999) --out "$tmp/x.f32"
expect2 "text without tokenizer" "$neb" generate -m "$tmp/tiny-b.gguf" -p hi
expect2 "think flag" "$neb" generate -m "$tmp/tiny-a.gguf" --chat hi --think maybe
grep -q "context holds 64" <("$neb" generate -m "$tmp/tiny-a.gguf" --tokens-file tests/fixtures/tiny-a/tokens.txt --ctx 64 2>&1) \
    && ok || bad "context message"
"$neb" generate --help | grep -q -- "--tokens-file" && ok || bad "generate --help"

echo "$((n - fail)) passed, $fail failed"
[ "$fail" -eq 0 ]
