/* nebulactl — the control CLI of a running coordinator (ARCHITECTURE.md §1).
 *
 * Finds the instance's runtime directory (--runtime DIR, --instance ID, or the
 * only instance under the default base), sends one request to its ctl.sock
 * (REQ/REP, core/ctl) and prints the reply as a table (or as JSON with
 * --json).  A missing or silent coordinator is a one-line error, exit 1;
 * a usage error exits 2. */
#include "core/ctl/ctl.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void usage(FILE *f)
{
    fprintf(f, "usage: nebulactl [--runtime DIR | --instance ID] [--json] COMMAND\n"
               "\n"
               "commands:\n"
               "  status           workers, pids, states, restarts, uptime, tier sizes, hit rates, SSD bytes/token,\n"
               "                   routed experts computed\n"
               "  stats            every worker's counters (from the stats region) and the\n"
               "                   speculative decoding totals (passes, tokens a pass, drafts accepted)\n"
               "  profile WORKER   per-stage times of one worker (busy, ring waits, per layer)\n"
               "  restart WORKER   kill WORKER and wait until its successor is ready\n"
               "  shutdown         stop the instance (workers, regions, runtime directory)\n"
               "\n"
               "  --runtime DIR    the coordinator's runtime directory (holds ctl.sock)\n"
               "  --instance ID    an instance id under $XDG_RUNTIME_DIR/nebula or /tmp/nebula-<uid>\n"
               "                   (default: the only instance there)\n"
               "  --json           print the reply as JSON\n");
}

static void default_base(char *buf, size_t len)
{
    const char *xdg = getenv("XDG_RUNTIME_DIR");
    if (xdg && *xdg) snprintf(buf, len, "%s/nebula", xdg);
    else snprintf(buf, len, "/tmp/nebula-%d", (int)getuid());
}

/* The runtime directory: given, by instance id, or the only one there. */
static int find_rundir(const char *runtime, const char *instance, char *out, size_t len)
{
    char base[PATH_MAX / 2];
    default_base(base, sizeof base);
    if (runtime) return snprintf(out, len, "%s", runtime) >= (int)len;
    if (instance) return snprintf(out, len, "%s/%s", base, instance) >= (int)len;
    DIR *d = opendir(base);
    struct dirent *e;
    int n = 0;
    while (d && (e = readdir(d)))
        if (e->d_name[0] != '.') n++, snprintf(out, len, "%s/%.200s", base, e->d_name);
    if (d) closedir(d);
    if (n == 1) return 0;
    fprintf(stderr, "nebulactl: %s under %s: give --runtime DIR or --instance ID\n",
            n ? "several instances" : "no coordinator is running (no instance)", base);
    return 1;
}

/* One request, one reply (timeout_ms); prints the reason on failure. */
static int call(const char *rundir, cJSON *req, int timeout_ms, cJSON **reply)
{
    char sock[PATH_MAX], ep[PATH_MAX + 16], err[256];
    struct stat st;
    snprintf(sock, sizeof sock, "%.*s/ctl.sock", PATH_MAX - 16, rundir);
    if (stat(sock, &st) || !S_ISSOCK(st.st_mode)) {
        fprintf(stderr, "nebulactl: no coordinator at %s (no ctl.sock)\n", rundir);
        return 1;
    }
    ctl_sock *s;
    ctl_endpoint(ep, sizeof ep, rundir, "ctl.sock");
    int rc = ctl_open(CTL_REQ, ep, NULL, &s, err, sizeof err);
    if (!rc) rc = ctl_send(s, NULL, req, err, sizeof err);
    if (!rc) rc = ctl_recv(s, timeout_ms, NULL, 0, reply, err, sizeof err);
    if (rc) fprintf(stderr, "nebulactl: the coordinator at %s does not answer: %s\n", rundir, err);
    ctl_close(s);
    ctl_term();
    return rc ? 1 : 0;
}

