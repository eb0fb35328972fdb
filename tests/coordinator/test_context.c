/* test_context.c — coordinator/context.c: the positions a request may use. */
#include <criterion/criterion.h>

#include "coordinator/coord.h"

Test(context, model_context_unless_the_cuda_plan_reserved_fewer)
{
    cr_assert_eq(coord_context_limit(262144, 0, true, 0), 262144, "no placement: the model's");
    cr_assert_eq(coord_context_limit(262144, 4096, false, 0), 262144, "the CPU backend has no VRAM plan to respect");
    cr_assert_eq(coord_context_limit(262144, 4096, true, 0), 4096, "the CUDA plan's K/V reserve");
    cr_assert_eq(coord_context_limit(4096, 262144, true, 0), 4096, "never above the model's");
    cr_assert_eq(coord_context_limit(0, 0, false, 0), 32768, "a GGUF without a context length");
}

Test(context, the_ctx_flag_lowers_it_on_either_backend)
{
    cr_assert_eq(coord_context_limit(262144, 4096, true, 8192), 8192, "--ctx replaces the placement's reserve");
    cr_assert_eq(coord_context_limit(262144, 0, false, 1000), 1000, "and applies on the CPU backend");
    cr_assert_eq(coord_context_limit(4096, 0, false, 1 << 20), 4096, "never above the model's");
}
