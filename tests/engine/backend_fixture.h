/* backend_fixture.h — the engine suites' way to get a CPU backend on a
 * fixture GGUF: the model opened and the backend created, each asserted
 * with its message.  The caller frees both (gw_backend_free, model_close). */
#ifndef NB_TESTS_ENGINE_BACKEND_FIXTURE_H
#define NB_TESTS_ENGINE_BACKEND_FIXTURE_H

#include <criterion/criterion.h>

#include "core/model/model.h"
#include "engine/backend.h"

static inline gw_backend *fixture_backend(const char *gguf, struct model **m)
{
    char err[256];
    gw_backend *be;
    cr_assert_eq(model_open(gguf, m, err, sizeof err), 0, "%s: %s", gguf, err);
    cr_assert_eq(gw_backend_create(*m, NULL, &be, err, sizeof err), 0, "%s", err);
    return be;
}

#endif
