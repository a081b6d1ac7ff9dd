"""A language-model run against a server that behaves like a real one: a reply envelope (id,
created, system_fingerprint, tool-call ids) drawn anew for every response, latency, kills at any
moment, and setup mistakes. The server is `harness serve` behind a loopback proxy that rewrites
each reply's envelope the way vLLM draws it (tests/llm/README.md has the real vLLM transcripts)."""
import http.client
import http.server
import json
import os
import signal
import subprocess
import threading
import time
import uuid

import pytest

from conftest import binary, run_cmd


class EnvelopeProxy:
    """Forwards every request to `upstream` (host, port); rewrites the envelope of each chat
    completion it passes on and waits `delay_s` before answering. Remembers the request bodies."""

    def __init__(self, upstream_port, delay_s=0.0):
        self.upstream_port = upstream_port
        self.delay_s = delay_s
        self.bodies = []
        self.lock = threading.Lock()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def forward(self, method):
                length = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(length) if length else None
                if method == "POST":
                    with proxy.lock:
                        proxy.bodies.append(body)
                headers = {k: v for k, v in self.headers.items() if k.lower() in ("authorization", "content-type")}
                conn = http.client.HTTPConnection("127.0.0.1", proxy.upstream_port, timeout=600)
                conn.request(method, self.path, body=body, headers=headers)
                r = conn.getresponse()
                data = r.read()
                conn.close()
                if method == "POST" and r.status == 200:
                    reply = json.loads(data)
                    reply["id"] = "chatcmpl-" + uuid.uuid4().hex
                    reply["created"] = int(time.time() * 1000) + len(proxy.bodies)
                    reply["system_fingerprint"] = "fp_" + uuid.uuid4().hex[:10]
                    for choice in reply.get("choices", []):
                        for call in choice.get("message", {}).get("tool_calls") or []:
                            call["id"] = "chatcmpl-tool-" + uuid.uuid4().hex
                    data = json.dumps(reply).encode()
                if proxy.delay_s:
                    time.sleep(proxy.delay_s)
                self.send_response(r.status)
                self.send_header("Content-Type", r.getheader("Content-Type", "application/json"))
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                self.forward("GET")

            def do_POST(self):
                self.forward("POST")

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self):
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def serve():
    """`harness serve` on a free loopback port; yields its port."""
    p = subprocess.Popen([binary("harness"), "serve", "--port", "0"], stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True)
    line = p.stdout.readline()  # the server's own word, not a deadline
    assert line.startswith("listening on "), line
    yield int(line.strip().rsplit(":", 1)[1])
    p.terminate()
    p.wait()


def smoke_args(root, name, url, *extra):
    return [binary("harness"), "run", "experiments/llm_smoke.toml", "--out", root, "--name", name,
            "--set", f"backbone.base_url={url}", "--set", "tts.enabled=false", *extra]


def digest(run):
    p = run_cmd([binary("replay"), "verify", run])
    line = [l for l in p.stdout.splitlines() if l.startswith("digest: ")]
    assert line, p.stdout
    return line[-1].split()[1]


def journal_keys(run):
    """The call keys of the journal's whole lines (a torn last line is not an entry)."""
    path = os.path.join(run, "llm_journal.jsonl")
    if not os.path.exists(path):
        return set()
    keys = set()
    with open(path, "rb") as f:
        for raw in f.read().split(b"\n"):
            try:
                keys.add(json.loads(raw)["key"])
            except (ValueError, KeyError):
                break
    return keys


def call_log_keys(run):
    with open(os.path.join(run, "llm_calls.jsonl")) as f:
        return [json.loads(l)["key"] for l in f if l.strip()]


def test_two_runs_against_a_server_that_draws_its_envelope_have_one_digest(serve, tmp_path):
    proxy = EnvelopeProxy(serve)
    try:
        root = str(tmp_path / "runs")
        run_cmd(smoke_args(root, "a", proxy.url))
        run_cmd(smoke_args(root, "b", proxy.url))
    finally:
        proxy.close()
    a, b = os.path.join(root, "a"), os.path.join(root, "b")
    assert digest(a) == digest(b)
    p = run_cmd([binary("replay"), "diff", a, b])
    assert p.stdout.startswith("runs are equal: "), p.stdout
    # The envelopes differed, and are kept beside the run.
    envelopes = []
    for run in (a, b):
        with open(os.path.join(run, "llm_calls.jsonl")) as f:
            envelopes.append({json.loads(l)["envelope"]["id"] for l in f})
    assert envelopes[0] and not envelopes[0] & envelopes[1]
    # The record holds the meaning only: no id, created or fingerprint in any reply object.
    p = run_cmd([binary("replay"), "cat", a, "--objects", "--no-manifest"])
    assert "system_fingerprint" not in p.stdout and "chatcmpl-" not in p.stdout


def wait_for_journal(run, proc, count):
    """Blocks until the run's journal holds `count` answers or the run ends; True when it holds them."""
    while proc.poll() is None:
        if len(journal_keys(run)) >= count:
            return True
        time.sleep(0.005)
    return False


