/* kvfile.h — the prompt cache's spill file (issue 17; docs/FILES.md).
 *
 * One checkpoint per file: a header naming what made it (the identity: the
 * model file, its size and time, the backend and its kernels: a state is
 * only resumed by the arithmetic that made it), the token ids it covers, then
 * the saved sequence state (engine's gw_seq_save bytes, opaque here) and a
 * hash of it.  The coordinator reads headers (its index after a restart),
 * the gpu-worker writes files and reads states back.  Every read checks the
 * magic, the version, the identity, the sizes against the file's and, for
 * the state, the hash: a corrupt or foreign file is an error (NB_EFORMAT)
 * with a message, never a wrong state.  Writes go to PATH.tmp (0600), then
 * rename. */
#ifndef NB_CORE_KVFILE_H
#define NB_CORE_KVFILE_H

#include <stddef.h>
#include <stdint.h>

#define KVFILE_IDENTITY_MAX 512
#define KVFILE_SUFFIX ".nbkv"

/* A 64-bit hash of bytes (not cryptographic: it finds corruption). */
uint64_t kvfile_hash(const void *p, uint64_t n, uint64_t seed);

/* grid: the prefill chunk the state was computed with (its evals' grid: which later prefills it
 * resumes exactly depends on it; 0: a state off the grid, exact within tolerance; coordinator/cache.c). */
int kvfile_write(const char *path, const char *identity, uint32_t grid, const int32_t *tokens, uint32_t n_tokens,
                 const void *state, uint64_t state_bytes, char *err, size_t errlen);
/* The header: the grid, the tokens (malloc'ed, *tokens) and the state's size. */
int kvfile_read_head(const char *path, const char *identity, uint32_t *grid, int32_t **tokens, uint32_t *n_tokens,
                     uint64_t *state_bytes, char *err, size_t errlen);
/* The state (malloc'ed, *state), checked against its hash; n_tokens: what the
 * caller expects the file to cover. */
int kvfile_read_state(const char *path, const char *identity, uint32_t n_tokens, void **state, uint64_t *state_bytes, char *err,
                      size_t errlen);

#endif
