#include "core/hash.h"

#include <gtest/gtest.h>

namespace vinci {
namespace {

// Expected values come from the Python package xxhash (an independent implementation):
//   xxhash.xxh3_128_hexdigest(b"vinci:" + kind + b"\0" + bytes)
TEST(Hash, TaggedMatchesIndependentXxh3) {
  EXPECT_EQ(hash_tagged("blob", "").hex(), "3a1f8463c8e04bbe1883f9c1323edc8e");
  EXPECT_EQ(hash_tagged("blob", "hello vinci").hex(), "84c3958b99c872e3087c196f519f115c");
  EXPECT_EQ(hash_tagged("kernel-source", "hello vinci").hex(), "ce3fec423021c58d2c97cec3a501870b");
  // xxhash.xxh3_64_intdigest(b"abc", seed=7)
  EXPECT_EQ(hash64("abc", 3, 7), 5260018501835528466ull);
}

TEST(Hash, KindTagSeparatesEqualBytes) {
  EXPECT_NE(hash_tagged("prompt", "x"), hash_tagged("reply", "x"));
  // The separator keeps ("ab","c") and ("a","bc") apart.
  EXPECT_NE(hash_tagged("ab", "c"), hash_tagged("a", "bc"));
}

TEST(Hash, StreamingEqualsOneShot) {
  Hasher h("blob");
  h.update("hello ").update("vinci");
  EXPECT_EQ(h.finish(), hash_tagged("blob", "hello vinci"));
}

TEST(Hash, HexRoundTrip) {
  Digest d = hash_tagged("blob", "round trip");
  Digest back;
  ASSERT_TRUE(Digest::parse_hex(d.hex(), &back));
  EXPECT_EQ(back, d);
  uint8_t bytes[16];
  d.to_bytes(bytes);
  EXPECT_EQ(Digest::from_bytes(bytes), d);
  EXPECT_FALSE(Digest::parse_hex("abc", &back));
  EXPECT_FALSE(Digest::parse_hex(std::string(31, '0') + "g", &back));
}

TEST(Hash, TypedUpdatesAreLengthPrefixed) {
  Digest a = Hasher("k").update_str("ab").update_str("c").finish();
  Digest b = Hasher("k").update_str("a").update_str("bc").finish();
  EXPECT_NE(a, b);
  EXPECT_NE(Hasher("k").update_f64(0.0).finish(), Hasher("k").update_f64(-0.0).finish());
}

}  // namespace
}  // namespace vinci
