# shellcheck shell=bash
# common.sh — what deploy/start.sh and deploy/stop.sh share (sourced, not run).
#
# One Nebula instance lives in a state directory (0700):
#   nginx.conf            made from conf/nginx.conf.in by start.sh
#   nginx.pid             nginx's master (nginx writes it)
#   supervisor.pid        deploy/supervise.sh (restarts a coordinator that dies)
#   coordinator.pid       nebula-coordinator (it starts and supervises the workers)
#   instance.env          ports, model and URL of the running instance
#   engine/               the coordinator's runtime directory (control sockets)
#   tmp/                  nginx's temporary files
#   www                   started by root: a link to /tmp/nebula-www.XXXXXX, what
#                         nginx's workers (www-data) may read (the page's copy, tmp/)
#   webui-error.log       nginx's error log and every start/stop failure
#   webui-access.log      nginx's access log
#   coordinator.log       the coordinator's and the workers' output
# start.lock serialises start.sh and stop.sh on one state directory.

NEBULA_REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# The binaries: $NEBULA_BIN, else $BUILD/bin (make's build directory), else build/bin.
case ${BUILD:-build} in
/*) NEBULA_BIN=${NEBULA_BIN:-$BUILD/bin} ;;
*) NEBULA_BIN=${NEBULA_BIN:-$NEBULA_REPO/${BUILD:-build}/bin} ;;
esac

say() { printf 'nebula: %s\n' "$*"; }

# Appends a line to webui-error.log (when the state directory exists) and
# prints it on stderr: the log is where a failed start is looked up later.
log_error() {
    printf 'nebula: %s\n' "$*" >&2
    [ -n "${STATE:-}" ] && [ -d "$STATE" ] &&
        printf '%s start/stop: %s\n' "$(date -u '+%Y/%m/%d %H:%M:%S')" "$*" >>"$STATE/webui-error.log"
    return 0
}

# Resolves the state directory: the argument, else $NEBULA_STATE_DIR, else
# ~/.local/state/nebula.  Made absolute (nginx needs absolute paths).
resolve_state() {
    local dir=${1:-${NEBULA_STATE_DIR:-${XDG_STATE_HOME:-$HOME/.local/state}/nebula}}
    case $dir in /*) ;; *) dir=$PWD/$dir ;; esac
    printf '%s\n' "${dir%/}"
}

# pid_alive PID WORD: PID is a live process whose command line contains WORD
# (a pid file left by a crash may name an unrelated process by now).
pid_alive() {
    local pid=$1 word=$2 cmd
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    pid_running "$pid" || return 1
    cmd=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || return 1
    [[ $cmd == *"$word"* ]]
}

read_pid() { [ -r "$1" ] && tr -dc '0-9' <"$1" || true; }

# Children of process $1 (the coordinator's workers, nginx's workers); one
# pass over /proc (a line of /proc/PID/stat is "pid (comm) state ppid ...").
children_of() {
    cat /proc/[0-9]*/stat 2>/dev/null |
        awk -v parent="$1" '{ s = $0; sub(/.*\) /, "", s); split(s, f, " "); if (f[2] == parent) print $1 }'
    return 0
}

