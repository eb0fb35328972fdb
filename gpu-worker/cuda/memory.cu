/* memory.cu — the CUDA backend's device memory: the blocks (one cudaMalloc
 * each, counted by part), the dense block's arrays, the peak measured, the
 * bytes copied, and the temporaries of a sublayer.
 *
 * The one idea: device memory is a few blocks sized by engine/vram.c
 * (the dense block — every weight upload, the slot tables, the step's words
 * —, the slots, the RoPE tables, the decode arena, and per sequence its
 * state, K/V and MTP K/V), so the VRAM plan counts what is allocated;
 * everything else is a temporary from the stream-ordered pool (or, while a
 * graph is captured, the arena), released at the end of its sublayer. */
#include "gpu-worker/cuda/backend_cuda.h"

/* ---------- errors ---------- */

thread_local char g_msg[1024];

int cu_fail_at(cudaError_t e, const char *what, const char *file, int line)
{
    const char *base = strrchr(file, '/');
    snprintf(g_msg, sizeof g_msg, "%s: %s (%s:%d)", what, cudaGetErrorString(e), base ? base + 1 : file, line);
    return NB_EIO;
}

/* ---------- blocks ---------- */

/* The blocks held now, by part, and each part's high-water mark (gw_backend_vram_used). */
static void ledger(cuda_backend *be, int part, int64_t delta)
{
    be->used[part] += (uint64_t)delta;
    uint64_t *peak = part == GW_PART_DENSE ? &be->base.vram_used.dense : part == GW_PART_MTP ? &be->base.vram_used.mtp
                     : part == GW_PART_KV ? &be->base.vram_used.kv : part == GW_PART_SLOTS ? &be->base.vram_used.slots
                                          : &be->base.vram_used.scratch;
    if (part != GW_PART_SCRATCH && be->used[part] > *peak) *peak = be->used[part]; /* scratch: cu_vram_note */
}

/* A device block of one part (NULL for 0 bytes). */
int cu_block_alloc(cuda_backend *be, int part, void **p, uint64_t bytes, const char *what)
{
    *p = NULL;
    if (!bytes) return 0;
    cudaError_t e = cudaMalloc(p, bytes);
    if (e != cudaSuccess) {
        *p = NULL;
        snprintf(g_msg, sizeof g_msg, "%s (%.1f MiB): %s", what, (double)bytes / 1048576.0, cudaGetErrorString(e));
        return NB_EIO;
    }
    ledger(be, part, (int64_t)bytes);
    return 0;
}

void cu_block_free(cuda_backend *be, int part, void *p, uint64_t bytes)
{
    if (!p) return;
    cudaFree(p);
    ledger(be, part, -(int64_t)bytes);
}

/* An array of the dense block (weights, slot tables, the step's words), at the
 * next GW_VRAM_ALIGN multiple; the block is gw_vram_dense_bytes' total, which
 * walks the same uploads: running past it is that walk undercounting. */
int cu_dev_alloc(cuda_backend *be, void **p, size_t bytes)
{
    const size_t need = gw_vram_align(bytes);
    *p = NULL;
    if (be->dense_off + need > be->dense_cap) {
        snprintf(g_msg, sizeof g_msg, "the dense block (%zu B, engine/vram.c gw_vram_dense_bytes) holds no %zu B more "
                 "at %zu B: the walk misses an upload", be->dense_cap, bytes, be->dense_off);
        return NB_EIO;
    }
    *p = be->dense_blk + be->dense_off;
    be->dense_off += need;
    *(be->acct_mtp ? &be->mtp_bytes : &be->dense_bytes) += need;
    return 0;
}

/* Host → device bytes of evals (gw_backend_bytes_copied). */
void cu_copied(cuda_backend *be, uint64_t n) { __atomic_add_fetch(&be->base.bytes_copied, n, __ATOMIC_RELAXED); }

/* Peak device use so far (gw_backend_vram_bytes): free memory at creation −
 * free now; and the scratch the backend holds (gw_backend_vram_used): the
 * arena and what its own pool has reserved at most (the device's pool, when
 * it has none of its own, is shared: not counted). */
void cu_vram_note(cuda_backend *be)
{
    size_t fr = 0, tot = 0;
    uint64_t pool = 0; /* the attribute is a cuuint64_t */
    if (be->own_pool && cudaMemPoolGetAttribute(be->pool, cudaMemPoolAttrReservedMemHigh, &pool) != cudaSuccess)
        (void)cudaGetLastError(), pool = 0;
    if (be->used[GW_PART_SCRATCH] + pool > be->base.vram_used.scratch) be->base.vram_used.scratch = be->used[GW_PART_SCRATCH] + pool;
    if (cudaMemGetInfo(&fr, &tot) != cudaSuccess || fr >= be->free0) return;
    uint64_t used = be->free0 - fr;
    if (used > be->base.vram_peak) __atomic_store_n(&be->base.vram_peak, used, __ATOMIC_RELAXED);
}

/* ---------- temporaries ---------- */

int cu_talloc(tmp *t, float **out, int64_t n)
{
    cuda_backend *be = t->be;
    const size_t bytes = ((size_t)(n > 0 ? n : 1) * sizeof(float) + 255) & ~(size_t)255;
    if (be->arena_on && be->arena_off + bytes <= be->arena_cap) {
        *out = (float *)(be->arena + be->arena_off);
        be->arena_off += bytes;
        return 0;
    }
    void *p;
    if (be->arena_on) CK(cudaMallocAsync(&p, bytes, be->st)); /* the arena full while capturing: a graph allocation */
    else CK(cudaMallocFromPoolAsync(&p, bytes, be->pool, be->st));
    t->p[t->n++] = p;
    *out = (float *)p;
    return 0;
}

static int tfree(tmp *t)
{
    cudaError_t e = cudaSuccess;
    for (int i = 0; i < t->n; i++) {
        cudaError_t f = cudaFreeAsync(t->p[i], t->be->st);
        if (e == cudaSuccess) e = f;
    }
    t->n = 0;
    t->be->arena_off = t->mark;
    CK(e);
    return 0;
}

/* Frees the temporaries whatever rc is, and returns the first failure. */
int cu_tdone(tmp *t, int rc)
{
    int r2 = tfree(t);
    return rc ? rc : r2;
}
