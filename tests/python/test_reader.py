"""vinci.open_run against the real binaries: every table's rows and values as `replay cat` and
`replay score` give them, the schema copy, and damaged runs."""
import collections
import json
import os
import re

import pytest

import vinci
from conftest import ROOT, run_cmd


def cat(replay, run, *extra):
    lines = run_cmd([replay, "cat", run, *extra]).stdout.splitlines()
    return [json.loads(line) for line in lines]


def test_schema_copy_is_the_recorders():
    recorder = open(os.path.join(ROOT, "recorder", "vinci.capnp"), "rb").read()
    version = int(re.search(rb"const formatVersion :UInt32 = (\d+);", recorder).group(1))
    assert version == vinci.LATEST_FORMAT_VERSION, "recorder/vinci.capnp's formatVersion is new: " \
        "ship its schema as python/vinci/schemas/v<N>/vinci.capnp and raise LATEST_FORMAT_VERSION"
    shipped = open(vinci._format.schema_path(version), "rb").read()
    assert shipped == recorder, "python/vinci/schemas/v%d/vinci.capnp differs from " \
        "recorder/vinci.capnp: copy it (cp recorder/vinci.capnp python/vinci/schemas/v%d/)" % (
            version, version)


def test_tables_match_replay_cat(replay, golden):
    lines = cat(replay, golden, "--objects")
    manifest, records = lines[0]["manifest"], lines[1:]
    run = vinci.open_run(golden)
    assert run.manifest["record_count"] == int(manifest["recordCount"]) == len(records)
    assert run.manifest["run_digest"] == manifest["runDigest"]
    assert run.manifest["config_text"] == manifest["configText"]
    assert run.verify() == len(records)

    kinds = collections.Counter(k for r in records for k in r if k not in (
        "seq", "step", "task", "scheme", "rollout", "turn", "phase", "objects"))
    assert sum(1 for _ in run.records()) == len(records)
    assert sum(1 for _ in run.records(kind="metric", phase="eval")) == sum(
        1 for r in records if "metric" in r and r["phase"] == "eval")

    meas = [r for r in records if "measurement" in r]
    m = run.measurements()
    assert len(m) == kinds["measurement"] == len(meas) > 0
    assert list(m["seq"]) == [int(r["seq"]) for r in meas]
    assert list(m["speedup"]) == [r["measurement"]["speedup"] for r in meas]
    assert list(m["kernel_us"]) == [r["measurement"]["kernelUs"] for r in meas]
    assert list(m["plan"]) == [r["measurement"].get("plan", "") for r in meas]
    assert list(m["phase"]) == [r["phase"] for r in meas]
    assert len(run.trials()) == sum(len(r["measurement"]["trials"]) for r in meas)
    assert list(run.trials()["seed"][:5]) == [int(t["seed"]) for t in meas[0]["measurement"]["trials"]]
    assert len(run.timings()) == sum(len(r["measurement"].get("kernelTimesUs", [])) +
                                     len(r["measurement"].get("referenceTimesUs", [])) for r in meas)
    k = run.timings().query("side == 'kernel'").groupby("seq")["time_us"].sum()
    timed = [r for r in meas if r["measurement"].get("kernelTimesUs")]
    assert k[int(timed[-1]["seq"])] == pytest.approx(sum(timed[-1]["measurement"]["kernelTimesUs"]))

    turns = run.turns()
    assert len(turns) == len(meas)
    rewards = {(r["phase"], r["step"], r["task"], r["scheme"], r["rollout"], r["turn"]): r["reward"]["value"]
               for r in records if "reward" in r and r["reward"]["kind"] == "turn"}
    t0 = turns.iloc[-1]
    assert t0["reward"] == rewards[(t0.phase, t0.step, t0.task, t0.scheme, t0.rollout, t0.turn)]
    assert len(run.rollouts()) == len({(r["phase"], r["step"], r["task"], r["scheme"], r["rollout"])
                                       for r in meas})

    sel = [r for r in records if "selection" in r]
    assert len(run.selections()) == len(sel) > 0
    assert list(run.selections()["selected"].iloc[0]) == sel[0]["selection"].get("selected", [])
    assert len(run.verifications()) == kinds["verification"]
    lib = [r for r in records if "librarySnapshot" in r]
    assert len(run.library()) == len(lib) > 0
    skills = 0
    for r in lib:
        text = r["objects"][r["librarySnapshot"]["snapshot"]]["text"]
        skills += sum(1 for line in text.split("\n")[1:] if line)
        assert r["librarySnapshot"]["size"] == sum(1 for line in text.split("\n")[1:] if line)
    assert len(run.skills()) == skills
    mets = [r for r in records if "metric" in r]
    assert len(run.metrics()) == len(mets)
    assert list(run.metrics()["value"]) == [r["metric"]["value"] for r in mets]


