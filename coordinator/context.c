/* context.c — how many positions a request may use.
 *
 * The model's trained context (32768 where the GGUF does not say), unless
 * the gpu-worker runs the CUDA backend under a prepared placement whose
 * VRAM plan reserved K/V for fewer positions (placement.json's
 * request.vram_ctx: nebula-prepare --ctx): the gpu-worker refuses an eval
 * past them, so the coordinator refuses such a request up front — a 400 at
 * the API, with the limit in /v1/models — instead of failing it half-way.
 * --ctx (asked > 0) lowers it on either backend, and is what the gpu-worker
 * then reserves K/V for in place of the placement's. */
#include "coordinator/coord.h"

int64_t coord_context_limit(int64_t n_ctx_train, int64_t vram_ctx, bool gw_cuda, int64_t asked)
{
    int64_t ctx = n_ctx_train > 0 ? n_ctx_train : 32768;
    if (asked > 0) return asked < ctx ? asked : ctx;
    return gw_cuda && vram_ctx > 0 && vram_ctx < ctx ? vram_ctx : ctx;
}
