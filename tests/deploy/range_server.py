#!/usr/bin/env python3
"""range_server.py — a static file server on 127.0.0.1 that honours Range.

    range_server.py DIR PORTFILE LOG [--cut NAME:BYTES ...]

Serves DIR's files (GET and HEAD, "Range: bytes=A-" and "bytes=A-B" with a
206 and its Content-Range; python3 -m http.server ignores Range).  Picks a
free port and writes it to PORTFILE.  Each request is one line of LOG:
"METHOD NAME RANGE STATUS BYTES_SENT".  --cut NAME:BYTES makes the first GET
of NAME send only BYTES of its body and then close the connection, as a
dropped download does; later GETs of NAME are whole.
"""
import http.server
import os
import re
import socketserver
import sys


def main():
    root, portfile, logpath = sys.argv[1:4]
    cuts = {}
    args = sys.argv[4:]
    while args:
        if args[0] != "--cut" or len(args) < 2:
            sys.exit("usage: range_server.py DIR PORTFILE LOG [--cut NAME:BYTES ...]")
        name, n = args[1].rsplit(":", 1)
        cuts[name] = int(n)
        args = args[2:]

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):  # the LOG file is the record
            pass

        def record(self, status, sent):
            with open(logpath, "a") as f:
                f.write("%s %s %s %d %d\n" % (self.command, self.path.lstrip("/"), self.headers.get("Range", "-"), status, sent))

        def serve(self, body):
            name = self.path.lstrip("/")
            path = os.path.join(root, name)
            if "/" in name or not os.path.isfile(path):
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()
                self.record(404, 0)
                return
            size = os.path.getsize(path)
            start, end, status = 0, size - 1, 200
            rng = self.headers.get("Range")
            if rng:
                m = re.fullmatch(r"bytes=(\d+)-(\d*)", rng.strip())
                if not m or int(m.group(1)) >= size:
                    self.send_response(416)
                    self.send_header("Content-Range", "bytes */%d" % size)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    self.record(416, 0)
                    return
                start = int(m.group(1))
                end = min(int(m.group(2)), size - 1) if m.group(2) else size - 1
                status = 206
            self.send_response(status)
            self.send_header("Content-Length", str(end - start + 1))
            self.send_header("Accept-Ranges", "bytes")
            if status == 206:
                self.send_header("Content-Range", "bytes %d-%d/%d" % (start, end, size))
            self.end_headers()
            if not body:
                self.record(status, 0)
                return
            limit = end - start + 1
            if name in cuts:  # the first GET of this file drops the connection
                limit = min(limit, cuts.pop(name))
                self.close_connection = True
            sent = 0
            with open(path, "rb") as f:
                f.seek(start)
                while sent < limit:
                    chunk = f.read(min(65536, limit - sent))
                    if not chunk:
                        break
                    self.wfile.write(chunk)
                    sent += len(chunk)
            self.wfile.flush()
            self.record(status, sent)

        def do_GET(self):
            self.serve(True)

        def do_HEAD(self):
            self.serve(False)

    class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
        daemon_threads = True

    srv = Server(("127.0.0.1", 0), Handler)
    with open(portfile + ".tmp", "w") as f:
        f.write(str(srv.server_address[1]))
    os.rename(portfile + ".tmp", portfile)
    srv.serve_forever()


if __name__ == "__main__":
    main()
