"""Writes a run's tables as Parquet or JSON lines: `python3 -m vinci export RUN --format F --out DIR`.

One file per table (DIR/<table>.parquet or DIR/<table>.jsonl, TABLES order) and DIR/manifest.json.
Files are written to temporary names and renamed into place, after the whole run has been read
and checked: a damaged run writes nothing.
"""
import json
import os

from .run import TABLES

FORMATS = ("parquet", "jsonl")


def _atomic(path, write):
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _column(series):
    values = series.tolist()  # Python ints, floats, strings, lists
    if series.dtype.kind == "f":
        values = [None if v != v else v for v in values]  # NaN: null
    return values


def write_jsonl(df, path):
    """One JSON object per row; floats written exactly (shortest round-trip form), NaN as null."""
    names = list(df.columns)
    columns = [_column(df[c]) for c in names]
    dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
    with open(path, "w") as f:
        for row in zip(*columns):
            f.write(dumps(dict(zip(names, row))))
            f.write("\n")


def export_run(run, out_dir, fmt, tables=None):
    """Writes `tables` (default: all) of `run` into out_dir; returns {table: rows}."""
    if fmt not in FORMATS:
        raise ValueError(f"--format: expected one of {', '.join(FORMATS)}, found {fmt!r}")
    names = list(tables) if tables else list(TABLES)
    for n in names:
        if n not in TABLES:
            raise ValueError(f"--tables: no table {n!r}; the tables are {', '.join(TABLES)}")
    frames = run.tables()  # reads and checks the whole run before anything is written
    os.makedirs(out_dir, exist_ok=True)
    counts = {}
    for name in names:
        df = frames[name]
        path = os.path.join(out_dir, f"{name}.{fmt}")
        if fmt == "parquet":
            _atomic(path, lambda p: df.to_parquet(p, engine="pyarrow", index=False))
        else:
            _atomic(path, lambda p, df=df: write_jsonl(df, p))
        counts[name] = len(df)
    manifest = dict(run.manifest)
    manifest["tables"] = counts
    _atomic(os.path.join(out_dir, "manifest.json"),
            lambda p: open(p, "w").write(json.dumps(manifest, indent=1, sort_keys=True) + "\n"))
    return counts
