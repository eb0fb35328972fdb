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