def test_kill_at_ten_points_then_resume_asks_nothing_paid_for_again(serve, tmp_path):
    root = str(tmp_path / "runs")
    proxy = EnvelopeProxy(serve, delay_s=0.03)
    try:
        run_cmd(smoke_args(root, "whole", proxy.url))
        want = digest(os.path.join(root, "whole"))
        total = len(call_log_keys(os.path.join(root, "whole")))
        assert total > 40, total
        points = [1, 2, 5, 9, 14, 20, 27, 33, 38, total - 3]
        killed_at = []
        for i, point in enumerate(points):
            name = f"k{i}"
            run = os.path.join(root, name)
            log = open(os.path.join(str(tmp_path), name + ".log"), "w")
            proc = subprocess.Popen(smoke_args(root, name, proxy.url), stdout=log, stderr=log,
                                    cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
            reached = wait_for_journal(run, proc, point)
            if reached:
                proc.send_signal(signal.SIGKILL)
            proc.wait()
            log.close()
            if not reached:
                continue  # it ended first: nothing to resume
            paid = journal_keys(run)
            killed_at.append(len(paid))
            asked_before = len(call_log_keys(run)) if os.path.exists(os.path.join(run, "llm_calls.jsonl")) else 0
            run_cmd([binary("harness"), "run", "--resume", run])
            asked_again = call_log_keys(run)[asked_before:]
            assert not paid & set(asked_again), f"point {point}: answers paid for were asked again"
            assert len(asked_again) + len(paid) <= total + 1
            assert digest(run) == want, f"point {point}"
            assert not os.path.exists(os.path.join(run, "llm_journal.jsonl")), "a complete run keeps no journal"
        assert len(killed_at) >= 8, killed_at
    finally:
        proxy.close()


@pytest.mark.parametrize("sig,code,name", [(signal.SIGTERM, 143, "SIGTERM"), (signal.SIGINT, 130, "SIGINT")])
def test_sigterm_and_sigint_stop_cleanly_and_resume(serve, tmp_path, sig, code, name):
    root = str(tmp_path / "runs")
    proxy = EnvelopeProxy(serve, delay_s=0.03)
    try:
        run_cmd(smoke_args(root, "whole", proxy.url))
        run = os.path.join(root, "stopped")
        proc = subprocess.Popen(smoke_args(root, "stopped", proxy.url), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True,
                                cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
        assert wait_for_journal(run, proc, 10)
        proc.send_signal(sig)
        out, err = proc.communicate()
        assert proc.returncode == code, (proc.returncode, err)
        assert f"stopped by {name}" in err and f"--resume {run}" in err, err
        run_cmd([binary("harness"), "run", "--resume", run])
        assert digest(run) == digest(os.path.join(root, "whole"))
    finally:
        proxy.close()


def test_setup_mistakes_stop_before_anything_is_spent(tmp_path):
    env_key = "VINCI_TEST_SERVER_KEY"
    server_env = dict(os.environ, **{env_key: "right-key"})
    p = subprocess.Popen([binary("harness"), "serve", "--port", "0", "--api-key-env", env_key],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=server_env)
    try:
        line = p.stdout.readline()
        assert line.startswith("listening on "), line
        port = line.strip().rsplit(":", 1)[1]
        url = f"http://127.0.0.1:{port}/v1"
        root = str(tmp_path / "runs")
        cases = [
            ("model", ["--set", f"backbone.base_url={url}", "--set", "backbone.model=qwen3-8b",
                       "--set", f"backbone.api_key_env={env_key}"], {env_key: "right-key"},
             "does not serve the model 'qwen3-8b' (backbone.model); it serves: vinci-sim"),
            ("key", ["--set", f"backbone.base_url={url}", "--set", f"backbone.api_key_env={env_key}"],
             {env_key: "wrong-key"}, "refused the API key"),
            ("nokey", ["--set", f"backbone.base_url={url}"], {}, "refused the API key"),
            ("path", ["--set", f"backbone.base_url=http://127.0.0.1:{port}/nope",
                      "--set", f"backbone.api_key_env={env_key}"], {env_key: "right-key"},
             "has no GET /models here"),
        ]
        for name, sets, extra_env, want in cases:
            args = [binary("harness"), "run", "experiments/llm_smoke.toml", "--out", root, "--name", name, *sets]
            env = {k: v for k, v in os.environ.items() if k != env_key}
            env.update(extra_env)
            r = subprocess.run(args, capture_output=True, text=True, env=env,
                               cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
            assert r.returncode == 2, (name, r.returncode, r.stderr)
            assert want in r.stderr, (name, r.stderr)
            assert "nothing was recorded" in r.stderr, (name, r.stderr)
            assert "right-key" not in r.stderr + r.stdout and "wrong-key" not in r.stderr + r.stdout
            assert not os.path.exists(os.path.join(root, name)), f"{name}: a folder was made"
    finally:
        p.terminate()
        p.wait()
