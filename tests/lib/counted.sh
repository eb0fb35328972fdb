# counted.sh — sourced by shell tests that count their checks: BUILD and bin
# (the binaries), tmp (a scratch folder removed at exit), `ok` and
# `bad MESSAGE` (a passed and a failed check), `verdict NAME` (prints the
# count; the test's exit status).
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
