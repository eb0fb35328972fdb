/* test_seq_state.c — a sequence's state saved and loaded (engine/seq_state.c,
 * gw_seq_save / gw_seq_load), on the CPU reference with tiny-a and tiny-b:
 *   - a state saved after a prefill and loaded into a fresh sequence goes on
 *     bit for bit as the sequence it came from (more prefill, then decode);
 *   - the resume rule: a prefill resumed from a state saved at a multiple of
 *     model_resume_align gives the logits of the unsplit prefill, bit for bit
 *     (the prompt cache's exactness rests on it);
 *   - a truncated, edited or other-model buffer is refused with NB_EINVAL and
 *     leaves the sequence reset (position 0), never half-loaded. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "core/util/err.h"
#include "tests/engine/seq_rig.h"

#define N 200

static void ids(int32_t *t, int n, int64_t V)
{
    for (int i = 0; i < n; i++) t[i] = (int32_t)((i * 37 + 11) % V);
}

/* Evaluates t[from, to) in evals cut at the given positions; the last row's logits into lg. */
static void eval_range(gw_seq *s, const int32_t *t, int from, int to, float *lg)
{
    char err[256];
    struct gw_eval_args a = {.tokens = t + from, .n_tokens = to - from, .logits_rows = GW_ROWS_LAST, .logits = lg};
    cr_assert_eq(gw_eval(s, &a, err, sizeof err), 0, "%s", err);
}

static void *save(gw_seq *s, uint64_t *len)
{
    char err[256];
    uint64_t cap = gw_seq_save_bytes(s);
    cr_assert_gt(cap, 0);
    void *b = malloc(cap);
    cr_assert_eq(gw_seq_save(s, b, cap, len, err, sizeof err), 0, "%s", err);
    cr_assert_eq(*len, cap, "saved %llu bytes, announced %llu", (unsigned long long)*len, (unsigned long long)cap);
    return b;
}

static void roundtrip(const char *name)
{
    struct rig r;
    rig_open(&r, name);
    char err[256];
    int32_t t[N];
    ids(t, N, r.V);
    float *ref = malloc((size_t)r.V * 4), *got = malloc((size_t)r.V * 4);
    cr_assert_eq(model_resume_align(r.m), 64, "%s has GDN layers: resume at multiples of the GDN chunk", name);
    /* the reference: one prefill of N tokens, then 3 decode steps */
    gw_seq *a = new_seq(&r);
    eval_range(a, t, 0, N, ref);
    float *ref_dec = malloc((size_t)r.V * 4 * 3);
    for (int i = 0; i < 3; i++) eval_range(a, t, i, i + 1, ref_dec + (size_t)i * r.V);
    /* saved at 128 (a multiple of 64), loaded into a fresh sequence, the rest evaluated */
    gw_seq *b = new_seq(&r), *c = new_seq(&r);
    eval_range(b, t, 0, 128, got);
    uint64_t len;
    void *blob = save(b, &len);
    eval_range(c, t, 0, 5, got); /* a sequence with other contents: the load replaces them */
    cr_assert_eq(gw_seq_load(c, blob, len, err, sizeof err), 0, "%s", err);
    cr_assert_eq(gw_seq_pos(c), 128);
    eval_range(c, t, 128, N, got);
    cr_expect_eq(memcmp(got, ref, (size_t)r.V * 4), 0, "%s: resumed at 128: logits differ from the unsplit prefill", name);
    for (int i = 0; i < 3; i++) {
        eval_range(c, t, i, i + 1, got);
        cr_expect_eq(memcmp(got, ref_dec + (size_t)i * r.V, (size_t)r.V * 4), 0, "%s: decode step %d after a load differs", name, i);
    }
    /* the same state saved twice is the same bytes; the loaded sequence saves what was loaded */
    gw_seq *d = new_seq(&r);
    cr_assert_eq(gw_seq_load(d, blob, len, err, sizeof err), 0, "%s", err);
    uint64_t len2;
    void *blob2 = save(d, &len2);
    cr_expect(len2 == len && memcmp(blob, blob2, len) == 0, "%s: load then save changed the bytes", name);
    free(blob2);
    free(blob);
    free(ref_dec);
    gw_seq_free(a), gw_seq_free(b), gw_seq_free(c), gw_seq_free(d);
    free(ref), free(got);
    rig_close(&r);
}

