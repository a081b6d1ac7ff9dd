#!/usr/bin/env python3
"""Writes a prompt folder whose KernelBench templates are KernelBench's own words.

vinci's prompts/policy_kernelbench_<backend>.md have KernelBench's structure in vinci's words
(docs/kernelbench_format.md). A model trained on KernelBench's prompts may do better on its exact
text, which vinci does not ship: this script builds it from a KernelBench checkout the user has,
reading its prompts/prompts.toml and example files, and writes a copy of vinci's prompt folder
where policy_kernelbench_cuda.md and policy_kernelbench_triton.md are KernelBench's one-shot (or
zero-shot, few-shot) prompt for that backend, the reference architecture replaced by vinci's
{architecture} placeholder. Point an experiment at the folder with backbone.prompts.

  python3 scripts/kernelbench_prompts.py --kernelbench ~/KernelBench --out prompts-kernelbench \\
      [--option one_shot|zero_shot|few_shot] [--precision fp32|fp16|bf16]

The composition is KernelBench's (src/kernelbench/prompt_constructor_toml.py,
render_prompt_by_option without hardware blocks): the option's components in order
(problem_statement, examples_block, arch_block, precision_note, instruction), each template
stripped and joined by blank lines, the placeholders filled in, the whole stripped with one final
newline. --check also renders it with KernelBench's own constructor where that imports (it needs
KernelBench's Python dependencies) and fails unless the two are byte-identical.

Exit status: 0 written (and, with --check, identical); 1 the check found a difference; 2 bad usage
or a checkout without what is needed.
"""

import argparse
import os
import shutil
import sys

try:
    import tomllib
except ImportError:  # Python < 3.11
    try:
        import tomli as tomllib
    except ImportError:
        sys.exit("kernelbench_prompts: needs Python 3.11 (tomllib) or the tomli package")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SENTINEL = "\x00VINCI_ARCHITECTURE\x00"
BACKENDS = ("cuda", "triton")


def die(msg):
    print("kernelbench_prompts: " + msg, file=sys.stderr)
    sys.exit(2)


def package_dir(checkout):
    """src/kernelbench of a checkout (also accepts that folder itself)."""
    for cand in (os.path.join(checkout, "src", "kernelbench"), checkout):
        if os.path.isfile(os.path.join(cand, "prompts", "prompts.toml")):
            return cand
    die("--kernelbench %s: expected a KernelBench checkout holding src/kernelbench/prompts/prompts.toml" % checkout)


def example_path(checkout, pkg, path):
    """An example file named in prompts.toml: relative to the checkout (src/kernelbench/...) or the package."""
    for cand in (os.path.join(checkout, path), os.path.join(pkg, path),
                 os.path.join(pkg, path.split("src/kernelbench/", 1)[-1])):
        if os.path.isfile(cand):
            return cand
    die("prompts.toml names %s, which the checkout does not have" % path)


def read(path):
    with open(path) as f:
        return f.read()


def block(cfg, dotted):
    node = cfg
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            die("prompts.toml has no %s" % dotted)
        node = node[part]
    if not isinstance(node, str):
        die("prompts.toml: %s is not a string" % dotted)
    return node.strip() + "\n"


def compose(cfg, keys):
    return "\n".join(block(cfg, k) for k in keys).strip() + "\n"


