/* nebula-bench-ring — round-trip latency between two processes through a
 * request/response ring pair (shm/), the gpu-worker ↔ cpu-moe-worker hand-off.
 *
 *   nebula-bench-ring [--seconds S] [--spin-us U] [--gap-us G]
 *
 * The client (this process) writes R rows of 2560 fp32 activations and their
 * expert ids/weights into a request slot and publishes it; an echo server
 * (a forked child that maps the region by name, as a worker would) copies the
 * rows into a response slot and publishes that; the client reads the rows back
 * and releases.  One round trip = that whole path, data movement included.
 * For R = 1 and 16, and R = 0 (the header alone: what the signalling costs
 * without data), and three ways of waiting (spin only; spin U µs, then futex;
 * futex at once) it prints p50 / p99 / p99.9 in µs and round trips per
 * second as a Markdown table (tools/bench/run-bench.sh appends it to
 * docs/BENCHMARKS.md).  Both sides wait the same way.
 * --gap-us G puts G µs (spun by the client, not timed) between one round
 * trip and the next, as a decode token's GPU work does between two layers'
 * requests: with a gap longer than the spin the server is asleep when the
 * request comes, and the round trip includes its futex wake-up.
 * Exit status: 0 ok, 1 a shared-memory or echo failure, 2 bad usage. */
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "shm/shm.h"
#include "core/util/clock.h"

#define ROW_FLOATS 2560 /* hidden size C of the model */
#define MAX_ROWS 16
#define TOP_K 10
#define WARMUP_ROUND_TRIPS 2000
#define WAIT_NS 5000000000ull /* a wait longer than this is a failure, not a latency */

static const char usage[] =
    "usage: nebula-bench-ring [--seconds S] [--spin-us U] [--gap-us G]\n"
    "\n"
    "  --seconds S   measuring time per table row, default 2\n"
    "  --spin-us U   spin budget of the spin-then-futex rows, default 50\n"
    "  --gap-us G    untimed pause of the client between round trips, default 0\n"
    "  --help        this text\n"
    "\n"
    "exit status: 0 ok, 1 a shared-memory or echo failure, 2 bad usage\n";

struct options {
    double seconds;
    double spin_us;
    double gap_us;
};

static int bad_usage(const char *why)
{
    fprintf(stderr, "nebula-bench-ring: %s\n%s", why, usage);
    return 2;
}

/* Fills opt from argv; returns 0, 1 for --help, or 2 for bad usage. */
static int parse_args(int argc, char **argv, struct options *opt)
{
    *opt = (struct options){2.0, 50.0, 0.0};
    for (int i = 1; i < argc; i += 2) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end;
        if (strcmp(a, "--help") == 0) {
            fputs(usage, stdout);
            return 1;
        } else if (strcmp(a, "--seconds") == 0 && v) {
            opt->seconds = strtod(v, &end);
            if (*end || !(opt->seconds > 0 && opt->seconds <= 60)) return bad_usage("--seconds wants a number in (0, 60]");
        } else if (strcmp(a, "--spin-us") == 0 && v) {
            opt->spin_us = strtod(v, &end);
            if (*end || !(opt->spin_us >= 1 && opt->spin_us <= 1e6)) return bad_usage("--spin-us wants 1 to 1e6");
        } else if (strcmp(a, "--gap-us") == 0 && v) {
            opt->gap_us = strtod(v, &end);
            if (*end || !(opt->gap_us >= 0 && opt->gap_us <= 1e6)) return bad_usage("--gap-us wants 0 to 1e6");
        } else {
            bool known = !strcmp(a, "--seconds") || !strcmp(a, "--spin-us") || !strcmp(a, "--gap-us");
            return bad_usage(known ? "missing value" : "unknown argument");
        }
    }
    return 0;
}

/* One table row's way of waiting. */
struct wait_kind {
    const char *name;
    struct ring_options opt;
};

/* ---- the echo server (child) ---- */

/* Copies each request into a response until a request flagged LAST. */
static int echo(const char *id, const struct ring_options *opt, char *err, size_t errlen)
{
    struct shm_region reg;
    struct ring_pair pair;
    int rc = shm_region_open(id, "bench-ring", &reg, err, errlen);
    if (rc != 0) return rc;
    if ((rc = ring_pair_attach(&pair, &reg, 0, RING_SERVER, opt, err, errlen)) != 0) {
        shm_region_close(&reg);
        return rc;
    }
    for (bool last = false; !last && rc == 0;) {
        struct ring_slot q, a;
        if ((rc = ring_wait(pair.req, &q, WAIT_NS, err, errlen)) != 0) break;
        if ((rc = ring_reserve(pair.resp, &a, WAIT_NS, err, errlen)) != 0) break;
        a.hdr->layer = q.hdr->layer;
        a.hdr->n_tokens = q.hdr->n_tokens;
        a.hdr->payload_bytes = q.hdr->payload_bytes;
        a.hdr->tag = q.hdr->tag;
        memcpy(a.payload, q.payload, q.hdr->payload_bytes);
        last = q.hdr->flags & RING_FLAG_LAST;
        if ((rc = ring_publish(pair.resp, err, errlen)) == 0) rc = ring_release(pair.req, err, errlen);
    }
    ring_pair_detach(&pair);
    shm_region_close(&reg);
    return rc;
}

