/* test_ring.c — the ring protocol (shm/ring.c): the words at their documented
 * offsets, full and empty, order and payload integrity across processes over
 * the slot wrap and the 32-bit counter wrap, request/response pairs, one
 * producer at a time, the restart of either side, and ring_set_spin_ns. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>

#include "shm_fixture.h"

#define ROW_FLOATS 64 /* small rows keep the long runs fast; the pair test uses real ones */

static const struct ring_geometry small = {8, 16, 10, 16 * ROW_FLOATS * 4};

static uint32_t word(const struct shm_region *r, size_t off) { return *(volatile uint32_t *)(r->base + off); }
static void set_word(struct shm_region *r, size_t off, uint32_t v) { *(volatile uint32_t *)(r->base + off) = v; }

/* Message k, deterministic in every field, so the receiver can check it all. */
static void fill(struct ring_slot *s, uint32_t k)
{
    uint32_t rows = 1 + k % 16;
    s->hdr->layer = k % 48;
    s->hdr->n_tokens = rows;
    s->hdr->n_experts = 10;
    s->hdr->payload_bytes = rows * ROW_FLOATS * 4;
    s->hdr->tag = (uint64_t)k * 7919u;
    for (uint32_t i = 0; i < rows * 10; i++) {
        s->expert_ids[i] = (int32_t)((k * 31 + i) % 512);
        s->expert_weights[i] = (float)k + 0.25f * (float)i;
    }
    float *x = s->payload;
    for (uint32_t i = 0; i < rows * ROW_FLOATS; i++) x[i] = (float)(k % 1000) * 1000.0f + (float)i;
}

/* 0 when slot carries message k exactly, else a code saying which field is wrong. */
static int check(const struct ring_slot *s, uint32_t k)
{
    uint32_t rows = 1 + k % 16;
    if (s->hdr->seq != k + 1) return 1;
    if (s->hdr->layer != k % 48 || s->hdr->n_tokens != rows || s->hdr->n_experts != 10) return 2;
    if (s->hdr->payload_bytes != rows * ROW_FLOATS * 4 || s->hdr->tag != (uint64_t)k * 7919u) return 3;
    for (uint32_t i = 0; i < rows * 10; i++)
        if (s->expert_ids[i] != (int32_t)((k * 31 + i) % 512) || s->expert_weights[i] != (float)k + 0.25f * (float)i)
            return 4;
    const float *x = s->payload;
    for (uint32_t i = 0; i < rows * ROW_FLOATS; i++)
        if (x[i] != (float)(k % 1000) * 1000.0f + (float)i) return 5;
    return 0;
}

