/* kvfile.c — the spill file of kvfile.h.
 *
 *   char magic[8] "NBKVSPL1", u32 version, u32 n_tokens, u32 grid, u32 0,
 *   u64 state_bytes, u64 state_hash, u64 tokens_hash,
 *   char identity[KVFILE_IDENTITY_MAX] (NUL-padded),
 *   i32 tokens[n_tokens], state bytes.
 * The file's size must be exactly that; the tokens and the state are hashed
 * (kvfile_hash) so a flipped byte anywhere is found. */
#include "core/kvfile/kvfile.h"

#include "core/util/err.h"

#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAGIC "NBKVSPL1"
#define VERSION 1u

struct head {
    char magic[8];
    uint32_t version, n_tokens, grid, zero;
    uint64_t state_bytes, state_hash, tokens_hash;
    char identity[KVFILE_IDENTITY_MAX];
};

uint64_t kvfile_hash(const void *p, uint64_t n, uint64_t seed)
{
    const unsigned char *b = p;
    uint64_t h = seed ^ 0x9e3779b97f4a7c15ull ^ n;
    uint64_t w;
    for (; n >= 8; n -= 8, b += 8) {
        memcpy(&w, b, 8);
        h = (h ^ (w * 0xbf58476d1ce4e5b9ull)) * 0x94d049bb133111ebull;
        h ^= h >> 31;
    }
    for (; n; n--, b++) h = (h ^ *b) * 0x100000001b3ull;
    h ^= h >> 33, h *= 0xff51afd7ed558ccdull, h ^= h >> 33;
    return h;
}

/* All n bytes written (wr) or read, or -1. */
static int io_all(int fd, void *p, uint64_t n, bool wr)
{
    char *c = p;
    while (n) {
        const size_t step = n > (1u << 30) ? (1u << 30) : (size_t)n;
        ssize_t k = wr ? write(fd, c, step) : read(fd, c, step);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        c += k, n -= (uint64_t)k;
    }
    return 0;
}
static int write_all(int fd, const void *p, uint64_t n) { return io_all(fd, (void *)p, n, true); }
static int read_all(int fd, void *p, uint64_t n) { return io_all(fd, p, n, false); }

int kvfile_write(const char *path, const char *identity, uint32_t grid, const int32_t *tokens, uint32_t n_tokens,
                 const void *state, uint64_t state_bytes, char *err, size_t errlen)
{
    struct head h = {.version = VERSION, .n_tokens = n_tokens, .grid = grid, .state_bytes = state_bytes};
    if (strlen(identity) >= sizeof h.identity) return nb_errf(err, errlen, NB_EINVAL, "cache identity too long");
    memcpy(h.magic, MAGIC, 8);
    strcpy(h.identity, identity);
    h.state_hash = kvfile_hash(state, state_bytes, 1), h.tokens_hash = kvfile_hash(tokens, (uint64_t)n_tokens * 4, 2);
    char tmp[4200];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp) return nb_errf(err, errlen, NB_EINVAL, "path too long");
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return nb_errf(err, errlen, NB_EIO, "cannot create %s: %s", tmp, strerror(errno));
    int bad = write_all(fd, &h, sizeof h) || write_all(fd, tokens, (uint64_t)n_tokens * 4) || write_all(fd, state, state_bytes);
    const int e = errno;
    bad |= close(fd) != 0;
    if (bad || rename(tmp, path)) {
        unlink(tmp);
        return nb_errf(err, errlen, NB_EIO, "cannot write %s: %s", path, strerror(bad ? e : errno));
    }
    return 0;
}

/* Opens path and checks its header against identity and the file's size. */
static int open_checked(const char *path, const char *identity, struct head *h, char *err, size_t errlen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return nb_errf(err, errlen, NB_EIO, "cannot open %s: %s", path, strerror(errno)), -1;
    struct stat st;
    const char *why = NULL;
    if (fstat(fd, &st) || read_all(fd, h, sizeof *h)) why = "shorter than its header";
    else if (memcmp(h->magic, MAGIC, 8)) why = "not a prompt-cache file";
    else if (h->version != VERSION) why = "another version of the format";
    else if (memchr(h->identity, 0, sizeof h->identity) == NULL || strcmp(h->identity, identity)) why = "made by another model, backend or kernels";
    else if ((uint64_t)st.st_size != sizeof *h + (uint64_t)h->n_tokens * 4 + h->state_bytes) why = "its size disagrees with its header";
    if (why) {
        close(fd);
        nb_errf(err, errlen, NB_EFORMAT, "%s: %s", path, why);
        return -1;
    }
    return fd;
}

/* The token ids after the header, checked against its hash: *t (malloc'd, NULL on failure). */
static int read_tokens(int fd, const struct head *h, const char *path, int32_t **t, char *err, size_t errlen)
{
    *t = malloc((size_t)h->n_tokens * 4 + 4);
    int rc = !*t ? nb_errf(err, errlen, NB_ENOMEM, "out of memory")
             : read_all(fd, *t, (uint64_t)h->n_tokens * 4) ? nb_errf(err, errlen, NB_EFORMAT, "%s: truncated", path)
             : kvfile_hash(*t, (uint64_t)h->n_tokens * 4, 2) != h->tokens_hash ? nb_errf(err, errlen, NB_EFORMAT, "%s: its tokens are corrupt", path)
                                                                              : 0;
    if (rc) free(*t), *t = NULL;
    return rc;
}

int kvfile_read_head(const char *path, const char *identity, uint32_t *grid, int32_t **tokens, uint32_t *n_tokens,
                     uint64_t *state_bytes, char *err, size_t errlen)
{
    struct head h;
    *tokens = NULL;
    int fd = open_checked(path, identity, &h, err, errlen);
    if (fd < 0) return NB_EFORMAT;
    int32_t *t;
    int rc = read_tokens(fd, &h, path, &t, err, errlen);
    close(fd);
    if (rc) return free(t), rc;
    *tokens = t, *n_tokens = h.n_tokens, *state_bytes = h.state_bytes, *grid = h.grid;
    return 0;
}

int kvfile_read_state(const char *path, const char *identity, uint32_t n_tokens, void **state, uint64_t *state_bytes, char *err,
                      size_t errlen)
{
    struct head h;
    *state = NULL;
    int fd = open_checked(path, identity, &h, err, errlen);
    if (fd < 0) return NB_EFORMAT;
    void *b = NULL;
    int32_t *t = NULL;
    int rc = h.n_tokens != n_tokens ? nb_errf(err, errlen, NB_EFORMAT, "%s covers %u tokens, not %u", path, h.n_tokens, n_tokens)
                                    : read_tokens(fd, &h, path, &t, err, errlen);
    if (!rc)
        rc = !(b = malloc(h.state_bytes ? h.state_bytes : 1)) ? nb_errf(err, errlen, NB_ENOMEM, "out of memory for %s", path)
             : read_all(fd, b, h.state_bytes) ? nb_errf(err, errlen, NB_EFORMAT, "%s: truncated", path)
             : kvfile_hash(b, h.state_bytes, 1) != h.state_hash ? nb_errf(err, errlen, NB_EFORMAT, "%s: its state is corrupt", path)
                                                                : 0;
    close(fd);
    free(t);
    if (rc) return free(b), rc;
    *state = b, *state_bytes = h.state_bytes;
    return 0;
}