static double num(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

static const char *str(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : "";
}

static void print_status(const cJSON *r)
{
    const cJSON *w, *tiers = cJSON_GetObjectItemCaseSensitive(r, "tiers");
    printf("instance %s  pid %.0f  up %.1f s  runtime %s\n", str(r, "instance"), num(r, "pid"), num(r, "uptime_s"), str(r, "runtime"));
    printf("model %s\nplacement %s\n", str(r, "model"), str(r, "placement"));
    static const char *names[] = {"vram", "ram", "ssd"};
    printf("tiers:");
    for (int t = 0; t < 3; t++) {
        const cJSON *o = cJSON_GetObjectItemCaseSensitive(tiers, names[t]);
        printf("  %s %.0f experts (%.1f MiB)", names[t], num(o, "experts"), num(o, "bytes") / 1048576.0);
    }
    printf("\nexperts resident on the gpu-worker: %.1f%% (%.0f hits, %.0f misses); cpu-moe-worker RAM hits %.1f%%\n",
           100 * num(r, "vram_hit_rate"), num(r, "expert_hits"), num(r, "expert_misses"), 100 * num(r, "ram_hit_rate"));
    printf("SSD bytes per token: %.0f (of which PLE rows %.0f; PLE table in %s)\n", num(r, "ssd_bytes_per_token"),
           num(r, "ssd_ple_bytes_per_token"), str(r, "ple_tier"));
    printf("routed experts computed: %.0f (%.2f per token evaluated)\n", num(r, "experts_computed"),
           num(r, "experts_computed_per_token"));
    printf("gpu-worker VRAM peak: %.1f MiB\n", num(r, "vram_peak_bytes") / 1048576.0);
    const cJSON *sl = cJSON_GetObjectItemCaseSensitive(r, "slots");
    const cJSON *ad = cJSON_GetObjectItemCaseSensitive(sl, "adapt");
    if (cJSON_IsString(ad) && !strcmp(ad->valuestring, "static")) printf("slots static: the placement's\n");
    else if (cJSON_IsObject(sl)) {
        printf("slots %s: decode hit rate %.1f%% (the placement's slots: %.1f%%), %.0f swaps (%.1f MiB), %.0f steps waited for a copy\n",
               cJSON_IsString(ad) ? ad->valuestring : "?", 100 * num(sl, "hit_rate"), 100 * num(sl, "static_hit_rate"),
               num(sl, "swaps"), num(sl, "bytes") / 1048576.0, num(sl, "waited_steps"));
    }
    printf("%-16s %8s %-12s %8s %10s %10s\n", "worker", "pid", "state", "restarts", "uptime_s", "beat_ago_s");
    cJSON_ArrayForEach(w, cJSON_GetObjectItemCaseSensitive(r, "workers"))
        printf("%-16s %8.0f %-12s %8.0f %10.1f %10.1f\n", str(w, "role"), num(w, "pid"), str(w, "state"), num(w, "restarts"),
               num(w, "uptime_s"), num(w, "last_heartbeat_s"));
}

static void print_stats(const cJSON *r)
{
    const cJSON *w, *c;
    cJSON_ArrayForEach(w, cJSON_GetObjectItemCaseSensitive(r, "workers"))
    {
        printf("%s (pid %.0f, %s)\n", str(w, "name"), num(w, "pid"), cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(w, "alive")) ? "alive" : "gone");
        cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(w, "counters")) printf("  %-16s %.0f\n", c->string, c->valuedouble);
    }
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(r, "speculative"), *d = cJSON_GetObjectItemCaseSensitive(s, "drafters");
    if (!cJSON_IsObject(s)) return;
    printf("speculative: %.0f passes (mtp %.0f, lookup %.0f), %.2f tokens a pass, %.0f of %.0f drafts accepted (%.1f %%), "
           "%.0f by the accuracy level\n  accepted by position:",
           num(s, "passes"), num(d, "mtp"), num(d, "lookup"), num(s, "tokens_per_pass"), num(s, "accepted"), num(s, "drafted"),
           100 * num(s, "acceptance"), num(s, "nongreedy_accepted"));
    int i = 0;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(s, "acceptance_by_position")) printf(" %d:%.0f%%", ++i, 100 * c->valuedouble);
    printf(i ? "\n" : " none\n");
    const cJSON *cv = cJSON_GetObjectItemCaseSensitive(s, "coverage");
    if (cJSON_IsObject(cv))
        printf("  coverage mode: cases A %.0f, B %.0f, C %.0f; %.0f rows computed with all their experts\n", num(cv, "case_a"),
               num(cv, "case_b"), num(cv, "case_c"), num(cv, "handoff_rows"));
    const cJSON *pc = cJSON_GetObjectItemCaseSensitive(r, "prompt_cache");
    if (pc) {
        printf("prompt cache (%s)\n", cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(pc, "enabled")) ? "on" : "off");
        cJSON_ArrayForEach(c, pc) if (cJSON_IsNumber(c)) printf("  %-16s %.0f\n", c->string, c->valuedouble);
    }
}

