# counted.sh — sourced by shell tests that count their checks: BUILD and bin
# (the binaries), tmp (a scratch folder removed at exit), `ok` and
# `bad MESSAGE` (a passed and a failed check), `verdict NAME` (prints the
# count; the test's exit status); for the model tools' tests gen (nebula-gen),
# `info F` (nebula-gguf info), `type_of F TENSOR` and `key_of F KEY`.
BUILD=${BUILD:-build}
bin=$BUILD/bin
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0 n=0
ok() { n=$((n + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); n=$((n + 1)); }
verdict() {
    echo "$1: $((n - fail))/$n passed"
    [ "$fail" -eq 0 ]
}
gen=$bin/nebula-gen
info() { "$bin/nebula-gguf" info "$1"; }
type_of() { info "$1" | awk -v t="$2" '$2 == t {print $3}'; }
key_of() { info "$1" | awk -v k="$2" '$3 == k {print $5}'; }
