"""The reference trainer for Hugging Face models (python/peft_trainer.py, docs/training.md) against
a real transformers model with real PEFT LoRA adapters: a tiny random-weight Qwen3 with a tokenizer
trained here (scripts/tiny_hf_model.py), on loopback:

- an rl update raises the log-probability of a positive-advantage reply and lowers a negative
  one's; an sft update lowers the replies' cross-entropy;
- an update from a parent is a function of its inputs: the same digest twice, and (on CPU) from a
  trainer restarted on the same store; /vinci/load brings a stored state back and 404s an unknown
  one; a non-finite loss is answered as a failed update that leaves the parent;
- the whole loop: `harness run` with the trainer as chat server and trainer (cold start, 2 RL steps,
  every role trained), then `replay verify` with the trainer stopped.

Needs an interpreter with torch, transformers, peft, safetensors and tokenizers: this one, or
VINCI_TRAINER_PYTHON. VINCI_TRAINER_DEVICE (default cpu) runs the trainer on cuda; the restart
digest check is then skipped (GPU reductions are not bit-exact). Skipped where no such interpreter
is found.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import unittest
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BUILD = os.environ.get("VINCI_BUILD_DIR", os.path.join(ROOT, "build"))
HARNESS = os.path.join(BUILD, "bin", "harness")
REPLAY = os.path.join(BUILD, "bin", "replay")
TRAINER = os.path.join(ROOT, "python", "peft_trainer.py")
MAKER = os.path.join(ROOT, "scripts", "tiny_hf_model.py")
PYTHON = os.environ.get("VINCI_TRAINER_PYTHON", sys.executable)
DEVICE = os.environ.get("VINCI_TRAINER_DEVICE", "cpu")
NAME = "qwen3-tiny"


def has_deps():
    probe = subprocess.run([PYTHON, "-c", "import torch, transformers, peft, safetensors, tokenizers"],
                           capture_output=True, text=True)
    return probe.returncode == 0


HAS_DEPS = has_deps()
MODEL_DIR = None


def setUpModule():
    global MODEL_DIR
    if not HAS_DEPS:
        return
    MODEL_DIR = tempfile.mkdtemp(prefix="vinci-hf-model-")
    made = subprocess.run([PYTHON, MAKER, MODEL_DIR], capture_output=True, text=True)
    if made.returncode != 0:
        raise AssertionError("tiny_hf_model.py: " + made.stderr[-3000:])


def tearDownModule():
    if MODEL_DIR:
        shutil.rmtree(MODEL_DIR, ignore_errors=True)


class PeftTrainer:
    def __init__(self, store, port=0):
        self.store = store
        self.p = subprocess.Popen([PYTHON, TRAINER, "--model", MODEL_DIR, "--store", store, "--name", NAME, "--serve",
                                   "--port", str(port), "--device", DEVICE, "--context", "1024"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.p.stdout.readline()  # the trainer's own word that it listens, not a deadline
        if not line.startswith("listening on 127.0.0.1:"):
            self.p.kill()
            raise AssertionError("peft_trainer: %r %s" % (line, self.p.stderr.read()[-3000:]))
        self.port = int(line.rsplit(":", 1)[1])
        self.url = "http://127.0.0.1:%d/v1" % self.port

    def post(self, path, body):
        req = urllib.request.Request(self.url + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
        self.p.wait()
        self.p.stdout.close()
        self.p.stderr.close()


REQUEST = {"model": NAME, "messages": [{"role": "system", "content": "Answer with knob settings."},
                                       {"role": "user", "content": "Task L1_019: a 4096 x 4096 matmul."}]}
GOOD = "```knobs\nblock = 256\nvector = 4\n```"
BAD = "I cannot write this kernel."


def update_body(kind, parent, samples, **options):
    return {"protocol": "vinci.trainer/1", "kind": kind, "step": 0 if kind == "rl" else -1, "base_model": NAME,
            "parent": parent, "roles": ["policy"], "seed": "00000000000000a7",
            "options": {"lr": 0.01, "epochs": 2, "clip": 1.0, **options}, "samples": samples}


def sample(completion, advantage):
    return {"role": "policy", "request_digest": "", "reply_digest": "", "request": REQUEST,
            "completion": completion, "advantage": advantage, "scale": 1.0}


@unittest.skipUnless(HAS_DEPS, "no interpreter with torch, transformers, peft, safetensors and tokenizers "
                               "(set VINCI_TRAINER_PYTHON)")
class PeftTrainerProtocol(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="vinci-peft-")
        self.trainer = PeftTrainer(os.path.join(self.tmp, "store"))

    def tearDown(self):
        self.trainer.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def logprob(self, model, completion):
        st, r = self.trainer.post("/vinci/logprob", {"model": model, "request": REQUEST, "completion": completion})
        self.assertEqual(st, 200, r)
        return r["logprob"]

    def test_updates_move_log_probabilities_and_are_functions_of_their_inputs(self):
        t = self.trainer
        rl = update_body("rl", "", [sample(GOOD, 1.0), sample(BAD, -1.0)])
        st, first = t.post("/vinci/update", rl)
        self.assertEqual(st, 200, first)
        self.assertTrue(first["model"].startswith(NAME + "-"), first)
        self.assertEqual(len(first["adapter"]), 64)
        self.assertGreater(first["tokens"]["completion"], 0)
        # The update is real: the positive reply rises, the negative one falls.
        self.assertGreater(self.logprob(first["model"], GOOD), self.logprob(NAME, GOOD))
        self.assertLess(self.logprob(first["model"], BAD), self.logprob(NAME, BAD))
        # From the same parent, the same update gives the same state.
        st, again = t.post("/vinci/update", rl)
        self.assertEqual(again["adapter"], first["adapter"])
        # sft lowers the replies' cross-entropy, starting from the parent named.
        st, sft = t.post("/vinci/update", update_body("sft", first["adapter"], [sample(GOOD, 1.0)]))
        self.assertEqual(st, 200, sft)
        self.assertLess(sft["loss_after"], sft["loss_before"])
        self.assertEqual(sft["parent"], first["adapter"])
        # The adapter is in PEFT's format, for vLLM's runtime LoRA loading.
        adapter_dir = os.path.join(t.store, first["adapter"], "adapter")
        with open(os.path.join(adapter_dir, "adapter_config.json")) as f:
            self.assertEqual(json.load(f)["peft_type"], "LORA")
        self.assertTrue(os.path.exists(os.path.join(adapter_dir, "adapter_model.safetensors")))

        # A non-finite loss is a failed update: the parent stays, nothing is stored.
        before = sorted(os.listdir(t.store))
        st, failed = t.post("/vinci/update", update_body("rl", first["adapter"], [sample(GOOD, 1e300)]))
        self.assertEqual(st, 200, failed)
        self.assertIn("not finite", failed["failure"])
        self.assertEqual(failed["adapter"], first["adapter"])
        self.assertIsNone(failed["loss"])
        self.assertEqual(sorted(os.listdir(t.store)), before)
        # Bad requests name the field.
        st, err = t.post("/vinci/update", dict(rl, seed="xyz"))
        self.assertEqual(st, 400)
        self.assertIn("seed: expected 16 lower-case hex digits", err["error"]["message"])
        st, err = t.post("/vinci/update", dict(rl, samples=[dict(sample(GOOD, 1), advantage="high")]))
        self.assertEqual(st, 400)
        self.assertIn("samples[0].advantage: expected a finite number", err["error"]["message"])
        st, err = t.post("/vinci/update", dict(rl, parent="f" * 64))
        self.assertEqual(st, 404, err)
        # A body announced past --max-body-mb is refused before it is read.
        import http.client
        c = http.client.HTTPConnection("127.0.0.1", t.port)
        c.putrequest("POST", "/v1/vinci/update")
        c.putheader("Content-Length", str(1 << 40))
        c.endheaders()
        r = c.getresponse()
        self.assertEqual(r.status, 413)
        self.assertIn("expected a Content-Length from 0 to", json.loads(r.read())["error"]["message"])
        c.close()

        # A restarted trainer on the same store brings the state back, and repeats the update.
        t.stop()
        self.trainer = t = PeftTrainer(t.store)
        st, loaded = t.post("/vinci/load", {"protocol": "vinci.trainer/1", "adapter": first["adapter"]})
        self.assertEqual((st, loaded["model"]), (200, first["model"]), loaded)
        st, missing = t.post("/vinci/load", {"protocol": "vinci.trainer/1", "adapter": "0" * 64})
        self.assertEqual(st, 404, missing)
        if DEVICE == "cpu":
            st, restarted = t.post("/vinci/update", rl)
            self.assertEqual(restarted["adapter"], first["adapter"])


sys.path.insert(0, HERE)
from test_learning_loop import RUN_SETTINGS as LOOP_SETTINGS  # noqa: E402

# The learning-loop test's small run, with shorter replies for the Hugging Face model.
RUN_SETTINGS = [s for s in LOOP_SETTINGS if not s.startswith("backbone.max_tokens=")] + ["backbone.max_tokens=32"]


@unittest.skipUnless(HAS_DEPS and os.path.exists(HARNESS),
                     "needs the built binaries and an interpreter with torch, transformers and peft")
class PeftTrainerLoop(unittest.TestCase):
    def test_the_loop_trains_a_hugging_face_model_and_replays_without_it(self):
        tmp = tempfile.mkdtemp(prefix="vinci-peft-loop-")
        trainer = PeftTrainer(os.path.join(tmp, "store"))
        try:
            out = os.path.join(tmp, "runs")
            args = [HARNESS, "run", "experiments/llm_tiny.toml", "--out", out, "--name", "hf",
                    "--set", "backbone.base_url=" + trainer.url, "--set", "trainer.url=" + trainer.url,
                    "--set", "backbone.model=" + NAME]
            for s in RUN_SETTINGS:
                args += ["--set", s]
            r = subprocess.run(args, cwd=ROOT, capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stdout[-2000:] + r.stderr[-3000:])
            run = os.path.join(out, "hf")
            cat = subprocess.run([REPLAY, "cat", run], capture_output=True, text=True, check=True)
            recs = [json.loads(l) for l in cat.stdout.splitlines() if l.strip()]
            ups = [x["modelUpdate"] for x in recs if "modelUpdate" in x]
            self.assertEqual([u["kind"] for u in ups], ["sft", "rl", "rl"])
            self.assertEqual(ups[0]["parent"], "")
            for before, after in zip(ups, ups[1:]):
                self.assertEqual(after["parent"], before["adapter"])
            self.assertEqual(sorted(ups[1]["roles"]), ["policy", "selection", "summary"])
            # The calls after each update name the model it made.
            step1 = {x["llmReply"]["model"] for x in recs if "llmReply" in x and x.get("step") == 1}
            self.assertEqual(step1, {ups[1]["model"]})
            for u in ups:
                self.assertTrue(os.path.isdir(os.path.join(trainer.store, u["adapter"], "adapter")), u)
            trainer.stop()
            v = subprocess.run([REPLAY, "verify", run], capture_output=True, text=True)
            self.assertEqual(v.returncode, 0, v.stdout[-2000:] + v.stderr[-2000:])
        finally:
            trainer.stop()
            shutil.rmtree(tmp, ignore_errors=True)


VLLM_URL = os.environ.get("VINCI_VLLM_URL", "")
VLLM_MODEL = os.environ.get("VINCI_VLLM_MODEL", "")


def post_json(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req) as r:
        return json.loads(r.read())


@unittest.skipUnless(HAS_DEPS and os.path.exists(HARNESS) and VLLM_URL and VLLM_MODEL,
                     "needs a vLLM server with runtime LoRA: VINCI_VLLM_URL (its /v1 URL) and VINCI_VLLM_MODEL "
                     "(the model folder it serves as qwen3-tiny); tests/llm/README.md says how")
class PeftTrainerDrivesVllm(unittest.TestCase):
    """The trainer loads each adapter into a real vLLM server, which then answers with it: vLLM's
    log-probability of a reply under the adapter is the trainer's, and the loop runs through vLLM."""

    def setUp(self):
        global MODEL_DIR
        self.tmp = tempfile.mkdtemp(prefix="vinci-peft-vllm-")
        self.saved, MODEL_DIR = MODEL_DIR, VLLM_MODEL  # the trainer's model must be vLLM's
        self.p = subprocess.Popen([PYTHON, TRAINER, "--model", VLLM_MODEL, "--store", os.path.join(self.tmp, "store"),
                                   "--name", NAME, "--vllm", VLLM_URL, "--port", "0", "--device", DEVICE],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.p.stdout.readline()
        if not line.startswith("listening on 127.0.0.1:"):
            self.p.kill()
            raise AssertionError("peft_trainer: %r %s" % (line, self.p.stderr.read()[-3000:]))
        self.url = "http://127.0.0.1:%d/v1" % int(line.rsplit(":", 1)[1])

    def tearDown(self):
        global MODEL_DIR
        MODEL_DIR = self.saved
        self.p.terminate()
        self.p.wait()
        self.p.stdout.close()
        self.p.stderr.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def vllm_logprob(self, model, completion):
        """The reply's log-probability as vLLM computes it (prompt_logprobs over the rendered chat)."""
        from_trainer = post_json(self.url + "/vinci/logprob", {"model": NAME, "request": REQUEST,
                                                                "completion": completion})
        tok = subprocess.run([PYTHON, "-c", "import json,sys; from transformers import AutoTokenizer as A\n"
                              "t=A.from_pretrained(sys.argv[1]); r=json.loads(sys.argv[2])\n"
                              "p=t.apply_chat_template(r['messages'], add_generation_prompt=True, tokenize=False)\n"
                              "print(json.dumps([t(p, add_special_tokens=False)['input_ids'], "
                              "t(sys.argv[3] + t.eos_token, add_special_tokens=False)['input_ids']]))",
                              VLLM_MODEL, json.dumps(REQUEST), completion], capture_output=True, text=True, check=True)
        prompt, reply = json.loads(tok.stdout)
        self.assertEqual(len(reply), from_trainer["tokens"])
        v = post_json(VLLM_URL + "/completions", {"model": model, "prompt": prompt + reply, "max_tokens": 1,
                                                   "prompt_logprobs": 0, "temperature": 0})
        lps = v["choices"][0]["prompt_logprobs"]
        return sum(lps[len(prompt) + i][str(t)]["logprob"] for i, t in enumerate(reply))

    def test_vllm_serves_the_adapter_the_trainer_made(self):
        up = post_json(self.url + "/vinci/update", update_body("rl", "", [sample(GOOD, 1.0), sample(BAD, -1.0)]))
        served = [m["id"] for m in json.loads(urllib.request.urlopen(VLLM_URL + "/models").read())["data"]]
        self.assertIn(up["model"], served)
        mine = post_json(self.url + "/vinci/logprob", {"model": up["model"], "request": REQUEST, "completion": GOOD})
        base = post_json(self.url + "/vinci/logprob", {"model": NAME, "request": REQUEST, "completion": GOOD})
        theirs = self.vllm_logprob(up["model"], GOOD)
        print("reply log-probability: base %.6f, adapter %.6f (trainer) %.6f (vLLM)" %
              (base["logprob"], mine["logprob"], theirs))
        self.assertNotAlmostEqual(mine["logprob"], base["logprob"], places=2)
        self.assertAlmostEqual(theirs, mine["logprob"], delta=1e-3 * abs(mine["logprob"]))

        # The loop through vLLM: every update's adapter loaded there, the next calls naming it.
        out = os.path.join(self.tmp, "runs")
        digests = []
        for name in ("a", "b"):
            args = [HARNESS, "run", "experiments/llm_tiny.toml", "--out", out, "--name", name,
                    "--set", "backbone.base_url=" + VLLM_URL, "--set", "trainer.url=" + self.url,
                    "--set", "backbone.model=" + NAME]
            for s in RUN_SETTINGS:
                args += ["--set", s]
            r = subprocess.run(args, cwd=ROOT, capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stdout[-2000:] + r.stderr[-3000:])
            digests.append([l for l in r.stdout.splitlines() if l.startswith("digest: ")][-1])
        cat = subprocess.run([REPLAY, "cat", os.path.join(out, "a")], capture_output=True, text=True, check=True)
        recs = [json.loads(l) for l in cat.stdout.splitlines() if l.strip()]
        ups = [x["modelUpdate"] for x in recs if "modelUpdate" in x]
        self.assertEqual([u["kind"] for u in ups], ["sft", "rl", "rl"])
        served = [m["id"] for m in json.loads(urllib.request.urlopen(VLLM_URL + "/models").read())["data"]]
        for u in ups:
            self.assertIn(u["model"], served)
        step1 = {x["llmReply"]["model"] for x in recs if "llmReply" in x and x.get("step") == 1}
        self.assertEqual(step1, {ups[1]["model"]})
        print("two runs through vLLM:", digests)
        if DEVICE == "cpu":
            self.assertEqual(digests[0], digests[1])
        v = subprocess.run([REPLAY, "verify", os.path.join(out, "a")], capture_output=True, text=True)
        self.assertEqual(v.returncode, 0, v.stdout[-2000:] + v.stderr[-2000:])


if __name__ == "__main__":
    unittest.main()
