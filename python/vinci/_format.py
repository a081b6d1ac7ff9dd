"""The bytes of a vinci run on disk (docs/log_format.md): schemas, log segments, frames, objects.

Everything here checks what it reads: a segment's header and number, every frame's length and
checksum, the run digest and record count against the manifest, and every object's header, zstd
frame and content address. Damage raises DamagedRunError (a subclass of RunError) naming the file,
the offset or address, what was expected and what was found.
"""
import functools
import os
import struct

import capnp  # pycapnp
import numpy as np
import xxhash
import zstandard

capnp.remove_import_hook()

SCHEMA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "schemas")
# The newest format version this package has a schema for: a manifest of a later version is refused.
LATEST_FORMAT_VERSION = 1

SEGMENT_MAGIC = b"VINCILOG"
SEGMENT_VERSION = 1
SEGMENT_HEADER = struct.Struct("<8sIIQ")  # magic, version, index, first frame
FRAME_HEADER = struct.Struct("<II")  # length, checksum
MAX_FRAME = 64 << 20
OBJECT_MAGIC = b"VOB1"
OBJECT_HEADER = struct.Struct("<4sBBHQ")  # magic, encoding, kind length, reserved, raw size
MAX_EXPANSION = 32768  # no zstd frame expands more than this


class RunError(Exception):
    """A run cannot be read: a missing folder or manifest, or an unknown format version."""


class DamagedRunError(RunError):
    """A run's bytes are damaged: a cut or corrupt log, a log that is not the manifest's, or a
    missing or corrupt object."""


def schema_path(version):
    return os.path.join(SCHEMA_DIR, f"v{version}", "vinci.capnp")


@functools.lru_cache(maxsize=None)
def load_schema(version=LATEST_FORMAT_VERSION):
    """The Cap'n Proto schema of a format version, as shipped in this package."""
    path = schema_path(version)
    if not os.path.exists(path):
        known = sorted(int(d[1:]) for d in os.listdir(SCHEMA_DIR) if d.startswith("v") and d[1:].isdigit())
        raise RunError(f"format version {version}: this package has schemas for versions {known} "
                       f"only; a newer vinci wrote this run (upgrade the vinci Python package)")
    return capnp.load(path, imports=[os.path.join(SCHEMA_DIR, "include")])


def address_hex(kind, data):
    """A content address: XXH3-128 of "vinci:" kind 0x00 bytes, as 32 hex digits."""
    if isinstance(kind, str):
        kind = kind.encode()
    return xxhash.xxh3_128_hexdigest(b"vinci:" + kind + b"\0" + data)


def frame_checksum(payload):
    return xxhash.xxh3_64_intdigest(payload, seed=len(payload)) & 0xFFFFFFFF


def segment_names(log_dir):
    """The segment files of a log, in order; raises on a missing log or a gap in the numbering."""
    if not os.path.isdir(log_dir):
        raise DamagedRunError(f"{log_dir}: the run has no log folder")
    names = sorted(n for n in os.listdir(log_dir) if n.endswith(".vlog"))
    for i, name in enumerate(names):
        if name != f"{i:08d}.vlog":
            raise DamagedRunError(f"{os.path.join(log_dir, name)}: expected segment {i:08d}.vlog "
                                  f"(segments are numbered densely from 0), found {name}")
    return names


