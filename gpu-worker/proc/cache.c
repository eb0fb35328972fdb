/* cache.c — the prompt cache's checkpoints in the gpu-worker (issue 17).
 *
 * The coordinator owns the index (which token ids each checkpoint covers,
 * the budgets, what to evict: coordinator/cache.c); this side keeps the
 * states.  A checkpoint is the sequence's whole state (gw_seq_save: host
 * bytes, copied off the device on CUDA, so checkpoints never take VRAM) under
 * the coordinator's id.  With a cache directory every checkpoint is also
 * written to DIR/ID.nbkv (core/kvfile: identity, tokens, state, hashes) by a
 * writer thread, so a save costs the request only the copy into RAM, and a
 * checkpoint dropped from RAM or left by an earlier instance is read back
 * from its file on a load.  The step ops (gpu-worker/step_proto.h):
 *   STEP_SAVE [id, persist, grid]  the sequence now → checkpoint id (+ its file)
 *   STEP_LOAD [id, n_pos]    checkpoint id (RAM, else its file) → the sequence
 *   STEP_DROP [id, file]     forget id in RAM (and remove its file)
 * The writer only reads an entry's state; an entry is freed under the lock,
 * by the writer once written when it was dropped meanwhile. */
#include "gpu-worker/proc/gw_proc.h"

#include "core/kvfile/kvfile.h"
#include "core/util/err.h"
#include "core/util/log.h"
#include "gpu-worker/step_proto.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct gwp_ckpt {
    uint32_t id;
    void *state;
    uint64_t bytes;
    int32_t *tokens;
    uint32_t n_tokens, grid;
    bool to_write, writing, dropped, unlink_after;
    struct gwp_ckpt *next;
};

static void ckpt_free(struct gwp_ckpt *e)
{
    free(e->state), free(e->tokens), free(e);
}

static void path_of(const struct gwp_cache *c, uint32_t id, char *p, size_t n)
{
    snprintf(p, n, "%s/%08x" KVFILE_SUFFIX, c->dir, id);
}

/* Unlinks e from the list (under the lock). */
static void unlist(struct gwp_cache *c, struct gwp_ckpt *e)
{
    for (struct gwp_ckpt **pp = &c->list; *pp; pp = &(*pp)->next)
        if (*pp == e) {
            *pp = e->next;
            c->ram_bytes -= e->bytes;
            return;
        }
}

