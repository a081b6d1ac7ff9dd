"""Shared fixtures of the Python package's tests: the repository, the real binaries, small runs."""
import os
import re
import shutil
import subprocess
import sys
import threading

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))
BUILD = os.environ.get("VINCI_BUILD_DIR", os.path.join(ROOT, "build"))
GOLDEN_ROOT = os.path.join(ROOT, "tests", "golden", "runs")


def binary(name):
    path = os.path.join(BUILD, "bin", name)
    if not os.path.exists(path):
        pytest.fail(f"{path} is not built (ninja -C {BUILD} harness replay)")
    return path


def run_cmd(args, check=True, **kw):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(ROOT, "python") + (
        ":" + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    p = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, env=env, **kw)
    if check and p.returncode != 0:
        raise AssertionError(f"{' '.join(args)} exited {p.returncode}:\n{p.stdout}\n{p.stderr}")
    return p


# How long a test waits on a child (for a line, for its exit) before it calls it stuck: a guard so
# that a hung test cannot hold CI forever, never a measure of speed (tests wait on events, so a
# machine 10x slower only takes longer). tests/cli_test_util.h's kHangGuardS.
HANG_GUARD_S = 600


class Child:
    """A background process (`harness serve`) whose stdout and stderr a thread reads as they come,
    so that a test waits on what it prints, or on its exit, never on a clock; and so that it never
    blocks on a full pipe."""

    def __init__(self, args, **kw):
        self.args = args
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)
        self._text = ""
        self._ended = False
        self._cond = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self.proc.stdout:
            with self._cond:
                self._text += line
                self._cond.notify_all()
        with self._cond:
            self._ended = True
            self._cond.notify_all()

    def output(self):
        with self._cond:
            return self._text

    def wait_for(self, pattern):
        """Blocks until the output holds a match of the regex `pattern` (returned); fails the test,
        naming the exit status and the output, when the process exits first (or after the hang
        guard)."""
        rx = re.compile(pattern)
        with self._cond:
            self._cond.wait_for(lambda: rx.search(self._text) or self._ended, timeout=HANG_GUARD_S)
            m = rx.search(self._text)
            if m:
                return m
        if not self._ended:
            self.proc.kill()
            self.proc.wait()
            pytest.fail(f"{' '.join(self.args)} printed no line matching {pattern!r} in {HANG_GUARD_S} s "
                        f"(the test's hang guard); its output:\n{self.output()}")
        rc = self.proc.wait()
        self._reader.join()
        pytest.fail(f"{' '.join(self.args)} exited with status {rc} before it printed a line matching "
                    f"{pattern!r}; its output:\n{self.output()}")

    def stop(self):
        """SIGTERM, then its exit status (killed after the hang guard)."""
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            rc = self.proc.wait(timeout=HANG_GUARD_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        self._reader.join()
        return rc


@pytest.fixture(scope="session")
def replay():
    return binary("replay")


@pytest.fixture(scope="session")
def golden():
    return os.path.join(GOLDEN_ROOT, "smoke")


@pytest.fixture
def golden_copy(tmp_path):
    """A private copy of the golden runs root (its objects and the smoke run) to damage."""
    dst = tmp_path / "runs"
    shutil.copytree(GOLDEN_ROOT, dst)
    return str(dst / "smoke")


@pytest.fixture(scope="session")
def smoke_runs(tmp_path_factory):
    """Two methods (the smoke config, and it evaluated without skills) at two seeds each, recorded
    by the real harness into one runs root: {name: run folder}."""
    harness = binary("harness")
    root = str(tmp_path_factory.mktemp("runs"))
    runs = {}
    for method, sets in (("smoke", []), ("smoke_noskill", ["--set", "eval.inject_skills=false"])):
        for seed in (7, 8):
            name = f"{method}_s{seed}"
            run_cmd([harness, "run", "experiments/smoke.toml", "--out", root, "--seed", str(seed),
                     "--name", name, "--threads", "1"] + sets)
            runs[name] = os.path.join(root, name)
    return runs
