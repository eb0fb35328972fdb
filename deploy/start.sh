#!/usr/bin/env bash
# start.sh — starts Nebula: the coordinator (which starts the workers and
# serves the HTTP API on 127.0.0.1:API_PORT) and nginx (the chat page on
# 127.0.0.1:PORT, proxying /v1/, /api/ and /metrics to the coordinator).
#
# usage: deploy/start.sh [--config FILE] [--model FILE] [--mtp FILE] [--prepared DIR] [--demo|--demo-random]
#                        [--port 8090] [--api-port 8091] [--state DIR] [--threads N]
#                        [--max-body BYTES] [--name NAME] [--wait SECONDS]
#
#   --config FILE     nebula.conf to read (default: $XDG_CONFIG_HOME/nebula/nebula.conf, else
#                     conf/nebula.conf of this checkout): the defaults of the options below
#                     (docs/RUNNING.md lists its keys); the coordinator reads the same file
#   --model FILE      the GGUF to serve (a Qwen3.8-Flash-Next, or the demo model)
#   --mtp FILE        a separate MTP (draft) GGUF for it, as Unsloth ships MTP/mtp-*.gguf
#                     (default: nebula.conf's model.mtp; none: the model file's own, if any)
#   --prepared DIR    nebula-prepare's output for it (experts on RAM/SSD tiers)
#   --demo            the bundled demo model: without --model, models/demo/nebula-demo-docs.gguf
#                     (a small model trained on documentation, docs/DEMO.md) where the checkout
#                     has it, else the random-weight one below
#   --demo-random     the random-weight demo model (its answers are noise; what tests use):
#                     build/models/demo.gguf, converted from tests/fixtures/tiny-a when missing
#   --port N          the page's port on 127.0.0.1 (default 8090)
#   --api-port N      the coordinator's port on 127.0.0.1 (default 8091)
#   --state DIR       pid files, logs, nginx.conf, the engine's runtime directory
#                     (default $NEBULA_STATE_DIR, else ~/.local/state/nebula)
#   --threads N       CPU threads of the engine (default: all cores)
#   --backend B       auto (default: cuda where nebula-gpu-worker --probe cuda finds a
#                     usable GPU, else cpu), cuda or cpu: the coordinator's --backend
#   --max-body BYTES  largest request body, for nginx and the coordinator (default 4194304)
#   --name NAME       the model id the API reports (default: the GGUF's general.name)
#   --wait SECONDS    how long to wait for the model to load (default 1800; 0: return
#                     as soon as the page answers, the page shows the loading progress)
# Environment: NEBULA_BIN (the binaries; default $BUILD/bin, else build/bin of this checkout),
# NEBULA_WEB (the page; default web/ of this checkout), NEBULA_STATE_DIR.
#
# Idempotent: when this state directory's instance is up (pid files alive and
# /api/status answers through nginx) it prints the URL and starts nothing.  A
# port held by another program is named and nothing is started.  Every
# failure is also written to STATE/webui-error.log, and whatever this run
# started is stopped again: a failed start leaves nothing running.
# The coordinator runs under deploy/supervise.sh, which restarts it when it
# dies (kill -9, a crash); started by root, nginx's workers run as www-data.
# deploy/stop.sh stops the instance.
set -euo pipefail
umask 077
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }

# The defaults: nebula.conf's, through `nebula config get` (the shell does
# not parse INI); the flags below override them.
config=
prev=
for a in "$@"; do [ "$prev" = --config ] && config=$a; prev=$a; done
cfg() { "$NEBULA_BIN/nebula" config get "$1" ${config:+--config "$config"}; }
if [ -x "$NEBULA_BIN/nebula" ]; then
    cfg_err=$(cfg server.port 2>&1 >/dev/null) || { echo "start.sh: ${cfg_err#nebula: }" >&2; exit 2; }
    model=$(cfg model.path) mtp=$(cfg model.mtp) prepared=$(cfg model.prepared) name=$(cfg model.name)
    port=$(cfg server.port) api_port=$(cfg server.api_port) max_body=$(cfg server.max_body)
    threads=$(cfg engine.threads) backend=$(cfg engine.backend)
    [ "$threads" != 0 ] || threads=
