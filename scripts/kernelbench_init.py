#!/usr/bin/env python3
"""The constructor of each task's KernelBench problem, written into the task files.

KernelBench builds a candidate as `ModelNew(*get_init_inputs())` with its problem file's
arguments, so a module written for the problem file takes those arguments. For every task with a
`kernelbench = { problem = ..., globals = ... }` line this reads the problem file from a
KernelBench checkout (Python's ast; nothing of it runs) and adds two keys to that line:

  init      = the items of its get_init_inputs(), in order: a KernelBench global that `globals`
              maps is written as the size expression it maps to (a string), any other module
              constant or literal as its value (integer, float, boolean, or an array of them)
  signature = the parameters of Model.__init__ after self, as written (names, annotations,
              defaults), so that the rendered Model takes what KernelBench's takes

  python3 scripts/kernelbench_init.py --kernelbench ~/KernelBench [--write] [--tasks data/tasks]

Without --write it prints what it would add and what it could not resolve. Exit status: 0 when
every task resolved.
"""
import argparse
import ast
import glob
import os
import re
import sys
import tomllib


def module_constants(tree):
    consts = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                consts[node.targets[0].id] = ast.literal_eval(node.value)
            except Exception:
                pass
    return consts


def toml_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    raise ValueError("no TOML form for %r" % (v,))


class Unresolved(Exception):
    pass


def resolve(node, globals_map, consts):
    """An item of get_init_inputs() as a task-file value."""
    if isinstance(node, ast.Name):
        if node.id in globals_map:
            g = globals_map[node.id]
            return g if isinstance(g, (str, list)) else str(g)
        if node.id in consts:
            return consts[node.id]
        raise Unresolved("the name %s is neither a mapped global nor a constant" % node.id)
    if isinstance(node, (ast.Tuple, ast.List)):
        return [resolve(e, globals_map, consts) for e in node.elts]
    try:
        return ast.literal_eval(node)
    except Exception:
        raise Unresolved("the expression %s" % ast.unparse(node))


def problem_constructor(path, globals_map):
    tree = ast.parse(open(path).read())
    consts = module_constants(tree)
    signature, items = None, None
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "Model":
            for b in node.body:
                if isinstance(b, ast.FunctionDef) and b.name == "__init__":
                    args = b.args
                    args.args = args.args[1:]  # self
                    signature = ast.unparse(args)
        if isinstance(node, ast.FunctionDef) and node.name == "get_init_inputs":
            for st in ast.walk(node):
                if isinstance(st, ast.Return) and isinstance(st.value, (ast.List, ast.Tuple)):
                    items = [resolve(e, globals_map, consts) for e in st.value.elts]
    if signature is None:
        raise Unresolved("no Model.__init__")
    if items is None:
        raise Unresolved("get_init_inputs() does not return a list")
    return signature, items


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kernelbench", required=True, help="a KernelBench checkout (holding KernelBench/level1)")
    ap.add_argument("--tasks", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "tasks"))
    ap.add_argument("--write", action="store_true", help="add init and signature to the task files")
    args = ap.parse_args()
    root = os.path.join(os.path.expanduser(args.kernelbench), "KernelBench")
    if not os.path.isdir(root):
        sys.exit("kernelbench_init: --kernelbench %s: expected a checkout holding KernelBench/level1" % args.kernelbench)
    failed = 0
    for path in sorted(glob.glob(os.path.join(args.tasks, "*.toml"))):
        text = open(path).read()
        tasks = {t["kernelbench"]["problem"]: t for t in tomllib.loads(text).get("task", []) if "kernelbench" in t}
        lines = text.split("\n")
        for i, line in enumerate(lines):
            m = re.match(r'^kernelbench = \{ problem = "([^"]+)"(.*) \}$', line)
            if not m:
                continue
            t = tasks[m.group(1)]
            if "init" in t["kernelbench"]:
                continue
            try:
                signature, items = problem_constructor(os.path.join(root, m.group(1)), t["kernelbench"].get("globals", {}))
            except (Unresolved, OSError) as e:
                print("%s %s: %s" % (t["id"], m.group(1), e))
                failed += 1
                continue
            add = ", init = %s, signature = %s" % (toml_value(items), toml_value(signature))
            print("%s: init %s; signature (%s)" % (t["id"], toml_value(items), signature))
            lines[i] = line[:-2] + add + " }"
        if args.write:
            new = "\n".join(lines)
            tomllib.loads(new)  # still TOML
            with open(path + ".tmp", "w") as f:
                f.write(new)
            os.replace(path + ".tmp", path)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
