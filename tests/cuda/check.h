/* check.h — what the GPU checks of the CUDA backend share (check_util.c):
 * check_backend.c's checks and check_verify.c's verify windows. */
#ifndef NB_TESTS_CUDA_CHECK_H
#define NB_TESTS_CUDA_CHECK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/model/model.h"
#include "engine/backend.h"
#include "engine/ffn.h"

extern int failures;        /* FAIL lines so far */
extern double tol;          /* logits pass when max|a − b| ≤ tol · max|b| (--tol) */
extern const char *kernels; /* --kernels, for every cuda backend made here */

double now(void);
void die(const char *what, const char *err);
/* max|a-b| / max|b| over n values (NaN counts as the largest error) */
double rel_err(const float *a, const float *b, int64_t n);
/* One PASS/FAIL line with a measured number; a FAIL counts in failures. */
void report(const char *name, bool ok, const char *fmt, double v);
int32_t argmax(const float *v, int64_t n);
int32_t *read_tokens(const char *path, int *n);
double mib(uint64_t b);

/* route tap: every layer's expert ids, appended */
struct routes {
    int32_t *ids;
    int64_t n, cap;
};
void route_tap(void *ctx, int layer, int n_tokens, int k, const int32_t *experts, const float *weights);

/* the remote-expert hook, answered on the CPU with gw_expert_ffn (ref kernels) */
struct remote_ctx {
    const struct model *m;
    uint64_t pairs;
    int fail;       /* answer with an error (the failure path) */
    unsigned calls; /* hook calls */
    struct gw_expert_scratch scratch;
};
int remote_fn(void *ctx, int layer, int n_rows, const float *x, int n_pairs, const int32_t *rows,
              const int32_t *experts, const float *weights, float *out, char *err, size_t errlen);
/* the PLE row hook, answered from the model's table on the host (ctx: the model) */
int ple_fn(void *ctx, int n_rows, const int64_t *rows, float *out, char *err, size_t errlen);

/* Backends (cuda ones with --kernels; exit 77 where no CUDA device is there) and sequences; failures die. */
gw_backend *make_pl(const struct model *m, const char *kind, bool no_graphs, const uint8_t *local);
gw_backend *make_p(const struct model *m, const char *kind, bool no_graphs);
gw_backend *make(const struct model *m, const char *kind);
gw_seq *seq(gw_backend *be);
void eval(gw_seq *s, const int32_t *tok, int n, enum gw_rows lr, float *logits, enum gw_rows wr, float *wide,
          struct routes *rt);

/* FNV-1a of a step's logits: runs compared bit for bit, step by step. */
uint64_t hash_bytes(const void *p, size_t n);
/* Greedy generation of n tokens after the prompt: ids into out (each step's
 * logits hash into hashes, if given); seconds of the decode loop. */
double greedy_h(gw_backend *be, const int32_t *prompt, int np, int n, int32_t *out, float *last_logits,
                uint64_t *hashes);
double greedy(gw_backend *be, const int32_t *prompt, int np, int n, int32_t *out, float *last_logits);
/* The same with the argmax taken by the backend (gw_eval_args.argmax, no logits copied). */
double greedy_argmax(gw_backend *be, const int32_t *prompt, int np, int n, int32_t *out);
int same_prefix(const int32_t *a, const int32_t *b, int n);

/* check_verify.c: verify windows and the return into them (see there); n
 * tokens decoded each way after the prompt of T. */
void check_verify(const struct model *m, gw_backend *cpu, const int32_t *tok, int T, int n, bool remote);

#endif
