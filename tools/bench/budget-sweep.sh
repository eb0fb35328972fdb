#!/usr/bin/env bash
# budget-sweep.sh [BUILD] [options] — decode against the VRAM budget (issue 15 item 6): for each
# budget, bench-cuda.sh (Nebula slots and zero-slot) and, with --peer-dir, peer-llamacpp.sh on
# the same file (llama.cpp with --n-cpu-moe chosen for the same budget; -ot exps=CPU once, at the
# first budget: it does not depend on one), then tools/bench/budget_plot.py: OUT/budget.svg
# (tok/s against budget, the three engines) and OUT/budget.md (the table and the ratios).
# Each report is kept in OUT (nebula-G.md, peer-G.md, their .err) as it is measured, so a run
# cut by a time limit keeps the budgets it finished; --plot-only redraws from them.
set -u
usage() {
    cat <<'EOF'
usage: budget-sweep.sh [BUILD] [options]
  --budgets LIST    VRAM budgets in GiB, comma-separated (default 8,12,24)
  --backend B       cuda (default) or cpu (how the script is tested without a GPU)
  --layers N        layers of the synthetic model (default 48: the full model)
  --mix NAME        quant mix (default iq2_xs)
  --prompt P        the prompt length decode is measured after (default 512)
  --gen N           generated tokens per request (default 32)
  --reps N          repetitions (default 1)
  --peer-dir DIR    llama.cpp's build (peer-llamacpp.sh setup --dir DIR); without it, Nebula only
  --models-dir DIR  where the model and its hotlists are kept (default BUILD/bench-models)
  --bench-args "A"  more bench-cuda.sh options (e.g. "--ngram-base 200000 --campaign 4")
  --out DIR         results (default BUILD/budget-sweep)
  --plot-only       only redraw OUT/budget.svg and budget.md from the reports already in OUT
EOF
}
BUILD=build
case ${1:-} in -*|"") ;; *) BUILD=$1; shift ;; esac
budgets=8,12,24 backend=cuda layers=48 mix=iq2_xs prompt=512 gen=32 reps=1 peer= models= bargs= out= plot_only=0
while [ $# -gt 0 ]; do
    case $1 in
        -h|--help) usage; exit 0 ;;
        --plot-only) plot_only=1; shift; continue ;;
    esac
    [ $# -ge 2 ] || { echo "budget-sweep: $1 needs a value (try --help)" >&2; exit 2; }
    case $1 in
        --budgets) budgets=$2 ;; --backend) backend=$2 ;; --layers) layers=$2 ;; --mix) mix=$2 ;; --prompt) prompt=$2 ;;
        --gen) gen=$2 ;; --reps) reps=$2 ;; --peer-dir) peer=$2 ;; --models-dir) models=$2 ;; --bench-args) bargs=$2 ;;
        --out) out=$2 ;;
        *) echo "budget-sweep: unknown option '$1' (try --help)" >&2; exit 2 ;;
    esac
    shift 2
done
[[ $budgets =~ ^[0-9]+(\.[0-9]+)?(,[0-9]+(\.[0-9]+)?)*$ ]] || { echo "budget-sweep: --budgets wants GiB like 8,12,24" >&2; exit 2; }
for v in "$layers" "$prompt" "$gen" "$reps"; do [[ $v =~ ^[0-9]+$ ]] || { echo "budget-sweep: '$v' is not a number" >&2; exit 2; }; done
here=$(cd "$(dirname "$0")" && pwd)
models=${models:-$BUILD/bench-models} out=${out:-$BUILD/budget-sweep}
mkdir -p "$out" || exit 1
plot() {
    local specs=() g
    for g in ${budgets//,/ }; do
        [ -s "$out/nebula-$g.md" ] || continue
        if [ -s "$out/peer-$g.md" ]; then specs+=("$g=$out/nebula-$g.md,$out/peer-$g.md"); else specs+=("$g=$out/nebula-$g.md"); fi
    done
    [ ${#specs[@]} -gt 0 ] || { echo "budget-sweep: no report in $out to plot" >&2; return 1; }
    python3 "$here/budget_plot.py" --out "$out" "${specs[@]}"
}
[ "$plot_only" = 1 ] && { plot; exit; }
[ -z "$peer" ] || [ -d "$peer" ] || { echo "budget-sweep: --peer-dir $peer is not a directory (peer-llamacpp.sh setup --dir DIR)" >&2; exit 2; }
first=1 status=0
for g in ${budgets//,/ }; do
    echo "budget-sweep: $g GiB: bench-cuda.sh" >&2
    # shellcheck disable=SC2086 # bargs is a list of words
    bash "$here/bench-cuda.sh" "$BUILD" --backend "$backend" --layers "$layers" --mix "$mix" --vram-gib "$g" --prompts "$prompt" \
        --gen "$gen" --reps "$reps" --models-dir "$models" $bargs >"$out/nebula-$g.md" 2>"$out/nebula-$g.err" ||
        { echo "budget-sweep: bench-cuda.sh at $g GiB failed: $(tail -2 "$out/nebula-$g.err")" >&2; status=1; }
    [ -n "$peer" ] || continue
    model=$(ls "$models"/synthetic-*-"${layers}"l-"$mix"-skew*.gguf 2>/dev/null | head -n 1)
    [ -n "$model" ] || { echo "budget-sweep: no ${layers}-layer $mix model in $models for llama.cpp" >&2; status=1; continue; }
    pl=vram
    [ "$first" = 1 ] && pl=vram,cpu-experts
    first=0
    echo "budget-sweep: $g GiB: peer-llamacpp.sh ($pl)" >&2
    bash "$here/peer-llamacpp.sh" bench --dir "$peer" -m "$model" --backend "$backend" --nebula-bin "$BUILD/bin" --vram-gib "$g" \
        --placements "$pl" --prompts "$prompt" --gen "$gen" --reps "$reps" --ubatch default --llama-args "-fa 1" \
        >"$out/peer-$g.md" 2>"$out/peer-$g.err" ||
        { echo "budget-sweep: peer-llamacpp.sh at $g GiB failed: $(tail -2 "$out/peer-$g.err")" >&2; status=1; }
done
plot || status=1
exit $status
