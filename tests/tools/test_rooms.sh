#!/usr/bin/env bash
# test_rooms.sh — every #include of the tree follows the rooms table of
# docs/ARCHITECTURE.md (tests/tools/rooms.py).  The checker itself is checked
# on a made-up tree first: a forbidden include, a private header included
# through a room's narrow face, an include of no file, a file in no room and
# a stale arrow must each fail it, so a checker that finds nothing cannot
# pass.  Run by tests/run-tests.sh (no build needed).
set -u
here=$(dirname "$0")
. "$here/../lib/check.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# A tree of three rooms: lib/ at the bottom, eng/ on it (public eng/api.h,
# private eng/impl.h), app/ through eng/api.h only.
fake="$tmp/tree"
mkdir -p "$fake/docs" "$fake/lib" "$fake/eng" "$fake/app"
cat >"$fake/docs/ARCHITECTURE.md" <<'EOF'
# a made-up tree

<!-- rooms table: read by tests/tools/rooms.py -->
| room | may include | why |
|---|---|---|
| `lib/` | — | the bottom |
| `eng/` | `lib/` | the engine |
| `app/` | `lib/`, `eng/api.h` | the face only |

after the table
EOF
printf '#include "lib/util.h"\n' >"$fake/lib/util.h"
printf '#include "lib/util.h"\n#include "eng/impl.h"\n' >"$fake/eng/api.h"
printf '#include "api.h"\n' >"$fake/eng/impl.h"
printf '#include "eng/api.h"\n#include "lib/util.h"\n#include <stdio.h>\n' >"$fake/app/main.c"

python3 "$here/rooms.py" "$fake" >"$tmp/out"
check "a clean made-up tree passes (exit 0)" [ $? -eq 0 ]

printf '#include "eng/impl.h"\n' >"$fake/app/bad.c"
python3 "$here/rooms.py" "$fake" >"$tmp/out"
check "a private header past the face fails (exit 1)" [ $? -eq 1 ]
check "and is named with its line" grep -q '^FORBIDDEN app/bad.c:1: app/ includes eng/impl.h (room eng/)' "$tmp/out"
rm "$fake/app/bad.c"

printf '#include "app/main.c"\n' >"$fake/lib/up.c"
python3 "$here/rooms.py" "$fake" >"$tmp/out"
check "an include against the arrows fails" grep -q '^FORBIDDEN lib/up.c:1: lib/ includes app/main.c' "$tmp/out"
rm "$fake/lib/up.c"

printf '#include "eng/gone.h"\n' >"$fake/app/typo.c"
python3 "$here/rooms.py" "$fake" >"$tmp/out"
check "an include of no file fails" grep -q '^ERROR app/typo.c:1: "eng/gone.h" is no file' "$tmp/out"
rm "$fake/app/typo.c"

mkdir -p "$fake/extra"
printf 'int x;\n' >"$fake/extra/x.c"
python3 "$here/rooms.py" "$fake" >"$tmp/out"
check "a source file in no room fails" grep -q '^ERROR extra/x.c: in no room' "$tmp/out"
rm -r "$fake/extra"

sed -i 's|`lib/`, `eng/api.h`|`lib/`, `eng/api.h`, `eng/old.h`|' "$fake/docs/ARCHITECTURE.md"
python3 "$here/rooms.py" "$fake" >"$tmp/out"
check "an arrow to a header that is gone fails" grep -q '^ERROR table: app/ -> eng/old.h: no such file' "$tmp/out"

# The tree itself.
python3 "$here/rooms.py" . >"$tmp/out"
rc=$?
cat "$tmp/out"
check "the tree's includes follow docs/ARCHITECTURE.md's rooms table" [ $rc -eq 0 ]
check_done