@pytest.mark.parametrize("phase", ["eval", "tts"])
def test_fast_p_matches_replay_score(replay, golden, phase):
    run = vinci.open_run(golden)
    fp = run.fast_p()
    steps = sorted(fp[fp["phase"] == phase]["step"].unique())
    assert steps, phase
    # Every step as reports count (speedup > p); the final one also as the metric records do.
    for step, inclusive in [(s, False) for s in steps] + [(steps[-1], True)]:
        args = [replay, "score", golden, "--format", "json", "--phase", phase]
        if phase == "eval":
            args += ["--step", str(step)]
        if inclusive:
            args.append("--fast-p-inclusive")
        ours = run.fast_p(inclusive=inclusive)
        ours = ours[(ours["phase"] == phase) & (ours["step"] == step)]
        theirs = json.loads(run_cmd(args).stdout)
        assert theirs["step"] == step
        assert len(theirs["fast_p"]) == len(ours) > 0
        for row in theirs["fast_p"]:
            level = 0 if row["level"] == "all" else int(row["level"][1:])
            o = ours[(ours["turn_mode"] == row["turn"]) & (ours["denominator"] == row["denominator"]) &
                     (ours["level"] == level) & (ours["threshold"] == row["threshold"])]
            assert len(o) == 1, row
            assert (int(o["numerator"].iloc[0]), int(o["count"].iloc[0])) == (
                row["numerator"], row["count"]), (step, inclusive, row)


def _frames_end(run_dir):
    """(path, size) of the log's last segment."""
    log = os.path.join(run_dir, "log")
    last = sorted(os.listdir(log))[-1]
    path = os.path.join(log, last)
    return path, os.path.getsize(path)


def test_cut_log_raises(golden_copy, replay):
    path, size = _frames_end(golden_copy)
    with open(path, "r+b") as f:
        f.truncate(size - 5)  # inside the last frame: torn
    with pytest.raises(vinci.DamagedRunError, match=r"torn frame"):
        vinci.open_run(golden_copy).measurements()
    assert run_cmd([replay, "cat", golden_copy], check=False).returncode == 1


def test_log_cut_at_a_frame_boundary_raises(golden_copy):
    path, size = _frames_end(golden_copy)
    data = open(path, "rb").read()
    # Drop the last frame whole: every frame left is valid, only the manifest can tell.
    pos, last = 24, 24
    while pos < len(data):
        last = pos
        pos += 8 + int.from_bytes(data[pos:pos + 4], "little")
    with open(path, "r+b") as f:
        f.truncate(last)
    schema = vinci.load_schema()
    manifest = schema.Manifest.from_bytes_packed(open(os.path.join(golden_copy, "manifest.bin"), "rb").read())
    n = manifest.recordCount
    assert n > 1
    with pytest.raises(vinci.DamagedRunError, match=rf"holds {n - 1} records, the manifest records {n}\b"):
        vinci.open_run(golden_copy).verify()


def test_log_not_the_manifests_raises(golden_copy):
    # Every frame valid and as many as the manifest records, but not the digest it records.
    schema = vinci.load_schema()
    path = os.path.join(golden_copy, "manifest.bin")
    m = schema.Manifest.from_bytes_packed(open(path, "rb").read()).as_builder()
    recorded = m.runDigest.hex()
    m.runDigest = bytes(16)
    os.chmod(path, 0o644)
    open(path, "wb").write(m.to_bytes_packed())
    zeros = "0" * 32
    with pytest.raises(vinci.DamagedRunError, match=f"the log's run digest is {recorded}, the "
                       f"manifest records {zeros}: the log is not this run's"):
        vinci.open_run(golden_copy).measurements()


