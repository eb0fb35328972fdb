#!/usr/bin/env bash
# Every getopt_long table of the tree (`static const struct option … = { … }`, written with core/util/opts.h's
# NB_OPT_* and the shared CLI_COMMON_OPTS / CONV_COMMON_OPTS lists) gives each long option its own code and its
# own name: two options with one code would both reach the same `case` — the second silently doing the first's
# work (branches merged on one night handed out G and O twice).  A planted duplicate must be found.
set -u
. tests/lib/counted.sh
check_tables() { # $@: C files; prints "file: table: duplicate …" lines
    python3 - "$@" <<'PY'
import re, sys
macros = {}
for h in ("tools/nebula/cli.h", "tools/nebula-convert/convert.h"):
    t = open(h).read()
    for m in re.finditer(r"#define (\w+_COMMON_OPTS)\s*\\\n((?:.*\\\n)*.*)", t):
        macros[m.group(1)] = m.group(2).replace("\\\n", " ")
opt = re.compile(r'(?:NB_OPT_(?:ARG|FLAG)\(\s*"([^"]+)"\s*,\s*([^)\s]+)\s*\)|\{\s*"([^"]+)"\s*,\s*\w+\s*,\s*0\s*,\s*([^}\s]+)\s*\})')
tables = 0
for path in sys.argv[1:]:
    src = open(path).read()
    for m in re.finditer(r"struct option\s+(\w+)\s*\[\]\s*=\s*\{(.*?)(?:NB_OPT_END|\{\s*0\s*,\s*0\s*,\s*0\s*,\s*0\s*\})\s*\}", src, re.S):
        body = m.group(2)
        for k, v in macros.items():
            body = body.replace(k, v)
        names, codes = {}, {}
        for o in opt.finditer(body):
            name, code = (o.group(1), o.group(2)) if o.group(1) else (o.group(3), o.group(4))
            if code in codes:
                print(f"{path}: {m.group(1)}: --{name} and --{codes[code]} share the code {code}")
            if name in names:
                print(f"{path}: {m.group(1)}: --{name} listed twice")
            codes.setdefault(code, name)
            names.setdefault(name, code)
        tables += 1
print(f"tables {tables}", file=sys.stderr)
PY
}
files=$(grep -rl --include='*.c' 'struct option' coordinator engine gpu-worker cpu-moe-worker ssd-pager shm core tools 2>/dev/null | sort)
out=$(check_tables $files 2>"$tmp/err")
[ -z "$out" ] && ok || bad "option tables: $out"
ntab=$(sed -n "s/^tables //p" "$tmp/err")
want=$(cat $files | grep -c 'struct option [A-Za-z_]* *\[\]')
[ "${ntab:-0}" = "$want" ] && [ "$want" -ge 10 ] && ok || bad "${ntab:-0} option tables parsed of the $want declared: $(cat "$tmp/err")"
# the check can fail: a copy of the coordinator's table with --spec-coverage on --slots' code
sed "s/NB_OPT_ARG(\"spec-coverage\", '[A-Za-z]')/NB_OPT_ARG(\"spec-coverage\", 'O')/" coordinator/main.c >"$tmp/planted.c"
grep -q "NB_OPT_ARG(\"spec-coverage\", 'O')" "$tmp/planted.c" && ok || bad "could not plant the duplicate"
check_tables "$tmp/planted.c" 2>/dev/null | grep -q "spec-coverage and --slots share the code 'O'" && ok ||
    bad "a planted duplicate code is not found: $(check_tables "$tmp/planted.c" 2>&1)"
verdict test_option_codes
