/* sha.c — SHA-256 through OpenSSL's EVP interface, and checksums.sha256.
 *
 * OpenSSL picks the SHA extensions (SHA-NI) or AVX2 code at run time, about
 * 2 GB/s per core, so hashing a 100 GB expert file is bounded by the disk.
 * checksums.sha256 is in sha256sum's format ("HEX  NAME"), so a user can
 * check a prepared directory with `sha256sum -c checksums.sha256` and
 * nothing of ours. */
#include "tools/nebula-prepare/prepare.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/util/err.h"

struct prep_sha {
    EVP_MD_CTX *ctx;
};

int sha_new(prep_sha **out, char *err, size_t errlen)
{
    prep_sha *s = calloc(1, sizeof *s);
    if (s) s->ctx = EVP_MD_CTX_new();
    if (!s || !s->ctx || EVP_DigestInit_ex(s->ctx, EVP_sha256(), NULL) != 1) {
        sha_free(s);
        return nb_errf(err, errlen, NB_ENOMEM, "cannot set up SHA-256 (OpenSSL)");
    }
    *out = s;
    return 0;
}

void sha_update(prep_sha *s, const void *data, size_t n)
{
    if (n) EVP_DigestUpdate(s->ctx, data, n);
}

static void to_hex(const unsigned char *md, char hex[PREP_SHA_HEX])
{
    static const char digits[] = "0123456789abcdef";
    for (int i = 0; i < 32; i++) {
        hex[2 * i] = digits[md[i] >> 4];
        hex[2 * i + 1] = digits[md[i] & 15];
    }
    hex[64] = 0;
}

void sha_final_hex(prep_sha *s, char hex[PREP_SHA_HEX])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    EVP_DigestFinal_ex(s->ctx, md, &len);
    to_hex(md, hex);
}

void sha_free(prep_sha *s)
{
    if (!s) return;
    EVP_MD_CTX_free(s->ctx);
    free(s);
}

void sha_buf_hex(const void *data, size_t n, char hex[PREP_SHA_HEX])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    EVP_Digest(data, n, md, &len, EVP_sha256(), NULL);
    to_hex(md, hex);
}

int sha_file(const char *path, uint64_t limit, struct progress *p, char hex[PREP_SHA_HEX], char *err, size_t errlen)
{
    enum { CHUNK = 8 << 20 };
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return nb_errf(err, errlen, errno == ENOENT ? NB_ENOENT : NB_EIO, "%s: %s", path, strerror(errno));
    /* The file is read once, front to back: tell the kernel, and drop what
     * was read so a 100 GB verification does not evict everything else. */
    posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    prep_sha *s = NULL;
    unsigned char *buf = malloc(CHUNK);
    int rc = buf ? sha_new(&s, err, errlen) : nb_errf(err, errlen, NB_ENOMEM, "out of memory");
    uint64_t done = 0;
    while (!rc && done < limit) {
        size_t want = limit - done < CHUNK ? (size_t)(limit - done) : CHUNK;
        ssize_t got = read(fd, buf, want);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) rc = nb_errf(err, errlen, NB_EIO, "%s: read at %llu: %s", path, (unsigned long long)done, strerror(errno));
        if (got <= 0) break;
        sha_update(s, buf, (size_t)got);
        if (done / (256u << 20) != (done + (uint64_t)got) / (256u << 20)) posix_fadvise(fd, 0, (off_t)done, POSIX_FADV_DONTNEED);
        done += (uint64_t)got;
        if (p) progress_add(p, (uint64_t)got);
        if (prep_interrupted) rc = nb_errf(err, errlen, NB_EIO, "interrupted");
    }
    if (!rc) sha_final_hex(s, hex);
    sha_free(s);
    free(buf);
    close(fd);
    return rc;
}

/* ---------- checksums.sha256 ---------- */

static bool is_hex64(const char *s)
{
    for (int i = 0; i < 64; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return false;
    return true;
}

void sums_load(struct sums *s, const char *dir)
{
    s->n = 0;
    char path[4096], *text = NULL;
    size_t n;
    if (path_join(path, sizeof path, dir, "checksums.sha256") || nb_read_file(path, &text, &n, NULL, 0)) return;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        /* "HEX  NAME" (sha256sum's text mode) or "HEX *NAME" (binary mode) */
        if (strlen(line) < 67 || !is_hex64(line) || line[64] != ' ' || (line[65] != ' ' && line[65] != '*')) continue;
        line[64] = 0;
        const char *name = line + 66;
        if (strlen(name) < sizeof s->e[0].name && !strchr(name, '/')) sums_set(s, name, line);
    }
    free(text);
}

const char *sums_get(const struct sums *s, const char *name)
{
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->e[i].name, name) == 0) return s->e[i].hex;
    return NULL;
}

void sums_set(struct sums *s, const char *name, const char *hex)
{
    int i = 0;
    while (i < s->n && strcmp(s->e[i].name, name) != 0) i++;
    if (i == s->n) {
        if (s->n == SUMS_MAX) return; /* cannot happen: we write fewer files */
        s->n++;
    }
    snprintf(s->e[i].name, sizeof s->e[i].name, "%s", name);
    snprintf(s->e[i].hex, sizeof s->e[i].hex, "%s", hex);
}

void sums_drop(struct sums *s, const char *name)
{
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->e[i].name, name) == 0) {
            s->e[i] = s->e[--s->n];
            return;
        }
}

int sums_save(const struct sums *s, const char *dir, char *err, size_t errlen)
{
    int order[SUMS_MAX];
    for (int i = 0; i < s->n; i++) order[i] = i;
    for (int i = 1; i < s->n; i++) /* insertion sort: a dozen names */
        for (int j = i; j > 0 && strcmp(s->e[order[j - 1]].name, s->e[order[j]].name) > 0; j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    char text[SUMS_MAX * 112];
    size_t len = 0;
    for (int i = 0; i < s->n; i++)
        len += (size_t)snprintf(text + len, sizeof text - len, "%s  %s\n", s->e[order[i]].hex, s->e[order[i]].name);
    /* Unchanged content is not rewritten: a re-run that verifies everything
     * leaves every timestamp as it was. */
    char path[4096], *old = NULL;
    size_t old_len = 0;
    bool same = path_join(path, sizeof path, dir, "checksums.sha256") == 0 &&
                nb_read_file(path, &old, &old_len, NULL, 0) == 0 && old_len == len && memcmp(old, text, len) == 0;
    free(old);
    return same ? 0 : write_file_atomic(dir, "checksums.sha256", text, len, err, errlen);
}