def render(checkout, pkg, cfg, backend, option, precision):
    backend_data = cfg.get("backends", {}).get(backend)
    if backend_data is None:
        die("prompts.toml has no [backends.%s]" % backend)
    option_data = cfg.get("options", {}).get(option)
    if option_data is None:
        die("prompts.toml has no [options.%s]" % option)
    shared = cfg.get("shared", {})
    display = backend_data.get("backend_display", backend.upper())
    context = {
        "ref_arch_src": SENTINEL,
        "backend": backend.upper() if backend in ("cuda", "cute") else backend.capitalize(),
        "backend_display": display,
        "problem_statement": shared.get("problem_statement", "").format(backend_display=display),
        "instruction": shared.get("instruction", "").format(backend_display=display),
        "precision_display": cfg.get("precision", {}).get(precision, {}).get("precision_display",
                                                                              precision.upper()),
    }
    kind = option_data.get("requires_example")
    if kind:
        entry = compose(cfg, ["templates.common.example_entry_template"]).strip()
        intro = compose(cfg, ["templates.common.example_intro_one_shot"]).strip().format(backend_display=display)
        pairs = []
        if kind == "few_shot" and backend_data.get("few_shot_examples"):
            intro = compose(cfg, ["templates.common.example_intro_few_shot"]).strip().format(backend_display=display)
            for i, (a, b) in enumerate(backend_data["few_shot_examples"], 1):
                pairs.append((a, b, "Example %d:" % i))
        else:
            arch = backend_data.get("few_shot_example_arch") or shared.get("few_shot_example_arch")
            pairs.append((arch, backend_data["one_shot_new_arch"], "Example:"))
        entries = [entry.format(example_label=label, input_code=read(example_path(checkout, pkg, a)),
                                output_code=read(example_path(checkout, pkg, b)), backend_display=display)
                   for a, b, label in pairs]
        context["examples_intro"] = intro
        context["examples_entries"] = "\n\n".join(entries).strip()
    parts = []
    for c in option_data["components"]:
        if c in ("problem_statement", "instruction"):
            parts.append(context[c])
        else:
            parts.append(compose(cfg, ["templates.common." + c]))
    text = "\n".join(parts).strip() + "\n"
    return text.format(**context).strip() + "\n"


def kernelbench_own(checkout, backend, option, precision):
    """KernelBench's constructor on the same input, or None when it does not import here."""
    sys.path.insert(0, os.path.join(checkout, "src"))
    try:
        from kernelbench.prompt_constructor_toml import get_prompt_for_backend
    except Exception as e:  # noqa: BLE001  (its dependencies: torch, openai, litellm, dotenv, ...)
        print("kernelbench_prompts: KernelBench's constructor does not import here (%s: %s)"
              % (type(e).__name__, e), file=sys.stderr)
        return None
    return get_prompt_for_backend(SENTINEL, backend=backend, option=option, precision=precision)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kernelbench", required=True, help="a KernelBench checkout")
    ap.add_argument("--out", required=True, help="the prompt folder to write (must not exist)")
    ap.add_argument("--option", default="one_shot", choices=["zero_shot", "one_shot", "few_shot"])
    ap.add_argument("--precision", default="fp32", choices=["fp32", "fp16", "bf16"])
    ap.add_argument("--check", action="store_true", help="compare with KernelBench's own constructor")
    args = ap.parse_args()
    checkout = os.path.abspath(os.path.expanduser(args.kernelbench))
    pkg = package_dir(checkout)
    if os.path.exists(args.out):
        die("--out %s exists: name a new folder" % args.out)
    with open(os.path.join(pkg, "prompts", "prompts.toml"), "rb") as f:
        cfg = tomllib.load(f)
    texts = {}
    for backend in BACKENDS:
        text = render(checkout, pkg, cfg, backend, args.option, args.precision)
        if text.count(SENTINEL) != 1:
            die("the %s prompt shows the architecture %d times, expected once" % (backend, text.count(SENTINEL)))
        if "{architecture}" in text:
            die("the %s prompt already holds the text {architecture}, vinci's placeholder" % backend)
        texts[backend] = text
    status = 0
    if args.check:
        for backend in BACKENDS:
            own = kernelbench_own(checkout, backend, args.option, args.precision)
            if own is None:
                die("--check: KernelBench's constructor cannot run here")
            same = own == texts[backend]
            print("%s %s: %s" % (backend, args.option, "identical to KernelBench's" if same else "DIFFERS from KernelBench's"))
            status = status or (0 if same else 1)
    shutil.copytree(os.path.join(REPO, "prompts"), args.out, ignore=shutil.ignore_patterns("tiny"))
    for backend, text in texts.items():
        with open(os.path.join(args.out, "policy_kernelbench_%s.md" % backend), "w") as f:
            f.write(text.replace(SENTINEL, "{architecture}"))
    print("kernelbench_prompts: wrote %s (KernelBench's %s prompts for %s)" % (args.out, args.option,
                                                                              ", ".join(BACKENDS)))
    return status


if __name__ == "__main__":
    sys.exit(main())