else # not built yet: the built-in defaults (the checks below say what is missing)
    [ -z "$config" ] || { echo "start.sh: --config needs $NEBULA_BIN/nebula: run make" >&2; exit 2; }
    model= mtp= prepared= name= port=8090 api_port=8091 max_body=4194304 threads= backend=auto
fi
demo=0 demo_random=0 state_arg= wait_s=1800 model_given=0
WEB=${NEBULA_WEB:-$NEBULA_REPO/web}
need() { [ $# -ge 2 ] || { echo "start.sh: $1 needs a value (try --help)" >&2; exit 2; }; }
while [ $# -gt 0 ]; do
    case $1 in
    --config) need "$@"; shift ;;
    --model) need "$@"; model=$2; model_given=1; shift ;;
    --mtp) need "$@"; mtp=$2; shift ;;
    --prepared) need "$@"; prepared=$2; shift ;;
    --demo) demo=1 ;;
    --demo-random) demo=1 demo_random=1 ;;
    --port) need "$@"; port=$2; shift ;;
    --api-port) need "$@"; api_port=$2; shift ;;
    --state) need "$@"; state_arg=$2; shift ;;
    --threads) need "$@"; threads=$2; shift ;;
    --backend) need "$@"; backend=$2; shift ;;
    --max-body) need "$@"; max_body=$2; shift ;;
    --name) need "$@"; name=$2; shift ;;
    --wait) need "$@"; wait_s=$2; shift ;;
    -h | --help) usage; exit 0 ;;
    *) echo "start.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
    esac
    shift
done

# --demo without --model: the demo model, whatever nebula.conf's model.path says.
[ "$demo" = 1 ] && [ "$model_given" = 0 ] && model= mtp= prepared=
is_port() { [[ $1 =~ ^[0-9]+$ ]] && [ "$1" -ge 1 ] && [ "$1" -le 65535 ]; }
is_port "$port" || { echo "start.sh: --port must be a port number, not '$port'" >&2; exit 2; }
is_port "$api_port" || { echo "start.sh: --api-port must be a port number, not '$api_port'" >&2; exit 2; }
[ "$port" != "$api_port" ] || { echo "start.sh: --port and --api-port must differ" >&2; exit 2; }
[[ $max_body =~ ^[0-9]+$ ]] && [ "$max_body" -ge 1024 ] || { echo "start.sh: --max-body must be a number of bytes >= 1024" >&2; exit 2; }
[[ $wait_s =~ ^[0-9]+$ ]] || { echo "start.sh: --wait must be a number of seconds" >&2; exit 2; }
[ -z "$threads" ] || [[ $threads =~ ^[0-9]+$ ]] || { echo "start.sh: --threads must be a number" >&2; exit 2; }
case $backend in auto | cpu | cuda) ;; *) echo "start.sh: --backend must be auto, cpu or cuda, not '$backend'" >&2; exit 2 ;; esac

STATE=$(resolve_state "$state_arg")
# nginx.conf takes the paths unquoted, and the control socket path must fit
# in a sockaddr_un.
for p in "$STATE" "$WEB"; do
    [[ $p =~ ^[A-Za-z0-9_./@+-]+$ ]] || { echo "start.sh: unsupported characters in path '$p' (letters, digits and _ . / @ + - only)" >&2; exit 2; }
