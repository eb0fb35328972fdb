#!/usr/bin/env bash
# test_supervise.sh — what deploy/supervise.sh promises, on the real stack
# (deploy/start.sh with the demo model on free ports, a temporary state
# directory):
#   - while it runs, the coordinator's regions have no name in /dev/shm
#     (shm_instance_unlink) and its workers map them all the same;
#   - the coordinator killed with -9: within 5 s nothing of its instance is
#     left in /dev/shm (no /dev/shm/nebula-PID-* of the dead pid) and no
#     process maps its regions any more (their memory is free); a new
#     coordinator runs, /api/status through nginx says ready and a streamed
#     completion works (twice in a row);
#   - a coordinator stopped on purpose (SIGTERM) is not restarted;
#   - a coordinator that keeps dying is given up after 5 restarts, and
#     webui-error.log says so;
#   - stop.sh after restarts: no process (supervisor, coordinators, workers,
#     nginx), no /dev/shm object of any coordinator seen, no runtime directory;
#   - started by root (CI is): nginx's master runs as root and its workers as
#     www-data (nobody where there is none), which can pass through the state
#     directory but not read its logs; not root: the check says why it is
#     skipped.
# Whatever happens, the trap kills what this test started (by pid).
set -u
. tests/deploy/lib.sh # procs_of, children, alive, free_ports, deploy_dirs
deploy_dirs nbsup
seen=    # every coordinator pid this test saw
cleanup() {
    local p
    for p in $(cat "$S/supervisor.pid" "$S/nginx.pid" "$S/coordinator.pid" 2>/dev/null) $(procs_of "$tmp"); do
        kill -9 "$p" 2>/dev/null
    done
    for p in $seen; do rm -f /dev/shm/nebula-"$p"-*; done
    rm -rf "$tmp"
}
trap cleanup EXIT
fail=0 n=0 skipped=0
ok() { n=$((n + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); n=$((n + 1)); }
shm_of() { ls /dev/shm | grep "^nebula-$1-" || true; }
# Processes that map a region of the instance of coordinator pid $1 (named or not).
mapping() { grep -l "/dev/shm/nebula-$1-" /proc/[0-9]*/maps 2>/dev/null | cut -d/ -f3 | sort -u | tr '\n' ' '; }
# Quiet when it passes; its FAIL line (why) when it does not.
check() { local o; o=$(python3 tests/deploy/http_checks.py "$@" 2>&1) || { printf '%s\n' "$o" | grep -m 3 . >&2; return 1; }; }
# Waits up to $1 s for coordinator.pid to name a live coordinator other than $2; prints it.
new_coordinator() {
    local deadline=$(($(date +%s) + $1)) p
    while [ "$(date +%s)" -lt "$deadline" ]; do
        p=$(cat "$S/coordinator.pid" 2>/dev/null)
        if [ -n "$p" ] && [ "$p" != "$2" ] && alive "$p"; then echo "$p"; return 0; fi
        sleep 0.1
    done
    return 1
}
# Waits up to $1 s for /api/status through nginx to say ready.
ready() {
    local deadline=$(($(date +%s) + $1))
    while [ "$(date +%s)" -lt "$deadline" ]; do check status "$base" && return 0; sleep 0.2; done
    return 1
}

command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || { echo "FAIL: nginx is not installed (make test runs deploy/install-deps.sh)"; exit 1; }
[ -x "$bin/nebula-coordinator" ] || { echo "FAIL: $bin/nebula-coordinator is missing: run make"; exit 1; }
[ -n "${NEBULA_WEB:-}" ] || make --no-print-directory web >/dev/null || { echo "FAIL: make web"; exit 1; }
"$bin/nebula-convert" tests/fixtures/tiny-a "$tmp/demo.gguf" --type f32 --name nebula-demo -q || { echo "FAIL: convert"; exit 1; }
read -r port api_port <<<"$(free_ports 2)"
base=http://127.0.0.1:$port
NEBULA_BIN=$bin NEBULA_WEB=$WEB deploy/start.sh --model "$tmp/demo.gguf" --demo --threads 1 --wait 60 \
    --port "$port" --api-port "$api_port" --state "$S" >"$tmp/out" 2>&1 || { cat "$tmp/out"; echo "FAIL: start.sh"; exit 1; }
spid=$(cat "$S/supervisor.pid") cpid=$(cat "$S/coordinator.pid") npid=$(cat "$S/nginx.pid")
seen=$cpid
alive "$spid" && alive "$cpid" && ok || bad "supervisor $spid / coordinator $cpid not running"

# ---- nginx's workers: not root when started by root ----
if [ "$(id -u)" = 0 ]; then
    want=www-data; id -u www-data >/dev/null 2>&1 || want=nobody
    master=$(ps -o user= -p "$npid" | tr -d ' ')
    workers=$(for w in $(children "$npid"); do ps -o user= -p "$w"; done | tr -d ' ' | sort -u)
    [ "$master" = root ] && [ "$workers" = "$want" ] && ok || bad "nginx master runs as '$master', workers as '$workers' (want root, $want)"
    www=$(readlink "$S/www")
    [ "$(stat -c '%a %U %G' "$www" 2>/dev/null)" = "750 root $(id -gn "$want")" ] && ok ||
        bad "the workers' directory '$www': $(stat -c '%a %U %G' "$www" 2>&1)"
    [ "$(stat -c %a "$S")" = 700 ] && ok || bad "state directory mode $(stat -c %a "$S")"
    check page "$base" "$WEB/index.html" && ok || bad "the page is not served by the $want workers"
    check stream "$base" && ok || bad "a streamed completion through the $want workers"
    if command -v setpriv >/dev/null; then
        g=$(id -g "$want") u=$(id -u "$want")
        setpriv --reuid "$u" --regid "$g" --clear-groups cat "$S/coordinator.log" >/dev/null 2>&1 &&
            bad "$want can read coordinator.log" || ok
        setpriv --reuid "$u" --regid "$g" --clear-groups ls "$S" >/dev/null 2>&1 && bad "$want can list the state directory" || ok
    fi
else
    echo "SKIP: nginx's user: not started as root, so nginx's user directive does not apply (CI runs as root)"
    skipped=$((skipped + 1))
fi

# ---- kill -9: nothing in /dev/shm within 5 s, a new coordinator, the API works ----
for round in 1 2; do
    workers=$(children "$cpid")
    [ -n "$workers" ] && ok || bad "round $round: coordinator $cpid has no workers"
    [ -z "$(shm_of "$cpid")" ] && ok || bad "round $round: the running instance's regions have names: $(shm_of "$cpid")"
    users=$(mapping "$cpid")
    for w in $workers; do [[ " $users" == *" $w "* ]] || bad "round $round: worker $w maps no region of $cpid (mapped by: $users)"; done
    kill -9 "$cpid"
    t0=$(date +%s%N)
    # A worker that has let go of its mappings may still be exiting: the 5 s are for it too.
    left_workers() { local w; for w in $workers; do alive "$w" && printf ' %s' "$w"; done; }
    while { [ -n "$(shm_of "$cpid")" ] || [ -n "$(mapping "$cpid")" ] || [ -n "$(left_workers)" ]; } &&
        [ $(($(date +%s%N) - t0)) -lt 5000000000 ]; do sleep 0.05; done
    [ -z "$(shm_of "$cpid")" ] && ok || bad "round $round: /dev/shm objects of the killed coordinator after 5 s: $(shm_of "$cpid")"
    [ -z "$(mapping "$cpid")" ] && ok || bad "round $round: processes still map the killed coordinator's regions after 5 s: $(mapping "$cpid")"
    echo "round $round: /dev/shm clean $((($(date +%s%N) - t0) / 1000000)) ms after kill -9 of $cpid"
    left=$(left_workers)
    [ -z "$left" ] && ok || bad "round $round: workers of the killed coordinator still run:$left"
    old=$cpid
    cpid=$(new_coordinator 30 "$old") && ok || bad "round $round: no new coordinator within 30 s"
    seen="$seen $cpid"
    ready 60 && ok || bad "round $round: /api/status through nginx not ready after the restart"
    check stream "$base" && ok || {
        bad "round $round: no streamed completion after the restart"
        tail -n 15 "$S"/coordinator.log "$S"/engine/*.log 2>/dev/null | sed 's/^/    /'
    }
done
grep -q "killed by signal 9; removed its" "$S/coordinator.log" && ok || bad "coordinator.log does not record the restart"

# ---- SIGTERM: stopped on purpose, not restarted ----
kill -TERM "$cpid"
for _ in $(seq 100); do alive "$cpid" || alive "$spid" || break; sleep 0.1; done
! alive "$cpid" && ! alive "$spid" && ok || bad "after SIGTERM: coordinator alive: $(alive "$cpid" && echo yes), supervisor alive: $(alive "$spid" && echo yes)"
[ "$(cat "$S/coordinator.pid")" = "$cpid" ] && [ -z "$(shm_of "$cpid")" ] && ok || bad "a coordinator stopped by SIGTERM was restarted, or left regions"
deploy/stop.sh --state "$S" >"$tmp/stop1" 2>&1 && ok || bad "stop.sh after the SIGTERM: $(cat "$tmp/stop1")"

# ---- one that keeps dying is given up ----
NEBULA_BIN=$bin NEBULA_WEB=$WEB deploy/start.sh --model "$tmp/demo.gguf" --demo --threads 1 --wait 60 \
    --port "$port" --api-port "$api_port" --state "$S" >"$tmp/out2" 2>&1 || bad "second start: $(cat "$tmp/out2")"
spid=$(cat "$S/supervisor.pid") cpid=$(cat "$S/coordinator.pid") www=$(readlink "$S/www")
seen="$seen $cpid"
for i in 1 2 3 4 5 6; do
    kill -9 "$cpid" 2>/dev/null
    [ "$i" = 6 ] && break
    cpid=$(new_coordinator 30 "$cpid") || { bad "kill $i: no new coordinator"; break; }
    seen="$seen $cpid"
done
for _ in $(seq 50); do alive "$spid" || break; sleep 0.1; done
! alive "$spid" && grep -q "not restarted again" "$S/webui-error.log" && ok ||
    bad "the supervisor did not give up after 6 deaths: $(tail -n 3 "$S/webui-error.log")"

# ---- stop.sh leaves nothing ----
deploy/stop.sh --state "$S" >"$tmp/stop2" 2>&1 && ok || bad "stop.sh: $(cat "$tmp/stop2")"
[ -z "$(procs_of "$S")" ] && ok || bad "processes left after stop.sh: $(procs_of "$S")"
left=
for p in $seen; do left="$left$(shm_of "$p")"; done
[ -z "$left" ] && ok || bad "/dev/shm objects left: $left"
[ ! -e "$S/engine" ] && [ ! -e "$S/supervisor.pid" ] && [ ! -e "$S/coordinator.pid" ] && [ ! -e "$S/www" ] && ok ||
    bad "left in $S: $(ls "$S")"
[ -z "${www:-}" ] || [ ! -e "$www" ] && ok || bad "the workers' directory $www is left"

echo "test_supervise: $((n - fail)) of $n checks passed$([ "$skipped" = 0 ] || echo ", $skipped skipped")"
[ "$fail" -eq 0 ]
