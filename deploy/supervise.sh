#!/usr/bin/env bash
# supervise.sh — keeps one instance's coordinator running: starts it, and
# when it dies without being asked to (a kill -9, a crash), removes what the
# dead one leaves behind and starts it again.
#
# usage: deploy/supervise.sh STATE COORDINATOR ARGS...   (deploy/start.sh runs it, in its own session)
#
# The idea: the coordinator is this script's child, so `wait` hears of its
# death at once, however it died.  Its workers die with it (PR_SET_PDEATHSIG,
# coordinator/workers.c), so nobody maps its shared-memory regions any more:
# their names (/dev/shm/nebula-PID-*, PID being the dead coordinator's) and
# its runtime directory STATE/engine are removed before the restart, within
# a second of the death.  A coordinator that exits 0 or dies of SIGTERM or
# SIGINT was stopped on purpose (nebulactl shutdown, kill), and one that
# exits 2 was given arguments it refuses (a restart would fail the same
# way): those are not restarted; any other end (SIGKILL, a crash, exit 1)
# is.  More
# than RESTARTS_MAX restarts within RESTARTS_WINDOW_S seconds: it gives up,
# and says so in webui-error.log.
#
# SIGTERM (deploy/stop.sh) ends this script and leaves the coordinator as it
# is: stop.sh stops it next, the orderly way.  STATE/supervisor.pid is this
# script, STATE/coordinator.pid the coordinator it runs now.
set -uo pipefail
[ $# -ge 2 ] || { echo "usage: deploy/supervise.sh STATE COORDINATOR ARGS..." >&2; exit 2; }
STATE=$1
shift
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

RESTARTS_MAX=5
RESTARTS_WINDOW_S=120

stopping=0
trap 'stopping=1' TERM INT HUP
echo $$ >"$STATE/supervisor.pid"

# Appends a line to coordinator.log, where the coordinator's own lines are.
note() { printf '==== %s supervise.sh: %s\n' "$(date -u '+%Y-%m-%d %H:%M:%S')" "$*" >>"$STATE/coordinator.log"; }

restarts=()
while :; do
    "$@" </dev/null >>"$STATE/coordinator.log" 2>&1 &
    cpid=$!
    echo "$cpid" >"$STATE/coordinator.pid"
    # wait returns early (status > 128) when a trapped signal arrives.
    while :; do
        wait "$cpid"
        rc=$?
        [ "$stopping" = 1 ] && exit 0
        pid_running "$cpid" || break
    done
    how="exited with status $rc"
    [ "$rc" -gt 128 ] && how="was killed by signal $((rc - 128))"
    case $rc in
    0 | 2 | 130 | 143) # stopped on purpose (SIGINT, SIGTERM), or refused its arguments
        note "the coordinator (pid $cpid) $how: not restarted"
        exit 0 ;;
    esac
    n=0
    for o in $(shm_objects "$cpid"); do rm -f "/dev/shm/$o" && n=$((n + 1)); done
    rm -rf -- "$STATE/engine"
    now=$(date +%s)
    recent=()
    for t in "${restarts[@]}"; do [ $((now - t)) -lt "$RESTARTS_WINDOW_S" ] && recent+=("$t"); done
    restarts=("${recent[@]}")
    if [ "${#restarts[@]}" -ge "$RESTARTS_MAX" ]; then
        note "the coordinator (pid $cpid) $how; removed its $n /dev/shm objects; ${#restarts[@]} restarts in ${RESTARTS_WINDOW_S}s: giving up"
        log_error "the coordinator died $((${#restarts[@]} + 1)) times in ${RESTARTS_WINDOW_S}s: not restarted again (see $STATE/coordinator.log); deploy/start.sh starts it"
        exit 1
    fi
    note "the coordinator (pid $cpid) $how; removed its $n /dev/shm objects and the runtime directory; restarting it"
    restarts+=("$now")
    sleep 0.5
    [ "$stopping" = 1 ] && exit 0
done
