# shellcheck shell=bash
# lib.sh — what the deploy tests share (sourced, not run): finding the
# processes of an instance, a process's children, liveness, free ports, the
# test's directories.

# Processes whose command line mentions $1 (the state directory is in nginx's
# master's, the supervisor's and the coordinator's), but for this test script
# and the helper itself.
procs_of() { python3 - "$1" "$$" "$(basename "$0")" <<'PY'
import os, sys
for p in filter(str.isdigit, os.listdir("/proc")):
    try:
        cmd = open("/proc/%s/cmdline" % p, "rb").read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        continue
    if sys.argv[1] in cmd and p != sys.argv[2] and "python3 - " not in cmd and sys.argv[3] not in cmd:
        print(p)
PY
}
# The children of pid $1.
children() { python3 - "$1" <<'PY'
import os, sys
for p in filter(str.isdigit, os.listdir("/proc")):
    try:
        stat = open("/proc/%s/stat" % p).read()
    except OSError:
        continue
    if stat[stat.rindex(")") + 2:].split()[1] == sys.argv[1]:
        print(p)
PY
}
# A live process (a zombie waiting for init to reap it is gone).
alive() { local s; s=$(cat "/proc/$1/stat" 2>/dev/null) || return 1; s=${s##*) }; [ "${s%% *}" != Z ]; }
# $1 free ports of 127.0.0.1, on one line.
free_ports() { python3 -c 'import socket
ss = [socket.socket() for _ in range(int(__import__("sys").argv[1]))]
for s in ss: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in ss))' "$1"; }
# The test's directories: bin (absolute: $BUILD/bin), WEB (the page), tmp (a
# fresh /tmp/$1.XXXXXX) and S=$tmp/a, short: the control socket path must fit
# in a sockaddr_un.
deploy_dirs() {
    bin=${BUILD:-build}/bin
    case $bin in /*) ;; *) bin=$PWD/$bin ;; esac
    WEB=${NEBULA_WEB:-$PWD/web}
    tmp=$(mktemp -d "/tmp/$1.XXXXXX")
    S=$tmp/a
}
