#!/usr/bin/env bash
# test_coord_deps.sh — coordinator/ has no import circle: the file-level graph
# built from nm of its objects (a symbol used by A.o and defined by B.o is
# A → B; tests/tools/coord_deps.py) is a DAG.  The checker itself is checked
# on a made-up pair of objects that do call each other, so a checker that
# finds nothing cannot pass.  Run by tests/run-tests.sh with BUILD set.
set -u
BUILD=${BUILD:-build}
here=$(dirname "$0")
. "$here/../lib/check.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

objs=("$BUILD"/obj/coordinator/*.o)
check "coordinator objects built (${#objs[@]})" [ -e "${objs[0]}" ]
python3 "$here/coord_deps.py" "${objs[@]}" >"$tmp/graph"
rc=$?
cat "$tmp/graph"
check "coordinator/: no cycle in the file graph" [ $rc -eq 0 ]

printf 'int b(void);\nint a(void) { return b(); }\n' >"$tmp/a.c"
printf 'int a(void);\nint b(void) { return a(); }\n' >"$tmp/b.c"
printf 'int a(void);\nint c(void) { return a(); }\n' >"$tmp/c.c"
for f in a b c; do ${CC:-cc} -c "$tmp/$f.c" -o "$tmp/$f.o"; done
python3 "$here/coord_deps.py" "$tmp/a.o" "$tmp/b.o" "$tmp/c.o" >"$tmp/out"
check "the checker finds a made-up cycle (exit 1)" [ $? -eq 1 ]
check "the checker names it" grep -q '^CYCLE: a <-> b$' "$tmp/out"
python3 "$here/coord_deps.py" "$tmp/a.o" "$tmp/c.o" >/dev/null
check "and passes a DAG (exit 0)" [ $? -eq 0 ]

check_done
