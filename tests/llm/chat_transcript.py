#!/usr/bin/env python3
"""Record an OpenAI-compatible server's HTTP exchanges, and replay them byte for byte.

  chat_transcript.py record --upstream http://127.0.0.1:8011 --out FILE.jsonl [--listen-port 0]
  chat_transcript.py replay --transcript FILE.jsonl [--transcript MORE.jsonl] [--listen-port 0]
                            [--past-end cycle|404]
  chat_transcript.py show FILE.jsonl

record is a loopback HTTP proxy: every request (any method, path and body; HTTP/1.1 keep-alive
and Expect: 100-continue handled) is forwarded to the upstream, its answer is passed back and one
JSON line per exchange is appended to FILE (flushed at once, so a killed recorder leaves whole
lines). replay is a loopback HTTP server that answers each request with a recorded response:
status, headers and body exactly as recorded (ids, timestamps and all), found by the request's
method, path (with its query) and exact body bytes. Request headers play no part in the match.

When identical requests were recorded several times, the n-th identical request replayed gets
the n-th recorded answer (in the order the recorder received the requests, its "seq"); past the
last one, --past-end cycle (the default) starts again from the first, --past-end 404 answers 404.
POST /_transcript/reset sets every counter back to the start (answered 204; the path is the
replayer's own and is never matched against the transcript). A request the transcript does not
hold is answered 404 with an OpenAI-style JSON error body that says so.

Both print `listening on 127.0.0.1:PORT` on stdout once they listen (--listen-port 0: a free
port). Both serve requests concurrently (a thread each) and end on SIGINT or SIGTERM.

A transcript line (JSON; keys in this order):
  seq                 the recorder's count of requests received, from 0 (arrival order)
  method, path        as the client sent them (path with its query string)
  request_headers     content-type, accept, and authorization as "<redacted>" when one was sent
  request_body        the body when it is UTF-8, else request_body_base64 (base64 of the bytes)
  status, reason      the upstream's status line
  response_headers    every header of the upstream's answer but the framing ones (connection,
                      keep-alive, transfer-encoding, content-length), as [name, value] pairs in
                      the order sent
  response_body       the body when it is UTF-8, else response_body_base64
  upstream_ms         how long the upstream took (information only)

replay and show read a transcript compressed with gzip when its name ends in .gz (record writes
plain JSON lines; `gzip -9n FILE` compresses one reproducibly).

The body of a streamed (chunked) answer is recorded whole, after the last chunk, and replayed
with a Content-Length. Only the Python standard library is used.
"""

import argparse
import base64
import gzip
import hashlib
import http.client
import http.server
import json
import signal
import sys
import threading
import time
import urllib.parse

HOP_BY_HOP = {
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailers",
    "transfer-encoding", "upgrade", "proxy-connection",
}
# Request headers not forwarded: framing (re-done by http.client), Host (the upstream's),
# Expect (the 100-continue is answered here) and Accept-Encoding (so bodies come uncompressed).
NOT_FORWARDED = HOP_BY_HOP | {"host", "content-length", "expect", "accept-encoding"}
# Response headers not recorded: framing (a replayed body always has a Content-Length).
NOT_RECORDED = HOP_BY_HOP | {"content-length"}
RECORDED_REQUEST_HEADERS = ("content-type", "accept")
RESET_PATH = "/_transcript/reset"


def open_text(path):
    """A transcript for reading: gzip-compressed when its name ends in .gz."""
    if path.endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8")
    return open(path, encoding="utf-8")


def body_fields(prefix, data):
    """The JSON fields that hold a body: text when it is UTF-8, else base64."""
    try:
        return {prefix: data.decode("utf-8")}
    except UnicodeDecodeError:
        return {prefix + "_base64": base64.b64encode(data).decode("ascii")}


def body_of(entry, prefix):
    """The bytes of a body written by body_fields."""
    if prefix in entry:
        return entry[prefix].encode("utf-8")
    if prefix + "_base64" in entry:
        return base64.b64decode(entry[prefix + "_base64"])
    return b""


