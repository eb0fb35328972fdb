/* test_context.c — coordinator/context.c: the positions a request may use. */
#include <criterion/criterion.h>

#include "coordinator/coord.h"

Test(context, model_context_unless_the_cuda_plan_reserved_fewer)
{
    cr_assert_eq(coord_context_limit(262144, 0, true), 262144, "no placement: the model's");
    cr_assert_eq(coord_context_limit(262144, 4096, false), 262144, "the CPU backend has no VRAM plan to respect");
    cr_assert_eq(coord_context_limit(262144, 4096, true), 4096, "the CUDA plan's K/V reserve");
    cr_assert_eq(coord_context_limit(4096, 262144, true), 4096, "never above the model's");
    cr_assert_eq(coord_context_limit(0, 0, false), 32768, "a GGUF without a context length");
}
