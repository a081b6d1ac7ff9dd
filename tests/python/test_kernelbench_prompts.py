"""scripts/kernelbench_prompts.py on a checkout in KernelBench's layout written here (prompts.toml
and example files of this test's own, not KernelBench's text): the composition rules (templates
stripped, joined by blank lines, placeholders filled, the architecture replaced by vinci's
{architecture}), the copy of vinci's other templates, and the errors. The byte-identity with
KernelBench's own constructor on its real checkout is what --check measures (docs/kernelbench_format.md)."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "kernelbench_prompts.py")

TOML = '''[meta]
default_precision = "fp32"

[shared]
problem_statement = """
Write {backend_display} for the model.
"""
instruction = """
Answer with ModelNew using {backend_display}.
"""
few_shot_example_arch = "src/kernelbench/prompts/ex.py"

[backends.cuda]
backend_display = "CUDA things"
one_shot_new_arch = "src/kernelbench/prompts/ex_new_cuda.py"

[backends.triton]
backend_display = "Triton things"
one_shot_new_arch = "src/kernelbench/prompts/ex_new_triton.py"

[precision.fp32]
precision_display = "FP32 here"

[templates.common]
arch_block = """
The model:


{ref_arch_src}

"""
examples_block = """
{examples_intro}

{examples_entries}
"""
example_intro_one_shot = """
See how {backend_display} look:
"""
example_intro_few_shot = """
Several:
"""
example_entry_template = """
{example_label}

In:

{input_code}

Out ({backend_display}):

{output_code}
"""
precision_note = """
Precision: {precision_display}.
"""

[options.one_shot]
components = ["problem_statement", "examples_block", "arch_block", "precision_note", "instruction"]
requires_example = "one_shot"

[options.zero_shot]
components = ["problem_statement", "arch_block", "precision_note", "instruction"]
'''


def make_checkout(tmp_path):
    prompts = tmp_path / "kb" / "src" / "kernelbench" / "prompts"
    prompts.mkdir(parents=True)
    (prompts / "prompts.toml").write_text(TOML)
    (prompts / "ex.py").write_text("class Model:\n    pass\n")
    (prompts / "ex_new_cuda.py").write_text("class ModelNew:  # cuda {braces} stay\n    pass\n")
    (prompts / "ex_new_triton.py").write_text("class ModelNew:  # triton\n    pass\n")
    return tmp_path / "kb"


def run(*args):
    return subprocess.run([sys.executable, SCRIPT, *map(str, args)], capture_output=True, text=True)


def test_one_shot_is_composed_as_kernelbench_composes_it(tmp_path):
    kb = make_checkout(tmp_path)
    out = tmp_path / "prompts"
    r = run("--kernelbench", kb, "--out", out)
    assert r.returncode == 0, r.stderr
    cuda = (out / "policy_kernelbench_cuda.md").read_text()
    assert cuda == (
        "Write CUDA things for the model.\n\n"
        "See how CUDA things look:\n\n"
        "Example:\n\nIn:\n\nclass Model:\n    pass\n\n\nOut (CUDA things):\n\n"
        "class ModelNew:  # cuda {braces} stay\n    pass\n\n"
        "The model:\n\n\n{architecture}\n\n"
        "Precision: FP32 here.\n\n"
        "Answer with ModelNew using CUDA things.\n")
    triton = (out / "policy_kernelbench_triton.md").read_text()
    assert "See how Triton things look:" in triton and "# triton" in triton
    # vinci's other templates come along, unchanged.
    for name in ("policy_system.md", "selection_system.md", "summary_system.md", "policy_feedback.md"):
        assert (out / name).read_text() == open(os.path.join(ROOT, "prompts", name)).read()


def test_zero_shot_has_no_example(tmp_path):
    kb = make_checkout(tmp_path)
    r = run("--kernelbench", kb, "--out", tmp_path / "p", "--option", "zero_shot")
    assert r.returncode == 0, r.stderr
    text = (tmp_path / "p" / "policy_kernelbench_triton.md").read_text()
    assert text == ("Write Triton things for the model.\n\nThe model:\n\n\n{architecture}\n\n"
                    "Precision: FP32 here.\n\nAnswer with ModelNew using Triton things.\n")


def test_errors_name_what_is_missing(tmp_path):
    r = run("--kernelbench", tmp_path, "--out", tmp_path / "p")
    assert r.returncode == 2 and "prompts.toml" in r.stderr
    kb = make_checkout(tmp_path)
    (tmp_path / "exists").mkdir()
    r = run("--kernelbench", kb, "--out", tmp_path / "exists")
    assert r.returncode == 2 and "exists" in r.stderr
    os.remove(kb / "src" / "kernelbench" / "prompts" / "ex_new_triton.py")
    r = run("--kernelbench", kb, "--out", tmp_path / "q")
    assert r.returncode == 2 and "ex_new_triton.py" in r.stderr
    assert not (tmp_path / "q").exists(), "nothing is written when a file is missing"
