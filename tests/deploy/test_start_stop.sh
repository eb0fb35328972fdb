#!/usr/bin/env bash
# test_start_stop.sh — deploy/start.sh and deploy/stop.sh with nginx and the
# real coordinator on the demo model (tiny-a), on free ports with a temporary
# state directory:
#   - the page is served (text/html, the repo's web/index.html, security
#     headers, never cached), /api/status answers through nginx, a streamed
#     chat completion arrives through nginx as SSE, a 10 MB POST gets a JSON
#     413 and the server keeps serving;
#   - a second start.sh says "already running" and starts no process; one
#     from another state directory on the same port names the running instance;
#   - a port held by another program (page port, then API port): a message
#     naming the port, a non-zero exit, nothing left running; the same for a
#     model the coordinator cannot load (the reason in webui-error.log);
#   - stop.sh: no process, no /dev/shm object, no runtime directory left,
#     also after the coordinator was killed with -9;
#   - nginx does not buffer streams: against tests/deploy/lockstep_upstream.py
#     (a stand-in coordinator that sends each event only after the client has
#     received the previous one) every event arrives while the stream is open;
#     with the upstream gone, nginx answers 502 in the OpenAI error shape.
# Whatever happens, the trap stops what this test started (by pid).
set -u
. tests/deploy/lib.sh # procs_of, children, alive, free_ports, deploy_dirs
deploy_dirs nbdeploy
holder=
cleanup() {
    local d p
    [ -n "$holder" ] && kill "$holder" 2>/dev/null
    for d in "$S" "$tmp/b" "$tmp/c"; do
        for p in $(cat "$d/nginx.pid" "$d/coordinator.pid" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
    done
    for p in $(procs_of "$tmp"); do kill -9 "$p" 2>/dev/null; done
    rm -rf "$tmp"
}
trap cleanup EXIT
fail=0 n=0
ok() { n=$((n + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); n=$((n + 1)); }
check() { python3 tests/deploy/http_checks.py "$@"; }

command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || { echo "FAIL: nginx is not installed (make test runs deploy/install-deps.sh)"; exit 1; }
[ -x "$bin/nebula-coordinator" ] || { echo "FAIL: $bin/nebula-coordinator is missing: run make"; exit 1; }
[ -r "$WEB/index.html" ] || { echo "FAIL: $WEB/index.html is missing"; exit 1; }
# The page's vendored packages (web/vendor/), as make run builds them.
[ -n "${NEBULA_WEB:-}" ] || make --no-print-directory web >/dev/null || { echo "FAIL: make web (npm ci in web/: registry unreachable?)"; exit 1; }
deploy/start.sh --help | grep -q -- '--api-port' && ok || bad "start.sh --help"
deploy/stop.sh --help | grep -q -- '--state' && ok || bad "stop.sh --help"

"$bin/nebula-convert" tests/fixtures/tiny-a "$tmp/demo.gguf" --type f32 --name nebula-demo -q || { echo "FAIL: convert"; exit 1; }
read -r port api_port port2 port3 <<<"$(free_ports 4)"
start() { NEBULA_BIN=$bin NEBULA_WEB=$WEB deploy/start.sh --model "$tmp/demo.gguf" --demo --threads 1 --wait 60 "$@"; }

# ---- start, serve ----
start --port "$port" --api-port "$api_port" --state "$S" >"$tmp/out" 2>&1; rc=$?
cat "$tmp/out"
[ $rc -eq 0 ] && grep -q "http://127.0.0.1:$port/" "$tmp/out" && ok || bad "start.sh: exit $rc"
grep -qi "noise" "$tmp/out" && ok || bad "start.sh does not say the demo model's answers are noise"
base=http://127.0.0.1:$port
cpid=$(cat "$S/coordinator.pid" 2>/dev/null) npid=$(cat "$S/nginx.pid" 2>/dev/null)
workers=$(children "$cpid") nworkers=$(children "$npid")
echo "coordinator $cpid, workers $(echo $workers), nginx $npid"
[ -n "$workers" ] && ok || bad "the coordinator has no worker processes"
check page "$base" "$WEB/index.html" && ok || bad "page"
check status "$base" && ok || bad "/api/status through nginx"
check stream "$base" && ok || bad "streamed chat completion through nginx"
check too_large "$base" && ok || bad "10 MB POST through nginx"
[ -s "$S/webui-access.log" ] && [ -f "$S/webui-error.log" ] && [ -s "$S/coordinator.log" ] && ok ||
    bad "logs missing in $S: $(ls "$S")"
[ "$(stat -c %a "$S")" = 700 ] && ok || bad "state directory mode $(stat -c %a "$S")"

# ---- idempotent ----
before=$(procs_of "$S/" | sort)
start --port "$port" --api-port "$api_port" --state "$S" >"$tmp/out2" 2>&1; rc=$?
after=$(procs_of "$S/" | sort)
[ $rc -eq 0 ] && grep -q "already running: http://127.0.0.1:$port/" "$tmp/out2" && ok || bad "second start: exit $rc, $(cat "$tmp/out2")"
[ "$before" = "$after" ] && [ "$(cat "$S/coordinator.pid")" = "$cpid" ] && [ "$(cat "$S/nginx.pid")" = "$npid" ] && ok ||
    bad "second start changed the processes: '$(echo $before)' -> '$(echo $after)'"

# ---- the backend: auto says which it took, a bad one is refused ----
if "$bin/nebula-gpu-worker" --probe cuda >/dev/null 2>&1; then want="backend: cuda"; else want="backend: cpu (no usable GPU"; fi
grep -qF "$want" "$tmp/out" && ok || bad "start.sh did not say '$want': $(grep backend "$tmp/out")"
start --port "$port2" --api-port "$port3" --state "$tmp/b" --backend tpu >"$tmp/out11" 2>&1; rc=$?
[ $rc -eq 2 ] && grep -q "backend must be auto, cpu or cuda" "$tmp/out11" && ok || bad "--backend tpu: exit $rc, $(cat "$tmp/out11")"
if ! "$bin/nebula-gpu-worker" --probe cuda >/dev/null 2>&1; then # asked for explicitly, a missing GPU is an error
    start --port "$port2" --api-port "$port3" --state "$tmp/b" --backend cuda >"$tmp/out12" 2>&1; rc=$?
    [ $rc -eq 1 ] && grep -q -- "--backend cuda: " "$tmp/out12" && [ -z "$(procs_of "$tmp/b/")" ] && ok ||
        bad "--backend cuda without a GPU: exit $rc, $(cat "$tmp/out12")"
fi

# ---- the same ports from another state directory: the running instance is named ----
start --port "$port" --api-port "$port3" --state "$tmp/b" >"$tmp/out10" 2>&1; rc=$?
[ $rc -ne 0 ] && grep -q "port $port .*in use by another Nebula instance (state directory $S" "$tmp/out10" && ok ||
    bad "page port of another instance: exit $rc, $(cat "$tmp/out10")"
[ -z "$(procs_of "$tmp/b/")" ] && ok || bad "processes left after the failed start: $(procs_of "$tmp/b/")"

# ---- a port held by another program: page port, then API port ----
python3 -c 'import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(1)
open(sys.argv[2], "w").close(); time.sleep(120)' "$port2" "$tmp/held" &
holder=$!
for _ in $(seq 100); do [ -e "$tmp/held" ] && break; sleep 0.05; done
start --port "$port2" --api-port "$port3" --state "$tmp/b" >"$tmp/out3" 2>&1; rc=$?
cat "$tmp/out3"
[ $rc -ne 0 ] && grep -q "port $port2 .*in use" "$tmp/out3" && ok || bad "page port taken: exit $rc"
grep -q "python3 (pid $holder)" "$tmp/out3" && ok || bad "the message does not name the holder (python3, pid $holder)"
grep -q "port $port2" "$tmp/b/webui-error.log" 2>/dev/null && ok || bad "webui-error.log lacks the port message"
[ -z "$(procs_of "$tmp/b/")" ] && ok || bad "processes left after the failed start: $(procs_of "$tmp/b/")"
start --port "$port3" --api-port "$port2" --state "$tmp/b" >"$tmp/out4" 2>&1; rc=$?
[ $rc -ne 0 ] && grep -q "port $port2 (the API port).*in use" "$tmp/out4" && ok || bad "API port taken: exit $rc, $(cat "$tmp/out4")"
[ -z "$(procs_of "$tmp/b/")" ] && ok || bad "processes left after the failed start: $(procs_of "$tmp/b/")"
kill "$holder" 2>/dev/null; wait "$holder" 2>/dev/null; holder=

# ---- a model the coordinator cannot load: the reason, and nothing left ----
head -c 65536 /dev/urandom >"$tmp/bad.gguf"
NEBULA_BIN=$bin NEBULA_WEB=$WEB deploy/start.sh --model "$tmp/bad.gguf" --port "$port2" --api-port "$port3" \
    --state "$tmp/b" >"$tmp/out7" 2>&1; rc=$?
[ $rc -ne 0 ] && grep -q "bad.gguf" "$tmp/b/webui-error.log" && ok || bad "unloadable model: exit $rc, $(cat "$tmp/out7")"
[ -z "$(procs_of "$tmp/b/")" ] && [ ! -e "$tmp/b/engine" ] && ok || bad "left after the failed start: $(procs_of "$tmp/b/") $(ls "$tmp/b")"

# ---- stop ----
deploy/stop.sh --state "$S" >"$tmp/out5" 2>&1; rc=$?
cat "$tmp/out5"
[ $rc -eq 0 ] && grep -q "stopped" "$tmp/out5" && ok || bad "stop.sh: exit $rc"
left=
for p in $cpid $npid $workers $nworkers; do alive "$p" && left="$left $p"; done
[ -z "$left" ] && [ -z "$(procs_of "$S/")" ] && ok || bad "processes left after stop.sh:$left $(procs_of "$S/")"
shm=$(ls /dev/shm | grep "^nebula-$cpid-" || true)
[ -z "$shm" ] && ok || bad "/dev/shm objects left: $shm"
[ ! -e "$S/engine" ] && [ ! -e "$S/coordinator.pid" ] && [ ! -e "$S/nginx.pid" ] && ok || bad "left in $S: $(ls "$S")"
curl -s -m 2 -o /dev/null "$base/" && bad "the page still answers after stop.sh" || ok
deploy/stop.sh --state "$S" | grep -q "not running" && ok || bad "second stop.sh"

# ---- a coordinator killed with -9: stop.sh removes its regions, its workers go ----
start --port "$port" --api-port "$api_port" --state "$S" >"$tmp/out8" 2>&1 || bad "restart: $(cat "$tmp/out8")"
cpid=$(cat "$S/coordinator.pid") workers=$(children "$cpid")
kill -9 "$cpid"
deploy/stop.sh --state "$S" >"$tmp/out9" 2>&1; rc=$?
left=
for p in $cpid $workers; do alive "$p" && left="$left $p"; done
[ $rc -eq 0 ] && [ -z "$left" ] && [ -z "$(procs_of "$S/")" ] && ok || bad "after kill -9: exit $rc, left:$left $(cat "$tmp/out9")"
[ -z "$(ls /dev/shm | grep "^nebula-$cpid-")" ] && [ ! -e "$S/engine" ] && ok || bad "after kill -9: regions or runtime directory left"

# ---- nginx streams without buffering; 502 when the coordinator is gone ----
mkdir -p "$tmp/fake"
ln -s "$PWD/tests/deploy/lockstep_upstream.py" "$tmp/fake/nebula-coordinator"
read -r port4 port5 <<<"$(free_ports 2)"
NEBULA_BIN=$tmp/fake NEBULA_WEB=$WEB deploy/start.sh --model "$tmp/demo.gguf" --port "$port4" --api-port "$port5" \
    --state "$tmp/c" >"$tmp/out6" 2>&1 && ok || bad "start.sh with the lockstep upstream: $(cat "$tmp/out6")"
check lockstep "http://127.0.0.1:$port4" && ok || bad "nginx buffers the stream"
kill "$(cat "$tmp/c/coordinator.pid")"
for _ in $(seq 50); do alive "$(cat "$tmp/c/coordinator.pid")" || break; sleep 0.1; done
check unavailable "http://127.0.0.1:$port4" && ok || bad "502 from nginx"
deploy/stop.sh --state "$tmp/c" >/dev/null && [ -z "$(procs_of "$tmp/c/")" ] && ok || bad "stop.sh with the coordinator already gone"

echo "test_start_stop: $((n - fail)) of $n checks passed"
[ "$fail" -eq 0 ]
