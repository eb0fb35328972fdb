#!/usr/bin/env bash
# test_nebula_gguf.sh — nebula-gguf from the shell: output of `info` on a seed
# file (key/values and tensor lines), --key and --no-tensors, `stats`, and
# the exit codes: 0 ok, 1 corrupt/unreadable file, missing key or a
# non-finite value, 2 bad usage.
# Run by tests/run-tests.sh with BUILD set; uses the committed fuzz seeds.
set -u
BIN=${BUILD:-build}/bin/nebula-gguf
SEED=tests/fuzz/corpus/gguf/every-type.gguf
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0

check() { # $1 = description, rest = command that must succeed
    local what=$1
    shift
    if "$@"; then echo "ok   $what"; else echo "FAIL $what"; fails=$((fails + 1)); fi
}
has() { grep -qF -- "$1" "$tmp/out"; }
status() { # $1 = expected exit code, rest = nebula-gguf arguments
    local want=$1
    shift
    "$BIN" "$@" >"$tmp/out" 2>"$tmp/err"
    [ $? -eq "$want" ]
}

[ -x "$BIN" ] || { echo "FAIL $BIN not built"; exit 1; }

check "info exits 0" status 0 info "$SEED"
check "version line" has "version:    3"
check "alignment line" has "alignment:  32"
check "string value quoted" has 'general.architecture  = "nebula-seed"'
check "escaped string" has '"tiny \"quoted\"\nmodel"'
check "integer value" has "v.i8                  = -100"
check "long array abbreviated" has "[0, 1, 2, ... ] (12 items)"
check "string array" has 'arr[str]   tokenizer.ggml.tokens = ["<|endoftext|>"'
check "tensor count" has "tensors: 5"
check "q8_0 tensor line" grep -qE '^ +2  blk\.0\.attn_q\.weight +q8_0 +32×2 +0xe0 +68  1$' "$tmp/out"
check "4-d tensor line" grep -qE '^ +4  output\.weight +bf16 +4×2×2×1 ' "$tmp/out"

check "--no-tensors" status 0 info --no-tensors "$SEED"
check "--no-tensors keeps key/values" has "key/values: 26"
check "--no-tensors drops the table" bash -c "! grep -q '^tensors:' '$tmp/out'"
check "--key string, unquoted" status 0 info --key general.architecture "$SEED"
check "--key prints the value alone" test "$(cat "$tmp/out")" = "nebula-seed"
check "--key array" status 0 info "$SEED" --key a.i32
check "--key array value" test "$(cat "$tmp/out")" = "[-3, 3]"
check "--help exits 0" status 0 --help
check "--help prints usage" has "usage: nebula-gguf info"

check "no arguments: 2" status 2
check "unknown command: 2" status 2 frobnicate "$SEED"
check "unknown option: 2" status 2 info --bogus "$SEED"
check "missing FILE: 2" status 2 info
check "--key without value: 2" status 2 info "$SEED" --key
check "two files: 2" status 2 info "$SEED" "$SEED"
check "usage on stderr" grep -q "usage:" "$tmp/err"

head -c 1200 "$SEED" >"$tmp/cut.gguf"
check "truncated file: 1" status 1 info "$tmp/cut.gguf"
check "reader message names the field and offset" grep -qE "cut.gguf: (header|kv|tensor).* offset 0x" "$tmp/err"
printf 'GGUX\3\0\0\0' >"$tmp/magic.gguf"
check "bad magic: 1" status 1 info "$tmp/magic.gguf"
check "bad magic message" grep -q "bad magic" "$tmp/err"
check "missing file: 1" status 1 info "$tmp/none.gguf"
check "missing key: 1" status 1 info --key no.such.key "$SEED"
check "missing key message" grep -q 'key "no.such.key" not found' "$tmp/err"

# stats: every row decoded; the seed's f16 norm holds one non-finite value, so exit 1.
check "stats on the seed: 1 (a non-finite value)" status 1 stats "$SEED"
check "stats: a header and a line per tensor" test "$(wc -l <"$tmp/out")" -eq 6
check "stats: the q8_0 tensor's values" grep -qE '^blk\.0\.attn_q\.weight	q8_0	64	' "$tmp/out"
check "stats counts the non-finite value" grep -qE '^blk\.0\.attn_norm\.weight	f16	16	.*	1$' "$tmp/out"
check "stats without FILE: 2" status 2 stats
check "stats on a truncated file: 1" status 1 stats "$tmp/cut.gguf"

[ "$fails" -eq 0 ] && echo "nebula-gguf: all checks passed" || echo "nebula-gguf: $fails checks failed"
[ "$fails" -eq 0 ]