Test(ring, words_sit_at_their_documented_offsets)
{
    const struct ring_geometry g = {8, 16, 10, 16 * 2560 * 4};
    cr_assert_eq(ring_bytes(&g), 512 + 8 * 165184);
    struct fx_ring f = fx_ring_new(&g);
    cr_assert_eq(word(&f.reg, 0), 0x4752424e, "magic \"NBRG\"");
    cr_assert_eq(word(&f.reg, 4), 1, "version");
    cr_assert_eq(word(&f.reg, 8), 8, "n_slots");
    cr_assert_eq(word(&f.reg, 12), 16, "max_tokens");
    cr_assert_eq(word(&f.reg, 16), 10, "max_experts");
    cr_assert_eq(word(&f.reg, 20), 16 * 2560 * 4, "payload_bytes");
    cr_assert_eq(word(&f.reg, 24), 165184, "slot_bytes");
    cr_assert_eq(word(&f.reg, 28), 512, "slots_offset");
    cr_assert_eq(word(&f.reg, 32), 64, "ids_offset");
    cr_assert_eq(word(&f.reg, 36), 704, "weights_offset");
    cr_assert_eq(word(&f.reg, 40), 1344, "payload_offset");
    cr_assert_eq(*(uint64_t *)(f.reg.base + 48), 512 + 8 * 165184, "ring_bytes");

    struct fx_sides sd = fx_sides_attach(f.id, NULL);
    ring *p = sd.p, *c = sd.c;
    cr_assert_eq(word(&f.reg, 68), (uint32_t)getpid(), "producer_pid");
    cr_assert_eq(word(&f.reg, 72), 1, "producer_epoch");
    cr_assert_eq(word(&f.reg, 132), (uint32_t)getpid(), "consumer_pid");
    struct ring_slot s;
    for (uint32_t k = 0; k < 3; k++) {
        cr_assert_eq(ring_reserve(p, &s, 0, fx_err, sizeof fx_err), 0);
        cr_assert_eq((uint8_t *)s.hdr, sd.rp.base + 512 + k * 165184, "slot %u", k);
        cr_assert_eq((uint8_t *)s.expert_weights, (uint8_t *)s.hdr + 704);
        cr_assert_eq((uint8_t *)s.payload, (uint8_t *)s.hdr + 1344);
        s.hdr->layer = 40 + k;
        cr_assert_eq(ring_publish(p, fx_err, sizeof fx_err), 0);
    }
    cr_assert_eq(word(&f.reg, 64), 3, "head");
    cr_assert_eq(word(&f.reg, 512 + 2 * 165184), 3, "seq of slot 2");
    cr_assert_eq(word(&f.reg, 512 + 2 * 165184 + 4), 42, "layer of slot 2");
    for (int k = 0; k < 2; k++) {
        cr_assert_eq(ring_wait(c, &s, 0, fx_err, sizeof fx_err), 0);
        cr_assert_eq(ring_release(c, fx_err, sizeof fx_err), 0);
    }
    cr_assert_eq(word(&f.reg, 128), 2, "tail");
    fx_sides_detach(&sd);
    fx_ring_end(&f);
}

Test(ring, full_and_empty)
{
    const struct ring_geometry g = {4, 1, 0, 64};
    struct fx_ring f = fx_ring_new(&g);
    struct fx_sides sd = fx_sides_attach(f.id, NULL);
    ring *p = sd.p, *c = sd.c;
    struct ring_slot s, s2;

    cr_assert_eq(ring_wait(c, &s, 0, fx_err, sizeof fx_err), SHM_ETIMEDOUT, "empty: a poll finds nothing");
    struct timespec t0;
    fx_now(&t0);
    cr_assert_eq(ring_wait(c, &s, 20000000, fx_err, sizeof fx_err), SHM_ETIMEDOUT);
    cr_assert_geq(fx_ms_since(&t0), 19.5, "waited the timeout");
    cr_assert_eq(ring_release(c, fx_err, sizeof fx_err), NB_EINVAL, "nothing to release");
    cr_assert_eq(ring_publish(p, fx_err, sizeof fx_err), NB_EINVAL, "nothing reserved");
    cr_assert_eq(ring_reserve(c, &s, 0, fx_err, sizeof fx_err), NB_EINVAL, "consumer cannot reserve");
    cr_assert_eq(ring_wait(p, &s, 0, fx_err, sizeof fx_err), NB_EINVAL, "producer cannot wait");

    for (uint32_t k = 0; k < 4; k++) {
        cr_assert_eq(ring_reserve(p, &s, 0, fx_err, sizeof fx_err), 0, "slot %u free", k);
        cr_assert_eq(ring_reserve(p, &s2, 0, fx_err, sizeof fx_err), 0);
        cr_assert_eq(s.hdr, s2.hdr, "reserve twice: the same slot");
        s.hdr->tag = k;
        cr_assert_eq(ring_publish(p, fx_err, sizeof fx_err), 0);
    }
    cr_assert_eq(ring_reserve(p, &s, 0, fx_err, sizeof fx_err), SHM_ETIMEDOUT, "full");
    fx_now(&t0);
    cr_assert_eq(ring_reserve(p, &s, 20000000, fx_err, sizeof fx_err), SHM_ETIMEDOUT, "full");
    cr_assert_geq(fx_ms_since(&t0), 19.5);
    cr_assert_eq(ring_get_counters(p).full_waits, 2, "both reserves found the ring full");

    cr_assert_eq(ring_wait(c, &s, 0, fx_err, sizeof fx_err), 0);
    cr_assert_eq(s.hdr->tag, 0);
    cr_assert_eq(ring_wait(c, &s2, 0, fx_err, sizeof fx_err), 0);
    cr_assert_eq(s.hdr, s2.hdr, "wait twice before release: the same message");
    cr_assert_eq(ring_reserve(p, &s, 0, fx_err, sizeof fx_err), SHM_ETIMEDOUT, "taken is not released");
    cr_assert_eq(ring_release(c, fx_err, sizeof fx_err), 0);
    cr_assert_eq(ring_reserve(p, &s, 0, fx_err, sizeof fx_err), 0, "released: one free slot");
    cr_assert_eq(s.hdr->tag, 0, "reserve clears the slot's last header");
    fx_sides_detach(&sd);
    fx_ring_end(&f);
}

