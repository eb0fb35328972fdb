#!/usr/bin/env bash
# peer-llamacpp.sh — llama.cpp side by side with Nebula (issue 13 item 5; docs/PARITY.md "llama.cpp").
#
# llama.cpp's own source comes from npm: node-llama-cpp@3.21.1 carries it as a git bundle
# (llama/gitRelease.bundle, 2026-09-12, with qwen4exp, --n-cpu-moe, -ot and --spec-type draft-mtp).
# `build` clones it into a directory outside the repository (or an ignored one), applies the
# package's own patches, and builds llama-bench, llama-cli, llama-server and llama-eval-callback for
# the CPU (GGML_NATIVE) or CUDA (sm_90). `bench` runs llama-bench on a GGUF with bench-cuda.sh's
# prompt lengths and generation count, under the expert placements that match Nebula's
# configurations, and prints rows of bench-cuda.sh's table (docs/BENCHMARKS.md); columns
# llama-bench cannot measure are "—". Nothing of llama.cpp enters the repository.
set -u
usage() {
    cat <<'EOF2'
usage: peer-llamacpp.sh build [cpu|cuda] --dir DIR [--jobs N] [--bundle FILE] [--portable]
       peer-llamacpp.sh bench --dir DIR -m MODEL.gguf [options]
       peer-llamacpp.sh cli   --dir DIR -m MODEL.gguf [-- llama-cli arguments]

build: DIR/src (the checkout), DIR/build-cpu or DIR/build-cuda; without --bundle, npm installs
       node-llama-cpp@3.21.1 into DIR/npm (scripts and optional GPU packages left out) for its
       bundle. DIR must be outside the repository or git-ignored. --jobs defaults to nproc.
       CUDA builds for sm_90 (the H200); about ten minutes with ninja and 14 jobs.
       --portable: instead of GGML_NATIVE, every CPU variant as a loadable backend
       (GGML_BACKEND_DL + GGML_CPU_ALL_VARIANTS; llama.cpp picks the best at run time), for a
       build made on one machine and run on another (built here, carried to the GPU machine);
       only llama-bench and llama-cli. The CUDA libraries (cudart, cuBLAS) are linked as shared
       objects: the machine that runs it needs the same CUDA major version.
bench: options
  --backend B       cpu or cuda: which build of DIR to run (default cuda if built, else cpu)
  --placements LIST comma-separated, each one of (default: cpu-experts,vram)
                      all-gpu      -ngl 99 (every weight on the GPU)
                      cpu-experts  -ngl 99 -ot exps=CPU (every routed expert on the CPU:
                                   Nebula's zero-slot configuration, --vram-slots 0)
                      vram         -ngl 99 --n-cpu-moe N, N the fewest layers whose experts
                                   stay on the CPU so that the rest fits --vram-gib less
                                   --reserve-gib (Nebula's slot configuration, same card)
                      ncmoe=N      -ngl 99 --n-cpu-moe N
                    on the cpu backend every placement is the same (-ngl 0): one row, "cpu"
  --vram-gib G      card to emulate (default 12); --reserve-gib R of it is not for weights (default 1)
  --prompts LIST    prompt lengths (default 512,2048, as bench-cuda.sh)
  --gen N           generated tokens (default 128, as bench-cuda.sh), decoded after the prompt
                    (llama-bench -d PROMPT)
  --reps N          repetitions (default 3); --threads N (default: all cores)
  --append FILE     append the dated block to FILE (default: print only)
  --ubatch LIST     prefill micro-batch sizes, comma-separated: "default" (llama-bench's own, no -ub)
                    or a number (-ub N, and -b N when N is over llama-bench's default batch of 2048);
                    one prefill row per size (default: default). Decode runs once, at the default.
  --llama-args "A"  extra llama-bench arguments for every run (e.g. "-fa 1")
  --nebula-bin DIR  where nebula-gguf is (the vram placement reads the tensor table; default
                    build/bin of the repository)
  --dry-run         print the llama-bench commands, run nothing
cli:   llama-cli of the newest build in DIR on MODEL, the rest passed through
       (e.g. -- -p "Hello" -n 64 --temp 0; a file with an MTP block needs --spec-type draft-mtp)
EOF2
}
die() { echo "peer-llamacpp: $*" >&2; exit 1; }
here=$(cd "$(dirname "$0")/../.." && pwd)
cmd=${1:-}; [ $# -gt 0 ] && shift
case $cmd in -h|--help|"") usage; [ -n "$cmd" ]; exit $? ;; build|bench|cli) ;; *) usage >&2; exit 2 ;; esac

kind=cpu dir= jobs=$(nproc) bundle= model= backend= placements=cpu-experts,vram vram_gib=12 reserve_gib=1
prompts=512,2048 gen=128 reps=3 threads=$(nproc) append= dry=0 portable=0 nbin=$here/build/bin ubatch=default largs= passthru=()
if [ "$cmd" = build ]; then case ${1:-} in cpu|cuda) kind=$1; shift ;; esac; fi
while [ $# -gt 0 ]; do
    case $1 in
        --dir) dir=$2 ;; --jobs) jobs=$2 ;; --bundle) bundle=$2 ;; -m) model=$2 ;; --backend) backend=$2 ;;
        --nebula-bin) nbin=$2 ;; --ubatch) ubatch=$2 ;; --llama-args) largs=$2 ;; --placements) placements=$2 ;; --vram-gib) vram_gib=$2 ;; --reserve-gib) reserve_gib=$2 ;;
        --prompts) prompts=$2 ;; --gen) gen=$2 ;; --reps) reps=$2 ;; --threads) threads=$2 ;; --append) append=$2 ;;
        --dry-run) dry=1; shift; continue ;;
        --portable) portable=1; shift; continue ;;
        --) shift; passthru=("$@"); break ;;
        -h|--help) usage; exit 0 ;;
        *) echo "peer-llamacpp: unknown option '$1'" >&2; usage >&2; exit 2 ;;
    esac
    [ $# -ge 2 ] || { echo "peer-llamacpp: $1 needs a value" >&2; exit 2; }
    shift 2
done
[ -n "$dir" ] || { echo "peer-llamacpp: --dir DIR is required" >&2; exit 2; }
[[ $prompts =~ ^[0-9]+(,[0-9]+)*$ ]] || { echo "peer-llamacpp: --prompts wants lengths like 512,2048" >&2; exit 2; }
[[ $ubatch =~ ^(default|[0-9]+)(,(default|[0-9]+))*$ ]] || { echo "peer-llamacpp: --ubatch wants sizes like default,512,4096" >&2; exit 2; }
for v in "$gen" "$reps" "$threads" "$jobs"; do [[ $v =~ ^[0-9]+$ ]] || { echo "peer-llamacpp: '$v' is not a count" >&2; exit 2; }; done

# The build never lands in the tree: outside it, or in a path git ignores.
mkdir -p "$dir" || die "cannot create $dir"
dir=$(cd "$dir" && pwd)
case $dir/ in "$here"/*)
    git -C "$here" check-ignore -q "$dir" || die "$dir is inside the repository and not ignored: give a directory outside it" ;;
esac

if [ "$cmd" = build ]; then
    for t in git cmake ninja; do command -v $t >/dev/null || die "$t is needed to build llama.cpp"; done
    if [ -z "$bundle" ]; then
        bundle=$dir/npm/node_modules/node-llama-cpp/llama/gitRelease.bundle
        if [ ! -f "$bundle" ]; then
            command -v npm >/dev/null || die "npm is needed for node-llama-cpp's bundle (or give --bundle FILE)"
            mkdir -p "$dir/npm" && (cd "$dir/npm" && [ -f package.json ] || echo '{"private": true}' >package.json)
            npm install --prefix "$dir/npm" --no-audit --no-fund --ignore-scripts --omit=optional node-llama-cpp@3.21.1 >/dev/null ||
                die "npm install node-llama-cpp@3.21.1 failed (registry unreachable? copy the bundle and give --bundle)"
        fi
    fi
    [ -f "$bundle" ] || die "$bundle: no such bundle"
    bundle=$(cd "$(dirname "$bundle")" && pwd)/$(basename "$bundle") # the patches are applied from inside the checkout
    patches=$(dirname "$bundle")/patches
    if [ ! -d "$dir/src/.git" ]; then
        git clone -q "$bundle" "$dir/src" || die "git clone $bundle failed"
        for p in "$patches"/*.diff; do [ -f "$p" ] && { git -C "$dir/src" apply "$p" || die "patch $p does not apply"; }; done
    fi
    b=$dir/build-$kind
    flags=(-DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=ON)
    targets=(llama-bench llama-cli llama-server llama-eval-callback)
    if [ "$portable" = 1 ]; then flags+=(-DGGML_NATIVE=OFF -DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=ON); targets=(llama-bench llama-cli)
    else flags+=(-DGGML_NATIVE=ON); fi
    [ "$kind" = cuda ] && flags+=(-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90)
    t0=$(date +%s)
    cmake -S "$dir/src" -B "$b" -G Ninja "${flags[@]}" >"$dir/cmake-$kind.log" 2>&1 || die "cmake failed: $dir/cmake-$kind.log"
    # the loadable backends (--portable) are not dependencies of the programs: built as their own targets
    [ "$portable" = 1 ] && targets+=($(ninja -C "$b" -t targets all 2>/dev/null | sed -n 's/^\(ggml-cpu-[a-z0-9_]*\|ggml-cuda\):.*/\1/p' | sort -u))
    ninja -C "$b" -j "$jobs" "${targets[@]}" >"$dir/build-$kind.log" 2>&1 ||
        die "build failed: tail $dir/build-$kind.log"
    echo "peer-llamacpp: $kind build of llama.cpp $(git -C "$dir/src" log -1 --format=%h) in $(( $(date +%s) - t0 )) s: $b/bin"
    exit 0
fi

[ -n "$model" ] && [ -f "$model" ] || die "-m MODEL.gguf: no such file '${model}'"
if [ -z "$backend" ]; then [ -x "$dir/build-cuda/bin/llama-bench" ] && backend=cuda || backend=cpu; fi
bin=$dir/build-$backend/bin
[ -x "$bin/llama-bench" ] || die "$bin/llama-bench is missing: run peer-llamacpp.sh build $backend --dir $dir"

if [ "$cmd" = cli ]; then exec "$bin/llama-cli" -m "$model" -t "$threads" "${passthru[@]}"; fi

# --n-cpu-moe for a VRAM budget: per layer the routed experts' bytes (the *_exps tensors), the
# rest dense; the first N layers keep their experts on the CPU (llama.cpp's --n-cpu-moe).
ncmoe_for_budget() {
    python3 - "$model" "$vram_gib" "$reserve_gib" "$nbin/nebula-gguf" <<'PY'
import re, subprocess, sys
model, vram, reserve, tool = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
out = subprocess.run([tool, "info", model], capture_output=True, text=True, check=True).stdout
exp, dense = {}, 0
for line in out.splitlines():
    f = line.split()
    if len(f) >= 6 and re.match(r"^\d+$", f[0]) and "." in f[1] and f[5].isdigit():
        m = re.match(r"blk\.(\d+)\..*_exps", f[1])
        if m: exp[int(m.group(1))] = exp.get(int(m.group(1)), 0) + int(f[5])
        else: dense += int(f[5])
room = (vram - reserve) * 2**30 - dense
n, layers = 0, sorted(exp)
while n < len(layers) and sum(exp[l] for l in layers[n:]) > room: n += 1
print(n)
PY
}

args_for() {
    [ "$backend" = cpu ] && { echo "-ngl 0"; return; }
    case $1 in
        all-gpu) echo "-ngl 99" ;;
        cpu-experts) echo "-ngl 99 -ot exps=CPU" ;;
        vram) n=$(ncmoe_for_budget) || die "cannot read $model's tensor table (make the nebula-gguf tool first)"; echo "-ngl 99 -ncmoe $n" ;;
        ncmoe=*) echo "-ngl 99 -ncmoe ${1#ncmoe=}" ;;
        *) die "unknown placement '$1'" ;;
    esac
}

