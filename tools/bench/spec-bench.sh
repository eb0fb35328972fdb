#!/usr/bin/env bash
# spec-bench.sh [BUILD] [options] — the verify window bench (issue 16's
# acceptance "Bench", docs/BENCHMARKS.md): `nebula spec-bench` on one model
# and backend, in one run —
#   (a) the cost of a verify window of 1 … 17 rows against one decode step
#       (and its rollback);
#   (b) decode tok/s against acceptance: the speculative loop with the oracle
#       drafter (the target's own greedy continuation, each draft corrupted
#       with probability R: --corrupt, default 0,0.15,0.3,0.5), beside plain
#       greedy decode measured in the same run, and whether the ids stayed
#       the plain ones (level 3 is exact);
#   (c) the window controller's trajectory of each of those runs.
# Writes OUT/spec-bench.json and OUT/spec-bench.md (the table, with the run's
# settings).  The model is --model FILE, or a synthetic one nebula-gen makes
# (--gen-layers N --mix M --ngram-base B, no MTP block: the oracle drafts),
# kept at --model-path.  Without a GPU, --backend cuda prints "SKIP: …" and
# exits 0.
set -u
usage() {
    cat <<'USAGE'
usage: spec-bench.sh [BUILD] [options]
  --model FILE        the model (default: a synthetic one, below)
  --gen-layers N      nebula-gen: layers of the synthetic model (default 48)
  --mix NAME          nebula-gen: quant mix (default iq2_xs)
  --ngram-base B      nebula-gen: n-gram table base (default 200000)
  --model-path FILE   where the synthetic model is written / reused (default BUILD/bench-models/spec-L<N>-<MIX>.gguf)
  --backend B         cpu or cuda (default cuda)
  --kernels K         cuda's matrix kernels, fast (default) or ref
  --prompt-len N      prompt ids (default 512)
  --gen N             tokens each run generates (default 256)
  --reps N            verify windows timed per size (default 8)
  --corrupt LIST      oracle corruption rates (default 0,0.15,0.3,0.5)
  --threads N         CPU threads (default: all)
  --out DIR           where spec-bench.json and spec-bench.md go (default .)
USAGE
}
BUILD=build
case ${1:-} in -*|"") ;; *) BUILD=$1; shift ;; esac
model= layers=48 mix=iq2_xs ngram=200000 model_path= backend=cuda kernels=fast plen=512 gen=256 reps=8 corrupt=0,0.15,0.3,0.5 threads= out=.
while [ $# -gt 0 ]; do
    case $1 in
        -h|--help) usage; exit 0 ;;
        --model) model=${2-} ;; --gen-layers) layers=${2-} ;; --mix) mix=${2-} ;; --ngram-base) ngram=${2-} ;;
        --model-path) model_path=${2-} ;; --backend) backend=${2-} ;; --kernels) kernels=${2-} ;; --prompt-len) plen=${2-} ;;
        --gen) gen=${2-} ;; --reps) reps=${2-} ;; --corrupt) corrupt=${2-} ;; --threads) threads=${2-} ;; --out) out=${2-} ;;
        *) echo "spec-bench: unknown option '$1'" >&2; usage >&2; exit 2 ;;
    esac
    [ $# -ge 2 ] || { echo "spec-bench: $1 needs a value" >&2; exit 2; }
    shift 2
done
for v in "--gen-layers $layers" "--ngram-base $ngram" "--prompt-len $plen" "--gen $gen" "--reps $reps"; do
    set -- $v
    [[ $2 =~ ^[0-9]+$ ]] || { echo "spec-bench: $1 wants a number, got '$2'" >&2; exit 2; }
done
[ -z "$threads" ] || [[ $threads =~ ^[0-9]+$ ]] || { echo "spec-bench: --threads wants a number" >&2; exit 2; }
[[ $corrupt =~ ^[0-9.]+(,[0-9.]+)*$ ]] || { echo "spec-bench: --corrupt wants rates like 0,0.15,0.3,0.5" >&2; exit 2; }
case $backend in cpu|cuda) ;; *) echo "spec-bench: --backend takes cpu or cuda" >&2; exit 2 ;; esac
bin=$BUILD/bin
[ -x "$bin/nebula" ] || { echo "spec-bench: $bin/nebula is not built" >&2; exit 1; }
if [ "$backend" = cuda ] && ! "$bin/nebula-gpu-worker" --probe cuda >/dev/null 2>&1; then
    echo "SKIP: spec-bench: no usable CUDA device ($("$bin/nebula-gpu-worker" --probe cuda 2>&1 | head -1))"
    exit 0
fi
mkdir -p "$out" || exit 1
if [ -z "$model" ]; then
    model=${model_path:-$BUILD/bench-models/spec-L$layers-$mix.gguf}
    if [ ! -s "$model" ]; then
        mkdir -p "$(dirname "$model")"
        t0=$(date +%s)
        "$bin/nebula-gen" "$model" --layers "$layers" --mix "$mix" --ngram-base "$ngram" --no-mtp -q >&2 ||
            { echo "spec-bench: nebula-gen failed" >&2; exit 1; }
        echo "spec-bench: made $model in $(($(date +%s) - t0)) s" >&2
    fi
fi
[ -s "$model" ] || { echo "spec-bench: no model $model" >&2; exit 1; }
args=(-m "$model" --backend "$backend" --prompt-len "$plen" --gen "$gen" --reps "$reps" --corrupt "$corrupt" --json "$out/spec-bench.json"
      --ctx $((plen + gen + 18 * (reps + 1) + 64)))
[ "$backend" = cuda ] && args+=(--kernels "$kernels")
[ -n "$threads" ] && args+=(--threads "$threads")
{
    echo "### spec-bench $(date -u +%Y-%m-%dT%H:%MZ): $(basename "$model"), $backend"
    echo
    echo "command: nebula spec-bench ${args[*]}"
    echo
    "$bin/nebula" spec-bench "${args[@]}"
} >"$out/spec-bench.md" 2>"$out/spec-bench.err"
rc=$?
cat "$out/spec-bench.md"
[ $rc -eq 0 ] || { echo "spec-bench: nebula spec-bench failed (rc $rc): $(tail -3 "$out/spec-bench.err")" >&2; exit 1; }
