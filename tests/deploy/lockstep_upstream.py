#!/usr/bin/env python3
"""lockstep_upstream.py — a stand-in for nebula-coordinator that proves nginx
does not buffer a stream (tests/deploy/test_start_stop.sh).

start.sh runs it as NEBULA_BIN/nebula-coordinator (same flags: --http,
--runtime, ...).  POST /v1/chat/completions with "stream": true sends one SSE
event, then waits until the client says it has received it
(GET /api/ack?n=1), sends the next, and so on; only then does the stream end.
Through a buffering proxy the client never sees the first event while the
stream is open, so it never acknowledges and the stream ends with an error
event after the wait: no timing decides the outcome, only the order.

GET /api/status answers "ready"; GET /v1/models a list; anything else 404 in
the OpenAI error shape.  SIGTERM removes the runtime directory and exits.
"""
import http.server
import json
import os
import signal
import sys
import threading

EVENTS = 3         # content events before the final chunk
WAIT_S = 30        # per acknowledgement; a buffered stream fails after this

args = sys.argv[1:]
if "--help" in args:
    print("usage: lockstep_upstream.py --http HOST:PORT --runtime DIR [ignored coordinator flags]")
    sys.exit(0)


def opt(name):
    return args[args.index(name) + 1] if name in args else None


host, port = opt("--http").rsplit(":", 1)
runtime = opt("--runtime")
if runtime:
    os.mkdir(runtime, 0o700)


def stop(*_):
    if runtime:
        os.rmdir(runtime)
    os._exit(0)


signal.signal(signal.SIGTERM, stop)
acks = {n: threading.Event() for n in range(1, EVENTS + 1)}


def chunk(delta, finish=None):
    return {"id": "chatcmpl-lockstep", "object": "chat.completion.chunk", "created": 0, "model": "lockstep",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def send_json(self, code, obj):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/api/status":
            self.send_json(200, {"phase": "ready", "progress": 1, "message": "lockstep stand-in",
                                 "model": {"id": "lockstep", "demo": False}, "workers": []})
        elif self.path == "/v1/models":
            self.send_json(200, {"object": "list", "data": [{"id": "lockstep", "object": "model"}]})
        elif self.path.startswith("/api/ack?n=") and self.path[11:].isdigit() and int(self.path[11:]) in acks:
            acks[int(self.path[11:])].set()
            self.send_json(200, {"ok": True})
        else:
            self.send_json(404, {"error": {"message": "not found", "type": "invalid_request_error",
                                           "param": None, "code": None}})

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.path != "/v1/chat/completions" or not json.loads(body or b"{}").get("stream"):
            self.send_json(404, {"error": {"message": "only streamed chat completions here",
                                           "type": "invalid_request_error", "param": None, "code": None}})
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def send(obj):
            data = b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        for n in range(1, EVENTS + 1):
            send(chunk({"content": "piece%d " % n}))
            if not acks[n].wait(WAIT_S):
                send({"error": {"message": "event %d was not acknowledged within %d s (buffered?)" % (n, WAIT_S),
                                "type": "server_error", "param": None, "code": "not_acknowledged"}})
                break
        else:
            send(chunk({}, "stop"))
        send(b"[DONE]")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def log_message(self, *_):
        pass


print("nebula-coordinator (lockstep stand-in): http on http://%s:%s" % (host, port), file=sys.stderr, flush=True)
http.server.ThreadingHTTPServer((host, int(port)), Handler).serve_forever()
