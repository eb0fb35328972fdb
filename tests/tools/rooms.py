#!/usr/bin/env python3
"""rooms.py — every #include of the tree checked against the rooms table.

The table is the one in docs/ARCHITECTURE.md ("Rooms and the arrows between
them"): a row per room (a folder, written with its trailing "/"), and the
rooms or single headers it may include.  A file belongs to the room of the longest prefix that holds
it; an include inside one's own room is always allowed; any other needs an
arrow in the table — to the whole room, or to that one header (how a room's
narrow public face is written down: a process may include engine/backend.h,
not engine/backend_impl.h).  "any" allows everything (tests/).

Quoted includes are resolved as the compilers do with -I.: beside the file
first, then from the tree's root.  Fails (exit 1) on an include no arrow
allows, an include that resolves to no file, or a source file in no room;
arrows no include uses are listed as notes.  Exit 2: no table.

    rooms.py [ROOT]     (default: the current directory; tests/tools/test_rooms.sh runs it)
"""
import os
import re
import sys

SOURCES = (".c", ".h", ".cu", ".cuh")
SKIP_DIRS = {".git", "node_modules", "vendor"}
MARKER = "<!-- rooms table: read by tests/tools/rooms.py -->"
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)


def read_table(doc):
    """{room prefix: set of allowed targets, or None for any} from the table after MARKER."""
    with open(doc, encoding="utf-8") as f:
        text = f.read()
    at = text.find(MARKER)
    if at < 0:
        return None
    rooms = {}
    for line in text[at + len(MARKER):].lstrip("\n").splitlines():
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 2 or set(cells[0]) <= set("-: "):
            continue
        names = re.findall(r"`([^`]+)`", cells[0])
        if len(names) != 1:
            continue  # the header row
        allowed = None if cells[1] == "any" else set(re.findall(r"`([^`]+)`", cells[1]))
        rooms[names[0]] = allowed
    return rooms


def room_of(path, rooms):
    best = None
    for r in rooms:
        if path.startswith(r) and (best is None or len(r) > len(best)):
            best = r
    return best


def sources(root):
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if x not in SKIP_DIRS and not x.startswith(".")
                         and not (d == root and x.startswith("build")))
        for f in sorted(files):
            if f.endswith(SOURCES):
                yield os.path.relpath(os.path.join(d, f), root).replace(os.sep, "/")


def resolve(root, src, inc):
    beside = os.path.normpath(os.path.join(os.path.dirname(src), inc)).replace(os.sep, "/")
    for cand in (beside, os.path.normpath(inc).replace(os.sep, "/")):
        if os.path.isfile(os.path.join(root, cand)):
            return cand
    return None


def main(argv):
    root = argv[1] if len(argv) > 1 else "."
    rooms = read_table(os.path.join(root, "docs", "ARCHITECTURE.md"))
    if not rooms:
        print("no rooms table in docs/ARCHITECTURE.md (the line %s, then the table)" % MARKER)
        return 2
    bad, used, n_inc = [], set(), 0
    for src in sources(root):
        mine = room_of(src, rooms)
        if mine is None:
            bad.append("%s: in no room of the table" % src)
            continue
        with open(os.path.join(root, src), encoding="utf-8", errors="replace") as f:
            text = f.read()
        for m in INCLUDE.finditer(text):
            n_inc += 1
            line = text.count("\n", 0, m.start()) + 1
            target = resolve(root, src, m.group(1))
            if target is None:
                bad.append('%s:%d: "%s" is no file of the tree' % (src, line, m.group(1)))
                continue
            theirs = room_of(target, rooms)
            if theirs == mine:
                continue
            allowed = rooms[mine]
            if allowed is None:
                continue
            if theirs in allowed:
                used.add((mine, theirs))
            elif target in allowed:
                used.add((mine, target))
            else:
                bad.append("%s:%d: %s includes %s (room %s): no such arrow" % (src, line, mine, target, theirs))
    for r in sorted(rooms):
        for t in sorted(rooms[r] or ()):
            if (r, t) not in used:
                print("note: the arrow %s -> %s is used by no include" % (r, t))
            if t.endswith("/") and t not in rooms:
                bad.append("table: %s -> %s: no such room" % (r, t))
            elif not t.endswith("/") and not os.path.isfile(os.path.join(root, t)):
                bad.append("table: %s -> %s: no such file" % (r, t))
    for b in bad:
        print("FORBIDDEN " + b if "no such arrow" in b else "ERROR " + b)
    print("%d includes checked against %d rooms: %d problem%s" % (n_inc, len(rooms), len(bad), "" if len(bad) == 1 else "s"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
