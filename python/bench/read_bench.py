#!/usr/bin/env python3
"""How fast vinci's Python package reads a large run into DataFrames.

    python3 python/bench/read_bench.py [--records 1000000] [--source RUN] [--work DIR] [--keep]

Makes a run of --records records (default 10^6) by repeating the records of a source run (default:
a fresh `build/bin/harness run experiments/smoke.toml`): every record but the source's runEnd, in
order, with seq renumbered and the steps of each repetition after the previous one's, then a
runEnd; segments of at most 64 MiB, checksums, run digest and manifest as the recorder writes them,
and the source's object store beside it. Then, in a fresh process, times
`vinci.open_run(RUN).measurements()` (the one pass that checks every frame, the digest and every
object named, and builds every table) and prints the figures. --check also has `replay score` read
the made run, to show vinci's own reader accepts it.
"""
import argparse
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))

import xxhash  # noqa: E402

from vinci import _format, open_run  # noqa: E402

SEGMENT_LIMIT = 64 << 20


def make_run(source, dest, records):
    src = open_run(source)
    schema = src.schema
    payloads = [p for p in src.payloads()]
    body = []
    max_step = 0
    for p in payloads:
        r = schema.Record.from_bytes_packed(p)
        if r._which_str() == "runEnd":
            continue
        body.append(r)
        max_step = max(max_step, r.step)
    os.makedirs(os.path.join(dest, "log"))
    digest = xxhash.xxh3_128()
    digest.update(b"vinci:run-digest\0")
    segment, first, size, out = 0, 0, 0, None

    def open_segment():
        nonlocal out, size
        if out:
            out.close()
        out = open(os.path.join(dest, "log", f"{segment:08d}.vlog"), "wb")
        out.write(_format.SEGMENT_HEADER.pack(b"VINCILOG", 1, segment, first))
        size = _format.SEGMENT_HEADER.size

    open_segment()
    seq = 0

    def write(payload):
        nonlocal seq, size, segment, first
        if size + 8 + len(payload) > SEGMENT_LIMIT:
            segment += 1
            first = seq
            open_segment()
        out.write(struct.pack("<II", len(payload), _format.frame_checksum(payload)))
        out.write(payload)
        size += 8 + len(payload)
        digest.update(struct.pack("<Q", len(payload)))
        digest.update(payload)
        seq += 1

    rep = 0
    while seq < records - 1:
        for r in body:
            if seq >= records - 1:
                break
            b = r.as_builder()
            b.seq = seq
            if b.step >= 0:
                b.step = b.step + rep * (max_step + 1)
            write(b.to_bytes_packed())
        rep += 1
    end = schema.Record.new_message()
    end.seq = seq
    run_end = end.init("runEnd")
    run_end.recordCount = seq
    run_end.runDigest = bytes.fromhex(digest.copy().hexdigest())
    write(end.to_bytes_packed())
    out.close()
    m = src._manifest.as_builder()
    m.name = os.path.basename(dest)
    m.recordCount = seq
    m.runDigest = bytes.fromhex(digest.hexdigest())
    m.completed = True
    with open(os.path.join(dest, "manifest.bin"), "wb") as f:
        f.write(m.to_bytes_packed())
    return seq


TIMER = r"""
import os, sys, time
sys.path.insert(0, sys.argv[2])
t0 = time.perf_counter(); c0 = time.process_time()
import vinci
run = vinci.open_run(sys.argv[1])
m = run.measurements()
t1 = time.perf_counter(); c1 = time.process_time()
print(f"records {run.manifest['record_count']}  measurements {len(m)}  trials {len(run.trials())}  "
      f"timing samples {len(run.timings())}")
print(f"vinci.open_run(RUN).measurements(): {t1 - t0:.2f} s wall, {c1 - c0:.2f} s CPU, import "
      f"included (every frame's checksum, the digest, the objects measurements name; the "
      f"measurements, trials and timings tables)")
run = vinci.open_run(sys.argv[1])
t2 = time.perf_counter(); c2 = time.process_time()
tables = run.tables()
t3 = time.perf_counter(); c3 = time.process_time()
print(f"vinci.open_run(RUN).tables(): {t3 - t2:.2f} s wall, {c3 - c2:.2f} s CPU (every table: "
      + ", ".join(f"{k} {len(v)}" for k, v in tables.items()) + ")")
print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--source", help="a run to repeat (default: a fresh smoke run)")
    ap.add_argument("--work", help="folder for the runs (default: a temporary one)")
    ap.add_argument("--keep", action="store_true", help="keep the made runs")
    ap.add_argument("--check", action="store_true", help="also read the made run with replay score")
    args = ap.parse_args()
    work = args.work or tempfile.mkdtemp(prefix="vinci_read_bench_")
    os.makedirs(work, exist_ok=True)
    try:
        source = args.source
        if not source:
            shutil.rmtree(os.path.join(work, "src"), ignore_errors=True)
            subprocess.run([os.path.join(ROOT, "build", "bin", "harness"), "run",
                            os.path.join(ROOT, "experiments", "smoke.toml"), "--out",
                            os.path.join(work, "src"), "--name", "smoke"],
                           check=True, capture_output=True, cwd=ROOT)
            source = os.path.join(work, "src", "smoke")
        root = os.path.join(work, "big")
        shutil.rmtree(root, ignore_errors=True)
        os.makedirs(root)
        shutil.copytree(os.path.join(os.path.dirname(os.path.abspath(source)), "objects"),
                        os.path.join(root, "objects"))
        run = os.path.join(root, "big")
        t = time.perf_counter()
        n = make_run(source, run, args.records)
        size = sum(os.path.getsize(os.path.join(run, "log", f)) for f in os.listdir(os.path.join(run, "log")))
        print(f"made {run}: {n} records, {size / 2**20:.0f} MiB of log, in {time.perf_counter() - t:.0f} s")
        if args.check:
            p = subprocess.run([os.path.join(ROOT, "build", "bin", "replay"), "score", run, "--turn", "last",
                                "--format", "csv"], capture_output=True, text=True, cwd=ROOT)
            print(f"replay score: exit {p.returncode} {p.stderr.strip()}")
        subprocess.run([sys.executable, "-c", TIMER, run, os.path.join(ROOT, "python")], check=True)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