def test_flipped_frame_byte_raises(golden_copy):
    path, size = _frames_end(golden_copy)
    with open(path, "r+b") as f:
        f.seek(size // 2)
        b = f.read(1)
        f.seek(size // 2)
        f.write(bytes([b[0] ^ 0x40]))
    with pytest.raises(vinci.DamagedRunError, match=r"corrupt frame|torn frame"):
        list(vinci.open_run(golden_copy).records())


def _an_object(run_dir):
    run = vinci.open_run(run_dir)
    plan = next(iter(run.records(kind="measurement"))).measurement.plan.hex()
    return run.store.path(plan)


def test_flipped_object_byte_raises(golden_copy, replay):
    path = _an_object(golden_copy)
    data = bytearray(open(path, "rb").read())
    data[-1] ^= 0x01
    os.chmod(path, 0o644)
    open(path, "wb").write(bytes(data))
    with pytest.raises(vinci.DamagedRunError, match=r"corrupt object"):
        vinci.open_run(golden_copy).measurements()
    p = run_cmd(["python3", "-m", "vinci", "export", golden_copy, "--format", "jsonl", "--out",
                 os.path.join(os.path.dirname(golden_copy), "out")], check=False)
    assert p.returncode == 1, p.stderr
    assert "corrupt object" in p.stderr
    assert not os.path.exists(os.path.join(os.path.dirname(golden_copy), "out"))


def test_deleted_object_raises(golden_copy, replay):
    path = _an_object(golden_copy)
    os.unlink(path)
    with pytest.raises(vinci.DamagedRunError, match=r"missing from the store"):
        vinci.open_run(golden_copy).tables()
    out = os.path.join(os.path.dirname(golden_copy), "out")
    p = run_cmd([replay, "export", golden_copy, "--format", "parquet", "--out", out], check=False)
    assert p.returncode == 1, p.stderr
    assert "missing from the store" in p.stderr


def test_unknown_format_version_is_refused(golden_copy):
    # A manifest of a later format version than the package knows: refused, not guessed at.
    schema = vinci.load_schema()
    path = os.path.join(golden_copy, "manifest.bin")
    m = schema.Manifest.from_bytes_packed(open(path, "rb").read()).as_builder()
    m.formatVersion = vinci.LATEST_FORMAT_VERSION + 1
    os.chmod(path, 0o644)
    open(path, "wb").write(m.to_bytes_packed())
    with pytest.raises(vinci.RunError, match=r"format version 2: this package has schemas for versions \[1\]"):
        vinci.open_run(golden_copy)


def test_missing_run_is_a_clear_error(tmp_path):
    with pytest.raises(vinci.RunError, match="no such run folder"):
        vinci.open_run(str(tmp_path / "nothing"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(vinci.RunError, match="has no manifest"):
        vinci.open_run(str(tmp_path / "empty"))


def test_language_model_run(replay):
    # The golden language-model run: model calls, prompt templates and their objects (request and
    # reply bodies) all read back and checked; its tables agree with replay cat and replay score.
    path = os.path.join(ROOT, "tests", "golden", "llm_live", "llm_main")
    records = cat(replay, path)[1:]
    run = vinci.open_run(path)
    assert run.manifest["world"] == "live"
    assert run.verify() == len(records)
    assert sum(1 for _ in run.records(kind="llmReply")) == sum(1 for r in records if "llmReply" in r) > 0
    assert len(run.measurements()) == sum(1 for r in records if "measurement" in r)
    theirs = json.loads(run_cmd([replay, "score", path, "--format", "json"]).stdout)
    fp = run.fast_p()
    ours = fp[(fp["phase"] == "eval") & (fp["step"] == theirs["step"])]
    assert len(ours) == len(theirs["fast_p"])
    assert sorted(ours["numerator"]) == sorted(r["numerator"] for r in theirs["fast_p"])


def test_a_rescored_run_reads_its_own_objects(replay, golden_copy, tmp_path):
    # replay rescore --out NEW keeps the new run's objects in NEW/objects: the reader finds them
    # there, with nothing of the run outside its folder.
    new = str(tmp_path / "elsewhere" / "new")
    run_cmd([replay, "rescore", golden_copy, "--device", "sim", "--out", new])
    assert sorted(os.listdir(os.path.dirname(new))) == ["new"]
    run = vinci.open_run(new)
    assert run.verify(objects=True) > 0
