"""python3 -m vinci COMMAND: export, tensorboard, plot-ablations, verify (docs/python.md).

Exit codes: 0 done; 1 a run is damaged (a cut or corrupt log, a log that is not the manifest's, a
missing or corrupt object); 2 any other error.
"""
import argparse
import os
import sys
import traceback

from ._format import DamagedRunError, RunError
from .run import TABLES, open_run


def cmd_export(args):
    from .export import FORMATS, export_run
    if args.format not in FORMATS:
        raise ValueError(f"--format: expected {' or '.join(FORMATS)}, found {args.format!r}")
    tables = args.tables.split(",") if args.tables else None
    counts = export_run(open_run(args.run), args.out, args.format, tables)
    print(" ".join(f"{k}={v}" for k, v in counts.items()), file=sys.stderr)


def cmd_tensorboard(args):
    from .tensorboard import write_tensorboard
    written = write_tensorboard([open_run(r) for r in args.runs], args.out)
    for sub, n in written.items():
        print(f"{os.path.join(args.out, sub)}: {n} scalars", file=sys.stderr)


def cmd_plot(args):
    from . import plots
    runs = plots.suite_runs(args.suite, args.root, args.world) if args.suite else []
    present = []
    for method, seed, path in runs:
        if os.path.exists(os.path.join(path, "manifest.bin")):
            present.append((method, seed, path))
        else:
            print(f"plot-ablations: {path}: no run there, skipped", file=sys.stderr)
    for i, path in enumerate(args.runs):
        present.append((plots.method_of(path), i, path))
    thresholds = [float(x) for x in args.thresholds.split(",")] if args.thresholds else None
    c = plots.curves(present, thresholds, args.fast_p_inclusive)
    for path in plots.draw(c, args.out):
        print(path)


def cmd_verify(args):
    run = open_run(args.run)
    n = run.verify(objects=not args.no_objects)
    print(f"{args.run}: ok, {n} records, run digest {run.manifest['run_digest']}")


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python3 -m vinci", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    e = sub.add_parser("export", help="a run's tables as Parquet or JSON lines files")
    e.add_argument("run")
    e.add_argument("--format", required=True, help="parquet or jsonl")
    e.add_argument("--out", required=True, help="folder for <table>.<format> and manifest.json")
    e.add_argument("--tables", help=f"comma-separated subset of: {','.join(TABLES)}")
    e.set_defaults(fn=cmd_export)
    t = sub.add_parser("tensorboard", help="TensorBoard scalars of runs, one subfolder per run")
    t.add_argument("runs", nargs="+")
    t.add_argument("--out", required=True)
    t.set_defaults(fn=cmd_tensorboard)
    p = sub.add_parser("plot-ablations", help="fast_p vs step per method with seed bands")
    p.add_argument("runs", nargs="*")
    p.add_argument("--suite", help="a suite file (ablations/suite.toml): its rows' runs")
    p.add_argument("--root", default=".", help="folder the suite's out path is relative to")
    p.add_argument("--world", default="open", choices=("open", "skills"),
                   help="the suite's sim world: its runs are under <out>/<world>/ (default open)")
    p.add_argument("--thresholds", help="comma-separated p values (default: each run's)")
    p.add_argument("--fast-p-inclusive", action="store_true", help="count speedup >= p")
    p.add_argument("--out", required=True)
    p.set_defaults(fn=cmd_plot)
    v = sub.add_parser("verify", help="read and check a whole run: frames, digest, objects")
    v.add_argument("run")
    v.add_argument("--no-objects", action="store_true")
    v.set_defaults(fn=cmd_verify)
    args = ap.parse_args(argv)
    if args.command == "plot-ablations" and not args.runs and not args.suite:
        ap.error("plot-ablations: give run folders or --suite")
    try:
        args.fn(args)
    except DamagedRunError as e:
        print(f"vinci {args.command}: damaged run: {e}", file=sys.stderr)
        return 1
    except (RunError, ValueError, OSError, ImportError) as e:
        print(f"vinci {args.command}: {e}", file=sys.stderr)
        return 2
    except Exception:  # a defect: the trace, and exit 2 (1 means a damaged run)
        traceback.print_exc()
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
