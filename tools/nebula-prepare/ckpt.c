/* ckpt.c — writing a large output so that an interrupted run resumes.
 *
 * The one idea: the output is a deterministic function of the input, split
 * into units (a layer of expert blobs, 256 MiB of n-gram pages).  Bytes go
 * to NAME.tmp; after each unit the file is synced and NAME.state records
 * "identity + units done".  A later run with the same identity re-reads the
 * recorded prefix, compares it chunk by chunk with freshly produced bytes
 * (memcmp, far cheaper than trusting or re-hashing a separate digest) and
 * feeds it to the whole-file SHA-256; it continues from the first byte that
 * differs, or from the checkpoint.  Bytes written after the last checkpoint
 * are never trusted: the file is truncated there.  When all units are in,
 * NAME.tmp is synced and renamed to NAME and the state file removed. */
#include "tools/nebula-prepare/prepare.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/util/err.h"

#define CHUNK_BYTES ((size_t)64 << 20)

volatile int prep_interrupted;
static int test_kill_after = -1, test_kill_signal;

void ckpt_set_test_kill(int after_units, int sig)
{
    test_kill_after = after_units;
    test_kill_signal = sig;
}

struct ckpt {
    const char *dir, *name;
    char tmp[4200], state[4200];
    const char *identity;
    const struct ckpt_source *src;
    int fd;
    prep_sha *sha;
    unsigned char *buf, *back;
    struct progress prog;
};

/* All n bytes at off, written from or read into buf (a short transfer
 * goes on where it stopped, EINTR retries); 0, or -1 with errno set. */
static int full_io(int fd, bool write, unsigned char *buf, size_t n, uint64_t off)
{
    while (n) {
        ssize_t k = write ? pwrite(fd, buf, n, (off_t)off) : pread(fd, buf, n, (off_t)off);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        buf += k, n -= (size_t)k, off += (uint64_t)k;
    }
    return 0;
}

/* Streaming writes without a flood of dirty pages: start the writeback of
 * the chunk just written, wait for the one before it and drop it from the
 * page cache.  The disk works while the next chunk is produced, and the
 * checkpoint's fdatasync has little left to do. */