Test(seq_state, roundtrip_tiny_a) { roundtrip("tiny-a"); }
Test(seq_state, roundtrip_tiny_b) { roundtrip("tiny-b"); }

/* Every split of the prefill on a multiple of the alignment is the unsplit prefill's bits. */
Test(seq_state, aligned_splits_are_exact)
{
    struct rig r;
    rig_open(&r, "tiny-a");
    int32_t t[N];
    ids(t, N, r.V);
    float *ref = malloc((size_t)r.V * 4), *got = malloc((size_t)r.V * 4);
    gw_seq *a = new_seq(&r);
    eval_range(a, t, 0, N, ref);
    const int A = model_resume_align(r.m);
    for (int cut = A; cut < N; cut += A) {
        gw_seq *b = new_seq(&r);
        eval_range(b, t, 0, cut, got);
        eval_range(b, t, cut, N, got);
        cr_expect_eq(memcmp(got, ref, (size_t)r.V * 4), 0, "a prefill cut at %d differs from the unsplit one", cut);
        gw_seq_free(b);
    }
    gw_seq_free(a);
    free(ref), free(got);
    rig_close(&r);
}

Test(seq_state, bad_buffers_refused)
{
    struct rig r, o;
    rig_open(&r, "tiny-a");
    rig_open(&o, "tiny-b");
    char err[256];
    int32_t t[N];
    ids(t, N, r.V);
    float *lg = malloc((size_t)r.V * 4);
    gw_seq *a = new_seq(&r), *b = new_seq(&r), *x = new_seq(&o);
    eval_range(a, t, 0, 70, lg);
    uint64_t len, xlen;
    unsigned char *blob = save(a, &len);
    int32_t tx[N];
    ids(tx, N, o.V);
    float *lgx = malloc((size_t)o.V * 4);
    eval_range(x, tx, 0, 70, lgx);
    void *other = save(x, &xlen);
    /* each failure leaves b reset */
    const uint64_t cuts[] = {0, 7, 40, len / 2, len - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        eval_range(b, t, 0, 3, lg);
        cr_expect_eq(gw_seq_load(b, blob, cuts[i], err, sizeof err), NB_EINVAL, "a state cut to %llu bytes was taken",
                     (unsigned long long)cuts[i]);
        cr_expect_eq(gw_seq_pos(b), 0, "a refused load left position %lld", (long long)gw_seq_pos(b));
    }
    eval_range(b, t, 0, 3, lg);
    cr_expect_eq(gw_seq_load(b, other, xlen, err, sizeof err), NB_EINVAL, "tiny-b's state loaded into tiny-a");
    cr_expect_eq(gw_seq_pos(b), 0);
    cr_log_info("other model: %s", err);
    unsigned char *edit = malloc(len + 4);
    memcpy(edit, blob, len);
    memset(edit + len, 0, 4);
    cr_expect_eq(gw_seq_load(b, edit, len + 4, err, sizeof err), NB_EINVAL, "bytes past the end were taken");
    memcpy(edit, blob, len);
    edit[0] ^= 1; /* the magic */
    cr_expect_eq(gw_seq_load(b, edit, len, err, sizeof err), NB_EINVAL, "a bad magic was taken");
    memcpy(edit, blob, len);
    edit[8] ^= 4; /* n_pos: every array's size then disagrees */
    cr_expect_eq(gw_seq_load(b, edit, len, err, sizeof err), NB_EINVAL, "a wrong position count was taken");
    memcpy(edit, blob, len);
    edit[32] = 0xff, edit[33] = 0xff, edit[34] = 0xff, edit[35] = 0x7f; /* the first token: out of the vocabulary */
    cr_expect_eq(gw_seq_load(b, edit, len, err, sizeof err), NB_EINVAL, "a token outside the vocabulary was taken");
    cr_expect_eq(gw_seq_load(b, blob, len, err, sizeof err), 0, "%s", err); /* and the good one still loads */
    cr_expect_eq(gw_seq_pos(b), 70);
    free(edit), free(blob), free(other), free(lg), free(lgx);
    gw_seq_free(a), gw_seq_free(b), gw_seq_free(x);
    rig_close(&r);
    rig_close(&o);
}
