"""vinci against vLLM 0.32.0 as it answered, replayed byte for byte by chat_transcript.py on
loopback (ids, timestamps and all; tests/llm/README.md says how the transcripts were made):

- two runs of experiments/llm_smoke.toml whose answers carry different ids and timestamps (the
  two live runs' answers, in order) have one digest, which is the digest the live runs had;
- the preflight reads vLLM's context length and stops a wrong model name with vLLM's list.

Needs the built binaries (build/bin, or VINCI_BUILD_DIR); no vLLM.
"""

import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BUILD = os.environ.get("VINCI_BUILD_DIR", os.path.join(ROOT, "build"))
HARNESS = os.path.join(BUILD, "bin", "harness")
REPLAY = os.path.join(BUILD, "bin", "replay")
TOOL = os.path.join(HERE, "chat_transcript.py")
SMOKE = os.path.join(HERE, "data", "vllm_llm_smoke.jsonl.gz")
# What the two live runs against vLLM printed (tests/llm/README.md): the replayer listens where the
# recorder did, so the runs record the same base_url.
LIVE_DIGEST = "c3382befa46c48f187c253a219be3238"
RECORDED_PORT = 18011


def port_is_free(port):
    import socket
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", port))
        return True
    except OSError:
        return False
    finally:
        s.close()


class Replayer:
    def __init__(self, transcript, port=0):
        self.p = subprocess.Popen([sys.executable, TOOL, "replay", "--transcript", transcript, "--listen-port",
                                   str(port), "--past-end", "404", "--quiet"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.p.stdout.readline()  # the server's own word, not a deadline
        if not line.startswith("listening on 127.0.0.1:"):
            self.p.kill()
            raise AssertionError("replayer: %r %s" % (line, self.p.stderr.read()))
        self.port = int(line.rsplit(":", 1)[1])

    def stop(self):
        self.p.terminate()
        self.p.wait()
        self.p.stdout.close()
        self.p.stderr.close()


def run(args, cwd=ROOT):
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True)


def smoke(out, port, *extra):
    return run([HARNESS, "run", "experiments/llm_smoke.toml", "--out", out,
                "--set", f"backbone.base_url=http://127.0.0.1:{port}/v1", "--set", "backbone.model=qwen3-tiny",
                "--set", "backbone.max_tokens_cap=256", *extra])


def digest_of(stdout):
    lines = [l for l in stdout.splitlines() if l.startswith("digest: ")]
    return lines[-1].split()[1] if lines else None


@unittest.skipUnless(os.path.exists(HARNESS), "vinci is not built")
class VllmRuns(unittest.TestCase):
    def test_two_runs_whose_answers_differ_in_envelope_have_the_live_digest(self):
        port = RECORDED_PORT if port_is_free(RECORDED_PORT) else 0
        server = Replayer(SMOKE, port)
        try:
            with tempfile.TemporaryDirectory() as tmp:
                digests = []
                for name in ("a", "b"):
                    r = smoke(os.path.join(tmp, name), server.port)
                    self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
                    self.assertIn("serves qwen3-tiny, context length 4096 (the server's)", r.stderr)
                    digests.append(digest_of(r.stdout))
                    v = run([REPLAY, "verify", os.path.join(tmp, name, "llm_smoke")])
                    self.assertEqual(v.returncode, 0, v.stdout + v.stderr)
                self.assertEqual(digests[0], digests[1])
                if server.port == RECORDED_PORT:
                    self.assertEqual(digests[0], LIVE_DIGEST)
                # The answers did differ in their envelopes, kept beside each run.
                ids = []
                for name in ("a", "b"):
                    with open(os.path.join(tmp, name, "llm_smoke", "llm_calls.jsonl")) as f:
                        ids.append({json.loads(l)["envelope"]["id"] for l in f})
                self.assertTrue(ids[0] and not ids[0] & ids[1])
                # The run recorded the context length its limits came from.
                cat = run([REPLAY, "cat", os.path.join(tmp, "a", "llm_smoke")])
                self.assertIn("context_length = 4096", cat.stdout.splitlines()[0])
        finally:
            server.stop()

    def test_preflight_names_vllms_models(self):
        server = Replayer(SMOKE)
        try:
            with tempfile.TemporaryDirectory() as tmp:
                r = run([HARNESS, "run", "experiments/llm_smoke.toml", "--out", tmp,
                         "--set", f"backbone.base_url=http://127.0.0.1:{server.port}/v1"])
                self.assertEqual(r.returncode, 2, r.stderr)
                self.assertIn("does not serve the model 'vinci-sim' (backbone.model); it serves: qwen3-tiny",
                              r.stderr)
                self.assertFalse(os.path.exists(os.path.join(tmp, "llm_smoke")))
        finally:
            server.stop()


if __name__ == "__main__":
    unittest.main()
