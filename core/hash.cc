#include "core/hash.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "core/bytes.h"
#include "core/check.h"

namespace vinci {
namespace {

constexpr char kHex[] = "0123456789abcdef";

void feed_tag(XXH3_state_t* st, std::string_view kind) {
  static constexpr char kPrefix[] = "vinci:";
  XXH3_128bits_update(st, kPrefix, sizeof(kPrefix) - 1);
  XXH3_128bits_update(st, kind.data(), kind.size());
  const char zero = 0;
  XXH3_128bits_update(st, &zero, 1);
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::string Digest::hex() const {
  std::string out(32, '0');
  for (int i = 0; i < 16; ++i) {
    out[15 - i] = kHex[(hi >> (4 * i)) & 0xf];
    out[31 - i] = kHex[(lo >> (4 * i)) & 0xf];
  }
  return out;
}

void Digest::to_bytes(uint8_t out[16]) const {
  for (int i = 0; i < 8; ++i) {
    out[i] = static_cast<uint8_t>(hi >> (56 - 8 * i));
    out[8 + i] = static_cast<uint8_t>(lo >> (56 - 8 * i));
  }
}

Digest Digest::from_bytes(const uint8_t in[16]) {
  Digest d;
  for (int i = 0; i < 8; ++i) {
    d.hi = (d.hi << 8) | in[i];
    d.lo = (d.lo << 8) | in[8 + i];
  }
  return d;
}

bool Digest::parse_hex(std::string_view text, Digest* out) {
  if (text.size() != 32) return false;
  Digest d;
  for (int i = 0; i < 32; ++i) {
    int v = hex_value(text[i]);
    if (v < 0) return false;
    uint64_t& word = i < 16 ? d.hi : d.lo;
    word = (word << 4) | static_cast<uint64_t>(v);
  }
  *out = d;
  return true;
}

Digest hash_tagged(std::string_view kind, const void* data, size_t size) {
  XXH3_state_t st;
  XXH3_128bits_reset(&st);
  feed_tag(&st, kind);
  XXH3_128bits_update(&st, data, size);
  XXH128_hash_t h = XXH3_128bits_digest(&st);
  return Digest{h.high64, h.low64};
}

uint64_t hash64(const void* data, size_t size, uint64_t seed) { return XXH3_64bits_withSeed(data, size, seed); }

Hasher::Hasher(std::string_view kind) {
  auto* st = XXH3_createState();
  VINCI_ASSERT(st != nullptr);
  XXH3_128bits_reset(st);
  feed_tag(st, kind);
  state_ = st;
}

Hasher::~Hasher() { XXH3_freeState(static_cast<XXH3_state_t*>(state_)); }

Hasher& Hasher::update(const void* data, size_t size) {
  XXH3_128bits_update(static_cast<XXH3_state_t*>(state_), data, size);
  return *this;
}

Hasher& Hasher::update_u64(uint64_t v) {
  unsigned char b[8];
  store_le(b, v, 8);
  return update(b, 8);
}

Hasher& Hasher::update_f64(double v) { return update_u64(f64_bits(v)); }

Hasher& Hasher::update_str(std::string_view s) {
  update_u64(s.size());
  return update(s.data(), s.size());
}

Hasher& Hasher::update_digest(const Digest& d) {
  update_u64(d.hi);
  return update_u64(d.lo);
}

Digest Hasher::finish() const {
  XXH128_hash_t h = XXH3_128bits_digest(static_cast<XXH3_state_t*>(state_));
  return Digest{h.high64, h.low64};
}

}  // namespace vinci
