"""A language model that learns in vinci, end to end, with vinci's tiny model (`harness lm`) as
both the chat server and the trainer (docs/training.md):

- the whole loop runs: the cold start's examples train the model (an sft update), then every RL
  step sends its calls and advantages (an rl update) and the next step asks for the model the
  trainer returned; selection, policy and summary are all trained;
- `replay verify` passes with the trainer stopped;
- two runs of one config have one digest and the same adapters;
- kill -9 of the trainer and of the harness mid-run, and of the trainer in the middle of an update,
  then `harness run --resume`, ends with the uninterrupted run's digest; a trainer that lost the
  run's adapters is refused clearly;
- an update whose loss is not finite is recorded as failed and the model stays what it was.

Needs the built binaries (build/bin, or VINCI_BUILD_DIR).
"""

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BUILD = os.environ.get("VINCI_BUILD_DIR", os.path.join(ROOT, "build"))
HARNESS = os.path.join(BUILD, "bin", "harness")
REPLAY = os.path.join(BUILD, "bin", "replay")

# A smaller model and run than experiments/llm_tiny.toml, so CI takes seconds a run.
LM_FLAGS = ["--context", "384", "--d-model", "64", "--layers", "1", "--heads", "2"]
RUN_SETTINGS = [
    'tasks.ids=["L1_019", "L1_020", "L1_021", "L1_023"]',
    "tasks.eval_share=0.25",
    "loop.steps=2",
    "loop.batch_tasks=2",
    "loop.rollouts=2",
    "loop.turns=2",
    "summary.samples=1",
    "eval.every=1",
    "eval.turns=1",
    "coldstart.trajectories=1",
    "coldstart.turns=2",
    "trainer.sft_epochs=1",
    "backbone.max_tokens=48",
    "backbone.concurrency=2",
]


def restartable_port():
    """A free port below the kernel's ephemeral range (32768-60999 by default): the trainer comes
    back on the port the run recorded, and a socket bound to port 0 elsewhere (another test) is
    given an ephemeral port, so it cannot take this one in between."""
    import socket
    for i in range(10000):
        port = 20000 + (os.getpid() * 7919 + 5003 + i) % 10000
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", port))
            return port
        except OSError:
            continue
        finally:
            s.close()
    raise AssertionError("no free port in 20000-29999")