def iter_segments(log_dir):
    """Yields (path, payloads, digest_input) per segment: its frames' payloads, every header,
    length and checksum checked, and the bytes the run digest reads for them (`length:u64 payload`
    per frame: the segment's frames with each checksum zeroed, since a little-endian u64 length is
    the u32 length followed by four zero bytes)."""
    first = 0
    for index, name in enumerate(segment_names(log_dir)):
        path = os.path.join(log_dir, name)
        with open(path, "rb") as f:
            data = f.read()
        if len(data) < SEGMENT_HEADER.size:
            raise DamagedRunError(f"{path}: offset 0: segment header cut short "
                                  f"({len(data)} of {SEGMENT_HEADER.size} bytes)")
        magic, version, seg_index, seg_first = SEGMENT_HEADER.unpack_from(data, 0)
        if magic != SEGMENT_MAGIC:
            raise DamagedRunError(f"{path}: offset 0: expected magic VINCILOG, found {magic!r}")
        if version != SEGMENT_VERSION:
            raise DamagedRunError(f"{path}: offset 8: segment version {version}; this reader knows "
                                  f"version {SEGMENT_VERSION} only")
        if seg_index != index or seg_first != first:
            raise DamagedRunError(f"{path}: offset 12: segment out of place: expected index {index} "
                                  f"first frame {first}, found index {seg_index} first frame {seg_first}")
        frames = []
        offsets = []
        pos = SEGMENT_HEADER.size
        end = len(data)
        unpack = FRAME_HEADER.unpack_from
        checksum = xxhash.xxh3_64_intdigest
        while pos < end:
            if pos + 8 > end:
                raise DamagedRunError(f"{path}: offset {pos}: torn frame: its header runs past the "
                                      f"end of the file ({end - pos} of 8 bytes)")
            length, crc = unpack(data, pos)
            if length == 0 or length > MAX_FRAME:
                raise DamagedRunError(f"{path}: offset {pos}: corrupt frame: length {length} "
                                      f"(expected 1 to {MAX_FRAME})")
            if pos + 8 + length > end:
                raise DamagedRunError(f"{path}: offset {pos}: torn frame: its payload of {length} "
                                      f"bytes runs past the end of the file ({end - pos - 8} left)")
            payload = data[pos + 8:pos + 8 + length]
            if checksum(payload, length) & 0xFFFFFFFF != crc:
                raise DamagedRunError(f"{path}: offset {pos}: corrupt frame: checksum mismatch "
                                      f"(recorded {crc:08x}, computed "
                                      f"{checksum(payload, length) & 0xFFFFFFFF:08x})")
            frames.append(payload)
            offsets.append(pos)
            pos += 8 + length
        first += len(frames)
        digest_input = np.frombuffer(data, dtype=np.uint8)[SEGMENT_HEADER.size:].copy()
        at = np.array(offsets, dtype=np.int64) - SEGMENT_HEADER.size + 4
        for k in range(4):
            digest_input[at + k] = 0
        yield path, frames, digest_input


class ObjectStore:
    """The object store of a runs root (RUNS_ROOT/objects): reads objects and checks them."""

    def __init__(self, root):
        self.root = root

    def path(self, address):
        return os.path.join(self.root, address[:2], address[2:])

    def get(self, address):
        """(kind, bytes) of the object at `address` (32 hex digits, or 16 bytes), checked: header,
        zstd frame, size and content address. Raises DamagedRunError when missing or corrupt."""
        if isinstance(address, (bytes, bytearray)):
            address = bytes(address).hex()
        path = self.path(address)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            raise DamagedRunError(f"{path}: object {address} is missing from the store") from None
        if len(data) < OBJECT_HEADER.size:
            raise DamagedRunError(f"{path}: corrupt object: header cut short ({len(data)} bytes)")
        magic, encoding, kind_len, reserved, raw_size = OBJECT_HEADER.unpack_from(data, 0)
        if magic != OBJECT_MAGIC or reserved != 0:
            raise DamagedRunError(f"{path}: corrupt object: expected magic VOB1 and reserved 0, "
                                  f"found {magic!r} and {reserved}")
        start = OBJECT_HEADER.size + kind_len
        if len(data) < start:
            raise DamagedRunError(f"{path}: corrupt object: kind cut short")
        kind = data[OBJECT_HEADER.size:start]
        payload = data[start:]
        if encoding == 0:
            raw = payload
        elif encoding == 1:
            if raw_size > MAX_EXPANSION * max(len(payload), 1):
                raise DamagedRunError(f"{path}: corrupt object: raw size {raw_size} is more than any "
                                      f"zstd frame of {len(payload)} bytes expands to")
            try:
                stated = zstandard.frame_content_size(payload)
            except zstandard.ZstdError as e:
                raise DamagedRunError(f"{path}: corrupt object: bad zstd frame: {e}") from None
            if stated != raw_size:
                raise DamagedRunError(f"{path}: corrupt object: zstd frame states {stated} bytes, "
                                      f"header {raw_size}")
            try:
                raw = zstandard.ZstdDecompressor().decompress(payload, max_output_size=raw_size)
            except zstandard.ZstdError as e:
                raise DamagedRunError(f"{path}: corrupt object: zstd: {e}") from None
        else:
            raise DamagedRunError(f"{path}: corrupt object: encoding {encoding} (expected 0 or 1)")
        if len(raw) != raw_size:
            raise DamagedRunError(f"{path}: corrupt object: expected {raw_size} bytes, found {len(raw)}")
        actual = address_hex(kind, raw)
        if actual != address:
            raise DamagedRunError(f"{path}: corrupt object: its bytes hash to {actual}, not to its "
                                  f"address {address}")
        return kind.decode(), raw