static void *writer_main(void *arg)
{
    struct gwp_cache *c = arg;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        struct gwp_ckpt *e = c->list;
        while (e && !e->to_write) e = e->next;
        if (!e) {
            if (c->stop) break;
            pthread_cond_wait(&c->cv, &c->mu);
            continue;
        }
        e->to_write = false, e->writing = true;
        pthread_mutex_unlock(&c->mu);
        char path[CTL_PATH_MAX + 32], err[512];
        path_of(c, e->id, path, sizeof path);
        if (kvfile_write(path, c->identity, e->grid, e->tokens, e->n_tokens, e->state, e->bytes, err, sizeof err))
            nb_log("prompt cache: %s", err);
        pthread_mutex_lock(&c->mu);
        e->writing = false;
        if (e->unlink_after) unlink(path);
        if (e->dropped) unlist(c, e), ckpt_free(e);
        pthread_cond_broadcast(&c->cv);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

int gwp_cache_open(struct gwp_cache *c, const char *dir, const char *identity, char *err, size_t errlen)
{
    memset(c, 0, sizeof *c);
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    c->inited = true;
    snprintf(c->identity, sizeof c->identity, "%s", identity);
    if (!dir[0]) return 0;
    snprintf(c->dir, sizeof c->dir, "%s", dir);
    if (pthread_create(&c->writer, NULL, writer_main, c)) return nb_errf(err, errlen, NB_EIO, "prompt cache: no writer thread");
    c->have_writer = true;
    return 0;
}

void gwp_cache_close(struct gwp_cache *c)
{
    if (!c->inited) return;
    pthread_mutex_lock(&c->mu);
    c->stop = true; /* the writer finishes what is queued first */
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    if (c->have_writer) pthread_join(c->writer, NULL);
    while (c->list) {
        struct gwp_ckpt *e = c->list;
        c->list = e->next;
        ckpt_free(e);
    }
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    c->inited = false;
}

static struct gwp_ckpt *find(struct gwp_cache *c, uint32_t id)
{
    for (struct gwp_ckpt *e = c->list; e; e = e->next)
        if (e->id == id && !e->dropped) return e;
    return NULL;
}

/* Forgets id in RAM (the lock held); its file too when asked (after a write in flight). */
static void drop(struct gwp_cache *c, uint32_t id, bool file)
{
    struct gwp_ckpt *e = find(c, id);
    if (e && e->writing) { /* the writer frees it (and removes the file) once written */
        e->dropped = true, e->unlink_after |= file;
        return;
    }
    if (e && e->to_write && !file) { /* still to be written: the writer writes, then frees it */
        e->dropped = true;
        return;
    }
    if (e) unlist(c, e), ckpt_free(e);
    if (file && c->dir[0]) {
        char path[CTL_PATH_MAX + 32];
        path_of(c, id, path, sizeof path);
        if (unlink(path) && errno != ENOENT) nb_log("prompt cache: cannot remove %s: %s", path, strerror(errno));
    }
}

int gwp_cache_serve(struct gwp_cache *c, gw_seq *seq, const struct ring_slot *req, struct ring_slot *resp, char *err,
                    size_t errlen)
{
    const uint32_t op = req->hdr->layer;
    const int32_t *a = req->payload;
    const uint32_t n_args = req->hdr->n_tokens;
    if (n_args != (op == STEP_SAVE ? 3u : 2u) || req->hdr->payload_bytes < n_args * 4) return nb_errf(err, errlen, NB_EINVAL, "bad cache step (op %u)", op);
    const uint32_t id = (uint32_t)a[0];
    int rc = 0;
    if (op == STEP_DROP) {
        pthread_mutex_lock(&c->mu);
        drop(c, id, a[1] != 0);
        pthread_mutex_unlock(&c->mu);
        return 0;
    }
    if (op == STEP_SAVE) {
        struct gwp_ckpt *e = calloc(1, sizeof *e);
        const int64_t n = gw_seq_pos(seq);
        const int32_t *tok = gw_seq_tokens(seq);
        uint64_t cap = gw_seq_save_bytes(seq);
        if (!e || !tok || !cap || !(e->state = malloc(cap)) || !(e->tokens = malloc((size_t)n * 4 + 4))) {
            if (e) ckpt_free(e);
            return nb_errf(err, errlen, NB_ENOMEM, "prompt cache: no memory for a checkpoint of %llu bytes", (unsigned long long)cap);
        }
        if ((rc = gw_seq_save(seq, e->state, cap, &e->bytes, err, errlen))) return ckpt_free(e), rc;
        memcpy(e->tokens, tok, (size_t)n * 4);
        e->id = id, e->n_tokens = (uint32_t)n, e->grid = (uint32_t)a[2], e->to_write = a[1] != 0 && c->dir[0];
        pthread_mutex_lock(&c->mu);
        drop(c, id, false);
        e->next = c->list, c->list = e, c->ram_bytes += e->bytes;
        pthread_cond_broadcast(&c->cv);
        pthread_mutex_unlock(&c->mu);
        /* the answer: [bytes lo, bytes hi, positions, hash of the tokens lo, hi] — the coordinator checks the tokens are its own */
        const uint64_t h = kvfile_hash(e->tokens, (uint64_t)n * 4, 3);
        int32_t *o = resp->payload;
        o[0] = (int32_t)(uint32_t)e->bytes, o[1] = (int32_t)(uint32_t)(e->bytes >> 32), o[2] = (int32_t)n;
        o[3] = (int32_t)(uint32_t)h, o[4] = (int32_t)(uint32_t)(h >> 32);
        resp->hdr->n_tokens = 5, resp->hdr->payload_bytes = 20;
        return 0;
    }
    if (op != STEP_LOAD) return nb_errf(err, errlen, NB_EINVAL, "bad cache step (op %u)", op);
    const int64_t want = a[1];
    pthread_mutex_lock(&c->mu);
    struct gwp_ckpt *e = find(c, id);
    if (e) rc = gw_seq_load(seq, e->state, e->bytes, err, errlen); /* the writer only reads it meanwhile */
    pthread_mutex_unlock(&c->mu);
    if (!e) { /* from its file: checked (identity, sizes, hashes) before a byte reaches the sequence */
        if (!c->dir[0]) return nb_errf(err, errlen, NB_EINVAL, "prompt cache: checkpoint %08x is not in RAM and there is no cache dir", id);
        char path[CTL_PATH_MAX + 32];
        void *state;
        uint64_t bytes;
        path_of(c, id, path, sizeof path);
        if ((rc = kvfile_read_state(path, c->identity, (uint32_t)want, &state, &bytes, err, errlen))) return rc;
        rc = gw_seq_load(seq, state, bytes, err, errlen);
        free(state);
    }
    if (rc == 0 && gw_seq_pos(seq) != want) {
        rc = nb_errf(err, errlen, NB_EFORMAT, "prompt cache: checkpoint %08x holds %lld positions, not %lld", id,
                     (long long)gw_seq_pos(seq), (long long)want);
        gw_seq_reset(seq);
    }
    return rc;
}