/* ---- the client (this process) ---- */

struct sample_set {
    uint64_t *ns;
    size_t n, cap;
};

/* True while the forked echo server has not exited. */
static bool server_running(pid_t server)
{
    int status;
    return waitpid(server, &status, WNOHANG) == 0;
}

/* One round trip of `rows` rows; 0 or an error.  The response must carry the
 * request's tag and rows back, or the echo is broken.  Until the row's fresh
 * server has attached, the ring still names the previous row's server, which
 * left after its LAST message: the wait ends with SHM_EPEER although nobody
 * is gone.  So SHM_EPEER counts only once `server` has exited; before that the
 * wait is retried (the answer is still to come). */
static int round_trip(struct ring_pair *pair, pid_t server, uint32_t rows, uint64_t tag, const float *src, float *dst,
                      bool last, char *err, size_t errlen)
{
    struct ring_slot q, a;
    int rc = ring_reserve(pair->req, &q, WAIT_NS, err, errlen);
    if (rc != 0) return rc;
    q.hdr->layer = (uint32_t)(tag % 48);
    q.hdr->n_tokens = rows;
    q.hdr->n_experts = TOP_K;
    q.hdr->payload_bytes = rows * ROW_FLOATS * (uint32_t)sizeof(float);
    q.hdr->tag = tag;
    q.hdr->flags = last ? RING_FLAG_LAST : 0;
    for (uint32_t i = 0; i < rows * TOP_K; i++) {
        q.expert_ids[i] = (int32_t)((tag + i) % 512);
        q.expert_weights[i] = 0.1f;
    }
    memcpy(q.payload, src, q.hdr->payload_bytes);
    if ((rc = ring_publish(pair->req, err, errlen)) != 0) return rc;
    while ((rc = ring_wait(pair->resp, &a, WAIT_NS, err, errlen)) == SHM_EPEER && server_running(server))
        usleep(1000);
    if (rc != 0) return rc;
    memcpy(dst, a.payload, a.hdr->payload_bytes);
    if (a.hdr->tag != tag || a.hdr->payload_bytes != rows * ROW_FLOATS * sizeof(float) ||
        (rows > 0 && dst[rows * ROW_FLOATS - 1] != src[rows * ROW_FLOATS - 1]))
        return nb_errf(err, errlen, NB_EFORMAT, "round trip %llu: the echo does not match the request",
                       (unsigned long long)tag);
    return ring_release(pair->resp, err, errlen);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static double percentile_us(const struct sample_set *s, double p)
{
    size_t i = (size_t)ceil(p * (double)s->n) - 1;
    return (double)s->ns[i < s->n ? i : s->n - 1] / 1000.0;
}

/* Runs one table row: a fresh echo server, warm-up, then `seconds` of round
 * trips, gap_ns apart.  Fills s and *elapsed_s (gaps included). */
static int measure(const struct shm_region *reg, const char *id, const struct wait_kind *wk, uint32_t rows,
                   double seconds, uint64_t gap_ns, const float *src, float *dst, struct sample_set *s,
                   double *elapsed_s, char *err, size_t errlen)
{
    struct ring_pair pair;
    int rc = ring_pair_attach(&pair, reg, 0, RING_CLIENT, &wk->opt, err, errlen);
    if (rc != 0) return rc;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        ring_pair_detach(&pair);
        return nb_errf(err, errlen, NB_EIO, "fork failed");
    }
    if (pid == 0) {
        /* Drop the inherited descriptor: it shares the client's attach locks,
         * which would keep the client "alive" here after its death. */
        close(reg->fd);
        char cerr[256];
        int crc = echo(id, &wk->opt, cerr, sizeof cerr);
        if (crc != 0) fprintf(stderr, "nebula-bench-ring: echo server: %s\n", cerr);
        _exit(crc == 0 ? 0 : 1);
    }
    uint64_t tag = 0;
    for (int i = 0; i < WARMUP_ROUND_TRIPS && rc == 0; i++)
        rc = round_trip(&pair, pid, rows, tag++, src, dst, false, err, errlen);
    s->n = 0;
    uint64_t t_start = nb_now_ns(), t_end = t_start + (uint64_t)(seconds * 1e9), t = t_start;
    while (rc == 0 && t < t_end && s->n < s->cap) {
        if (gap_ns) { /* the client is busy elsewhere: spun, not slept, so only the server's wait is measured */
            for (uint64_t until = t + gap_ns; (t = nb_now_ns()) < until;)
                ;
        }
        rc = round_trip(&pair, pid, rows, tag++, src, dst, false, err, errlen);
        uint64_t t1 = nb_now_ns();
        s->ns[s->n++] = t1 - t;
        t = t1;
    }
    *elapsed_s = (double)(t - t_start) / 1e9;
    if (rc == 0) rc = round_trip(&pair, pid, rows, tag++, src, dst, true, err, errlen); /* LAST: the server leaves */
    if (rc != 0) kill(pid, SIGKILL);
    int status;
    waitpid(pid, &status, 0);
    if (rc == 0 && !(WIFEXITED(status) && WEXITSTATUS(status) == 0))
        rc = nb_errf(err, errlen, NB_EIO, "the echo server failed");
    ring_pair_detach(&pair);
    return rc;
}

