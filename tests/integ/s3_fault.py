"""s3_fault.py - a fault-injecting HTTP proxy between ckptd and the test's S3
server, for the remote tier's failure tests.  Requests are numbered from 1
in arrival order; each mode picks every Nth of them:

  s3_fault.py LISTEN_PORT UPSTREAM_PORT MODE...
    5xx:N          answer 503 SlowDown without forwarding
    drop:N         read the request, close the connection, answer nothing
    slow:N:SECS    forward, then hold the reply SECS seconds
    corrupt:N      (PUTs with a body only) flip a byte of the body on the way
    deny:PATTERN   answer 500 to every request whose path contains PATTERN
                   (a server that keeps failing)
    forbid:FILE    answer 403 AccessDenied to every request while FILE
                   exists (a policy that denies, until it is fixed)

Each fault is printed ("FAULT 5xx PUT /bucket/key") for the test to count.
The Host header is passed on unchanged: the signature covers it.
"""
import http.client
import http.server
import os
import sys
import threading
import time

LOCK = threading.Lock()
COUNT = {"all": 0, "put": 0}
MODES = []
UPSTREAM = 0


def pick(kind, n_all, n_put):
    for m in MODES:
        parts = m.split(":")
        if parts[0] != kind:
            continue
        if kind in ("deny", "forbid"):
            return parts[1]
        n = n_put if kind == "corrupt" else n_all
        if n and n % int(parts[1]) == 0:
            return parts
    return None


class Proxy(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def fault(self, what):
        print("FAULT %s %s %s" % (what, self.command, self.path), flush=True)

    def handle_any(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        with LOCK:
            COUNT["all"] += 1
            if self.command == "PUT" and body:
                COUNT["put"] += 1
            n_all, n_put = COUNT["all"], (COUNT["put"] if self.command == "PUT" and body else 0)
        deny = pick("deny", n_all, n_put)
        if deny and deny in self.path:
            self.fault("deny")
            return self.reply(500, b"<Error><Code>InternalError</Code>"
                              b"<Message>injected</Message></Error>")
        forbid = pick("forbid", n_all, n_put)
        if forbid and os.path.exists(forbid):
            self.fault("forbid")
            return self.reply(403, b"<Error><Code>AccessDenied</Code>"
                              b"<Message>Access Denied</Message></Error>")
        if pick("5xx", n_all, n_put):
            self.fault("5xx")
            return self.reply(503, b"<Error><Code>SlowDown</Code>"
                              b"<Message>injected</Message></Error>")
        if pick("drop", n_all, n_put):
            self.fault("drop")
            self.close_connection = True
            return
        if pick("corrupt", n_all, n_put):
            self.fault("corrupt")
            body = bytes([body[0] ^ 0xFF]) + body[1:]
        conn = http.client.HTTPConnection("127.0.0.1", UPSTREAM, timeout=60)
        conn.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
        for k, v in self.headers.items():
            conn.putheader(k, v)
        conn.endheaders(body if body else None)
        resp = conn.getresponse()
        data = resp.read()
        slow = pick("slow", n_all, n_put)
        if slow:
            self.fault("slow")
            time.sleep(float(slow[2]))
        self.send_response(resp.status)
        for k, v in resp.getheaders():
            if k.lower() not in ("content-length", "transfer-encoding", "connection",
                                 "date", "server"):
                self.send_header(k, v)
        # a HEAD's length is the object's
        self.send_header("Content-Length", resp.getheader("Content-Length", "0")
                         if self.command == "HEAD" else str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)
        conn.close()

    def reply(self, status, body):
        self.send_response(status)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = handle_any


def main():
    global UPSTREAM
    listen, UPSTREAM = int(sys.argv[1]), int(sys.argv[2])
    MODES.extend(sys.argv[3:])
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", listen), Proxy)
    srv.daemon_threads = True
    srv.serve_forever()


if __name__ == "__main__":
    main()
