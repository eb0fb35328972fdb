/* tmpfiles.h — a scratch directory per test and whole-file read/write, for
 * the format tests (GGUF, safetensors).  Criterion runs each test in its own
 * process, so the static state here is per test. */
#ifndef NB_TEST_TMPFILES_H
#define NB_TEST_TMPFILES_H

#include <criterion/criterion.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char tmp_dir[64];

static inline void tmp_setup(void)
{
    snprintf(tmp_dir, sizeof tmp_dir, "/tmp/nb-test-XXXXXX");
    cr_assert(mkdtemp(tmp_dir), "mkdtemp");
}

static inline int tmp_rm(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

static inline void tmp_teardown(void) { nftw(tmp_dir, tmp_rm, 8, FTW_DEPTH | FTW_PHYS); }

/* tmp_dir/name; four rotating buffers so a call can use several at once. */
static inline const char *tmp_path(const char *name)
{
    static char bufs[4][256];
    static int next;
    char *p = bufs[next++ & 3];
    snprintf(p, sizeof bufs[0], "%s/%s", tmp_dir, name);
    return p;
}

/* The whole file, NUL-terminated past its *len bytes (so text files can go
 * to strchr or cJSON as they are). */
static inline void *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    cr_assert(f, "open %s", path);
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc(*len + 1);
    cr_assert(buf, "out of memory reading %s", path);
    cr_assert(fread(buf, 1, *len, f) == *len);
    buf[*len] = 0;
    fclose(f);
    return buf;
}

static inline void spit(const char *path, const void *buf, size_t len)
{
    FILE *f = fopen(path, "wb");
    cr_assert(f, "create %s", path);
    cr_assert(fwrite(buf, 1, len, f) == len);
    fclose(f);
}

static inline bool file_exists(const char *path) { return access(path, F_OK) == 0; }

#endif
