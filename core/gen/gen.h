/* gen.h — one generation: prompt → prefill → sample → stop, driven from outside.
 *
 * The one generation loop of Nebula, for every driver: `nebula generate`
 * (a local backend, blocking), the coordinator (the gpu-worker over the step
 * ring, event-driven) and the speculative loop to come (draft/verify).  It
 * knows no backend: it owns the prompt, the sampler, the budget, the stop
 * rule and the timings, and it is a push interface — the driver asks what to
 * evaluate next (gen_next), evaluates it however it can, and hands the
 * logits back (gen_feed), which samples when a token is due.  So a blocking
 * driver is a three-line loop and an event-driven one keeps a session across
 * callbacks.
 *
 *     gen_session *g;  gen_new(&cfg, &g, err, n);
 *     struct gen_step st;
 *     while (gen_next(g, &st) == GEN_EVAL) {
 *         evaluate st.ids[0..st.n_ids) → logits of the last row (or its argmax when st.argmax_ok)
 *         gen_feed(g, logits, NULL, &ev, err, n);   ev: a sampled token, or prefill progress
 *     }
 *     gen_result(g): made ids, why it stopped, timings
 *
 * The stop rule: a generation ends at the budget ("length"), at a stop id
 * unless ignore_stop ("stop token"; the id is kept in the output: it was
 * generated), or when the driver says so (gen_cancel: "hook").  Rows: a
 * step asks for n_rows rows of logits (1: the last position); a driver with
 * drafts evaluates a window and hands its rows to gen_feed_verify, which
 * accepts a prefix. */
#ifndef NB_GEN_H
#define NB_GEN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/gen/spec.h"
#include "core/sampling/sampling.h"

typedef struct tok_tokenizer tok_tokenizer;
typedef struct gram_matcher gram_matcher;

#define GEN_MAX_STOP 8

struct gen_config {
    const int32_t *prompt;      /* n_prompt ids, copied */
    size_t n_prompt;
    long long budget;           /* tokens to generate at most (the caller clipped it to the context) */
    struct sampling_params sp;
    int32_t n_vocab;
    int32_t stop_ids[GEN_MAX_STOP]; /* ids that end the generation (gen_stop_ids) */
    int n_stop;
    bool ignore_stop;           /* stop ids are generated like any other (benchmarks) */
    size_t chunk;               /* prefill ids per step (0: the whole prompt in one) */
    const char *logits_path;    /* NULL, or a file for the rows each token is sampled from (float32,
                                 * n_vocab per token): written to PATH.tmp (0600), renamed when complete */
    gram_matcher *constrain;    /* NULL, or structured output (core/grammar; borrowed, over n_vocab ids): each
                                 * token is sampled among those the matcher allows, then accepted by it */
    int32_t constrain_after;    /* -1: constrained from the first token; else an id (</think>) before which
                                 * only the stop ids are refused, and after which the matcher applies */
    int accuracy_level;         /* verify windows' acceptance (core/gen/spec.h): 1 or 2 approximate, else (0, 3)
                                 * exact; a constrained session is exact whatever it says */
};

/* The stop ids of a tokenizer: eos, <|im_end|>, <|endoftext|> (the chat
 * model's end of turn).  Without one (ids only), none: nothing is known to end
 * a turn.  Returns the count written to ids (GEN_MAX_STOP room). */
int gen_stop_ids(const tok_tokenizer *tok, int32_t *ids);

typedef struct gen_session gen_session;

/* 0, NB_ENOMEM, or NB_EIO when the logits file cannot be created. */
int gen_new(const struct gen_config *cfg, gen_session **out, char *err, size_t errlen);
void gen_free(gen_session *g); /* removes an incomplete logits file; NULL is allowed */
/* Back to the start: the sampler reseeded, nothing generated, the prompt to
 * prefill again (a retry after a worker died gives the same ids). */
int gen_restart(gen_session *g, char *err, size_t errlen);

/* The prompt cache (issue 17): the sequence holds the prompt's first `at`
 * ids already (a checkpoint was loaded), so the prefill starts after them;
 * cut and cut2, in (at, n_prompt], are positions where a prefill step ends
 * (a checkpoint is saved there; 0: none).  Steps end on the grid of chunk
 * from position 0 as before, so the evals are an uncached prefill's, split
 * at most at at, cut and cut2.  After gen_new / gen_restart, before the
 * first gen_next. */
void gen_resume(gen_session *g, size_t at, size_t cut, size_t cut2);
/* Prompt ids evaluated so far (fed back), the loaded ones included. */
size_t gen_prefilled(const gen_session *g);