[ "$backend" = cpu ] && placements=cpu
rows=$(mktemp); trap 'rm -f "$rows"' EXIT
for pl in ${placements//,/ }; do
    a=$(args_for "$pl") || exit 1
    for p in ${prompts//,/ }; do
        # GEN tokens decoded after a P-token context (at the default micro-batch); then the prefill of P tokens
        # from empty at each --ubatch size
        tg=("$bin/llama-bench" -m "$model" -t "$threads" -r "$reps" -o json $a $largs -p 0 -n "$gen" -d "$p")
        if [ $dry = 1 ]; then echo "${tg[*]}"; else
            jt=$("${tg[@]}" 2>"$rows.err") || die "llama-bench failed: $(tail -3 "$rows.err")"
        fi
        for ub in ${ubatch//,/ }; do
            ubf=() label="$pl ($a${largs:+ $largs})"
            if [ "$ub" != default ]; then
                ubf=(-ub "$ub")
                [ "$ub" -gt 2048 ] && ubf+=(-b "$ub")
                label="$pl ($a${largs:+ $largs} ${ubf[*]})"
            fi
            pp=("$bin/llama-bench" -m "$model" -t "$threads" -r "$reps" -o json $a $largs "${ubf[@]}" -p "$p" -n 0)
            if [ $dry = 1 ]; then echo "${pp[*]}"; continue; fi
            jp=$("${pp[@]}" 2>"$rows.err") || die "llama-bench failed: $(tail -3 "$rows.err")"
            python3 - "$label" "$p" "$jp" "$jt" >>"$rows" <<'PY'
import json, statistics, sys
cfg, p, pp, tg = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])[0], json.loads(sys.argv[4])[0]
pt, dt = pp["samples_ts"], tg["samples_ts"]
d = statistics.median(dt)
print(f"| llama.cpp {cfg} | {p} | {statistics.median(pt):.1f} | {p / statistics.median(pt):.3f} "
      f"| {d:.2f} ({min(dt):.2f}–{max(dt):.2f}) | {1e3 / d:.2f} | — | — | — | — | — | — | — | — |")
print(f"#info {pp.get('build_commit', '?')} {pp.get('cpu_info', '?')} | {pp.get('gpu_info', '')}", file=sys.stderr)
PY
            # each row on stderr as it is measured: a run cut by a time limit keeps what it measured
            echo "peer-llamacpp: row: $(tail -n 1 "$rows")" >&2
        done
    done
done
[ $dry = 1 ] && exit 0
{
    echo "## peer-llamacpp.sh — llama.cpp on $(basename "$model") ($backend) — $(date -u +%Y-%m-%dT%H:%MZ)"
    echo
    echo "- llama.cpp $(git -C "$dir/src" log -1 --format=%h 2>/dev/null) from node-llama-cpp@3.21.1's bundle, $backend build; llama-bench, $reps repetitions, $threads threads; decode measured after a context of the prompt's length (-d); TTFT = prompt / prefill tok/s"
    echo "- placements: cpu-experts = -ot exps=CPU (Nebula's zero-slot), vram = --n-cpu-moe for a $vram_gib GiB card less $reserve_gib GiB (Nebula's slots); columns llama-bench does not measure are —"
    echo
    echo "| configuration | prompt | prefill tok/s | TTFT s | decode tok/s | ms/token | VRAM hit | PCIe B/token | CPU-expert ms/token | gpu-worker waits ms/token | experts/token | floor ms | measured/floor | bound |"
    echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"
    cat "$rows"
    echo
} | if [ -n "$append" ]; then tee -a "$append"; else cat; fi