static double load_average(void)
{
    double l = -1;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &l) != 1) l = -1;
        fclose(f);
    }
    return l;
}

static int run(const struct options *opt, char *err, size_t errlen)
{
    const struct ring_geometry g = {4, MAX_ROWS, TOP_K, MAX_ROWS * ROW_FLOATS * sizeof(float)};
    const struct wait_kind kinds[] = {
        {"spin", {.mode = RING_WAIT_SPIN}},
        {"spin, then futex", {.mode = RING_WAIT_FUTEX, .spin_ns = (uint64_t)(opt->spin_us * 1000)}},
        {"futex at once", {.mode = RING_WAIT_FUTEX, .spin_ns = 1}},
    };
    const uint32_t row_counts[] = {0, 1, MAX_ROWS};

    shm_instance *inst;
    int rc = shm_instance_create(&inst, NULL, err, errlen);
    if (rc != 0) return rc;
    struct shm_region reg = {.fd = -1};
    struct sample_set s = {.cap = (size_t)(opt->seconds * 2e6) + 16}; /* room for 0.5 µs round trips */
    s.ns = malloc(s.cap * sizeof *s.ns);
    float *src = malloc(MAX_ROWS * ROW_FLOATS * sizeof(float)), *dst = malloc(MAX_ROWS * ROW_FLOATS * sizeof(float));
    if (!s.ns || !src || !dst) rc = nb_errf(err, errlen, NB_ENOMEM, "out of memory");
    if (rc == 0) rc = shm_region_create(inst, "bench-ring", ring_pair_bytes(&g), &reg, err, errlen);
    if (rc == 0) rc = ring_pair_format(&reg, 0, &g, err, errlen);
    for (size_t i = 0; rc == 0 && i < (size_t)MAX_ROWS * ROW_FLOATS; i++) src[i] = (float)(i % 1000) * 0.001f;

    if (rc == 0) {
        printf("Round trip between two processes through a request/response ring pair (shm/): the client writes "
               "R rows of %d fp32 (and %d expert ids + weights per row) into a request slot, an echo process copies "
               "the rows into a response slot, the client reads them back. %u slots per ring, %.1f s per row after "
               "%d warm-up round trips; \"spin, then futex\" spins %.0f µs first; %.0f µs between round trips. "
               "Load average at start: %.2f.\n\n",
               ROW_FLOATS, TOP_K, g.n_slots, opt->seconds, WARMUP_ROUND_TRIPS, opt->spin_us, opt->gap_us,
               load_average());
        printf("| rows | payload KiB | wait             | round trips |  p50 µs |  p99 µs | p99.9 µs | round trips/s |\n");
        printf("|-----:|------------:|------------------|------------:|--------:|--------:|---------:|--------------:|\n");
    }
    for (size_t r = 0; rc == 0 && r < sizeof row_counts / sizeof *row_counts; r++) {
        for (size_t k = 0; rc == 0 && k < sizeof kinds / sizeof *kinds; k++) {
            double elapsed = 0;
            rc = measure(&reg, shm_instance_id(inst), &kinds[k], row_counts[r], opt->seconds,
                         (uint64_t)(opt->gap_us * 1000), src, dst, &s, &elapsed, err, errlen);
            if (rc != 0) break;
            qsort(s.ns, s.n, sizeof *s.ns, cmp_u64);
            printf("| %4u | %11.0f | %-16s | %11zu | %7.2f | %7.2f | %8.2f | %13.0f |\n", row_counts[r],
                   row_counts[r] * ROW_FLOATS * 4 / 1024.0, kinds[k].name, s.n, percentile_us(&s, 0.50),
                   percentile_us(&s, 0.99), percentile_us(&s, 0.999), (double)s.n / elapsed);
            fflush(stdout);
        }
    }
    shm_region_close(&reg);
    char derr[256];
    int drc = shm_instance_destroy(inst, derr, sizeof derr); /* nothing stays in /dev/shm, even after a failure */
    if (rc == 0 && drc != 0) rc = nb_errf(err, errlen, drc, "%s", derr);
    free(s.ns), free(src), free(dst);
    return rc;
}

int main(int argc, char **argv)
{
    struct options opt;
    int a = parse_args(argc, argv, &opt);
    if (a) return a == 1 ? 0 : 2;
    char err[256];
    int rc = run(&opt, err, sizeof err);
    if (rc != 0) {
        fprintf(stderr, "nebula-bench-ring: %s (%s)\n", err, shm_strerror(rc));
        return 1;
    }
    return 0;
}