enum gen_next { GEN_EVAL = 1, GEN_DONE = 0 };
enum gen_phase { GEN_PREFILL, GEN_DECODE };

struct gen_step {
    enum gen_phase phase;
    const int32_t *ids;  /* the ids to evaluate at the sequence's next positions (the session's memory) */
    int n_ids;
    int n_rows;          /* rows of logits wanted, the last ones (1 today) */
    bool argmax_ok;      /* the argmax of the last row is all the sampler needs (greedy, no penalty, no dump,
                          * no constraint, an exact accuracy level) */
};
/* What to evaluate next, or GEN_DONE. */
enum gen_next gen_next(gen_session *g, struct gen_step *st);

struct gen_event {
    size_t prefill_done, prefill_total; /* ids of the prompt evaluated so far */
    bool token;          /* a token was sampled (the prefill's last step and every decode step) */
    int32_t id;
    long long index;     /* of that token, from 0 */
    bool stop;           /* it is a stop id (not ignored): the generation is over */
};
/* Computes the next sample's mask of a constrained session now (a no-op
 * otherwise, or when it is ready): a driver calls it after sending a step,
 * so the mask is made while the step is evaluated.  gen_feed makes it when
 * it was not.  0, or NB_ENOMEM. */
int gen_prepare(gen_session *g, char *err, size_t errlen);
/* The last step's result: logits (n_rows × n_vocab) or, when it allowed it,
 * argmax (one id per row).  0, or NB_EIO when the logits file cannot be written. */
int gen_feed(gen_session *g, const float *logits, const int32_t *argmax, struct gen_event *ev, char *err, size_t errlen);
/* A verify window instead of a decode step (speculative decoding, issue 16):
 * the driver evaluated the decode step's id (st.ids[0]) followed by n_drafts
 * drafted ids in one eval, and hands its n_drafts + 1 rows (logits, or one
 * argmax a row when st.argmax_ok).  The rows are sampled in order as that many
 * decode steps would sample them (the same sampler, the same random draws):
 * row i's token is kept, and row i + 1 is looked at only when that token
 * equals draft i and the generation goes on.  So the tokens are exactly the
 * non-speculative ones whatever the drafts — greedy or sampled — as long as
 * the rows are the decode steps' logits — at an exact accuracy level.  At
 * level 1 or 2 a draft the row's token is not may be kept instead by the
 * level's rule (core/gen/spec.h; a block is this window), which needs the
 * logits.  *accepted = the drafts kept (the
 * driver keeps the window's first *accepted + 1 positions, and the last token
 * sampled is the next step's id); ev[0 … *n_ev) one event per token sampled
 * (room for n_drafts + 1).  0 or NB_EIO (the logits file). */
int gen_feed_verify(gen_session *g, int n_drafts, const int32_t *drafts, const float *logits, const int32_t *argmax,
                    struct gen_event *ev, int *n_ev, int *accepted, char *err, size_t errlen);
/* Tokens generated so far, and their ids (gen_made of them; the session's memory). */
long long gen_made(const gen_session *g);
const int32_t *gen_out(const gen_session *g);
/* The accuracy level the verify windows run at: 1, 2, or 3 (exact). */
int gen_accuracy_level(const gen_session *g);
/* The verify windows' counters so far (the driver adds each pass's drafter
 * to by_src); reset by gen_restart.  Their `accepted` counts the drafts that
 * became tokens: with the one that ended the generation, which *accepted
 * leaves out (the driver has no next window to keep it for). */
struct spec_stats *gen_spec_stats(gen_session *g);
/* Prompt lookup (issue 16 item 7): up to n drafts for the tokens after the
 * last one generated — the tokens that followed the context's (prompt, then
 * what was generated) last 3, else 2, else 1 tokens where they last occurred
 * before.  Returns the count found (0 … n) into out. */
int gen_lookup_drafts(const gen_session *g, int n, int32_t *out);
/* Ends the generation now (the driver's reason: a client left, a stop string). */
void gen_cancel(gen_session *g);

struct gen_result {
    const int32_t *ids;  /* made ids (the session's memory) */
    long long made;
    const char *why;     /* "length", "stop token", "hook", or "grammar" (constrained: no token was allowed) */
    double prompt_s;     /* first gen_next to the prefill's last feed */
    double decode_s;     /* from there to the last feed */
    const struct spec_stats *spec; /* the verify windows (passes 0: none) */
    int accuracy_level;  /* the level they ran at (gen_accuracy_level) */
};
/* The outcome so far.  After GEN_DONE, completes the logits file (0 or NB_EIO). */
int gen_finish(gen_session *g, struct gen_result *r, char *err, size_t errlen);

#endif