done
[ ${#STATE} -le 80 ] || { echo "start.sh: state directory path too long (${#STATE} > 80 characters): $STATE" >&2; exit 2; }
mkdir -p "$STATE" && chmod 700 "$STATE"
for t in curl python3 flock; do
    command -v "$t" >/dev/null || { log_error "$t is not installed: run deploy/install-deps.sh"; exit 1; }
done
take_lock 30 || exit 1
if [ "$STATE" = "$(resolve_state "")" ]; then
    STOP_HINT="make stop   (or deploy/stop.sh)"
else
    STOP_HINT="deploy/stop.sh --state $STATE"
fi

URL="http://127.0.0.1:$port/"

# ---- already running? ----
npid=$(read_pid "$STATE/nginx.pid")
cpid=$(read_pid "$STATE/coordinator.pid")
spid=$(read_pid "$STATE/supervisor.pid")
if pid_alive "$npid" nginx && pid_alive "$cpid" nebula-coordinator && pid_alive "$spid" supervise.sh; then
    RUN_PORT= RUN_URL= RUN_MODEL=
    [ -r "$STATE/instance.env" ] && . "$STATE/instance.env"
    if [ -n "$RUN_PORT" ] && curl -fsS -m 5 -o /dev/null "http://127.0.0.1:$RUN_PORT/api/status" 2>/dev/null; then
        say "already running: $RUN_URL (model $RUN_MODEL; state $STATE)"
        [ "$RUN_PORT" = "$port" ] || say "(it listens on port $RUN_PORT, not $port: stop it first to change)"
        say "stop it with: $STOP_HINT"
        exit 0
    fi
fi
if pid_alive "$npid" nginx || pid_alive "$cpid" nebula-coordinator || pid_alive "$spid" supervise.sh; then
    say "a previous instance in $STATE is only partly up: stopping it first"
    stop_instance 30 1 || { log_error "could not stop the previous instance (see above)"; exit 1; }
else
    # Leftovers of a crash or a reboot: pid files of dead processes, the
    # engine's runtime directory, its /dev/shm regions.
    if [ -n "$cpid" ]; then for o in $(shm_objects "$cpid"); do rm -f "/dev/shm/$o"; done; fi
    rm -rf -- "$STATE/engine"
    remove_www
    rm -f "$STATE/nginx.pid" "$STATE/coordinator.pid" "$STATE/supervisor.pid" "$STATE/instance.env"
fi

# ---- what is needed ----
NGINX=$(command -v nginx || true)
[ -n "$NGINX" ] || for c in /usr/sbin/nginx /sbin/nginx; do [ -x "$c" ] && NGINX=$c && break; done
[ -n "$NGINX" ] || { log_error "nginx is not installed: run deploy/install-deps.sh (make run does)"; exit 1; }
COORD=$NEBULA_BIN/nebula-coordinator
[ -x "$COORD" ] || { log_error "$COORD is missing: run make"; exit 1; }
# (the help read whole first: grep -q would close the pipe early, and under pipefail the writer's SIGPIPE fails it)
coord_help=$("$COORD" --help 2>/dev/null || true)
grep -q -- '--http' <<<"$coord_help" ||
    { log_error "$COORD has no HTTP API (--http): rebuild with make"; exit 1; }
# The gpu-worker's backend (the coordinator's --backend): the GPU
# where this build can run on it, else the CPU reference; asked for
# explicitly, cuda must be usable.
GW=$NEBULA_BIN/nebula-gpu-worker
if [ "$backend" != cpu ]; then
    probe="cuda: $GW is missing" usable=0
    if [ -x "$GW" ] && probe=$("$GW" --probe cuda 2>&1); then usable=1; fi
    if [ "$usable" = 1 ]; then
        say "backend: cuda (${probe#cuda: })"
        backend=cuda
    elif [ "$backend" = cuda ]; then
        log_error "--backend cuda: ${probe#cuda: }"
        exit 1
    else
        say "backend: cpu (no usable GPU: ${probe#cuda: })"
        backend=cpu
    fi
else
    say "backend: cpu (asked for: --backend cpu or nebula.conf's engine.backend)"
fi
[ -r "$WEB/index.html" ] || { log_error "$WEB/index.html is missing: run make web"; exit 1; }

if [ -z "$model" ]; then
    [ "$demo" = 1 ] || { echo "start.sh: give --model FILE, or --demo for the bundled demo model (try --help)" >&2; exit 2; }
    # The trained demo model where the checkout has it (docs/DEMO.md), else the random-weight one, made here.
    trained=$NEBULA_REPO/models/demo/nebula-demo-docs.gguf
    model=$NEBULA_REPO/build/models/demo.gguf
    if [ "$demo_random" = 0 ] && [ -r "$trained" ]; then
        model=$trained
    else
        stale=0
        for f in "$NEBULA_REPO"/tests/fixtures/tiny-a/* "$NEBULA_BIN/nebula-convert"; do [ "$f" -nt "$model" ] && stale=1; done
        if [ ! -s "$model" ] || [ "$stale" = 1 ]; then
            mkdir -p "$(dirname "$model")"
            say "making the demo model (tiny random weights: its answers are noise) → $model"
            # Written aside and renamed: a concurrent start never reads half a file.
            "$NEBULA_BIN/nebula-convert" "$NEBULA_REPO/tests/fixtures/tiny-a" "$model.$$.tmp" --type f32 --name nebula-demo -q &&
                mv -f "$model.$$.tmp" "$model" || { rm -f "$model.$$.tmp"; log_error "could not make the demo model"; exit 1; }
        fi
    fi
fi
[ -r "$model" ] || { log_error "cannot read the model file '$model'"; exit 1; }
model=$(cd "$(dirname "$model")" && pwd)/$(basename "$model")
if [ -n "$mtp" ]; then
    [ -r "$mtp" ] || { log_error "cannot read the MTP file '$mtp'"; exit 1; }
    mtp=$(cd "$(dirname "$mtp")" && pwd)/$(basename "$mtp")
fi
if [ -n "$prepared" ]; then
    [ -r "$prepared/placement.json" ] || { log_error "'$prepared' is not a nebula-prepare directory (no placement.json)"; exit 1; }
    prepared=$(cd "$prepared" && pwd)
fi

# ---- ports ----
# A port is free when we can bind it the way nginx will (127.0.0.1,
# SO_REUSEADDR).  When taken, ss says by whom if it can.
port_free() {
    python3 -c 'import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try: s.bind(("127.0.0.1", int(sys.argv[1])))
except OSError: sys.exit(1)' "$1"
}
port_holder() {
    local line name pid cmd state=
    line=$(ss -Hltnp "sport = :$1" 2>/dev/null | head -n 1)
    if [[ $line =~ users:\(\(\"([^\"]+)\",pid=([0-9]+) ]]; then
        name=${BASH_REMATCH[1]} pid=${BASH_REMATCH[2]}
        # Another Nebula instance (another state directory) is named as such.
        cmd=$(tr '\0' ' ' 2>/dev/null </proc/"$pid"/cmdline || true)
        if [[ $cmd == "nginx: worker process"* ]]; then
            local stat; stat=$(cat "/proc/$pid/stat" 2>/dev/null || true); stat=${stat##*) }
            set -- $stat
            cmd=$(tr '\0' ' ' 2>/dev/null </proc/"${2:-0}"/cmdline || true)
        fi
        if [[ $cmd =~ nginx.*-p\ (/[^ ]*[^/ ])/?\  ]]; then state=${BASH_REMATCH[1]}
        elif [[ $cmd =~ nebula-coordinator.*--runtime\ (/[^ ]+)/engine ]]; then state=${BASH_REMATCH[1]}; fi
        if [ -n "$state" ] && [ -f "$state/nginx.conf" ]; then
            printf 'another Nebula instance (state directory %s; stop it with deploy/stop.sh --state %s)' "$state" "$state"
        else
            printf '%s (pid %s)' "$name" "$pid"
        fi
    else
        printf 'another program'
    fi
}
for p in "$port" "$api_port"; do
    if ! port_free "$p"; then
        what=page; [ "$p" = "$api_port" ] && what=API
        opt=--port; [ "$p" = "$api_port" ] && opt=--api-port
        log_error "port $p (the $what port) is already in use by $(port_holder "$p"); free it, or choose another port (deploy/start.sh $opt N; make run PORT=N API_PORT=N)"
        exit 1
    fi
done

# ---- start: anything started before a failure is stopped again ----
started=0
on_exit() {
    local rc=$?
    if [ "$started" = 1 ] && [ "$rc" -ne 0 ]; then
        log_error "start failed: stopping what was started"
        stop_instance 20 1 || true
    fi
}
trap on_exit EXIT
trap 'exit 130' INT TERM

mkdir -p "$STATE/tmp"
# Logs grow across starts; one over 16 MiB is kept as NAME.1 (one generation).
for f in webui-error.log webui-access.log coordinator.log; do
    if [ -f "$STATE/$f" ] && [ "$(stat -c %s "$STATE/$f")" -gt $((16 << 20)) ]; then mv -f "$STATE/$f" "$STATE/$f.1"; fi
done
: >>"$STATE/webui-error.log"
chmod 600 "$STATE/webui-error.log"
args=(--model "$model" --runtime "$STATE/engine" --http "127.0.0.1:$api_port" --max-body "$max_body" --backend "$backend")
[ -n "$config" ] && args=(--config "$(cd "$(dirname "$config")" && pwd)/$(basename "$config")" "${args[@]}")
[ -n "$prepared" ] && args+=(--prepared "$prepared")
[ -n "$mtp" ] && args+=(--mtp "$mtp")
[ -n "$threads" ] && args+=(--threads "$threads")
[ -n "$name" ] && args+=(--name "$name")
[ "$demo" = 1 ] && args+=(--demo)
printf '==== %s start.sh: %s %s\n' "$(date -u '+%Y-%m-%d %H:%M:%S')" "$COORD" "${args[*]}" >>"$STATE/coordinator.log"
chmod 600 "$STATE/coordinator.log"
started=1
# Its own session: a Ctrl-C in this terminal, or closing it, does not reach
# the engine.  deploy/supervise.sh runs the coordinator as its child, writes
# both pid files, and restarts a coordinator that dies (after removing its
# /dev/shm regions and runtime directory).
rm -f "$STATE/coordinator.pid" "$STATE/supervisor.pid"
setsid "$NEBULA_REPO/deploy/supervise.sh" "$STATE" "$COORD" "${args[@]}" \
    </dev/null >>"$STATE/coordinator.log" 2>&1 9>&- &
for _ in $(seq 50); do [ -s "$STATE/coordinator.pid" ] && break; sleep 0.1; done
cpid=$(read_pid "$STATE/coordinator.pid")

# The HTTP API is up before the model is loaded.
status_json=
for _ in $(seq 600); do
    if ! pid_alive "$cpid" nebula-coordinator; then
        log_error "the coordinator exited during start-up; the end of $STATE/coordinator.log:"
        tail -n 15 "$STATE/coordinator.log" | tee -a "$STATE/webui-error.log" >&2
        exit 1
    fi
    status_json=$(curl -fsS -m 2 "http://127.0.0.1:$api_port/api/status" 2>/dev/null) && break
    status_json=
    sleep 0.1
done
[ -n "$status_json" ] || { log_error "the coordinator's API (127.0.0.1:$api_port) did not answer within 60 s"; exit 1; }

# nginx's workers as root would serve the network with every privilege: when
# started by root, its master (which binds the port and opens the logs) stays
# root and its workers drop to www-data (nobody where there is no www-data).
# They get only what serving needs, in a directory of their own, since the
# state directory and the checkout may lie where they cannot pass (/root):
# WWW=/tmp/nebula-www.XXXXXX (root, group www-data, 0750) holds a copy of the
# page (web/, made at each start) and nginx's temporary files (tmp/).  The
# state directory stays 0700: they cannot read its logs, pid files or
# coordinator.log.  STATE/www points to WWW, which stop.sh removes.
nginx_user=
page_root=$WEB
nginx_tmp=$STATE/tmp
if [ "$(id -u)" = 0 ]; then
    nginx_user=www-data
    id -u "$nginx_user" >/dev/null 2>&1 || nginx_user=nobody
    nginx_group=$(id -gn "$nginx_user")
    www=$(mktemp -d /tmp/nebula-www.XXXXXX) || { log_error "cannot make a directory in /tmp for nginx's workers"; exit 1; }
    ln -sfn "$www" "$STATE/www"
    mkdir "$www/web" "$www/tmp"
    (cd "$WEB" && tar -ch --exclude=./node_modules -f - .) | tar -x -C "$www/web" -f - ||
        { log_error "cannot copy the page $WEB to $www/web"; exit 1; }
    chgrp -R "$nginx_group" "$www"
    chmod -R u=rwX,g=rX,o= "$www"
    chmod 710 "$www/tmp"
    page_root=$www/web nginx_tmp=$www/tmp
fi

# nginx, from the template.
sed -e "s|@STATE@|$STATE|g" -e "s|@WEB@|$page_root|g" -e "s|@TMP@|$nginx_tmp|g" -e "s|@PORT@|$port|g" \
    -e "s|@API_PORT@|$api_port|g" -e "s|@MAX_BODY@|$max_body|g" \
    -e "s|@USER@|${nginx_user:+user $nginx_user $nginx_group;}|" \
    "$NEBULA_REPO/conf/nginx.conf.in" >"$STATE/nginx.conf"
nginx_args=(-p "$STATE/" -c "$STATE/nginx.conf")
# -e (nginx >= 1.19.5) keeps nginx from opening /var/log/nginx/error.log first.
"$NGINX" -h 2>&1 | grep -q -- '-e filename' && nginx_args+=(-e "$STATE/webui-error.log")
if ! out=$("$NGINX" "${nginx_args[@]}" 2>&1 9>&-); then
    printf '%s\n' "$out" >>"$STATE/webui-error.log"
    if [[ $out == *"Address already in use"* ]]; then
        log_error "port $port is already in use by $(port_holder "$port") (taken while starting); choose another port"
    else
        log_error "nginx did not start: $out"
    fi
    exit 1
fi
for _ in $(seq 50); do pid_alive "$(read_pid "$STATE/nginx.pid")" nginx && break; sleep 0.1; done
pid_alive "$(read_pid "$STATE/nginx.pid")" nginx || { log_error "nginx did not start (see $STATE/webui-error.log)"; exit 1; }

page=$(curl -sS -m 5 -o /dev/null -w '%{http_code} %{content_type}' "$URL" 2>&1) || true
[[ $page == "200 text/html"* ]] || { log_error "$URL does not serve the page (got: $page)"; exit 1; }
curl -fsS -m 5 -o /dev/null "${URL}api/status" 2>/dev/null ||
    { log_error "${URL}api/status does not answer through nginx"; exit 1; }

{
    printf 'RUN_PORT=%q\nRUN_API_PORT=%q\nRUN_URL=%q\n' "$port" "$api_port" "$URL"
    printf 'RUN_MODEL=%q\nRUN_STARTED=%q\n' "$model" "$(date -u '+%Y-%m-%dT%H:%M:%SZ')"
} >"$STATE/instance.env"

json_field() { python3 -c 'import json, sys
d = json.loads(sys.argv[1])
for k in sys.argv[2].split("."): d = d.get(k) if isinstance(d, dict) else None
print("" if d is None else d)' "$1" "$2" 2>/dev/null || true; }

say "Nebula is up: $URL"
# The demo says what it is: the coordinator's notice (the trained model's general.description, else random weights').
if [ "$demo" = 1 ] || [ "$(json_field "$status_json" model.demo)" = True ]; then
    notice=$(json_field "$status_json" model.notice)
    say "model: the bundled DEMO model — ${notice:-tiny, random weights: its answers are noise} (make run MODEL=path.gguf serves a real Qwen3.8-Flash-Next)"
fi

# ---- the model loads (the page shows the progress meanwhile) ----
if [ "$wait_s" -gt 0 ]; then
    deadline=$(($(date +%s) + wait_s))
    tty=0 shown=0; [ -t 1 ] && tty=1
    trap 'echo; say "still loading in the background; the page shows the progress"; started=0; exit 0' INT
    while :; do
        status_json=$(curl -fsS -m 5 "http://127.0.0.1:$api_port/api/status" 2>/dev/null) || status_json=
        phase=$(json_field "$status_json" phase)
        case $phase in
        ready) break ;;
        error)
            [ "$shown" = 1 ] && echo
            log_error "the model did not load: $(json_field "$status_json" message) (see $STATE/coordinator.log)"
            exit 1 ;;
        esac
        if ! pid_alive "$cpid" nebula-coordinator; then
            [ "$shown" = 1 ] && echo
            log_error "the coordinator exited while loading; the end of $STATE/coordinator.log:"
            tail -n 15 "$STATE/coordinator.log" | tee -a "$STATE/webui-error.log" >&2
            exit 1
        fi
        if [ "$(date +%s)" -ge "$deadline" ]; then
            [ "$shown" = 1 ] && echo
            say "still loading after ${wait_s}s; it goes on in the background (the page shows the progress)"
            break
        fi
        if [ "$tty" = 1 ]; then
            pct=$(python3 -c 'import sys; print(int(100 * float(sys.argv[1] or 0)))' "$(json_field "$status_json" progress)" 2>/dev/null || echo 0)
            printf '\rnebula: %s %3s%%  %-50.50s' "${phase:-starting}" "$pct" "$(json_field "$status_json" message)"
            shown=1
        fi
        sleep 0.5
    done
    [ "$shown" = 1 ] && printf '\r%-80s\r' ''
    [ "$phase" = ready ] && say "model loaded and ready"
fi
started=0
say "open $URL in a browser; stop with: $STOP_HINT"
say "logs: $STATE/webui-error.log, webui-access.log, coordinator.log"