class Handler(http.server.BaseHTTPRequestHandler):
    """Reads whole requests (Content-Length or chunked) on a keep-alive connection."""

    protocol_version = "HTTP/1.1"
    server_version = "chat_transcript"

    def read_body(self):
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            parts = []
            while True:
                size_line = self.rfile.readline(65537)
                size = int(size_line.split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline(65537)
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def send_whole(self, status, reason, headers, body):
        """status, the headers as given (no Server or Date added), Content-Length, body."""
        self.log_request(status, len(body))
        self.send_response_only(status, reason)
        for name, value in headers:
            self.send_header(name, value)
        if status >= 200 and status not in (204, 304):
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        self.wfile.flush()

    def send_json_error(self, status, message, kind):
        body = json.dumps({"error": {"message": message, "type": kind, "param": None,
                                     "code": status}}).encode("utf-8")
        self.send_whole(status, None, [("content-type", "application/json")], body)

    def handle_any(self):
        raise NotImplementedError

    def log_message(self, fmt, *args):
        if not self.server.quiet:
            sys.stderr.write("%s %s\n" % (self.server.name, fmt % args))

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = do_HEAD = \
        lambda self: self.handle_any()


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, port, handler, name, quiet):
        self.name = name
        self.quiet = quiet
        super().__init__(("127.0.0.1", port), handler)


# ---- record -----------------------------------------------------------------------------------

class RecordHandler(Handler):
    def upstream_connection(self):
        # One upstream connection per client connection, kept alive while the client's is.
        conn = getattr(self, "_upstream", None)
        if conn is None:
            up = self.server.upstream
            conn = http.client.HTTPConnection(up.hostname, up.port or 80,
                                              timeout=self.server.timeout_s)
            self._upstream = conn
        return conn

    def handle_any(self):
        server = self.server
        with server.lock:
            seq = server.next_seq
            server.next_seq += 1
        body = self.read_body()
        headers = {k: v for k, v in self.headers.items() if k.lower() not in NOT_FORWARDED}
        headers["Accept-Encoding"] = "identity"
        target = server.upstream_prefix + self.path
        started = time.monotonic()
        for attempt in (0, 1):
            conn = self.upstream_connection()
            try:
                conn.request(self.command, target, body=body if body or self.command in (
                    "POST", "PUT", "PATCH") else None, headers=headers)
                answer = conn.getresponse()
                data = answer.read()
                break
            except (ConnectionError, http.client.HTTPException, OSError) as e:
                conn.close()
                self._upstream = None
                if attempt == 1 or not isinstance(e, (http.client.RemoteDisconnected,
                                                      ConnectionResetError, BrokenPipeError)):
                    sys.stderr.write("record: upstream failed on %s %s: %s\n"
                                     % (self.command, self.path, e))
                    self.send_json_error(502, "chat_transcript record: the upstream failed: %s"
                                         % e, "UpstreamError")
                    return
        elapsed_ms = round((time.monotonic() - started) * 1000.0, 1)
        response_headers = [[k, v] for k, v in answer.getheaders()
                            if k.lower() not in NOT_RECORDED]
        request_headers = {}
        for name in RECORDED_REQUEST_HEADERS:
            if self.headers.get(name) is not None:
                request_headers[name] = self.headers.get(name)
        if self.headers.get("authorization") is not None:
            request_headers["authorization"] = "<redacted>"
        entry = {"seq": seq, "method": self.command, "path": self.path,
                 "request_headers": request_headers}
        entry.update(body_fields("request_body", body))
        entry.update({"status": answer.status, "reason": answer.reason,
                      "response_headers": response_headers})
        entry.update(body_fields("response_body", data))
        entry["upstream_ms"] = elapsed_ms
        line = json.dumps(entry, ensure_ascii=True, separators=(",", ":")) + "\n"
        with server.lock:
            server.out.write(line)
            server.out.flush()
        if answer.getheader("connection", "").lower() == "close":
            conn.close()
            self._upstream = None
        self.send_whole(answer.status, answer.reason, response_headers, data)

    def finish(self):
        conn = getattr(self, "_upstream", None)
        if conn is not None:
            conn.close()
        super().finish()


def record(args):
    up = urllib.parse.urlsplit(args.upstream)
    if up.scheme != "http" or not up.hostname:
        sys.exit("record: --upstream must be http://HOST:PORT[/PREFIX], got %r" % args.upstream)
    server = Server(args.listen_port, RecordHandler, "record", args.quiet)
    server.upstream = up
    server.upstream_prefix = up.path.rstrip("/")
    server.timeout_s = args.timeout
    server.lock = threading.Lock()
    server.next_seq = 0
    if args.append:
        try:
            with open(args.out, encoding="utf-8") as f:
                seqs = [json.loads(l)["seq"] for l in f if l.strip()]
            server.next_seq = max(seqs) + 1 if seqs else 0
        except FileNotFoundError:
            pass
    server.out = open(args.out, "a" if args.append else "w", encoding="utf-8")
    serve(server)