class Trainer:
    """`harness lm` on loopback: the chat API and the trainer protocol, over a store folder."""

    def __init__(self, store, port=0, extra=()):
        self.store = store
        self.p = subprocess.Popen([HARNESS, "lm", "--port", str(port), "--store", store, *LM_FLAGS, *extra],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.p.stdout.readline()  # the server's own word that it listens, not a deadline
        if not line.startswith("listening on 127.0.0.1:"):
            self.p.kill()
            raise AssertionError("harness lm: %r %s" % (line, self.p.stderr.read()))
        self.port = int(line.rsplit(":", 1)[1])
        self.url = "http://127.0.0.1:%d/v1" % self.port

    def stop(self, sig=signal.SIGTERM):
        if self.p.poll() is None:
            self.p.send_signal(sig)
        self.p.wait()
        self.p.stdout.close()
        self.p.stderr.close()


def run_args(out, url, name, *extra):
    args = [HARNESS, "run", "experiments/llm_tiny.toml", "--out", out, "--name", name,
            "--set", "backbone.base_url=" + url, "--set", "trainer.url=" + url]
    for s in RUN_SETTINGS:
        args += ["--set", s]
    return args + list(extra)


def digest_of(stdout):
    lines = [l for l in stdout.splitlines() if l.startswith("digest: ")]
    return lines[-1].split()[1] if lines else None


def records(run_dir):
    cat = subprocess.run([REPLAY, "cat", run_dir], capture_output=True, text=True, check=True)
    return [json.loads(l) for l in cat.stdout.splitlines() if l.strip()]


def wait_for_trained_call(run, run_dir):
    """Until the run's call log names a model the trainer made (the run's own word, not a deadline)."""
    calls = os.path.join(run_dir, "llm_calls.jsonl")
    while run.poll() is None:
        if os.path.exists(calls):
            with open(calls) as f:
                for line in f:
                    try:
                        if json.loads(line).get("model", "").startswith("vinci-tiny-"):
                            return
                    except ValueError:
                        pass  # a line being written
        time.sleep(0.05)
    raise AssertionError("the run ended before asking for a trained model: %s" % run.stderr.read()[-2000:])


def updates(run_dir):
    return [r["modelUpdate"] for r in records(run_dir) if "modelUpdate" in r]


@unittest.skipUnless(os.path.exists(HARNESS), "vinci is not built")
class LearningLoop(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="vinci-learn-")
        self.out = os.path.join(self.tmp, "runs")
        self.trainer = Trainer(os.path.join(self.tmp, "store"), restartable_port())

    def tearDown(self):
        self.trainer.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def run_ok(self, name, *extra):
        r = subprocess.run(run_args(self.out, self.trainer.url, name, *extra), cwd=ROOT, capture_output=True,
                           text=True)
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        return digest_of(r.stdout)

    def test_the_model_learns_replays_without_a_trainer_and_repeats(self):
        first = self.run_ok("a")
        ups = updates(os.path.join(self.out, "a"))
        kinds = [u["kind"] for u in ups]
        self.assertEqual(kinds, ["sft", "rl", "rl"])
        # Each update starts from the one before, and the next calls ask for the model it named.
        self.assertEqual(ups[0]["parent"], "")
        for before, after in zip(ups, ups[1:]):
            self.assertEqual(after["parent"], before["adapter"])
            self.assertNotEqual(after["adapter"], before["adapter"])
        self.assertEqual(sorted(ups[1]["roles"]), ["policy", "selection", "summary"])
        recs = records(os.path.join(self.out, "a"))
        step1_models = {r["llmReply"]["model"] for r in recs if "llmReply" in r and r.get("step") == 1}
        self.assertEqual(step1_models, {ups[1]["model"]})
        # The update request holds the step's calls with their advantages.
        store_objects = os.path.join(self.out, "objects")
        self.assertTrue(os.path.isdir(store_objects))
        sent = {r["llmReply"]["role"] for r in recs if "llmReply" in r and r.get("step") == 0
                and r.get("phase", "train") == "train"}
        self.assertIn("policy", sent)
        self.assertGreater(ups[1]["samples"], 0)

        # Replay needs neither the model nor the trainer.
        self.trainer.stop()
        v = subprocess.run([REPLAY, "verify", os.path.join(self.out, "a")], capture_output=True, text=True)
        self.assertEqual(v.returncode, 0, v.stdout + v.stderr)
        # Rescoring keeps the recorded models; export still writes each call with its advantage.
        rescored = os.path.join(self.tmp, "rescored")
        rs = subprocess.run([REPLAY, "rescore", os.path.join(self.out, "a"), "--device", "sim", "--out", rescored],
                            capture_output=True, text=True)
        self.assertEqual(rs.returncode, 0, rs.stdout[-2000:] + rs.stderr[-2000:])
        self.assertEqual([u["model"] for u in updates(rescored)], [u["model"] for u in ups])
        exported = os.path.join(self.tmp, "export.jsonl")
        ex = subprocess.run([REPLAY, "export", os.path.join(self.out, "a"), "--out", exported], capture_output=True,
                            text=True)
        self.assertEqual(ex.returncode, 0, ex.stderr)
        with open(exported) as f:
            self.assertGreater(sum(1 for _ in f), 0)

        # The same config again, against a trainer started afresh on the same port and store.
        self.trainer = Trainer(self.trainer.store, self.trainer.port)
        second = self.run_ok("b")
        self.assertEqual(first, second)
        d = subprocess.run([REPLAY, "diff", os.path.join(self.out, "a"), os.path.join(self.out, "b")],
                           capture_output=True, text=True)
        self.assertEqual(d.returncode, 0, d.stdout[-2000:])
        self.assertEqual([u["adapter"] for u in updates(os.path.join(self.out, "b"))],
                         [u["adapter"] for u in ups])

    def test_kill_the_trainer_and_the_harness_then_resume_to_the_same_digest(self):
        whole = self.run_ok("whole")
        n_updates = len(updates(os.path.join(self.out, "whole")))
        # A fresh store: the killed run's trainer must make its adapters itself.
        self.trainer.stop()
        shutil.rmtree(self.trainer.store)
        self.trainer = Trainer(self.trainer.store, self.trainer.port)
        run = subprocess.Popen(run_args(self.out, self.trainer.url, "killed"), cwd=ROOT, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
        run_dir = os.path.join(self.out, "killed")
        # Kill the trainer once the run asks for the model the cold start trained, then the harness,
        # whatever it is doing.
        wait_for_trained_call(run, run_dir)
        self.trainer.stop(signal.SIGKILL)
        if run.poll() is None:
            run.send_signal(signal.SIGKILL)
        run.communicate()

        self.trainer = Trainer(self.trainer.store, self.trainer.port)
        r = subprocess.run([HARNESS, "run", "--resume", run_dir], cwd=ROOT, capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        self.assertEqual(digest_of(r.stdout), whole)
        self.assertEqual(len(updates(run_dir)), n_updates)

    def test_a_trainer_killed_in_the_middle_of_an_update_resumes_to_the_same_digest(self):
        whole = self.run_ok("whole")
        self.trainer.stop()
        shutil.rmtree(self.trainer.store)
        # The cold start's update is answered; the first RL update is computed and then stalls
        # before its state is stored, and the trainer is killed there.
        self.trainer = Trainer(self.trainer.store, self.trainer.port, ["--faults", "ok,stall"])
        run = subprocess.Popen(run_args(self.out, self.trainer.url, "mid"), cwd=ROOT, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
        for line in self.trainer.p.stderr:  # the trainer's own word that it is inside the update
            if "stalled before storing its state" in line:
                break
        else:
            raise AssertionError("the trainer ended without stalling: %s" % run.communicate()[1][-2000:])
        self.trainer.stop(signal.SIGKILL)
        _, err = run.communicate()
        self.assertNotEqual(run.returncode, 0)
        self.assertIn("the update after step 0", err)
        self.assertIn("--resume", err)
        run_dir = os.path.join(self.out, "mid")
        self.assertEqual([u["kind"] for u in updates(run_dir)], ["sft"])

        self.trainer = Trainer(self.trainer.store, self.trainer.port)
        r = subprocess.run([HARNESS, "run", "--resume", run_dir], cwd=ROOT, capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        self.assertEqual(digest_of(r.stdout), whole)

    def test_a_resume_is_refused_when_the_trainer_lost_the_adapter(self):
        run = subprocess.Popen(run_args(self.out, self.trainer.url, "lost"), cwd=ROOT, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
        run_dir = os.path.join(self.out, "lost")
        # Once the run asks for the trained model, its update is recorded; a trainer that goes away
        # then stops the run (its next call cannot be reached), keeping what it recorded.
        wait_for_trained_call(run, run_dir)
        self.trainer.stop(signal.SIGKILL)
        run.communicate()
        self.assertNotEqual(run.returncode, 0)
        self.assertEqual([u["kind"] for u in updates(run_dir)][:1], ["sft"])
        self.trainer.stop()
        shutil.rmtree(self.trainer.store)
        self.trainer = Trainer(self.trainer.store, self.trainer.port)
        r = subprocess.run([HARNESS, "run", "--resume", run_dir], cwd=ROOT, capture_output=True, text=True)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn(updates(run_dir)[0]["adapter"], r.stderr)
        self.assertIn("cannot load adapter", r.stderr)
        self.assertIn("start the trainer with the store that holds it", r.stderr)


    def test_an_update_with_a_non_finite_loss_is_recorded_as_failed_and_keeps_the_model(self):
        # The cold start's update trains; the first RL update's loss is taken as NaN by the trainer.
        self.trainer.stop()
        self.trainer = Trainer(self.trainer.store, 0, ["--faults", "ok,nonfinite"])
        r = subprocess.run(run_args(self.out, self.trainer.url, "nan"), cwd=ROOT, capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        self.assertIn("the update failed (the update's loss is not finite", r.stderr)
        run_dir = os.path.join(self.out, "nan")
        ups = updates(run_dir)
        self.assertEqual([u["kind"] for u in ups], ["sft", "rl", "rl"])
        sft, failed, after = ups
        self.assertIn("not finite", failed["failure"])
        self.assertEqual(failed["parent"], sft["adapter"])
        self.assertEqual(failed["adapter"], sft["adapter"])  # unchanged
        self.assertEqual(failed["model"], sft["model"])
        self.assertEqual(failed["loss"], "NaN")
        self.assertEqual(after.get("failure", ""), "")
        self.assertEqual(after["parent"], sft["adapter"])  # the next update starts from the kept model
        recs = records(run_dir)
        step1 = {x["llmReply"]["model"] for x in recs if "llmReply" in x and x.get("step") == 1}
        self.assertEqual(step1, {sft["model"]})
        self.trainer.stop()
        v = subprocess.run([REPLAY, "verify", run_dir], capture_output=True, text=True)
        self.assertEqual(v.returncode, 0, v.stdout[-2000:] + v.stderr[-2000:])


if __name__ == "__main__":
    unittest.main()