static void flush_behind(int fd, uint64_t off, size_t n)
{
    sync_file_range(fd, (off_t)off, (off_t)n, SYNC_FILE_RANGE_WRITE);
    if (off < CHUNK_BYTES) return;
    uint64_t prev = off - CHUNK_BYTES;
    sync_file_range(fd, (off_t)prev, CHUNK_BYTES,
                    SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
    posix_fadvise(fd, (off_t)prev, CHUNK_BYTES, POSIX_FADV_DONTNEED);
}

/* Units recorded by a state file of this identity (0 if none or another). */
static int state_units(struct ckpt *c, uint64_t *bytes)
{
    char *text = NULL;
    size_t n;
    *bytes = 0;
    if (nb_read_file(c->state, &text, &n, NULL, 0)) return 0;
    int units = 0;
    unsigned long long b = 0;
    char *id_line = strstr(text, "\nidentity ");
    char *done_line = strstr(text, "\ndone ");
    size_t idlen = strlen(c->identity);
    bool ok = strncmp(text, "nebula-prepare state 1\n", 23) == 0 && id_line && done_line &&
              strncmp(id_line + 10, c->identity, idlen) == 0 && id_line[10 + idlen] == '\n' &&
              sscanf(done_line + 6, "%d %llu", &units, &b) == 2 && units >= 0 && units <= c->src->n_units;
    free(text);
    if (!ok) {
        say("%s: the partial %s.tmp belongs to another input or layout; starting over", c->name, c->name);
        return 0;
    }
    uint64_t want = 0;
    for (int u = 0; u < units; u++) want += c->src->unit_bytes(c->src->ctx, u);
    if (want != b) return 0;
    *bytes = b;
    return units;
}

static int state_save(struct ckpt *c, int units, uint64_t bytes, char *err, size_t errlen)
{
    char text[4600];
    int n = snprintf(text, sizeof text, "nebula-prepare state 1\nidentity %s\ndone %d %llu\n", c->identity, units,
                     (unsigned long long)bytes);
    if (n < 0 || (size_t)n >= sizeof text) return nb_errf(err, errlen, NB_EINVAL, "%s: identity too long", c->name);
    char name[256];
    snprintf(name, sizeof name, "%s.state", c->name);
    return write_file_atomic(c->dir, name, text, (size_t)n, err, errlen);
}

/* Re-reads units [0, units) of the partial file against fresh bytes.
 * Returns the number of bytes that match (and were hashed). */
static int replay(struct ckpt *c, int units, uint64_t *good, char *err, size_t errlen)
{
    uint64_t off = 0;
    *good = 0;
    for (int u = 0; u < units; u++) {
        uint64_t ub = c->src->unit_bytes(c->src->ctx, u);
        for (uint64_t o = 0; o < ub; o += CHUNK_BYTES) {
            size_t n = ub - o < CHUNK_BYTES ? (size_t)(ub - o) : CHUNK_BYTES;
            int rc = c->src->fill(c->src->ctx, u, o, c->buf, n, err, errlen);
            if (rc) return rc;
            if (full_io(c->fd, false, c->back, n, off) != 0 || memcmp(c->buf, c->back, n) != 0) {
                say("%s: the partial file differs from the input at byte %llu (unit %d); rewriting from there", c->name,
                    (unsigned long long)off, u);
                return 0;
            }
            sha_update(c->sha, c->buf, n);
            off += n;
            *good = off;
            if (o + n == ub && c->src->unit_done) c->src->unit_done(c->src->ctx, u);
            progress_add(&c->prog, n);
            if (prep_interrupted) return nb_errf(err, errlen, NB_EIO, "interrupted");
        }
    }
    return 0;
}

/* Writes from byte `from` (a unit's start, or inside it after a replay
 * that stopped there) to the end, checkpointing after every unit. */
static int write_rest(struct ckpt *c, uint64_t from, char *err, size_t errlen)
{
    uint64_t unit_start = 0;
    for (int u = 0; u < c->src->n_units; u++) {
        uint64_t ub = c->src->unit_bytes(c->src->ctx, u);
        if (unit_start + ub <= from) {
            unit_start += ub;
            continue;
        }
        for (uint64_t o = from > unit_start ? from - unit_start : 0; o < ub;) {
            size_t n = ub - o < CHUNK_BYTES ? (size_t)(ub - o) : CHUNK_BYTES;
            int rc = c->src->fill(c->src->ctx, u, o, c->buf, n, err, errlen);
            if (rc) return rc;
            if (full_io(c->fd, true, c->buf, n, unit_start + o) != 0)
                return nb_errf(err, errlen, NB_EIO, "%s: write at %llu: %s", c->tmp, (unsigned long long)(unit_start + o),
                               strerror(errno));
            sha_update(c->sha, c->buf, n);
            progress_add(&c->prog, n);
            flush_behind(c->fd, unit_start + o, n);
            o += n;
            if (u == test_kill_after) raise(test_kill_signal); /* test hook: a signal before the unit's checkpoint */
            if (prep_interrupted) return nb_errf(err, errlen, NB_EIO, "interrupted");
        }
        /* Checkpoint: the unit is on disk before the state says so. */
        if (fdatasync(c->fd) != 0) return nb_errf(err, errlen, NB_EIO, "%s: sync: %s", c->tmp, strerror(errno));
        posix_fadvise(c->fd, (off_t)unit_start, (off_t)ub, POSIX_FADV_DONTNEED);
        if (c->src->unit_done) c->src->unit_done(c->src->ctx, u);
        unit_start += ub;
        int rc = state_save(c, u + 1, unit_start, err, errlen);
        if (rc) return rc;
    }
    return 0;
}

int ckpt_write_file(const char *dir, const char *name, const char *identity, const struct ckpt_source *src,
                    char hex[PREP_SHA_HEX], int *resumed_units, char *err, size_t errlen)
{
    struct ckpt c = {.dir = dir, .name = name, .identity = identity, .src = src, .fd = -1};
    char final[4096];
    if (path_join(final, sizeof final, dir, name)) return nb_errf(err, errlen, NB_EINVAL, "%s/%s: path too long", dir, name);
    snprintf(c.tmp, sizeof c.tmp, "%s.tmp", final);
    snprintf(c.state, sizeof c.state, "%s.state", final);
    *resumed_units = 0;
    uint64_t total = 0;
    for (int u = 0; u < src->n_units; u++) total += src->unit_bytes(src->ctx, u);

    uint64_t recorded = 0;
    int units = state_units(&c, &recorded);
    struct stat st;
    if (units && (stat(c.tmp, &st) != 0 || (uint64_t)st.st_size < recorded)) units = 0, recorded = 0;

    int rc = 0;
    c.buf = malloc(CHUNK_BYTES);
    c.back = units ? malloc(CHUNK_BYTES) : NULL;
    if (!c.buf || (units && !c.back)) rc = nb_errf(err, errlen, NB_ENOMEM, "out of memory for the write buffers");
    if (!rc) rc = sha_new(&c.sha, err, errlen);
    if (!rc && (c.fd = open(c.tmp, O_RDWR | O_CREAT | O_CLOEXEC, 0644)) < 0)
        rc = nb_errf(err, errlen, NB_EIO, "%s: %s", c.tmp, strerror(errno));

    uint64_t good = 0;
    if (!rc && units) {
        progress_begin(&c.prog, name, recorded);
        say("%s: resuming: checking the %d units (%llu bytes) already written", name, units, (unsigned long long)recorded);
        rc = replay(&c, units, &good, err, errlen);
        if (!rc) progress_end(&c.prog, "partial file checked");
        int whole = 0;
        uint64_t whole_bytes = 0;
        for (; whole < units && whole_bytes + src->unit_bytes(src->ctx, whole) <= good; whole++)
            whole_bytes += src->unit_bytes(src->ctx, whole);
        *resumed_units = whole;
        /* A damaged prefix: the state must not promise more than is left. */
        if (!rc && whole < units) rc = state_save(&c, whole, whole_bytes, err, errlen);
    }
    /* Nothing after the verified prefix is trusted. */
    if (!rc && ftruncate(c.fd, (off_t)good) != 0) rc = nb_errf(err, errlen, NB_EIO, "%s: truncate: %s", c.tmp, strerror(errno));
    if (!rc) {
        progress_begin(&c.prog, name, total);
        c.prog.done = good;
        rc = write_rest(&c, good, err, errlen);
    }
    if (!rc && fsync(c.fd) != 0) rc = nb_errf(err, errlen, NB_EIO, "%s: sync: %s", c.tmp, strerror(errno));
    if (c.fd >= 0 && close(c.fd) != 0 && !rc) rc = nb_errf(err, errlen, NB_EIO, "%s: close: %s", c.tmp, strerror(errno));
    if (!rc && rename(c.tmp, final) != 0) rc = nb_errf(err, errlen, NB_EIO, "rename %s: %s", c.tmp, strerror(errno));
    if (!rc) {
        unlink(c.state);
        sha_final_hex(c.sha, hex);
        c.prog.done -= good; /* the summary's rate counts what this run wrote */
        progress_end(&c.prog, "written");
    }
    sha_free(c.sha);
    free(c.buf);
    free(c.back);
    return rc;
}
