/* files.c — small-file helpers of nebula-prepare and the size parser.
 *
 * Every small output (experts.idx, hotlist.tsv, placement.json,
 * manifest.json, checksums.sha256) is written whole to NAME.tmp, synced and
 * renamed: a reader sees the old file or the new one, never half of one. */
#include "tools/nebula-prepare/prepare.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/util/err.h"

int path_join(char *buf, size_t len, const char *dir, const char *name)
{
    int n = snprintf(buf, len, "%s/%s", dir, name);
    return n < 0 || (size_t)n >= len ? NB_EINVAL : 0;
}

bool file_exists(const char *dir, const char *name)
{
    char path[4096];
    struct stat st;
    return path_join(path, sizeof path, dir, name) == 0 && stat(path, &st) == 0;
}

int write_file_atomic(const char *dir, const char *name, const void *data, size_t n, char *err, size_t errlen)
{
    char path[4096], tmp[4100];
    if (path_join(path, sizeof path, dir, name) || snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp)
        return nb_errf(err, errlen, NB_EINVAL, "%s/%s: path too long", dir, name);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return nb_errf(err, errlen, NB_EIO, "%s: %s", tmp, strerror(errno));
    const char *p = data;
    size_t left = n;
    int rc = 0;
    while (left && !rc) {
        ssize_t w = write(fd, p, left);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) rc = nb_errf(err, errlen, NB_EIO, "%s: write: %s", tmp, strerror(errno));
        else p += w, left -= (size_t)w;
    }
    if (!rc && fdatasync(fd) != 0) rc = nb_errf(err, errlen, NB_EIO, "%s: sync: %s", tmp, strerror(errno));
    if (close(fd) != 0 && !rc) rc = nb_errf(err, errlen, NB_EIO, "%s: close: %s", tmp, strerror(errno));
    if (!rc && rename(tmp, path) != 0) rc = nb_errf(err, errlen, NB_EIO, "rename %s: %s", tmp, strerror(errno));
    if (rc) unlink(tmp);
    return rc;
}

void release_input(const void *p, uint64_t n)
{
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t a = ((uintptr_t)p + page - 1) / page * page, b = ((uintptr_t)p + n) / page * page;
    if (b > a) madvise((void *)a, b - a, MADV_DONTNEED); /* read-only mapping: pages come back from the file */
}

int parse_size(const char *s, uint64_t *out)
{
    if (!s || !*s) return NB_EINVAL;
    if (strcasecmp(s, "all") == 0 || strcasecmp(s, "inf") == 0) {
        *out = BUDGET_ALL;
        return 0;
    }
    if (!isdigit((unsigned char)*s) && *s != '.') return NB_EINVAL;
    errno = 0;
    char *end;
    double v = strtod(s, &end);
    if (errno || end == s || !isfinite(v) || v < 0) return NB_EINVAL;
    static const char units[] = "KMGTP";
    double mult = 1;
    if (*end) {
        const char *u = strchr(units, toupper((unsigned char)*end));
        if (!u) {
            if (toupper((unsigned char)*end) != 'B' || end[1]) return NB_EINVAL;
            end++;
        } else {
            for (const char *k = units; k <= u; k++) mult *= 1024;
            end++;
            if (*end == 'i' || *end == 'I') end++;
            if (*end == 'b' || *end == 'B') end++;
        }
    }
    if (*end) return NB_EINVAL;
    double bytes = floor(v * mult);
    if (bytes >= 18446744073709551615.0) return NB_EINVAL;
    *out = (uint64_t)bytes;
    return 0;
}
