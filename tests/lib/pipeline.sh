# pipeline.sh — sourced by the tests that start the multi-process pipeline
# (tests/tools/test_pipeline.sh, test_sweep_pipeline.sh) once BUILD and bin
# are set.  It makes the temporary folder $tmp and, at exit, kills the
# coordinator ($coord_pid) and the worker pids noted in $tmp/pids (by pid,
# the coordinator first so that it restarts nobody), removes instance
# $inst's /dev/shm objects and $tmp.  Counted checks: ok, bad MESSAGE ($n
# checks, $fail failed).  nebulactl on the runtime folder $run: ctl ARGS;
# json EXPR prints a Python expression of the JSON on stdin (as d);
# note_pids adds the workers' pids to $tmp/pids; wait_status EXPR waits up
# to 15 s until the status reply d satisfies EXPR.
tmp=$(mktemp -d)
coord_pid= inst=
cleanup() {
    local p
    [ -n "$coord_pid" ] && kill -9 "$coord_pid" 2>/dev/null
    for p in $(cat "$tmp/pids" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
    [ -n "$coord_pid" ] && wait "$coord_pid" 2>/dev/null
    [ -n "$inst" ] && rm -f /dev/shm/nebula-"$inst"-*
    rm -rf "$tmp"
}
trap cleanup EXIT
fail=0 n=0
ok() { n=$((n + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); n=$((n + 1)); }
ctl() { "$bin/nebulactl" --runtime "$run" "$@"; }
json() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }
note_pids() { ctl --json status 2>/dev/null | json "' '.join(str(w['pid']) for w in d['workers'])" >>"$tmp/pids"; }
wait_status() {
    for _ in $(seq 150); do
        ctl --json status 2>/dev/null | json "($1) or sys.exit(1)" >/dev/null 2>&1 && return 0
        sleep 0.1
    done
    return 1
}
