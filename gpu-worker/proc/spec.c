/* spec.c — the gpu-worker's side of speculative decoding (STEP_SPEC,
 * gpu-worker/step_proto.h; issue 16): go back to the previous window's
 * accepted prefix, draft with the MTP block (or take the coordinator's
 * drafts), evaluate [t0, drafts] as one verify window, answer the drafts and
 * every row's argmax or logits (in coverage mode, STEP_FLAG_COVERAGE, with
 * the resident experts only and the handoff rows' mask).  The wide states it needs stay here: the
 * last prefill row's (STEP_FLAG_WIDE) for the first window, each window's
 * rows for the next one's MTP input. */
#include "gpu-worker/proc/gw_proc.h"

#include <stdlib.h>
#include <string.h>

#include "core/model/model.h"
#include "core/util/err.h"
#include "gpu-worker/step_proto.h"

static int want_buffers(struct gwp_spec *sp, const struct model *m)
{
    const int64_t W = model_wide(&m->hp);
    if (!sp->wide && !(sp->wide = malloc((size_t)W * sizeof *sp->wide))) return NB_ENOMEM;
    if (!sp->win_wide && !(sp->win_wide = malloc((size_t)((STEP_MAX_DRAFT + 1) * W) * sizeof *sp->win_wide))) return NB_ENOMEM;
    return 0;
}

float *gwp_spec_wide(struct gwp_spec *sp, const struct model *m) { return want_buffers(sp, m) ? NULL : sp->wide; }

void gwp_spec_reset(struct gwp_spec *sp) { sp->have_wide = false, sp->win_n = 0; }

void gwp_spec_free(struct gwp_spec *sp)
{
    free(sp->wide), free(sp->win_wide);
    memset(sp, 0, sizeof *sp);
}

int gwp_spec_serve(struct gwp_spec *sp, gw_backend *be, gw_seq *seq, const struct ring_slot *req, struct ring_slot *resp,
                   char *err, size_t errlen)
{
    const struct model *m = gw_backend_model(be);
    const int64_t V = m->hp.n_vocab, W = model_wide(&m->hp);
    const int32_t *p = req->payload;
    if (req->hdr->payload_bytes < 4 * sizeof *p) return nb_errf(err, errlen, NB_EINVAL, "spec step: %u payload bytes", req->hdr->payload_bytes);
    const int32_t t0 = p[0], n = p[1], keep = p[2], src = p[3];
    const bool cover = req->hdr->flags & STEP_FLAG_COVERAGE;
    const int words = 4 + (src == STEP_DRAFT_GIVEN ? n : 0) + cover; /* the request's */
    if (n < 0 || n > STEP_MAX_DRAFT || (src != STEP_DRAFT_MTP && src != STEP_DRAFT_GIVEN) ||
        req->hdr->payload_bytes < (uint32_t)words * sizeof *p || t0 < 0 || t0 >= V)
        return nb_errf(err, errlen, NB_EINVAL, "spec step: bad request (t0 %d, %d drafts, source %d)", t0, n, src);
    float tau = 0;
    if (cover) memcpy(&tau, p + words - 1, sizeof tau);
    if (cover && !(tau > 0 && tau <= 1)) return nb_errf(err, errlen, NB_EINVAL, "spec step: coverage %g", (double)tau);
    int rc = want_buffers(sp, m);
    if (rc) return nb_errf(err, errlen, rc, "spec step: out of memory");
    if (keep >= 0) { /* the previous window's accepted prefix */
        if (keep >= sp->win_n) return nb_errf(err, errlen, NB_EINVAL, "spec step: keep %d of a %d-row window", keep, sp->win_n);
        if ((rc = gw_seq_truncate(seq, sp->win_pos0 + keep + 1, err, errlen))) return rc;
        memcpy(sp->wide, sp->win_wide + (int64_t)keep * W, (size_t)W * sizeof *sp->wide);
        sp->have_wide = true;
    }
    sp->win_n = 0;
    if (src == STEP_DRAFT_MTP && !sp->have_wide)
        return nb_errf(err, errlen, NB_EINVAL, "spec step: no MTP input (the prefill's last step lacked STEP_FLAG_WIDE)");
    int32_t win[STEP_MAX_DRAFT + 1];
    win[0] = t0;
    const int64_t pos = gw_seq_pos(seq);
    if (src == STEP_DRAFT_GIVEN) {
        for (int i = 0; i < n; i++) {
            if (p[4 + i] < 0 || p[4 + i] >= V) return nb_errf(err, errlen, NB_EINVAL, "spec step: draft %d out of vocabulary", p[4 + i]);
            win[1 + i] = p[4 + i];
        }
    } else if (n > 0 && (rc = gw_mtp_draft(seq, t0, sp->wide, pos, n, win + 1, NULL, err, errlen)))
        return rc;
    const bool only_argmax = req->hdr->flags & STEP_FLAG_ARGMAX;
    int32_t *out = resp->payload;
    uint8_t handoff[STEP_MAX_DRAFT + 1];
    out[0] = n;
    memcpy(out + 1, win + 1, (size_t)n * sizeof *out);
    struct gw_eval_args a = {.tokens = win, .n_tokens = n + 1, .logits_rows = GW_ROWS_ALL,
                             .logits = only_argmax ? NULL : (float *)(out + 1 + n), .argmax = only_argmax ? out + 1 + n : NULL,
                             .wide_rows = GW_ROWS_ALL, .wide = sp->win_wide, .verify = true, .coverage = tau,
                             .handoff = cover ? handoff : NULL};
    if ((rc = gw_eval(seq, &a, err, errlen))) return rc;
    const int64_t at = 1 + n + (int64_t)(n + 1) * (only_argmax ? 1 : V); /* the rows' end */
    if (cover) { /* the handoff mask after the rows */
        uint32_t mask = 0;
        for (int i = 0; i <= n; i++) mask |= (uint32_t)(handoff[i] != 0) << i;
        memcpy(out + at, &mask, sizeof mask);
    }
    sp->win_pos0 = pos, sp->win_n = n + 1, sp->have_wide = false; /* the next window's input is one of these rows */
    resp->hdr->n_tokens = (uint32_t)(n + 1);
    resp->hdr->payload_bytes = (uint32_t)((at + cover) * sizeof *out);
    return 0;
}
