#!/usr/bin/env bash
# run-bench.sh BUILD_DIR — runs every CPU benchmark binary (BUILD_DIR/bin/nebula-bench-*)
# and appends one dated block per benchmark to docs/BENCHMARKS.md: date, git commit,
# machine (uname -m, CPU model, cores), the command, and the Markdown table it printed.
# Called by `make bench` from the repository root.  Each benchmark prints its own
# table on stdout and exits non-zero on failure; a failed one is reported and its
# output is not recorded.  One whose output starts with "SKIP:" (bench-cuda.sh
# without a GPU) is reported and not recorded either.  nebula-bench-bw is not
# run on its own: bench-cuda.sh measures the bandwidths for its roofline.
set -u
BUILD=${1:-build}
OUT=docs/BENCHMARKS.md

shopt -s nullglob
benches=("$BUILD"/bin/nebula-bench-* tools/bench/bench-*.sh)
if [ ${#benches[@]} -eq 0 ]; then
    echo "run-bench: no $BUILD/bin/nebula-bench-* binaries (run make first)" >&2
    exit 1
fi

# Models for the engine benchmarks (made once, kept in BUILD/bench-models).
bash tools/bench/prepare-models.sh "$BUILD" || { echo "run-bench: preparing models failed" >&2; exit 1; }

if [ ! -f "$OUT" ]; then
    mkdir -p "$(dirname "$OUT")"
    cat >"$OUT" <<'HEADER'
# Benchmarks

Dated results, newest last.  Each block says when, on which commit and machine,
and with which command it was measured.  CPU-kernel figures from the 2-core
development machine are for ratios between kernels, not absolute engine speed
(the shared BENCHMARKS.md gives the protocol for engine runs).
HEADER
fi

date=$(date -u +%Y-%m-%dT%H:%MZ)
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD -- core tools 2>/dev/null || commit="$commit (with uncommitted changes)"
cpuinfo() { sed -n "s/^$1[[:space:]]*: //p" /proc/cpuinfo 2>/dev/null | head -n 1; }
cpu="$(cpuinfo 'model name') (family $(cpuinfo 'cpu family'), model $(cpuinfo model))"
machine="$(uname -m), $cpu, $(nproc) cores"

status=0
for bench in "${benches[@]}"; do
    name=$(basename "$bench")
    [ "$name" = nebula-bench-bw ] && continue
    echo "== $name"
    args=()
    [ "$name" = nebula-bench-reference ] && args=(--models-dir "$BUILD/bench-models")
    case $bench in *.sh) args=("$BUILD") ;; esac
    if ! table=$("$bench" "${args[@]}"); then
        echo "run-bench: $name failed; nothing recorded" >&2
        status=1
        continue
    fi
    printf '%s\n' "$table"
    case $table in SKIP:*) continue ;; esac
    {
        printf '\n## %s — %s\n\n' "$name" "$date"
        printf -- '- commit: %s\n- machine: %s\n- command: `%s`\n\n' "$commit" "$machine" "$bench${args[*]:+ ${args[*]}}"
        printf '%s\n' "$table"
    } >>"$OUT"
done
[ $status -eq 0 ] && echo "appended to $OUT"
exit $status
