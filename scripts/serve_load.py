#!/usr/bin/env python3
"""`harness serve` under load: concurrent chat requests, then an oversized body.

Starts `harness serve --port 0` (the port from its `listening on HOST:PORT` line), reads its
resident memory (VmRSS in /proc/PID/status), sends REQUESTS chat requests at once (one thread and
one connection each, all released together once every connection is open) with bodies shaped like
the ones vinci's chat client sends (system and user messages, a task header, a per-call seed;
every other one a second turn with the last reply and its evaluation), then streams a BIG_MB MB
body and waits for the server's answer while it sends, then asks once more and reads VmRSS again
and the peak (VmHWM). Prints a table of the figures.

Passes (exit 0) when every request got a complete HTTP response whose body is JSON (no empty
replies, no dropped connections), every chat request a 200 with a chat.completion, the big body
a 413 with a JSON error body before the client had sent all of it, and RSS after < RSS before +
--max-growth-mb. Fails with exit 1 naming what did not hold; 2 for a bad command line.

Nothing here depends on the machine's speed: the script waits on events (the port line, the
replies, the socket turning readable), and its one timeout, --hang-guard seconds (300), only
stops a hung server from hanging the caller.

    python3 scripts/serve_load.py [--harness build/bin/harness] [--requests 200] [--big-mb 50]

Python 3 standard library only. ctest runs it as `harness.serve_load` (tests/harness/CMakeLists.txt).
"""

import argparse
import http.client
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SYSTEM = (
    "You are an expert in writing high-performance GPU kernels. Given a PyTorch reference model, "
    "write a replacement that computes the same outputs with custom CUDA kernels and runs faster on "
    "an NVIDIA H200 (sm_90). The result must be correct for every input the task allows; do not call "
    "PyTorch compute operators, cuBLAS or torch.compile for the work you are asked to implement. "
    "After each attempt you receive the evaluation result (compilation, correctness, runtime, "
    "speedup) and may improve the kernel.")

# Task headers as vinci's task prompts start (gpu/task_prompt.cc); the server reads "Task ID:" and
# "Sizes (small|full)".
TASKS = [
    ("L1_019", "relu (level 1, elementwise)\nCompute y = relu(x).\nSizes (small): N = 4096"),
    ("L1_001", "square_matmul (level 1, gemm)\nCompute C = A @ B for square float32 matrices A and B "
               "of shape [N, N].\nSizes (small): N = 256"),
]

FORMAT = (
    "# Answer format\n\nWrite device code only, in one ```cuda block: `extern \"C\" __global__` entry "
    "points (and any `__device__` helpers); no host code. Then say what to launch in one ```launch "
    "block, one statement a line.")

# A second turn of L1_001: the last reply's launch block with its knobs line, and its evaluation.
LAST_REPLY = (
    "The sim backbone chose this schedule for L1_001.\n\n```cuda\nextern \"C\" __global__ void "
    "k0_gemm(const float* A, const float* B, float* C, long long M, long long N, long long K) {}\n```\n"
    "```launch\n# knobs: gemm.bounds=unchecked gemm.tensor_cores=off gemm.threads=64 gemm.tile_k=8 "
    "gemm.tile_m=128 gemm.tile_n=64 gemm.unroll=4\nk0_gemm<<<(ceil_div(N, 64), ceil_div(N, 128), 1), "
    "128>>>(A, B, C, N, N, N)\n```\n")
FEEDBACK = (
    "compiled: yes\ncorrect: yes\nmax difference: 0; mean difference: 0\nreference runtime: 2809 us; "
    "your runtime: 7748 us; speedup: 0.3626x\n\n\nImprove the kernel: make it correct if it is not, "
    "then faster. Answer in the same format (one ```cuda block and one ```launch block).")