/* ring_set_spin_ns: a waiter spins that long before it sleeps (a wait
 * shorter than the spin never sleeps), 1 ns sleeps at once, 0 is the 50 µs
 * default again. */
/* A step message carries a whole prefill chunk: up to RING_MAX_TOKENS (8192,
 * NB_MAX_PREFILL_CHUNK) rows; one more is refused with the reason. */
Test(ring, max_tokens_reaches_the_largest_prefill_chunk)
{
    struct ring_geometry g = {2, RING_MAX_TOKENS, 0, 4 * (RING_MAX_TOKENS + 64)};
    cr_assert_eq(RING_MAX_TOKENS, 8192);
    cr_assert_eq(ring_check_geometry(&g, fx_err, sizeof fx_err), 0, "%s", fx_err);
    cr_assert_gt(ring_bytes(&g), 2 * (size_t)g.payload_bytes);
    g.max_tokens = RING_MAX_TOKENS + 1;
    cr_assert_eq(ring_check_geometry(&g, fx_err, sizeof fx_err), NB_EINVAL);
    cr_assert(strstr(fx_err, "max_tokens 8193 (1-8192)"), "%s", fx_err);
    cr_assert_eq(ring_bytes(&g), 0);
    cr_assert_eq(ring_pair_bytes(&g), 0);
}

Test(ring, set_spin_decides_when_a_waiter_sleeps)
{
    const struct ring_geometry g = {4, 1, 0, 64};
    struct fx_ring f = fx_ring_new(&g);
    struct fx_sides sd = fx_sides_attach(f.id, NULL);
    ring *c = sd.c;
    struct ring_slot s;
    ring_set_spin_ns(c, 1000000000ull);
    cr_assert_eq(ring_wait(c, &s, 10000000, fx_err, sizeof fx_err), SHM_ETIMEDOUT);
    cr_assert_eq(ring_get_counters(c).sleeps, 0, "a 10 ms wait inside a 1 s spin slept");
    ring_set_spin_ns(c, 1);
    cr_assert_eq(ring_wait(c, &s, 10000000, fx_err, sizeof fx_err), SHM_ETIMEDOUT);
    uint64_t slept = ring_get_counters(c).sleeps;
    cr_assert_geq(slept, 1, "a 1 ns spin did not sleep");
    ring_set_spin_ns(c, 0);
    cr_assert_eq(ring_wait(c, &s, 20000, fx_err, sizeof fx_err), SHM_ETIMEDOUT);
    cr_assert_eq(ring_get_counters(c).sleeps, slept, "a 20 µs wait inside the default 50 µs spin slept");
    fx_sides_detach(&sd);
    fx_ring_end(&f);
}

