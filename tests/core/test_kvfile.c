/* test_kvfile.c — the prompt cache's spill file (core/kvfile): a file
 * written reads back (grid, tokens, state); another identity, a flipped byte
 * in the tokens or the state, a cut or grown file, a bad magic and the wrong
 * token count are each an NB_EFORMAT naming why, never a state; no .tmp is
 * left behind. */
#include <criterion/criterion.h>
#include <string.h>

#include "core/kvfile/kvfile.h"
#include "core/util/err.h"
#include "tests/core/tmpfiles.h"

TestSuite(kvfile, .init = tmp_setup, .fini = tmp_teardown);

#define ID "nebula-kv1 model=/m.gguf size=1 backend=cpu"

static const int32_t toks[5] = {3, 1, 4, 1, 5};
static unsigned char state[1000];

static const char *write_one(void)
{
    char err[256];
    for (size_t i = 0; i < sizeof state; i++) state[i] = (unsigned char)(i * 7 + 3);
    const char *p = tmp_path("00000001" KVFILE_SUFFIX);
    cr_assert_eq(kvfile_write(p, ID, 512, toks, 5, state, sizeof state, err, sizeof err), 0, "%s", err);
    return p;
}

Test(kvfile, roundtrip)
{
    char err[256];
    const char *p = write_one();
    char tmp[300];
    snprintf(tmp, sizeof tmp, "%s.tmp", p);
    cr_expect(!file_exists(tmp), "the .tmp is renamed");
    uint32_t grid, n;
    int32_t *t;
    uint64_t bytes;
    cr_assert_eq(kvfile_read_head(p, ID, &grid, &t, &n, &bytes, err, sizeof err), 0, "%s", err);
    cr_expect(grid == 512 && n == 5 && bytes == sizeof state && !memcmp(t, toks, sizeof toks));
    free(t);
    void *s;
    cr_assert_eq(kvfile_read_state(p, ID, 5, &s, &bytes, err, sizeof err), 0, "%s", err);
    cr_expect(bytes == sizeof state && !memcmp(s, state, sizeof state));
    free(s);
}

/* Every kind of damage: the header read and the state read both refuse it. */
static void refused(const char *p, const char *identity, uint32_t n_expect, const char *why)
{
    char err[256];
    uint32_t grid, n;
    int32_t *t = NULL;
    void *s = NULL;
    uint64_t bytes;
    int rh = kvfile_read_head(p, identity, &grid, &t, &n, &bytes, err, sizeof err);
    int rs = kvfile_read_state(p, identity, n_expect, &s, &bytes, err, sizeof err);
    cr_expect(rs == NB_EFORMAT && s == NULL, "%s: the state was read (%d)", why, rs);
    cr_log_info("%s: %s (header: %d)", why, err, rh);
    free(t);
}

Test(kvfile, damage_refused)
{
    const char *p = write_one();
    size_t len;
    unsigned char *good = slurp(p, &len), *bad = malloc(len + 8);
    refused(p, "nebula-kv1 model=/other.gguf size=1 backend=cpu", 5, "another identity");
    refused(p, ID, 4, "another token count");
    const size_t head = len - sizeof state - sizeof toks;
    const size_t at[] = {0, head + 2, head + sizeof toks + 10, len - 1};
    for (size_t i = 0; i < sizeof at / sizeof at[0]; i++) {
        memcpy(bad, good, len);
        bad[at[i]] ^= 0x20;
        spit(p, bad, len);
        char why[64];
        snprintf(why, sizeof why, "a byte flipped at %zu", at[i]);
        refused(p, ID, 5, why);
    }
    spit(p, good, len - 3);
    refused(p, ID, 5, "a cut file");
    memcpy(bad, good, len);
    memset(bad + len, 0, 8);
    spit(p, bad, len + 8);
    refused(p, ID, 5, "a grown file");
    spit(p, "short", 5);
    refused(p, ID, 5, "shorter than a header");
    /* the header's own damage is found by the header read too */
    char err[256];
    uint32_t grid, n;
    int32_t *t = NULL;
    uint64_t bytes;
    memcpy(bad, good, len);
    bad[head + 1] ^= 1; /* a token */
    spit(p, bad, len);
    cr_expect_eq(kvfile_read_head(p, ID, &grid, &t, &n, &bytes, err, sizeof err), NB_EFORMAT, "a flipped token passed the header read");
    cr_expect(t == NULL);
    spit(p, good, len);
    cr_expect_eq(kvfile_read_head(p, ID, &grid, &t, &n, &bytes, err, sizeof err), 0, "%s", err);
    free(t);
    free(good), free(bad);
}