def chat_body(i):
    """The i-th request: a policy call as vinci makes it, a second turn for odd i."""
    if i % 2:
        task_id, header = TASKS[1]
        messages = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": f"# Task\n\nTask {task_id}: {header}\n\n{FORMAT}"},
            {"role": "assistant", "content": LAST_REPLY},
            {"role": "user", "content": FEEDBACK},
        ]
    else:
        task_id, header = TASKS[(i // 2) % len(TASKS)]
        messages = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": f"# Task\n\nTask {task_id}: {header}\n\n{FORMAT}"},
        ]
    body = {"messages": messages, "model": "vinci-sim", "seed": 1000003 * i + 7,
            "temperature": 1.0 if i % 3 else 0.0}
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def memory_mib(pid):
    """(VmRSS, VmHWM) of a process in MiB, from /proc/PID/status."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0]) / 1024.0
    return out["VmRSS"], out["VmHWM"]


class Server:
    """`harness serve --port 0` in the background; its stderr goes to a file."""

    def __init__(self, harness, library, guard):
        self.log = tempfile.NamedTemporaryFile(prefix="vinci_serve_load_", suffix=".log", delete=False)
        self.proc = subprocess.Popen([harness, "serve", "--port", "0", "--library", library],
                                     stdout=subprocess.PIPE, stderr=self.log, text=True)
        self.port = None
        # The port line, however long the start takes; the guard only stops a hung start.
        found = threading.Event()

        def read_port():
            for line in self.proc.stdout:
                if line.startswith("listening on "):
                    self.port = int(line.rsplit(":", 1)[1])
                    found.set()
            found.set()  # stdout closed: the server ended

        threading.Thread(target=read_port, daemon=True).start()
        found.wait(guard)
        if self.port is None:
            self.stop(guard)
            raise RuntimeError(f"harness serve printed no `listening on` line (exit {self.proc.returncode}):\n"
                               + self.log_text())

    def log_text(self):
        with open(self.log.name, errors="replace") as f:
            return f.read()

    def stop(self, guard):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(guard)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def one_request(port, body, guard, barrier, result):
    """Connects, waits for every other thread to connect, sends one chat request, reads the reply."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=guard)
    try:
        conn.connect()
        barrier.wait(guard)
        conn.request("POST", "/v1/chat/completions", body=body,
                     headers={"Content-Type": "application/json", "Connection": "close"})
        resp = conn.getresponse()
        data = resp.read()
        result["status"] = resp.status
        result["bytes"] = len(data)
        if not data:
            result["problem"] = "empty reply"
            return
        try:
            reply = json.loads(data)
        except ValueError:
            result["problem"] = "not JSON: " + data[:80].decode(errors="replace")
            return
        if resp.status == 200 and not (isinstance(reply, dict) and reply.get("object") == "chat.completion"):
            result["problem"] = "200 without a chat.completion: " + data[:80].decode(errors="replace")
    except (http.client.HTTPException, OSError, threading.BrokenBarrierError) as e:
        result["problem"] = f"dropped ({type(e).__name__}: {e})"
    finally:
        conn.close()


def big_body(port, megabytes, guard):
    """Streams a body of `megabytes` MB (declared in Content-Length) and stops sending once the server
    answers. Returns a dict: status, reply (the parsed JSON body, or None), sent (body bytes sent
    before the answer), all_sent, seconds (to the answer), problem (or None)."""
    total = megabytes * 1000 * 1000
    head = b'{"messages":[{"role":"user","content":"'
    tail = b'"}]}'

    def pieces():
        left = total - len(head) - len(tail)
        chunk = b"x" * (1 << 20)
        while left > 0:
            yield chunk[:min(left, len(chunk))]
            left -= len(chunk)
        yield tail

    out = {"status": None, "reply": None, "sent": 0, "all_sent": False, "seconds": None, "problem": None}
    request = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
               f"Content-Type: application/json\r\nContent-Length: {total}\r\nConnection: close\r\n\r\n").encode()
    sock = socket.create_connection(("127.0.0.1", port), timeout=guard)
    try:
        start = time.monotonic()
        sock.sendall(request + head)
        out["sent"] = len(head)
        sock.setblocking(False)
        sel = selectors.DefaultSelector()
        sel.register(sock, selectors.EVENT_READ | selectors.EVENT_WRITE)
        body = pieces()
        pending = b""
        sending = True
        answered = False
        while not answered:
            left = start + guard - time.monotonic()
            if left <= 0:
                out["problem"] = f"no answer within the {guard:.0f} s hang guard"
                return out
            for _, mask in sel.select(left):
                if mask & selectors.EVENT_READ:
                    answered = True
                    break
                if not pending:
                    pending = next(body, b"")
                if not pending:
                    sending = False
                    out["all_sent"] = True
                else:
                    try:
                        n = sock.send(pending)
                        pending = pending[n:]
                        out["sent"] += n
                    except (BlockingIOError, InterruptedError):
                        pass
                    except (BrokenPipeError, ConnectionResetError):
                        sending = False  # the server closed its side; its answer, if any, is there to read
                if not sending:
                    sel.modify(sock, selectors.EVENT_READ)
        out["seconds"] = time.monotonic() - start
        sel.close()
        sock.setblocking(True)
        sock.settimeout(guard)
        resp = http.client.HTTPResponse(sock)
        try:
            resp.begin()
            data = resp.read()
        except (http.client.HTTPException, OSError) as e:
            out["problem"] = f"no complete answer ({type(e).__name__}: {e})"
            return out
        out["status"] = resp.status
        try:
            out["reply"] = json.loads(data)
        except ValueError:
            out["reply"] = None
        return out
    finally:
        sock.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--harness", default=os.path.join(ROOT, "build", "bin", "harness"))
    ap.add_argument("--library", default=os.path.join(ROOT, "experiments", "seed_skills.jsonl"))
    ap.add_argument("--requests", type=int, default=200, help="concurrent chat requests (200)")
    ap.add_argument("--big-mb", type=int, default=50, help="the oversized body, in MB (50)")
    ap.add_argument("--max-growth-mb", type=float, default=200.0,
                    help="RSS after may exceed RSS before by less than this (200)")
    ap.add_argument("--hang-guard", type=float, default=300.0,
                    help="seconds after which a step that never ends is a failure (300)")
    args = ap.parse_args()
    if args.requests < 1 or args.big_mb < 1 or args.hang_guard <= 0:
        ap.error("--requests, --big-mb and --hang-guard must be positive")
    if not os.access(args.harness, os.X_OK):
        print(f"serve_load: {args.harness}: no harness binary there (build with scripts/build.sh, or --harness)",
              file=sys.stderr)
        return 2
    guard = args.hang_guard
    failures = []
    statuses, problems = {}, {}
    answered_json = empty = dropped = 0
    load_seconds = None
    big = {"status": None, "sent": 0, "all_sent": False, "seconds": None}
    rss_before = rss_after = rss_peak = None

    try:
        server = Server(args.harness, args.library, guard)
    except RuntimeError as e:
        print(f"serve_load: FAILED: {e}", file=sys.stderr)
        return 1
    try:
        rss_before, _ = memory_mib(server.proc.pid)
        results = [dict() for _ in range(args.requests)]
        barrier = threading.Barrier(args.requests)
        threads = [threading.Thread(target=one_request, args=(server.port, chat_body(i), guard, barrier, results[i]),
                                    daemon=True)
                   for i in range(args.requests)]
        start = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join(max(0.0, start + guard - time.monotonic()))
        load_seconds = time.monotonic() - start
        if any(t.is_alive() for t in threads):
            failures.append(f"requests still unanswered after the {guard:.0f} s hang guard")
        for r in results:
            if "status" in r:
                statuses[r["status"]] = statuses.get(r["status"], 0) + 1
            if "problem" in r or "status" not in r:
                what = r.get("problem", "no reply").split(" (")[0].split(":")[0]
                problems[what] = problems.get(what, 0) + 1
        empty = problems.get("empty reply", 0)
        dropped = problems.get("dropped", 0) + problems.get("no reply", 0)
        answered_json = sum(1 for r in results if "status" in r and "problem" not in r)
        if answered_json != args.requests:
            examples = sorted({r.get("problem", "no reply") for r in results if "problem" in r or "status" not in r})
            failures.append(f"{args.requests - answered_json} of {args.requests} requests without a complete JSON "
                            "reply: " + "; ".join(examples[:5]))
        if statuses.get(200, 0) != args.requests:
            failures.append(f"statuses {statuses}: expected {args.requests} x 200 for valid chat requests")

        big = big_body(server.port, args.big_mb, guard)
        if big["problem"]:
            failures.append(f"{args.big_mb} MB body: {big['problem']}")
        else:
            reply = big["reply"]
            error = reply.get("error") if isinstance(reply, dict) else None
            message = error.get("message") if isinstance(error, dict) else None
            if big["status"] != 413 or not isinstance(message, str) or not message:
                failures.append(f"{args.big_mb} MB body: HTTP {big['status']}, body {reply!r:.200}: expected 413 "
                                "with a JSON error body")
            if big["all_sent"]:
                failures.append(f"{args.big_mb} MB body: the server answered only after the whole body was sent")

        # Still serving after all that.
        again = {}
        one_request(server.port, chat_body(0), guard, threading.Barrier(1), again)
        if again.get("status") != 200 or "problem" in again:
            failures.append(f"a chat request after the big body: {again}")

        rss_after, rss_peak = memory_mib(server.proc.pid)
        if not rss_after < rss_before + args.max_growth_mb:
            failures.append(f"RSS grew from {rss_before:.1f} MiB to {rss_after:.1f} MiB, past the allowed "
                            f"{args.max_growth_mb:.0f} MiB")
    finally:
        rc = server.stop(guard)
    if rc != 0:
        failures.append(f"harness serve exited {rc} on SIGTERM")

    def mib(v):
        return f"{v:.1f} MiB" if v is not None else "-"

    rows = [
        ("chat requests (concurrent)", f"{args.requests}"),
        ("statuses", ", ".join(f"{k}: {v}" for k, v in sorted(statuses.items())) or "none"),
        ("complete JSON replies", f"{answered_json}"),
        ("empty replies", f"{empty}"),
        ("dropped connections", f"{dropped}"),
        ("wall time, chat requests", f"{load_seconds:.2f} s" if load_seconds is not None else "-"),
        (f"{args.big_mb} MB body", f"HTTP {big['status']}" if big["status"] else "no answer"),
        ("  sent before the answer", f"{big['sent'] / 1e6:.2f} MB" + (" (all of it)" if big["all_sent"] else "")),
        ("  time to the answer", f"{big['seconds']:.3f} s" if big["seconds"] is not None else "-"),
        ("RSS before", mib(rss_before)),
        ("RSS after", mib(rss_after)),
        ("RSS peak (VmHWM)", mib(rss_peak)),
    ]
    width = max(len(k) for k, _ in rows)
    vwidth = max(len(v) for _, v in rows)
    print(f"| {'figure':<{width}} | {'value':<{vwidth}} |")
    print(f"|{'-' * (width + 2)}|{'-' * (vwidth + 2)}|")
    for k, v in rows:
        print(f"| {k:<{width}} | {v:<{vwidth}} |")
    if failures:
        for f in failures:
            print(f"serve_load: FAILED: {f}", file=sys.stderr)
        print(f"serve_load: the server's log: {server.log.name}", file=sys.stderr)
        return 1
    os.unlink(server.log.name)
    print("serve_load: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