Test(ring, headers_that_do_not_fit_the_geometry_are_refused)
{
    struct fx_ring f = fx_ring_new(&small);
    struct fx_sides sd = fx_sides_attach(f.id, NULL);
    ring *p = sd.p, *c = sd.c;
    struct ring_slot s;
    cr_assert_eq(ring_reserve(p, &s, 0, fx_err, sizeof fx_err), 0);
    /* Whatever lands in seq while the producer fills the header is not a publish. */
    s.hdr->seq = 0x80000001u;
    cr_assert_eq(ring_wait(c, &s, 0, fx_err, sizeof fx_err), SHM_ETIMEDOUT, "seq far ahead");
    *s.hdr = (struct ring_slot_header){.n_tokens = 17};
    cr_assert_eq(ring_wait(c, &s, 0, fx_err, sizeof fx_err), SHM_ETIMEDOUT, "seq 0");
    cr_assert_eq(ring_publish(p, fx_err, sizeof fx_err), NB_EINVAL, "17 rows > max_tokens 16");
    s.hdr->n_tokens = 16;
    s.hdr->payload_bytes = small.payload_bytes + 4;
    cr_assert_eq(ring_publish(p, fx_err, sizeof fx_err), NB_EINVAL, "payload over capacity");
    s.hdr->payload_bytes = small.payload_bytes;
    cr_assert_eq(ring_publish(p, fx_err, sizeof fx_err), 0);
    s.hdr->n_experts = 11; /* a broken producer (or a GPU kernel) writes after publishing */
    cr_assert_eq(ring_wait(c, &s, 0, fx_err, sizeof fx_err), NB_EFORMAT);
    cr_assert(strstr(fx_err, "n_experts 11"), "%s", fx_err);
    cr_assert_eq(ring_release(c, fx_err, sizeof fx_err), 0, "a bad message can be skipped");

    struct ring_geometry bad = small;
    bad.n_slots = 6;
    cr_assert_eq(ring_bytes(&bad), 0, "6 slots: not a power of two");
    cr_assert_eq(ring_format(&f.reg, 0, &bad, fx_err, sizeof fx_err), NB_EINVAL);
    cr_assert_eq(ring_format(&f.reg, 8, &small, fx_err, sizeof fx_err), NB_EINVAL, "unaligned offset");
    cr_assert_eq(ring_format(&f.reg, 64, &small, fx_err, sizeof fx_err), NB_EINVAL, "does not fit");
    cr_assert_eq(ring_format(&f.reg, 0, &small, fx_err, sizeof fx_err), SHM_EBUSY, "formatting under attached sides");
    fx_sides_detach(&sd);
    set_word(&f.reg, 4, 2);
    ring *r;
    cr_assert_eq(ring_attach(&r, &f.reg, 0, RING_CONSUMER, NULL, fx_err, sizeof fx_err), NB_ENOTSUP, "version 2");
    set_word(&f.reg, 0, 0);
    cr_assert_eq(ring_attach(&r, &f.reg, 0, RING_CONSUMER, NULL, fx_err, sizeof fx_err), NB_EFORMAT, "no magic");
    fx_ring_end(&f);
}

/* ---- two processes ---- */

struct stream {
    const char *id;
    uint32_t start, n; /* message numbers start .. start + n - 1 */
    struct ring_options opt;
};

static int produce(void *arg)
{
    const struct stream *st = arg;
    struct shm_region reg;
    ring *p = fx_attach(st->id, "ring", RING_PRODUCER, &st->opt, &reg);
    if (!p) return 10;
    struct ring_slot s;
    for (uint32_t k = 0; k < st->n; k++) {
        if (ring_reserve(p, &s, 10000000000ull, fx_err, sizeof fx_err) != 0) return 11;
        fill(&s, st->start + k);
        if (k + 1 == st->n) s.hdr->flags = RING_FLAG_LAST;
        if (ring_publish(p, fx_err, sizeof fx_err) != 0) return 12;
    }
    fx_detach(p, &reg);
    return 0;
}

/* The consumer side in the test process; the counters start at `start` so
 * that `n` messages cross the 32-bit wrap. */
