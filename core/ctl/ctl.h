/* ctl.h — the control plane: small JSON messages over ZeroMQ.
 *
 * The coordinator binds a ROUTER socket; each worker connects a DEALER whose
 * identity is its role ("gpu-worker", "cpu-moe-worker", "ssd-pager"), so the
 * coordinator can address a worker by name and tell which one spoke.
 * nebulactl talks to a separate REP endpoint.  Endpoints are `ipc://` paths
 * inside the instance's runtime directory (mode 0700), and every socket file
 * is chmod 0600 right after bind.  Activations never travel here: only
 * commands (hello, load, configure, reset, stats, shutdown, heartbeat) and
 * their replies, each one JSON object with a "type" field (docs/PROTOCOL.md,
 * "Control plane").  Every receive takes a timeout so that a dead peer is a
 * timeout, not a hang. */
#ifndef NB_CTL_H
#define NB_CTL_H

#include <stdbool.h>
#include <stddef.h>

#include <cJSON.h>

#define CTL_PROTOCOL_VERSION 1

typedef struct ctl_sock ctl_sock;

enum ctl_kind { CTL_ROUTER, CTL_DEALER, CTL_REP, CTL_REQ };

/* ROUTER/REP bind (and chmod the ipc file 0600); DEALER/REQ connect.
 * `identity` names a DEALER (ignored otherwise). */
int ctl_open(enum ctl_kind kind, const char *endpoint, const char *identity, ctl_sock **out, char *err, size_t errlen);
void ctl_close(ctl_sock *s);

/* Sends one JSON object.  On a ROUTER, `peer` names the worker to send to;
 * NULL elsewhere.  The object is not consumed. */
int ctl_send(ctl_sock *s, const char *peer, const cJSON *msg, char *err, size_t errlen);
/* Receives one JSON object within timeout_ms (-1: forever).  On a ROUTER the
 * sender's identity is copied into peer (peer_len bytes).  NB_EIO on timeout
 * with err "timeout"; NB_EFORMAT if the bytes are not a JSON object with a
 * string "type".  The caller cJSON_Delete()s *msg. */
int ctl_recv(ctl_sock *s, int timeout_ms, char *peer, size_t peer_len, cJSON **msg, char *err, size_t errlen);
/* The underlying ZeroMQ socket (for zmq_poll over several sockets). */
void *ctl_zmq_socket(ctl_sock *s);

/* Call once before the process exits, after closing its sockets: ZeroMQ
 * delivers queued messages (a last reply) only while its context lives, up
 * to the 1 s linger each socket has. */
void ctl_term(void);

/* In a child made by fork() (without exec): forget the parent's ZeroMQ
 * context, which must not be used across a fork, and start a fresh one.
 * Workers are exec'd and never need this; tests that fork do. */
void ctl_after_fork(void);

/* {"type": type} — callers add fields. */
cJSON *ctl_msg(const char *type);
/* The message's "type" (never NULL for a received message). */
const char *ctl_type(const cJSON *msg);
/* Builds "ipc://DIR/NAME". */
void ctl_endpoint(char *buf, size_t len, const char *dir, const char *name);

#endif
