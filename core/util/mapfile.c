/* mapfile.c — read-only whole-file mappings and whole-file reads (see mapfile.h). */
#include "core/util/mapfile.h"

#include "core/util/err.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int nb_map_file(const char *path, size_t min_bytes, int short_code, const char *why_short, void **map, size_t *size,
                char *err, size_t errlen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return nb_errf(err, errlen, errno == ENOENT ? NB_ENOENT : NB_EIO, "%s: %s", path, strerror(errno));
    struct stat st;
    int rc = 0;
    if (fstat(fd, &st) != 0) rc = nb_errf(err, errlen, NB_EIO, "%s: %s", path, strerror(errno));
    else if (!S_ISREG(st.st_mode)) rc = nb_errf(err, errlen, NB_EIO, "%s: not a regular file", path);
    else if ((size_t)st.st_size < min_bytes || st.st_size == 0)
        rc = nb_errf(err, errlen, short_code, "%s: %s", path, why_short);
    if (rc) {
        close(fd);
        return rc;
    }
    void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    int map_errno = errno;
    close(fd); /* the mapping keeps the file */
    if (m == MAP_FAILED) return nb_errf(err, errlen, NB_EIO, "%s: mmap: %s", path, strerror(map_errno));
    *map = m;
    *size = (size_t)st.st_size;
    return 0;
}

int nb_read_file(const char *path, char **data, size_t *n, char *err, size_t errlen)
{
    *data = NULL;
    if (n) *n = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return nb_errf(err, errlen, errno == ENOENT ? NB_ENOENT : NB_EIO, "%s: %s", path, strerror(errno));
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap + 1);
    int rc = buf ? 0 : nb_errf(err, errlen, NB_ENOMEM, "out of memory");
    while (!rc) {
        if (len == cap) {
            char *b = cap < ((size_t)1 << 40) ? realloc(buf, 2 * cap + 1) : NULL;
            if (!b) {
                rc = nb_errf(err, errlen, NB_ENOMEM, "%s: too large to read", path);
                break;
            }
            buf = b;
            cap *= 2;
        }
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (got == 0) {
            if (ferror(f)) rc = nb_errf(err, errlen, NB_EIO, "%s: read error", path);
            break;
        }
    }
    fclose(f);
    if (rc) {
        free(buf);
        return rc;
    }
    buf[len] = 0;
    *data = buf;
    if (n) *n = len;
    return 0;
}