static void stream_test(const struct ring_options *opt, uint32_t start, uint32_t n)
{
    struct fx_ring f = fx_ring_new(&small);
    struct shm_region *reg = &f.reg, rc;
    /* As if the ring had carried messages up to start: counters and the seq of
     * each slot's last message. */
    set_word(reg, 64, start);  /* head */
    set_word(reg, 128, start); /* tail */
    size_t slot_bytes = word(reg, 24);
    for (uint32_t m = start - small.n_slots; m != start; m++)
        set_word(reg, 512 + (m & (small.n_slots - 1)) * slot_bytes, m + 1);
    struct stream st = {f.id, start, n, *opt};
    ring *c = fx_attach(st.id, "ring", RING_CONSUMER, opt, &rc);
    cr_assert(c, "%s", fx_err);
    pid_t pid = fx_spawn(produce, &st);
    struct ring_slot s;
    for (uint32_t k = 0; k < n; k++) {
        int rc_wait = ring_wait(c, &s, 10000000000ull, fx_err, sizeof fx_err);
        cr_assert_eq(rc_wait, 0, "message %u: %s", k, fx_err);
        int bad = check(&s, start + k);
        cr_assert_eq(bad, 0, "message %u: field group %d wrong", k, bad);
        cr_assert_eq(s.hdr->flags, k + 1 == n ? RING_FLAG_LAST : 0u);
        cr_assert_eq(ring_release(c, fx_err, sizeof fx_err), 0);
    }
    cr_assert_eq(fx_reap(pid), 0, "producer: %s", fx_err);
    cr_assert_eq(ring_wait(c, &s, 1000000000ull, fx_err, sizeof fx_err), SHM_EPEER, "the producer left: drained");
    cr_assert_eq(ring_get_counters(c).messages, n);
    cr_assert_eq(word(reg, 128), start + n, "tail");
    fx_detach(c, &rc);
    fx_ring_end(&f);
}

Test(ring, order_and_payload_across_processes_spin, .timeout = 60)
{
    struct ring_options opt = {.mode = RING_WAIT_SPIN};
    stream_test(&opt, 0, 20000);
}

Test(ring, order_and_payload_across_processes_futex, .timeout = 60)
{
    struct ring_options opt = {.mode = RING_WAIT_FUTEX, .spin_ns = 1}; /* sleep at once: every hand-over via futex */
    stream_test(&opt, 0, 5000);
}

Test(ring, sequence_counters_wrap_at_2_to_the_32, .timeout = 60)
{
    struct ring_options opt = {.mode = RING_WAIT_FUTEX};
    stream_test(&opt, 0xfffff000u, 10000);
}

/* Server of a request/response pair: answers each request with 2x + 1 of
 * its rows, the same tag, until a request flagged LAST. */
static int serve(void *arg)
{
    const char *id = arg;
    struct shm_region reg;
    struct ring_pair pair;
    if (shm_region_open(id, "pair", &reg, fx_err, sizeof fx_err) != 0) return 10;
    if (ring_pair_attach(&pair, &reg, 0, RING_SERVER, NULL, fx_err, sizeof fx_err) != 0) return 11;
    for (bool last = false; !last;) {
        struct ring_slot q, a;
        if (ring_wait(pair.req, &q, 10000000000ull, fx_err, sizeof fx_err) != 0) return 12;
        if (ring_reserve(pair.resp, &a, 10000000000ull, fx_err, sizeof fx_err) != 0) return 13;
        a.hdr->tag = q.hdr->tag;
        a.hdr->n_tokens = q.hdr->n_tokens;
        a.hdr->payload_bytes = q.hdr->payload_bytes;
        const float *x = q.payload;
        float *y = a.payload;
        for (uint32_t i = 0; i < q.hdr->payload_bytes / 4; i++) y[i] = 2 * x[i] + 1;
        last = q.hdr->flags & RING_FLAG_LAST;
        if (ring_publish(pair.resp, fx_err, sizeof fx_err) != 0) return 14;
        if (ring_release(pair.req, fx_err, sizeof fx_err) != 0) return 15;
    }
    ring_pair_detach(&pair);
    shm_region_close(&reg);
    return 0;
}

