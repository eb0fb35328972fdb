#!/usr/bin/env bash
# stop.sh — stops the Nebula instance that deploy/start.sh started: nginx, the
# coordinator (an orderly nebulactl shutdown, else SIGTERM; SIGKILL after the
# timeout) and its workers, then checks that nothing is left: no process, no
# /dev/shm region of the instance, no runtime directory.
#
# usage: deploy/stop.sh [--state DIR] [--timeout SECONDS]
#
#   --state DIR        the state directory given to start.sh (default
#                      $NEBULA_STATE_DIR, else ~/.local/state/nebula)
#   --timeout SECONDS  how long the coordinator gets to stop (default 30)
#
# Exits 0 when the instance is stopped (or was not running), 1 when something
# could not be stopped (said on stderr and in STATE/webui-error.log).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }

state_arg= timeout=30
while [ $# -gt 0 ]; do
    case $1 in
    --state) [ $# -ge 2 ] || { echo "stop.sh: --state needs a value" >&2; exit 2; }; state_arg=$2; shift ;;
    --timeout) [ $# -ge 2 ] || { echo "stop.sh: --timeout needs a value" >&2; exit 2; }; timeout=$2; shift ;;
    -h | --help) usage; exit 0 ;;
    *) echo "stop.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
    esac
    shift
done
[[ $timeout =~ ^[0-9]+$ ]] || { echo "stop.sh: --timeout must be a number of seconds" >&2; exit 2; }

STATE=$(resolve_state "$state_arg")
if [ ! -d "$STATE" ]; then
    say "not running (no state directory $STATE)"
    exit 0
fi
take_lock 60 || exit 1
stop_instance "$timeout" 0