# pid_running PID: the process exists and is not a zombie (a daemon's parent
# is init, which may take a while to reap it: it is gone all the same).
pid_running() {
    local stat
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    stat=${stat##*) }
    [ "${stat%% *}" != Z ]
}

# Waits up to $2 seconds for every pid of $1 (a list) to be gone.
wait_gone() {
    local pids=$1 deadline=$(($(date +%s) + $2)) p left
    while :; do
        left=
        for p in $pids; do pid_running "$p" && left="$left $p"; done
        [ -z "$left" ] && return 0
        [ "$(date +%s)" -ge "$deadline" ] && return 1
        sleep 0.1
    done
}

# The /dev/shm objects of the instance of coordinator pid $1 (its instance
# id starts with its pid: shm/region.c).
shm_objects() { ls -1 /dev/shm 2>/dev/null | grep -E "^nebula-$1-[0-9a-f]{8}-" || true; }

# Stops nginx, the coordinator and its workers of the state directory $STATE;
# prints what it did.  Returns 1 when something is left (a process, a /dev/shm
# object), after saying what.
stop_instance() {
    local timeout=${1:-30} quiet=${2:-0}
    local npid cpid spid pids kids left=0 stopped=
    npid=$(read_pid "$STATE/nginx.pid")
    # The supervisor first, so that it does not restart what is stopped
    # below; it leaves the coordinator running and coordinator.pid true.
    spid=$(read_pid "$STATE/supervisor.pid")
    if pid_alive "$spid" supervise.sh; then
        kill -TERM "$spid" 2>/dev/null || true
        if ! wait_gone "$spid" 10; then
            kill -KILL "$spid" 2>/dev/null || true
            wait_gone "$spid" 5 || true
        fi
    fi
    cpid=$(read_pid "$STATE/coordinator.pid")

    if pid_alive "$npid" nginx; then
        kids=$(children_of "$npid")
        kill -TERM "$npid" 2>/dev/null || true # fast shutdown: open streams are cut
        if ! wait_gone "$npid $kids" 10; then
            kill -KILL "$npid" $kids 2>/dev/null || true
            wait_gone "$npid $kids" 5 || true
        fi
        stopped="nginx (pid $npid)"
    fi

    if pid_alive "$cpid" nebula-coordinator; then
        kids=$(children_of "$cpid")
        # The orderly way first: the coordinator stops its workers and removes
        # its regions and runtime directory; SIGTERM does the same.
        if [ -S "$STATE/engine/ctl.sock" ] && [ -x "$NEBULA_BIN/nebulactl" ]; then
            "$NEBULA_BIN/nebulactl" --runtime "$STATE/engine" shutdown >/dev/null 2>&1 || kill -TERM "$cpid" 2>/dev/null || true
        else
            kill -TERM "$cpid" 2>/dev/null || true
        fi
        if ! wait_gone "$cpid" "$timeout"; then
            log_error "the coordinator (pid $cpid) did not stop within ${timeout}s: killing it"
            kill -KILL "$cpid" 2>/dev/null || true
            wait_gone "$cpid" 5 || true
        fi
        # Workers stop by themselves once their starter is gone; a stuck one is killed.
        if ! wait_gone "$kids" 10; then
            kill -KILL $kids 2>/dev/null || true
            wait_gone "$kids" 5 || true
        fi
        stopped="${stopped:+$stopped, }the coordinator (pid $cpid) and $(echo $kids | wc -w) worker(s)"
        pids="$cpid $kids"
    fi

    # A coordinator that was killed leaves its regions: they are this
    # instance's, and nobody else can use them.
    if [ -n "$cpid" ] && ! pid_running "$cpid"; then
        local o
        for o in $(shm_objects "$cpid"); do rm -f "/dev/shm/$o"; done
        [ -d "$STATE/engine" ] && rm -rf -- "$STATE/engine"
    fi

    for p in $npid $spid ${pids:-}; do
        if pid_running "$p"; then log_error "process $p is still running"; left=1; fi
    done
    if [ -n "$cpid" ] && [ -n "$(shm_objects "$cpid")" ]; then
        log_error "/dev/shm objects left: $(shm_objects "$cpid" | tr '\n' ' ')"
        left=1
    fi
    if [ "$left" = 0 ]; then
        rm -f "$STATE/nginx.pid" "$STATE/coordinator.pid" "$STATE/supervisor.pid" "$STATE/instance.env"
        remove_www
    fi
    if [ "$quiet" = 0 ]; then
        if [ -n "$stopped" ]; then say "stopped $stopped"; else say "not running (state directory $STATE)"; fi
    fi
    return "$left"
}

# Removes the directory of nginx's workers (STATE/www, made by start.sh when
# run by root) and the link to it.
remove_www() {
    local www
    www=$(readlink "$STATE/www" 2>/dev/null) || return 0
    [[ $www =~ ^/tmp/nebula-www\.[A-Za-z0-9]+$ ]] && rm -rf -- "$www"
    rm -f "$STATE/www"
}

# Takes the state directory's lock (fd 9), waiting up to $1 seconds.
take_lock() {
    exec 9>>"$STATE/start.lock"
    flock -w "$1" 9 || { log_error "another start.sh or stop.sh is working on $STATE"; return 1; }
}