Test(ring, request_response_pair_round_trips, .timeout = 60)
{
    const struct ring_geometry g = {4, 16, 10, 16 * 2560 * 4}; /* real rows: 2560 floats */
    shm_instance *inst = fx_instance();
    struct shm_region reg = fx_region(inst, "pair", ring_pair_bytes(&g));
    cr_assert_eq(ring_pair_response_offset(&g) % 4096, 0);
    cr_assert_eq(ring_pair_format(&reg, 0, &g, fx_err, sizeof fx_err), 0, "%s", fx_err);
    struct ring_pair pair;
    cr_assert_eq(ring_pair_attach(&pair, &reg, 0, RING_CLIENT, NULL, fx_err, sizeof fx_err), 0, "%s", fx_err);
    pid_t pid = fx_spawn(serve, (void *)shm_instance_id(inst));
    enum { N = 1000 };
    for (uint32_t k = 0; k < N; k++) {
        uint32_t rows = k % 2 ? 16 : 1, n = rows * 2560;
        struct ring_slot q, a;
        cr_assert_eq(ring_reserve(pair.req, &q, 10000000000ull, fx_err, sizeof fx_err), 0, "%s", fx_err);
        q.hdr->tag = 1000000 + k;
        q.hdr->n_tokens = rows;
        q.hdr->payload_bytes = n * 4;
        q.hdr->flags = k + 1 == N ? RING_FLAG_LAST : 0;
        float *x = q.payload;
        for (uint32_t i = 0; i < n; i++) x[i] = (float)((k * 7 + i) % 4099) * 0.5f;
        cr_assert_eq(ring_publish(pair.req, fx_err, sizeof fx_err), 0);
        cr_assert_eq(ring_wait(pair.resp, &a, 10000000000ull, fx_err, sizeof fx_err), 0, "%s", fx_err);
        cr_assert_eq(a.hdr->seq, q.hdr->seq, "response k answers request k");
        cr_assert_eq(a.hdr->tag, 1000000 + k);
        cr_assert_eq(a.hdr->payload_bytes, n * 4);
        const float *y = a.payload;
        for (uint32_t i = 0; i < n; i++)
            cr_assert_eq(y[i], 2 * ((float)((k * 7 + i) % 4099) * 0.5f) + 1, "round trip %u, value %u", k, i);
        cr_assert_eq(ring_release(pair.resp, fx_err, sizeof fx_err), 0);
    }
    cr_assert_eq(fx_reap(pid), 0, "server failed");
    ring_pair_detach(&pair);
    shm_region_close(&reg);
    fx_instance_end(inst);
}

/* ---- one producer at a time, restarts ---- */

static int try_attach_producer(void *arg)
{
    struct shm_region reg;
    ring *p = fx_attach(arg, "ring", RING_PRODUCER, NULL, &reg);
    if (p) return 1;
    return strstr(fx_err, "a live producer is attached") ? 0 : 2;
}

Test(ring, a_second_producer_is_refused_while_the_first_lives)
{
    struct fx_ring f = fx_ring_new(&small);
    struct shm_region rp, rc;
    const char *id = f.id;
    ring *p = fx_attach(id, "ring", RING_PRODUCER, NULL, &rp);
    cr_assert(p, "%s", fx_err);
    cr_assert_eq(fx_reap(fx_spawn(try_attach_producer, (void *)id)), 0, "another process");
    struct shm_region r2;
    cr_assert_null(fx_attach(id, "ring", RING_PRODUCER, NULL, &r2), "another handle in this process");

    /* The first producer sends two and leaves; a new one continues the count. */
    struct ring_slot s;
    for (int k = 0; k < 2; k++) {
        cr_assert_eq(ring_reserve(p, &s, 0, fx_err, sizeof fx_err), 0);
        fill(&s, (uint32_t)k);
        cr_assert_eq(ring_publish(p, fx_err, sizeof fx_err), 0);
    }
    fx_detach(p, &rp);
    p = fx_attach(id, "ring", RING_PRODUCER, NULL, &rp);
    cr_assert(p, "after detach: %s", fx_err);
    cr_assert_eq(word(&f.reg, 72), 2, "producer_epoch counts attaches");
    cr_assert_eq(ring_reserve(p, &s, 0, fx_err, sizeof fx_err), 0);
    fill(&s, 2);
    cr_assert_eq(ring_publish(p, fx_err, sizeof fx_err), 0);

    ring *c = fx_attach(id, "ring", RING_CONSUMER, NULL, &rc);
    cr_assert(c, "%s", fx_err);
    for (uint32_t k = 0; k < 3; k++) {
        cr_assert_eq(ring_wait(c, &s, 0, fx_err, sizeof fx_err), 0, "%s", fx_err);
        cr_assert_eq(check(&s, k), 0, "message %u", k);
        cr_assert_eq(ring_release(c, fx_err, sizeof fx_err), 0);
    }
    fx_detach(p, &rp);
    fx_detach(c, &rc);
    fx_ring_end(&f);
}