static void print_profile(const cJSON *r)
{
    const cJSON *l;
    double steps = num(r, "steps");
    printf("%s: %.0f steps, %.0f tokens, busy %.3f s, ring waits %.3f s\n", str(r, "worker"), steps, num(r, "tokens"),
           num(r, "busy_ns") / 1e9, num(r, "ring_wait_ns") / 1e9);
    printf("%6s %10s %12s %12s\n", "layer", "calls", "total_ms", "mean_us");
    cJSON_ArrayForEach(l, cJSON_GetObjectItemCaseSensitive(r, "layers"))
        printf("%6.0f %10.0f %12.3f %12.1f\n", num(l, "layer"), num(l, "calls"), num(l, "ns") / 1e6,
               num(l, "calls") > 0 ? num(l, "ns") / 1e3 / num(l, "calls") : 0);
}

/* After shutdown's reply: waits (10 s) for the coordinator to remove its directory. */
static int wait_gone(const char *rundir)
{
    for (int i = 0; i < 200; i++) {
        if (access(rundir, F_OK)) return 0;
        usleep(50000);
    }
    fprintf(stderr, "nebulactl: %s still exists 10 s after shutdown\n", rundir);
    return 1;
}

int main(int argc, char **argv)
{
    const char *runtime = NULL, *instance = NULL;
    bool json = false;
    int i = 1;
    for (; i < argc && argv[i][0] == '-'; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return usage(stdout), 0;
        if (!strcmp(argv[i], "--json")) json = true;
        else if (!strcmp(argv[i], "--runtime") && i + 1 < argc) runtime = argv[++i];
        else if (!strcmp(argv[i], "--instance") && i + 1 < argc) instance = argv[++i];
        else return usage(stderr), 2;
    }
    const char *cmd = i < argc ? argv[i++] : NULL, *arg = i < argc ? argv[i++] : NULL;
    bool needs_worker = cmd && (!strcmp(cmd, "profile") || !strcmp(cmd, "restart"));
    bool known = cmd && (needs_worker || !strcmp(cmd, "status") || !strcmp(cmd, "stats") || !strcmp(cmd, "shutdown"));
    if (!known || (needs_worker != !!arg) || i < argc) {
        fprintf(stderr, "nebulactl: %s\n", !known ? "unknown or missing command" : "wrong arguments for the command");
        return usage(stderr), 2;
    }
    char rundir[PATH_MAX];
    if (find_rundir(runtime, instance, rundir, sizeof rundir)) return 1;
    cJSON *req = ctl_msg(cmd), *reply = NULL;
    if (arg) cJSON_AddStringToObject(req, "worker", arg);
    int rc = call(rundir, req, !strcmp(cmd, "restart") ? 90000 : 10000, &reply);
    cJSON_Delete(req);
    if (rc) return 1;
    if (!strcmp(ctl_type(reply), "error")) {
        fprintf(stderr, "nebulactl: %s\n", str(reply, "message"));
        rc = 1;
    } else if (json) {
        char *text = cJSON_Print(reply);
        printf("%s\n", text);
        free(text);
    } else if (!strcmp(cmd, "status")) print_status(reply);
    else if (!strcmp(cmd, "stats")) print_stats(reply);
    else if (!strcmp(cmd, "profile")) print_profile(reply);
    else printf("%s: ok\n", cmd);
    if (!rc && !strcmp(cmd, "shutdown")) rc = wait_gone(rundir);
    cJSON_Delete(reply);
    return rc;
}
