// Keyed, counter-based randomness.
//
// Every random draw in vinci comes from a Stream whose key names what the draw is for:
//
//   RngKey key = RngKey::root(seed).with("step", 3).with("task", "L1_019").with("purpose", "policy");
//   Stream s(key);
//   double u = s.uniform();
//
// A key is XXH3-128 over its parent and the (name, value) pair, so the order in which work runs,
// or the number of threads, never changes a draw. The engine is Philox4x32-10 (Salmon et al.,
// "Parallel random numbers: as easy as 1, 2, 3", SC'11): a fully specified function of (key,
// counter), so the same key gives the same bytes on every machine and standard library.
// Distributions are written here on top of it, never with std::*_distribution, whose output differs
// between standard libraries.
#ifndef VINCI_CORE_RNG_H_
#define VINCI_CORE_RNG_H_

#include <cstdint>
#include <string_view>

#include "core/hash.h"

namespace vinci {

class RngKey {
 public:
  static RngKey root(uint64_t seed);
  RngKey with(std::string_view name, std::string_view value) const;
  RngKey with(std::string_view name, int64_t value) const;
  const Digest& digest() const { return key_; }

 private:
  explicit RngKey(Digest key) : key_(key) {}
  Digest key_;
};

// One Philox4x32-10 block: the 4 output words for (key, counter).
void philox4x32_10(const uint32_t key[2], const uint32_t counter[4], uint32_t out[4]);

// A stream of draws under one key. Draw i is a pure function of (key, i).
class Stream {
 public:
  explicit Stream(const RngKey& key);

  uint64_t next_u64();
  // Uniform on [0, 1) with 53 random bits.
  double uniform();
  // Uniform on (0, 1): never 0, for logarithms.
  double uniform_open();
  // Uniform integer in [0, n). REQUIRES: n > 0. Unbiased (Lemire's multiply with rejection).
  uint64_t below(uint64_t n);
  // Standard normal by Box-Muller (the cosine branch only, so each call uses two fresh draws).
  double normal();
  // Standard Gumbel: -log(-log(U)).
  double gumbel();

  uint64_t draws() const { return counter_; }

 private:
  uint32_t key_[2];
  uint64_t hi_;  // upper 64 bits of the Philox counter, from the key
  uint64_t counter_ = 0;
  uint32_t block_[4];
  uint64_t block_index_ = ~0ull;
};

}  // namespace vinci

#endif  // VINCI_CORE_RNG_H_
