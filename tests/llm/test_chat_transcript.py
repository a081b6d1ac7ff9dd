"""chat_transcript.py record and replay, against the committed vLLM transcripts (no vLLM needed).

Standard library only: python3 -m unittest tests/llm/test_chat_transcript.py, or pytest.
"""

import base64
import gzip
import http
import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
TOOL = os.path.join(HERE, "chat_transcript.py")
DATA = os.path.join(HERE, "data")


def entries(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def body(entry, prefix):
    if prefix in entry:
        return entry[prefix].encode("utf-8")
    if prefix + "_base64" in entry:
        return base64.b64decode(entry[prefix + "_base64"])
    return b""


class Proc:
    """chat_transcript.py ARGS..., its port read from the line it prints."""

    def __init__(self, *args):
        self.p = subprocess.Popen([sys.executable, TOOL, *args, "--quiet"], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        line = self.p.stdout.readline()
        if not line.startswith("listening on 127.0.0.1:"):
            self.p.kill()
            raise AssertionError("no listening line: %r %s" % (line, self.p.stderr.read()))
        self.port = int(line.rsplit(":", 1)[1])

    def stop(self):
        self.p.terminate()
        try:
            self.p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
        self.p.stdout.close()
        self.p.stderr.close()


def request(conn, method, path, data=None, headers=None):
    conn.request(method, path, body=data, headers=headers or {})
    r = conn.getresponse()
    return r.status, r.getheaders(), r.read()


def write_transcript(path, items):
    with open(path, "w", encoding="utf-8") as f:
        for i, (method, path_, req, status, res) in enumerate(items):
            f.write(json.dumps({"seq": i, "method": method, "path": path_, "request_body": req,
                                "status": status, "reason": http.HTTPStatus(status).phrase,
                                "response_headers": [["content-type", "application/json"]],
                                "response_body": res}) + "\n")


class Replay(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.tmp.name, "t.jsonl")
        write_transcript(self.path, [
            ("POST", "/v1/chat/completions", '{"a":1}', 200, '{"id":"first"}'),
            ("GET", "/v1/models", "", 200, '{"models":[]}'),
            ("POST", "/v1/chat/completions", '{"a":1}', 200, '{"id":"second"}'),
            ("POST", "/v1/chat/completions", '{"a":2}', 400, '{"error":"x"}'),
        ])
        self.procs = []

    def tearDown(self):
        for p in self.procs:
            p.stop()
        self.tmp.cleanup()

    def start(self, *args):
        p = Proc("replay", "--transcript", self.path, *args)
        self.procs.append(p)
        return p

    def test_identical_requests_get_recorded_answers_in_order_then_cycle(self):
        p = self.start()
        conn = http.client.HTTPConnection("127.0.0.1", p.port, timeout=10)
        got = [request(conn, "POST", "/v1/chat/completions", b'{"a":1}')[2] for _ in range(3)]
        self.assertEqual(got, [b'{"id":"first"}', b'{"id":"second"}', b'{"id":"first"}'])
        status, headers, data = request(conn, "POST", "/v1/chat/completions", b'{"a":2}')
        self.assertEqual((status, data), (400, b'{"error":"x"}'))
        self.assertIn(("content-type", "application/json"), headers)
        # The reset path starts every request's answers again from the first.
        self.assertEqual(request(conn, "POST", "/_transcript/reset", b"")[0], 204)
        self.assertEqual(request(conn, "POST", "/v1/chat/completions", b'{"a":1}')[2],
                         b'{"id":"first"}')

    def test_past_end_404(self):
        p = self.start("--past-end", "404")
        conn = http.client.HTTPConnection("127.0.0.1", p.port, timeout=10)
        for want in (b'{"id":"first"}', b'{"id":"second"}'):
            self.assertEqual(request(conn, "POST", "/v1/chat/completions", b'{"a":1}')[2], want)
        status, _, data = request(conn, "POST", "/v1/chat/completions", b'{"a":1}')
        self.assertEqual(status, 404)
        self.assertEqual(json.loads(data)["error"]["type"], "TranscriptExhausted")

    def test_unknown_request_is_404_naming_the_transcript(self):
        p = self.start()
        conn = http.client.HTTPConnection("127.0.0.1", p.port, timeout=10)
        for method, path, data in (("POST", "/v1/chat/completions", b'{"a": 1}'),
                                   ("GET", "/v1/nothing", None)):
            status, headers, answer = request(conn, method, path, data)
            self.assertEqual(status, 404)
            self.assertIn(("content-type", "application/json"), headers)
            err = json.loads(answer)["error"]
            self.assertIn("the transcript has no such request", err["message"])
            self.assertEqual(err["type"], "NotInTranscript")

    def test_keep_alive_expect_continue_and_chunked_bodies(self):
        p = self.start()
        # One connection, several requests; a body sent after 100 Continue; a chunked body.
        s = socket.create_connection(("127.0.0.1", p.port), timeout=10)
        f = s.makefile("rb")

        def answer():
            status = f.readline()
            headers = {}
            while True:
                line = f.readline().strip()
                if not line:
                    break
                k, v = line.decode().split(":", 1)
                headers[k.strip().lower()] = v.strip()
            return status, f.read(int(headers.get("content-length", 0)))

        s.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
        self.assertEqual(answer(), (b"HTTP/1.1 200 OK\r\n", b'{"models":[]}'))
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 7\r\n"
                  b"Expect: 100-continue\r\n\r\n")
        self.assertEqual(f.readline(), b"HTTP/1.1 100 Continue\r\n")
        self.assertEqual(f.readline(), b"\r\n")
        s.sendall(b'{"a":1}')
        self.assertEqual(answer()[1], b'{"id":"first"}')
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                  b"Transfer-Encoding: chunked\r\n\r\n3\r\n{\"a\r\n4\r\n\":2}\r\n0\r\n\r\n")
        self.assertEqual(answer(), (b"HTTP/1.1 400 Bad Request\r\n", b'{"error":"x"}'))
        s.close()

    def test_concurrent_requests(self):
        p = self.start()
        results = []

        def one():
            conn = http.client.HTTPConnection("127.0.0.1", p.port, timeout=10)
            for _ in range(5):
                results.append(request(conn, "GET", "/v1/models")[2])
            conn.close()

        threads = [threading.Thread(target=one) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(results, [b'{"models":[]}'] * 40)


class CommittedTranscripts(unittest.TestCase):
    """Every exchange of the committed transcripts replays byte for byte, and recording the
    replayer gives the same exchanges back."""

    def check_file(self, name):
        path = os.path.join(DATA, name)
        recorded = entries(path)
        self.assertTrue(recorded)
        replayer = Proc("replay", "--transcript", path, "--past-end", "404")
        tmp = tempfile.TemporaryDirectory()
        out = os.path.join(tmp.name, "again.jsonl")
        recorder = Proc("record", "--upstream", "http://127.0.0.1:%d" % replayer.port, "--out", out)
        try:
            conn = http.client.HTTPConnection("127.0.0.1", recorder.port, timeout=30)
            for e in sorted(recorded, key=lambda e: e["seq"]):
                data = body(e, "request_body") if e["method"] != "GET" else None
                status, headers, answer = request(conn, e["method"], e["path"], data,
                                                  {"Content-Type": "application/json"})
                self.assertEqual(status, e["status"], e["path"])
                self.assertEqual(answer, body(e, "response_body"), e["path"])
                self.assertEqual([[k, v] for k, v in headers if k.lower() != "content-length"],
                                 e["response_headers"])
            again = entries(out)
            self.assertEqual(len(again), len(recorded))
            for a, e in zip(again, sorted(recorded, key=lambda e: e["seq"])):
                for key in ("method", "path", "status", "response_headers"):
                    self.assertEqual(a[key], e[key])
                self.assertEqual(body(a, "request_body"), body(e, "request_body"))
                self.assertEqual(body(a, "response_body"), body(e, "response_body"))
        finally:
            recorder.stop()
            replayer.stop()
            tmp.cleanup()

    def test_vllm_cases(self):
        self.check_file("vllm_cases.jsonl")

    def test_vllm_llm_smoke(self):
        self.check_file("vllm_llm_smoke.jsonl.gz")


if __name__ == "__main__":
    unittest.main()
