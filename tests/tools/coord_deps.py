#!/usr/bin/env python3
"""coord_deps.py — the file-level dependency graph of a folder's objects, from nm.

A symbol that A.o uses (U) and B.o defines (T, D, B, R...) is an arrow A → B.
Prints the arrows, then every cycle found (strongly connected components of
more than one file, or a file that is its own neighbour cannot happen: nm
lists a symbol defined in the same object as defined).  Exit status 1 when
there is a cycle, 2 on bad usage or no objects.

    coord_deps.py OBJ...        (tests/tools/test_coord_deps.sh runs it on build/obj/coordinator/*.o)
"""
import os
import subprocess
import sys


def symbols(obj):
    out = subprocess.run(["nm", obj], check=True, capture_output=True, text=True).stdout
    defined, used = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == "U":
            used.add(parts[1])
        elif len(parts) == 3 and parts[1] in "TDBRCGSV" and parts[1].isupper():
            defined.add(parts[2])
    return defined, used


def sccs(nodes, edges):
    """Tarjan's algorithm, iterative-free (the graphs are a dozen files)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(sorted(comp))

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def main(argv):
    objs = [a for a in argv[1:] if a.endswith(".o")]
    if not objs:
        print("usage: coord_deps.py OBJ.o...", file=sys.stderr)
        return 2
    name = {o: os.path.basename(o)[:-2] for o in objs}
    info = {name[o]: symbols(o) for o in objs}
    owner = {}
    for f, (defined, _) in info.items():
        for s in defined:
            owner[s] = f
    edges = {f: set() for f in info}
    for f, (_, used) in info.items():
        for s in used:
            g = owner.get(s)
            if g and g != f:
                edges[f].add(g)
    for f in sorted(edges):
        print(f"{f} -> {' '.join(sorted(edges[f])) or '(nothing)'}")
    cycles = [c for c in sccs(edges.keys(), edges) if len(c) > 1]
    for c in cycles:
        print("CYCLE: " + " <-> ".join(c))
    return 1 if cycles else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
