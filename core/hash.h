// Content hashing: XXH3-128 over canonical bytes with a kind tag in front.
//
// An address is XXH3-128("vinci:" kind "\0" bytes). The tag keeps a kernel source and a prompt with
// equal bytes at different addresses (as ccache delimits its hash inputs). Digests of derived values
// use the same function with their own kinds.
#ifndef VINCI_CORE_HASH_H_
#define VINCI_CORE_HASH_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace vinci {

// A 128-bit digest. Printed as 32 lower-case hex digits, high word first.
struct Digest {
  uint64_t hi = 0;
  uint64_t lo = 0;

  bool is_zero() const { return hi == 0 && lo == 0; }
  std::string hex() const;
  // The 16 bytes, big-endian (the order hex() prints them in).
  void to_bytes(uint8_t out[16]) const;
  static Digest from_bytes(const uint8_t in[16]);
  // Parses exactly 32 hex digits; returns false on anything else.
  static bool parse_hex(std::string_view text, Digest* out);

  friend bool operator==(const Digest& a, const Digest& b) { return a.hi == b.hi && a.lo == b.lo; }
  friend bool operator!=(const Digest& a, const Digest& b) { return !(a == b); }
  friend bool operator<(const Digest& a, const Digest& b) { return a.hi != b.hi ? a.hi < b.hi : a.lo < b.lo; }
};

// XXH3-128 of kind-tagged bytes.
Digest hash_tagged(std::string_view kind, const void* data, size_t size);
inline Digest hash_tagged(std::string_view kind, std::string_view bytes) {
  return hash_tagged(kind, bytes.data(), bytes.size());
}

// XXH3-64 of raw bytes, seeded; used for frame checksums and key derivation.
uint64_t hash64(const void* data, size_t size, uint64_t seed = 0);

// For unordered containers keyed by a digest (its bits are already uniformly mixed).
struct DigestHash {
  size_t operator()(const Digest& d) const { return static_cast<size_t>(d.lo ^ (d.hi * 0x9E3779B97F4A7C15ull)); }
};

// Streaming XXH3-128 for digests over many pieces (a run digest, a parameter digest).
// The stream is tagged like hash_tagged, so Hasher(k).update(b).finish() == hash_tagged(k, b).
class Hasher {
 public:
  explicit Hasher(std::string_view kind);
  ~Hasher();
  Hasher(const Hasher&) = delete;
  Hasher& operator=(const Hasher&) = delete;

  Hasher& update(const void* data, size_t size);
  Hasher& update(std::string_view bytes) { return update(bytes.data(), bytes.size()); }
  // Fixed-width little-endian integers and IEEE-754 bit patterns, so digests do not depend on
  // how a number would be printed.
  Hasher& update_u64(uint64_t v);
  Hasher& update_i64(int64_t v) { return update_u64(static_cast<uint64_t>(v)); }
  Hasher& update_f64(double v);
  // A length-prefixed string: ("ab","c") and ("a","bc") hash differently.
  Hasher& update_str(std::string_view s);
  Hasher& update_digest(const Digest& d);
  Digest finish() const;

 private:
  void* state_;  // XXH3_state_t, kept out of the header
};

}  // namespace vinci

#endif  // VINCI_CORE_HASH_H_
