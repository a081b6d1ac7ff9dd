#include "core/rng.h"

#include <cmath>

#include "core/check.h"

namespace vinci {

RngKey RngKey::root(uint64_t seed) {
  Hasher h("rng-root");
  h.update_u64(seed);
  return RngKey(h.finish());
}

RngKey RngKey::with(std::string_view name, std::string_view value) const {
  Hasher h("rng-key");
  h.update_digest(key_).update_str(name).update_u64(0).update_str(value);
  return RngKey(h.finish());
}

RngKey RngKey::with(std::string_view name, int64_t value) const {
  Hasher h("rng-key");
  h.update_digest(key_).update_str(name).update_u64(1).update_i64(value);
  return RngKey(h.finish());
}

void philox4x32_10(const uint32_t key[2], const uint32_t counter[4], uint32_t out[4]) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  uint32_t c0 = counter[0], c1 = counter[1], c2 = counter[2], c3 = counter[3];
  uint32_t k0 = key[0], k1 = key[1];
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = static_cast<uint64_t>(kM0) * c0;
    uint64_t p1 = static_cast<uint64_t>(kM1) * c2;
    uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += kW0;
    k1 += kW1;
  }
  out[0] = c0;
  out[1] = c1;
  out[2] = c2;
  out[3] = c3;
}

Stream::Stream(const RngKey& key) {
  key_[0] = static_cast<uint32_t>(key.digest().lo);
  key_[1] = static_cast<uint32_t>(key.digest().lo >> 32);
  hi_ = key.digest().hi;
}

uint64_t Stream::next_u64() {
  uint64_t block = counter_ >> 1;
  if (block != block_index_) {
    uint32_t ctr[4] = {static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32), static_cast<uint32_t>(hi_),
                       static_cast<uint32_t>(hi_ >> 32)};
    philox4x32_10(key_, ctr, block_);
    block_index_ = block;
  }
  int w = static_cast<int>(counter_ & 1) * 2;
  ++counter_;
  return (static_cast<uint64_t>(block_[w + 1]) << 32) | block_[w];
}

double Stream::uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

double Stream::uniform_open() { return (static_cast<double>(next_u64() >> 11) + 0.5) * 0x1.0p-53; }

uint64_t Stream::below(uint64_t n) {
  VINCI_REQUIRE(n > 0, "below(n) needs n > 0, got " << n);
  unsigned __int128 m = static_cast<unsigned __int128>(next_u64()) * n;
  uint64_t low = static_cast<uint64_t>(m);
  if (low < n) {
    uint64_t threshold = (0 - n) % n;
    while (low < threshold) {
      m = static_cast<unsigned __int128>(next_u64()) * n;
      low = static_cast<uint64_t>(m);
    }
  }
  return static_cast<uint64_t>(m >> 64);
}

double Stream::normal() {
  double u1 = uniform_open();
  double u2 = uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

double Stream::gumbel() { return -std::log(-std::log(uniform_open())); }

}  // namespace vinci
