/* ctl.c — JSON control messages over ZeroMQ sockets (see ctl.h).
 *
 * A ROUTER frame set is [identity][empty][json]; a DEALER sends [empty][json]
 * so the ROUTER sees the same shape; REQ/REP use a single frame (ZeroMQ adds
 * and strips their envelope).  One context for the process, created on the
 * first open. */
#include "core/ctl/ctl.h"

#include "core/util/err.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zmq.h>

#define CTL_MAX_MSG (1 << 20) /* control messages are small; anything larger is a bug or an attack */

struct ctl_sock {
    enum ctl_kind kind;
    void *z;
};

static void *ctx;
static pthread_once_t ctx_once = PTHREAD_ONCE_INIT;
static void make_ctx(void) { ctx = zmq_ctx_new(); }

void ctl_term(void)
{
    if (ctx) zmq_ctx_term(ctx);
    ctx = NULL;
}

void ctl_after_fork(void)
{
    pthread_once(&ctx_once, make_ctx);
    ctx = zmq_ctx_new(); /* the inherited one is abandoned, never touched */
}

void ctl_endpoint(char *buf, size_t len, const char *dir, const char *name) { snprintf(buf, len, "ipc://%s/%s", dir, name); }

int ctl_open(enum ctl_kind kind, const char *endpoint, const char *identity, ctl_sock **out, char *err, size_t errlen)
{
    static const int types[] = {[CTL_ROUTER] = ZMQ_ROUTER, [CTL_DEALER] = ZMQ_DEALER, [CTL_REP] = ZMQ_REP, [CTL_REQ] = ZMQ_REQ};
    *out = NULL;
    pthread_once(&ctx_once, make_ctx);
    if (!ctx) return nb_errf(err, errlen, NB_EIO, "zmq_ctx_new: %s", zmq_strerror(zmq_errno()));
    ctl_sock *s = calloc(1, sizeof *s);
    if (!s) return nb_errf(err, errlen, NB_ENOMEM, "out of memory");
    s->kind = kind;
    s->z = zmq_socket(ctx, types[kind]);
    int linger = 1000, maxmsg = CTL_MAX_MSG;
    int64_t maxmsg64 = CTL_MAX_MSG;
    (void)maxmsg;
    if (!s->z) goto zfail;
    zmq_setsockopt(s->z, ZMQ_LINGER, &linger, sizeof linger); /* a last reply still leaves; a dead peer blocks close ≤ 1 s */
    zmq_setsockopt(s->z, ZMQ_MAXMSGSIZE, &maxmsg64, sizeof maxmsg64);
    if (kind == CTL_DEALER && identity && zmq_setsockopt(s->z, ZMQ_ROUTING_ID, identity, strlen(identity))) goto zfail;
    if (kind == CTL_ROUTER) {
        int mandatory = 1; /* sending to an unknown worker is an error, not a silent drop */
        zmq_setsockopt(s->z, ZMQ_ROUTER_MANDATORY, &mandatory, sizeof mandatory);
    }
    if (kind == CTL_ROUTER || kind == CTL_REP) {
        if (zmq_bind(s->z, endpoint)) goto zfail;
        if (!strncmp(endpoint, "ipc://", 6) && chmod(endpoint + 6, 0600)) {
            nb_errf(err, errlen, NB_EIO, "chmod 0600 %s: %s", endpoint + 6, strerror(errno));
            ctl_close(s);
            return NB_EIO;
        }
    } else if (zmq_connect(s->z, endpoint)) {
        goto zfail;
    }
    *out = s;
    return 0;
zfail:
    nb_errf(err, errlen, NB_EIO, "%s: %s", endpoint, zmq_strerror(zmq_errno()));
    ctl_close(s);
    return NB_EIO;
}

void ctl_close(ctl_sock *s)
{
    if (!s) return;
    if (s->z) zmq_close(s->z);
    free(s);
}

void *ctl_zmq_socket(ctl_sock *s) { return s->z; }

cJSON *ctl_msg(const char *type)
{
    cJSON *m = cJSON_CreateObject();
    if (m) cJSON_AddStringToObject(m, "type", type);
    return m;
}

