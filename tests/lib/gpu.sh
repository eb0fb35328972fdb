# gpu.sh — sourced by the GPU checks (tests/cuda/run-on-gpu.sh,
# run-backend-on-gpu.sh; make test-gpu runs both).
#
# require_gpu NAME: returns only where nvidia-smi lists a GPU; otherwise
# prints why on stderr and exits 1.  A GPU check with no GPU to run on has
# checked nothing, so it fails rather than printing SKIP and exiting 0: a
# green make test-gpu means the kernels ran.
require_gpu() {
    local why=
    if ! command -v nvidia-smi >/dev/null 2>&1; then
        why="nvidia-smi absent"
    elif ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
        why="nvidia-smi lists no GPU: $(nvidia-smi -L 2>&1 | head -n 1)"
    fi
    [ -z "$why" ] && return 0
    echo "FAIL: $1: no GPU ($why); the GPU checks run only on a machine with an NVIDIA GPU and its driver" >&2
    exit 1
}

# gpu_exclusive NAME: holds an exclusive lock on the GPU for the rest of the
# calling script.  The backend measures its VRAM peak from the device's free
# memory (cudaMemGetInfo), which counts every process on the card: two checks
# run at once see each other's allocations (a 0.1 GiB model "peaking" at
# 3.2 GiB), so the vram-plan checks would fail for the wrong reason.  A second
# run waits for the first and says so.
gpu_exclusive() {
    exec 9>"${TMPDIR:-/tmp}/nebula-gpu.lock"
    if ! flock -n 9; then
        echo "$1: another GPU check or bench holds ${TMPDIR:-/tmp}/nebula-gpu.lock; waiting (VRAM peaks are measured device-wide)" >&2
        flock 9
    fi
}

# require_built WHAT FILE...: returns only when every FILE is an executable;
# otherwise fails naming the first missing one and WHAT builds it.
require_built() {
    local what=$1 f
    shift
    for f in "$@"; do
        [ -x "$f" ] || { echo "FAIL: $f is not built ($what)" >&2; exit 1; }
    done
}

# gpu_check_begin NAME WHAT FILE...: a GPU check's start — a GPU here
# (require_gpu), the lock on it (gpu_exclusive), its binaries built
# (require_built WHAT FILE...).
gpu_check_begin() {
    local name=$1
    shift
    require_gpu "$name"
    gpu_exclusive "$name"
    require_built "$@"
}