# ---- replay -----------------------------------------------------------------------------------

def load_transcripts(paths):
    """{(method, path, body bytes): [entries in seq order]}; seq is per file, files in order."""
    exchanges = {}
    for file_index, path in enumerate(paths):
        with open_text(path) as f:
            for line_no, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    entry = json.loads(line)
                    key = (entry["method"], entry["path"], body_of(entry, "request_body"))
                    int(entry["status"])
                except (ValueError, KeyError, TypeError) as e:
                    sys.exit("replay: %s:%d: not a transcript line (%s)" % (path, line_no, e))
                order = (file_index, entry.get("seq", line_no), line_no)
                exchanges.setdefault(key, []).append((order, entry))
    return {k: [e for _, e in sorted(v, key=lambda p: p[0])] for k, v in exchanges.items()}


class ReplayHandler(Handler):
    def handle_any(self):
        server = self.server
        body = self.read_body()
        if self.command == "POST" and self.path == RESET_PATH:
            with server.lock:
                server.served.clear()
            self.send_whole(204, None, [], b"")
            return
        key = (self.command, self.path, body)
        answers = server.exchanges.get(key)
        if not answers:
            digest = hashlib.sha256(body).hexdigest()[:16]
            sys.stderr.write("replay: no such request: %s %s (%d-byte body, sha256 %s)\n"
                             % (self.command, self.path, len(body), digest))
            self.send_json_error(
                404, "the transcript has no such request: %s %s with this %d-byte body "
                "(sha256 %s...)" % (self.command, self.path, len(body), digest),
                "NotInTranscript")
            return
        with server.lock:
            n = server.served.get(key, 0)
            server.served[key] = n + 1
        if n >= len(answers):
            if server.past_end == "404":
                self.send_json_error(
                    404, "the transcript has %d answer(s) to %s %s with this body, all given"
                    % (len(answers), self.command, self.path), "TranscriptExhausted")
                return
            n %= len(answers)
        entry = answers[n]
        headers = [(name, value) for name, value in entry.get("response_headers", [])]
        self.send_whole(int(entry["status"]), entry.get("reason"), headers,
                        body_of(entry, "response_body"))


def replay(args):
    server = Server(args.listen_port, ReplayHandler, "replay", args.quiet)
    server.exchanges = load_transcripts(args.transcript)
    server.past_end = args.past_end
    server.lock = threading.Lock()
    server.served = {}
    serve(server)


# ---- show -------------------------------------------------------------------------------------

def show(args):
    """One line per exchange: seq, method, path, request body size, status, body head."""
    with open_text(args.file) as f:
        for line in f:
            if not line.strip():
                continue
            e = json.loads(line)
            req = body_of(e, "request_body")
            res = body_of(e, "response_body")
            head = res[:100].decode("utf-8", "replace").replace("\n", "\\n")
            print("%4s %-6s %-28s req %6d B -> %d %6d B  %s"
                  % (e.get("seq"), e["method"], e["path"], len(req), e["status"], len(res), head))


def serve(server):
    def stop(signum, frame):
        threading.Thread(target=server.shutdown, daemon=True).start()
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print("listening on 127.0.0.1:%d" % server.server_address[1], flush=True)
    try:
        server.serve_forever()
    finally:
        server.server_close()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("record", help="proxy to an upstream, appending each exchange to a file")
    r.add_argument("--upstream", required=True, help="http://HOST:PORT of the real server")
    r.add_argument("--out", required=True, help="the transcript (JSON lines)")
    r.add_argument("--append", action="store_true", help="add to --out instead of replacing it")
    r.add_argument("--listen-port", type=int, default=0)
    r.add_argument("--timeout", type=float, default=600.0, help="upstream timeout, seconds")
    r.add_argument("--quiet", action="store_true", help="no line per request on stderr")
    r.set_defaults(func=record)
    s = sub.add_parser("replay", help="answer requests from transcripts")
    s.add_argument("--transcript", required=True, action="append")
    s.add_argument("--listen-port", type=int, default=0)
    s.add_argument("--past-end", choices=["cycle", "404"], default="cycle",
                   help="past the last recorded answer to a request: start again, or 404")
    s.add_argument("--quiet", action="store_true", help="no line per request on stderr")
    s.set_defaults(func=replay)
    w = sub.add_parser("show", help="a line per exchange of a transcript")
    w.add_argument("file")
    w.set_defaults(func=show)
    args = p.parse_args(argv)
    args.func(args)


if __name__ == "__main__":
    main()
