"""The sim world's positive control, `sim.knowledge = "skills"`, checked from the outside: a run's
log says, turn by turn, what the policy knew (its `sim_knowledge` objects), and no turn ever uses
a technique it did not know. The table of techniques is docs/sim_model.md's ("Skills as
knowledge"), written here again so that the code is checked against the documentation."""
import collections
import json
import os

from conftest import ROOT, binary, run_cmd

# docs/sim_model.md, "Skills as knowledge": each technique and its choices (knob, value).
TECHNIQUES = {
    "tensor_cores": [("gemm.tensor_cores", "tf32"), ("gemm.tensor_cores", "bf16"), ("gemm.tensor_cores", "fp16")],
    "warp_level_rows": [("row.strategy", "warp_shuffle"), ("row.strategy", "block_shuffle"),
                        ("row.strategy", "inner_tile")],
    "vectorized_access": [("ew.vector_width", "2"), ("ew.vector_width", "4"), ("row.vector_width", "4")],
    "epilogue_fusion": [("fusion", "fused")],
    "fast_math": [("ew.math", "fast")],
}
STATES = ("locked", "taught", "carried", "discovered")

# A library whose one skill teaches epilogue fusion in its content, and one that only describes
# it in prose (teaches nothing).
LIBRARY = [
    {"name": "fuse_the_epilogue", "description": "Fuse elementwise epilogues into the producing kernel.",
     "scope": "general", "tags": ["kernel_fusion", "epilogue", "elementwise"],
     "content": "## Motivation\nOne kernel per op re-reads memory.\n\n## Key Idea\n- `fusion = fused`: one kernel.\n",
     "verify_speedup": None},
    {"name": "fusion_in_prose", "description": "Fusion helps elementwise epilogues.", "scope": "general",
     "tags": ["kernel_fusion", "epilogue", "elementwise"],
     "content": "## Key Idea\nFuse the epilogue (fusion = fused) into the producer.\n", "verify_speedup": None},
]


def policy_turns(run):
    """(knowledge, plan knobs) of every policy sample that names a sim_knowledge object."""
    out = []
    for line in run_cmd([binary("replay"), "cat", run, "--objects"]).stdout.splitlines():
        r = json.loads(line)
        s = r.get("sample")
        if not s or s["role"] != "policy" or "prompt" not in s:
            continue
        k = r["objects"].get(s["prompt"])
        if k is None or k["kind"] != "sim_knowledge":
            continue
        plan = json.loads(r["objects"][s["output"]]["text"])
        out.append((json.loads(k["text"]), plan["knobs"]))
    return out


def run_smoke(tmp_path, *sets):
    lib = tmp_path / "library.jsonl"
    lib.write_text("".join(json.dumps(s) + "\n" for s in LIBRARY))
    args = [binary("harness"), "run", os.path.join(ROOT, "experiments", "smoke.toml"), "--out", str(tmp_path / "runs"),
            "--set", f"library.seed={lib}", "--set", "coldstart.enabled=false", "--set", "loop.steps=3"]
    for s in sets:
        args += ["--set", s]
    run_cmd(args)
    return str(tmp_path / "runs" / "smoke")


def test_a_technique_is_used_only_when_known_and_the_log_counts_how(tmp_path):
    run = run_smoke(tmp_path, "sim.knowledge=skills")
    turns = policy_turns(run)
    assert turns, "a skills-world run names a sim_knowledge object in every policy sample"
    uses = collections.Counter()
    for knowledge, knobs in turns:
        assert set(knowledge) == set(STATES)
        for tech, choices in TECHNIQUES.items():
            used = any(knobs.get(k) == v for k, v in choices)
            relevant = any(k in knobs for k, _ in choices)
            states = [s for s in STATES if tech in knowledge[s]]
            assert len(states) == (1 if relevant else 0), (tech, knowledge, knobs)
            if used:
                assert states[0] != "locked", f"turn used the locked technique {tech}: {knowledge} {knobs}"
                uses[states[0]] += 1
    # Every way of knowing a technique occurs, and the taught one comes from the skill whose
    # content writes `fusion = fused`.
    assert uses["taught"] > 0 and uses["carried"] > 0 and uses["discovered"] > 0, uses
    assert run_cmd([binary("replay"), "verify", run]).returncode == 0


def test_without_discovery_or_skills_nothing_locked_is_ever_used(tmp_path):
    run = run_smoke(tmp_path, "sim.knowledge=skills", "sim.discovery=0", "selection.mode=none")
    turns = policy_turns(run)
    assert turns
    for knowledge, knobs in turns:
        assert knowledge["taught"] == [] and knowledge["discovered"] == [] and knowledge["carried"] == []
        for tech, choices in TECHNIQUES.items():
            assert not any(knobs.get(k) == v for k, v in choices), (tech, knobs)


def test_the_open_world_records_no_knowledge(tmp_path):
    run = run_smoke(tmp_path)
    assert policy_turns(run) == []
    manifest = json.loads(run_cmd([binary("replay"), "cat", run]).stdout.splitlines()[0])["manifest"]
    assert "[tasks]" in manifest["configText"]
    assert "[sim]" not in manifest["configText"], "the open world records no [sim] keys"