Test(ring, restarted_sides_resume_where_the_dead_ones_stopped)
{
    struct fx_ring f = fx_ring_new(&small);
    struct fx_sides sd = fx_sides_attach(f.id, NULL);
    const char *id = f.id;
    ring *p = sd.p, *c = sd.c;
    struct ring_slot s;
    for (uint32_t k = 0; k < 3; k++) {
        cr_assert_eq(ring_reserve(p, &s, 0, fx_err, sizeof fx_err), 0);
        fill(&s, k);
        cr_assert_eq(ring_publish(p, fx_err, sizeof fx_err), 0);
    }
    /* The consumer takes 0 and releases it, takes 1 and dies before releasing. */
    cr_assert_eq(ring_wait(c, &s, 0, fx_err, sizeof fx_err), 0);
    cr_assert_eq(ring_release(c, fx_err, sizeof fx_err), 0);
    cr_assert_eq(ring_wait(c, &s, 0, fx_err, sizeof fx_err), 0);
    fx_detach(c, &sd.rc);
    c = fx_attach(id, "ring", RING_CONSUMER, NULL, &sd.rc);
    cr_assert(c, "%s", fx_err);
    cr_assert_eq(ring_wait(c, &s, 0, fx_err, sizeof fx_err), 0);
    cr_assert_eq(check(&s, 1), 0, "message 1 comes again");
    cr_assert_eq(ring_release(c, fx_err, sizeof fx_err), 0);

    /* The producer dies between its two stores of message 3: seq written, head not. */
    cr_assert_eq(ring_reserve(p, &s, 0, fx_err, sizeof fx_err), 0);
    fill(&s, 3);
    s.hdr->seq = 4;
    fx_detach(p, &sd.rp);
    cr_assert_eq(word(&f.reg, 64), 3, "head not bumped");
    p = fx_attach(id, "ring", RING_PRODUCER, NULL, &sd.rp);
    cr_assert(p, "%s", fx_err);
    cr_assert_eq(word(&f.reg, 64), 4, "the new producer finished the publish");
    cr_assert_eq(ring_reserve(p, &s, 0, fx_err, sizeof fx_err), 0);
    fill(&s, 4);
    cr_assert_eq(ring_publish(p, fx_err, sizeof fx_err), 0);
    for (uint32_t k = 2; k < 5; k++) {
        cr_assert_eq(ring_wait(c, &s, 0, fx_err, sizeof fx_err), 0, "%s", fx_err);
        cr_assert_eq(check(&s, k), 0, "message %u", k);
        cr_assert_eq(ring_release(c, fx_err, sizeof fx_err), 0);
    }
    fx_detach(p, &sd.rp);
    fx_detach(c, &sd.rc);
    fx_ring_end(&f);
}

static struct shm_region inherited;

static int attach_through_parent_handle(void *arg)
{
    ring *r;
    int rc = ring_attach(&r, &inherited, 0, RING_CONSUMER, NULL, fx_err, sizeof fx_err);
    return rc == NB_EINVAL && strstr(fx_err, "open the region again") ? 0 : 1;
}

Test(ring, a_handle_does_not_cross_fork)
{
    struct fx_ring f = fx_ring_new(&small);
    inherited = f.reg;
    cr_assert_eq(fx_reap(fx_spawn(attach_through_parent_handle, NULL)), 0);
    fx_ring_end(&f);
}