const char *ctl_type(const cJSON *msg)
{
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(msg, "type");
    return cJSON_IsString(t) ? t->valuestring : "";
}

int ctl_send(ctl_sock *s, const char *peer, const cJSON *msg, char *err, size_t errlen)
{
    char *text = cJSON_PrintUnformatted(msg);
    if (!text) return nb_errf(err, errlen, NB_ENOMEM, "out of memory");
    int rc = 0;
    if (s->kind == CTL_ROUTER) {
        if (!peer) rc = nb_errf(err, errlen, NB_EINVAL, "a ROUTER send needs a peer");
        else if (zmq_send(s->z, peer, strlen(peer), ZMQ_SNDMORE) < 0 || zmq_send(s->z, "", 0, ZMQ_SNDMORE) < 0)
            rc = nb_errf(err, errlen, NB_EIO, "send to %s: %s", peer, zmq_strerror(zmq_errno()));
    } else if (s->kind == CTL_DEALER && zmq_send(s->z, "", 0, ZMQ_SNDMORE) < 0) {
        rc = nb_errf(err, errlen, NB_EIO, "send: %s", zmq_strerror(zmq_errno()));
    }
    if (!rc && zmq_send(s->z, text, strlen(text), 0) < 0)
        rc = nb_errf(err, errlen, NB_EIO, "send%s%s: %s", peer ? " to " : "", peer ? peer : "", zmq_strerror(zmq_errno()));
    free(text);
    return rc;
}

/* Receives one frame into a malloc'ed NUL-terminated buffer; *more says if
 * another frame follows. */
static int recv_frame(void *z, char **buf, size_t *len, int *more)
{
    zmq_msg_t m;
    zmq_msg_init(&m);
    if (zmq_msg_recv(&m, z, 0) < 0) {
        zmq_msg_close(&m);
        return -1;
    }
    *len = zmq_msg_size(&m);
    *buf = malloc(*len + 1);
    if (*buf) {
        memcpy(*buf, zmq_msg_data(&m), *len);
        (*buf)[*len] = 0;
    }
    *more = zmq_msg_more(&m);
    zmq_msg_close(&m);
    return *buf ? 0 : -1;
}

int ctl_recv(ctl_sock *s, int timeout_ms, char *peer, size_t peer_len, cJSON **msg, char *err, size_t errlen)
{
    *msg = NULL;
    zmq_pollitem_t item = {s->z, 0, ZMQ_POLLIN, 0};
    int n = zmq_poll(&item, 1, timeout_ms);
    if (n < 0) return nb_errf(err, errlen, NB_EIO, "poll: %s", zmq_strerror(zmq_errno()));
    if (n == 0) return nb_errf(err, errlen, NB_EIO, "timeout");
    /* Frames: ROUTER [id][""][json], DEALER [""][json], REQ/REP [json]. */
    char *frames[3] = {0};
    size_t lens[3];
    int nf = 0, more = 1, rc = 0;
    while (more && rc == 0) {
        char *b;
        size_t l;
        if (recv_frame(s->z, &b, &l, &more)) rc = nb_errf(err, errlen, NB_EIO, "recv: %s", zmq_strerror(zmq_errno()));
        else if (nf < 3) frames[nf] = b, lens[nf++] = l;
        else free(b), rc = nb_errf(err, errlen, NB_EFORMAT, "control message with too many frames");
    }
    const char *json = nf ? frames[nf - 1] : NULL;
    if (!rc && s->kind == CTL_ROUTER && peer) {
        if (nf < 2) rc = nb_errf(err, errlen, NB_EFORMAT, "ROUTER message without identity");
        else snprintf(peer, peer_len, "%.*s", (int)lens[0], frames[0]);
    }
    if (!rc) {
        cJSON *m = json ? cJSON_Parse(json) : NULL;
        if (!m || !cJSON_IsObject(m) || !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(m, "type"))) {
            cJSON_Delete(m);
            rc = nb_errf(err, errlen, NB_EFORMAT, "control message is not a JSON object with a \"type\"");
        } else {
            *msg = m;
        }
    }
    for (int i = 0; i < nf; i++) free(frames[i]);
    return rc;
}
