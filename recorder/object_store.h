// The content-addressed object store shared by every run under one runs root.
//
// An object is immutable bytes of one kind ("kernel-source", "plan", "prompt", "reply", "skill",
// "library", "checkpoint", "config", ...). Its address is hash_tagged(kind, bytes) (core/hash.h),
// so equal bytes of one kind are stored once however many runs produce them, and equal bytes of
// two kinds never share an address.
//
// On disk (docs/log_format.md): ROOT/xx/yyyyyyyyyyyyyyyyyyyyyyyyyyyyyy, the first two hex digits of
// the address as a folder and the other thirty as the file name. Each file is
//
//   object   := magic:"VOB1" encoding:u8 kind_len:u8 reserved:u16(0) raw_size:u64le kind payload
//   encoding := 0 (payload is the raw bytes) | 1 (payload is one zstd frame of the raw bytes)
//
// written atomically (temp file, fsync, rename). A put that finds the address taken reads the
// stored object and fails with kMismatch unless kind and bytes are equal: a collision or a bug
// never passes silently. A get re-hashes what it read and fails with kCorruption on a mismatch.
#ifndef VINCI_RECORDER_OBJECT_STORE_H_
#define VINCI_RECORDER_OBJECT_STORE_H_

#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/hash.h"
#include "core/status.h"

namespace vinci {

struct StoredObject {
  std::string kind;
  std::string bytes;
};

struct ObjectStoreStats {
  uint64_t puts = 0;        // put() calls
  uint64_t written = 0;     // objects this store wrote (the rest were already there)
  uint64_t bytes_raw = 0;   // raw bytes of the objects it wrote
  uint64_t bytes_disk = 0;  // file bytes of the objects it wrote
};

class ObjectStore {
 public:
  // Objects at least this large are zstd-compressed when that makes them smaller.
  static constexpr size_t kCompressMin = 128;
  static constexpr int kZstdLevel = 3;

  // REQUIRES: root is the store's folder; it is created on the first put.
  // durable: fsync every object as it is written. Off by default: an object is renamed into place
  // whole, so a crash or SIGKILL of the writer never leaves a partial one, and sync() makes
  // everything written so far durable at the points that need it (a run's checkpoints).
  explicit ObjectStore(std::string root, bool durable = false);

  const std::string& root() const { return root_; }
  std::string path_of(const Digest& address) const;

  // Stores bytes of a kind and returns their address. Thread-safe.
  Result<Digest> put(std::string_view kind, std::string_view bytes);
  // Reads an object back, checking its address.
  Result<StoredObject> get(const Digest& address) const;
  bool contains(const Digest& address) const;
  // The addresses of every object in the store (files named like one), in address order.
  Result<std::vector<Digest>> list() const;

  ObjectStoreStats stats() const;
  // Makes every object written so far durable (syncfs on the store's file system).
  Status sync() const;

 private:
  std::string root_;
  bool durable_;
  mutable std::mutex mu_;
  // Addresses this process wrote or checked, with a second, independent hash of the kind and
  // bytes: a repeated put is checked against it without reading the file again.
  std::unordered_map<Digest, uint64_t, DigestHash> known_;
  ObjectStoreStats stats_;
};

// Encodes and decodes the object file format above (exposed for tests and `replay cat`).
std::string encode_object_file(std::string_view kind, std::string_view bytes);
Result<StoredObject> decode_object_file(std::string_view file, const std::string& path_for_errors);

}  // namespace vinci

#endif  // VINCI_RECORDER_OBJECT_STORE_H_
