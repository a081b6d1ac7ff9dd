#!/usr/bin/env python3
"""Reads a vinci run from Python with pycapnp and the schema, independently of vinci's C++ reader.

    python3 tests/recorder/read_run.py RUN_DIR [--schema recorder/vinci.capnp]

It parses the manifest and every log frame (checking each frame's checksum), recomputes the run
digest and the address of every object a record names (with the xxhash package), and prints one
line per record. Used as a test (tests/recorder/CMakeLists.txt) and as the documented example of
reading runs from Python (docs/log_format.md).
"""
import argparse
import os
import struct
import sys

import capnp  # pycapnp
import xxhash

capnp.remove_import_hook()


def load_schema(path):
    return capnp.load(path, imports=["/usr/include"])


def frames(log_dir):
    """Yields (file, offset, payload) for every frame, checking headers and checksums."""
    names = sorted(n for n in os.listdir(log_dir) if n.endswith(".vlog"))
    expected_first = 0
    for index, name in enumerate(names):
        data = open(os.path.join(log_dir, name), "rb").read()
        magic, version, seg_index, first = struct.unpack_from("<8sIIQ", data, 0)
        assert magic == b"VINCILOG", (name, magic)
        assert version == 1 and seg_index == index and first == expected_first, (name, version)
        pos = 24
        while pos < len(data):
            length, checksum = struct.unpack_from("<II", data, pos)
            payload = data[pos + 8: pos + 8 + length]
            assert len(payload) == length, f"{name}: torn frame at {pos}"
            actual = xxhash.xxh3_64_intdigest(payload, seed=length) & 0xFFFFFFFF
            assert actual == checksum, f"{name}: bad checksum at {pos}"
            yield name, pos, payload
            expected_first += 1
            pos += 8 + length


def tagged_address(kind, data):
    return xxhash.xxh3_128_hexdigest(b"vinci:" + kind + b"\0" + data)


def read_object(store, hexaddr):
    """Returns (kind, bytes) of an uncompressed object, or None for a zstd-compressed one."""
    path = os.path.join(store, hexaddr[:2], hexaddr[2:])
    data = open(path, "rb").read()
    magic, encoding, kind_len, _, raw_size = struct.unpack_from("<4sBBHQ", data, 0)
    assert magic == b"VOB1"
    kind = data[16:16 + kind_len]
    if encoding != 0:
        return None
    body = data[16 + kind_len:]
    assert len(body) == raw_size
    return kind, body


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("run")
    ap.add_argument("--schema", default=os.path.join(os.path.dirname(__file__), "..", "..",
                                                     "recorder", "vinci.capnp"))
    args = ap.parse_args()
    schema = load_schema(args.schema)
    run = args.run.rstrip("/")
    with open(os.path.join(run, "manifest.bin"), "rb") as f:
        manifest = schema.Manifest.from_bytes_packed(f.read())
    print(f"manifest: name={manifest.name} seed={manifest.seed} world={manifest.world} "
          f"completed={manifest.completed} records={manifest.recordCount}")

    digest = xxhash.xxh3_128()
    digest.update(b"vinci:run-digest\0")
    store = os.path.join(os.path.dirname(run), "objects")
    count = 0
    checked_objects = 0
    for name, offset, payload in frames(os.path.join(run, "log")):
        rec = schema.Record.from_bytes_packed(payload)
        assert rec.seq == count, (rec.seq, count)
        kind = rec.which()
        print(f"{rec.seq} {kind} step={rec.step} task={rec.task!r}")
        if kind == "measurement" and rec.task == "L1_019_relu":
            hexaddr = rec.measurement.plan.hex()
            obj = read_object(store, hexaddr)
            assert obj is not None
            assert tagged_address(obj[0], obj[1]) == hexaddr, "object address mismatch"
            print(f"  object {hexaddr}: {obj[0].decode()} {obj[1].decode()!r}")
            checked_objects += 1
        digest.update(struct.pack("<Q", len(payload)))
        digest.update(payload)
        count += 1

    assert manifest.completed, "run is not complete"
    assert count == manifest.recordCount, (count, manifest.recordCount)
    assert digest.hexdigest() == manifest.runDigest.hex(), (digest.hexdigest(), manifest.runDigest.hex())
    assert checked_objects == 1
    print(f"ok: {count} records, run digest {digest.hexdigest()}")


if __name__ == "__main__":
    sys.exit(main())
