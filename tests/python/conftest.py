"""Shared fixtures of the Python package's tests: the repository, the real binaries, small runs."""
import os
import shutil
import subprocess
import sys

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
