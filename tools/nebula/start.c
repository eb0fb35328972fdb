/* start.c — `nebula start` and `nebula stop`: the two commands a person needs.
 *
 * They run this checkout's deploy/start.sh and deploy/stop.sh (found from the
 * binary, BIN/../../deploy/, as nebula.conf is), which do the work and keep
 * their guarantees: a second start reuses the running engine, a failed start
 * leaves nothing behind, a stop leaves no process.  `nebula start` then opens
 * the page in the browser where there is a desktop (xdg-open; wslview or
 * explorer.exe under WSL), reading the URL from the state directory's
 * instance.env, which start.sh writes. */
#include "tools/nebula/cli.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* BIN/../../deploy/NAME of this binary. */
static int script_path(const char *name, char *buf, size_t len)
{
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return -1;
    exe[n] = 0;
    char *slash = strrchr(exe, '/');
    if (!slash) return -1;
    *slash = 0;
    int k = snprintf(buf, len, "%s/../../deploy/%s", exe, name);
    return k > 0 && (size_t)k < len && access(buf, R_OK) == 0 ? 0 : -1;
}

/* Runs bash SCRIPT ARGS... and returns its exit status. */
static int run_script(const char *script, int argc, char **argv)
{
    char **args = calloc((size_t)argc + 3, sizeof *args);
    if (!args) return CLI_FAIL;
    args[0] = "bash";
    args[1] = (char *)script;
    for (int i = 0; i < argc; i++) args[i + 2] = argv[i];
    pid_t pid = fork();
    if (pid == 0) {
        execvp("bash", args);
        perror("nebula: bash");
        _exit(127);
    }
    free(args);
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) < 0) return CLI_FAIL;
    return WIFEXITED(st) ? WEXITSTATUS(st) : CLI_FAIL;
}

/* The state directory start.sh used: --state DIR, else as deploy/common.sh resolves it. */
static void state_dir(int argc, char **argv, char *buf, size_t len)
{
    for (int i = 0; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--state")) {
            snprintf(buf, len, "%s", argv[i + 1]);
            return;
        }
    const char *s = getenv("NEBULA_STATE_DIR"), *x = getenv("XDG_STATE_HOME"), *h = getenv("HOME");
    if (s && *s) snprintf(buf, len, "%s", s);
    else if (x && *x) snprintf(buf, len, "%s/nebula", x);
    else snprintf(buf, len, "%s/.local/state/nebula", h ? h : ".");
}

/* RUN_URL=... of STATE/instance.env. */
static int read_url(const char *state, char *url, size_t len)
{
    char path[4200], line[1024];
    snprintf(path, sizeof path, "%s/instance.env", state);
    FILE *f = fopen(path, "r");
    int rc = -1;
    while (f && fgets(line, sizeof line, f)) {
        if (strncmp(line, "RUN_URL=", 8)) continue;
        char *v = line + 8;
        v[strcspn(v, "\r\n")] = 0;
        if (*v == '\'' || *v == '"') { /* the shell's quoting of a plain URL */
            v++;
            v[strcspn(v, "'\"")] = 0;
        }
        snprintf(url, len, "%s", v);
        rc = 0;
    }
    if (f) fclose(f);
    return rc;
}

static bool is_wsl(void) { return access("/proc/sys/fs/binfmt_misc/WSLInterop", F_OK) == 0; }

/* Opens url in the desktop's browser, detached; says what it did. */
static void open_browser(const char *url)
{
    const char *openers[] = {"xdg-open", "wslview", "explorer.exe"};
    int first = is_wsl() ? 1 : 0, last = is_wsl() ? 2 : 0;
    bool desktop = getenv("DISPLAY") || getenv("WAYLAND_DISPLAY") || is_wsl();
    if (!desktop) {
        printf("nebula: no desktop here: open %s in a browser\n", url);
        return;
    }
    for (int i = first; i <= last; i++) {
        pid_t pid = fork();
        if (pid == 0) {
            setsid();
            int null = open("/dev/null", O_RDWR);
            if (null >= 0) dup2(null, 0), dup2(null, 1), dup2(null, 2);
            execlp(openers[i], openers[i], url, (char *)NULL);
            _exit(127);
        }
        int st = 0;
        /* The opener returns at once (the browser is its child): its status says whether it ran. */
        if (pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) != 127) {
            printf("nebula: opened %s in the browser\n", url);
            return;
        }
    }
    printf("nebula: no browser opener found (xdg-open): open %s in a browser\n", url);
}

int cmd_start(int argc, char **argv)
{
    char script[4200], state[4096], url[1024];
    bool browser = true;
    int n = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--no-browser")) browser = false;
        else argv[1 + n++] = argv[i];
    }
    if (n == 1 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
        printf("usage: nebula start [--no-browser] [deploy/start.sh options]\n"
               "Starts Nebula (deploy/start.sh: the engine, the chat page on 127.0.0.1) or finds it\n"
               "running, then opens the page in the browser where there is a desktop.\n"
               "deploy/start.sh --help lists its options; nebula stop stops it.\n");
        return CLI_OK;
    }
    if (script_path("start.sh", script, sizeof script)) {
        fprintf(stderr, "nebula: deploy/start.sh not found beside this binary (a build of a Nebula checkout)\n");
        return CLI_FAIL;
    }
    int rc = run_script(script, n, argv + 1);
    if (rc != 0) return rc;
    state_dir(n, argv + 1, state, sizeof state);
    if (browser && read_url(state, url, sizeof url) == 0) open_browser(url);
    return CLI_OK;
}

int cmd_stop(int argc, char **argv)
{
    char script[4200];
    if (argc == 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
        printf("usage: nebula stop [deploy/stop.sh options]\nStops what nebula start started (deploy/stop.sh).\n");
        return CLI_OK;
    }
    if (script_path("stop.sh", script, sizeof script)) {
        fprintf(stderr, "nebula: deploy/stop.sh not found beside this binary (a build of a Nebula checkout)\n");
        return CLI_FAIL;
    }
    return run_script(script, argc - 1, argv + 1);
}
