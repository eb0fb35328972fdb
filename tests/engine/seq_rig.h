/* seq_rig.h — the engine's sequence suites' fixture: a fixture model on the
 * CPU backend with its prompt ids (tokens.txt), and new sequences on it,
 * each step asserted with its message.  Header-only, for test_cpu_seq.c and
 * test_rollback.c. */
#ifndef NB_TESTS_ENGINE_SEQ_RIG_H
#define NB_TESTS_ENGINE_SEQ_RIG_H

#include <criterion/criterion.h>
#include <stdlib.h>

#include "core/model/model.h"
#include "engine/backend.h"
#include "tests/core/model_fixture.h"

struct rig {
    struct model *m;
    gw_backend *be;
    int32_t *tok;
    int T;
    int64_t V, wide;
};

static inline void rig_open(struct rig *r, const char *name)
{
    char err[256];
    cr_assert_eq(model_open(fixture_gguf(name), &r->m, err, sizeof err), 0, "%s", err);
    cr_assert_eq(gw_backend_create(r->m, NULL, &r->be, err, sizeof err), 0, "%s", err);
    r->tok = fixture_ints(name, "tokens.txt", &r->T);
    r->V = r->m->hp.n_vocab;
    r->wide = model_wide(&r->m->hp);
}

static inline void rig_close(struct rig *r)
{
    gw_backend_free(r->be);
    model_close(r->m);
    free(r->tok);
}

static inline gw_seq *new_seq(const struct rig *r)
{
    char err[256];
    gw_seq *s;
    cr_assert_eq(gw_seq_create(r->be, &s, err, sizeof err), 0, "%s", err);
    return s;
}

#endif
