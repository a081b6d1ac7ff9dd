#include "core/bytes.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace vinci {
namespace {

// Expected bytes are Python's struct.pack with "<" (little-endian, standard sizes).
TEST(Bytes, WritesLittleEndianAsStructPackDoes) {
  ByteWriter w;
  w.u8(0xab);
  w.u16(0x0102);
  w.u32(0x01020304u);
  w.u64(0x0102030405060708ull);
  w.i32(-2);
  w.i64(-1);
  w.f32(1.5f);  // struct.pack("<f", 1.5) == b"\x00\x00\xc0\x3f"
  w.f64(-0.1);  // struct.pack("<d", -0.1) == b"\x9a\x99\x99\x99\x99\x99\xb9\xbf"
  w.str("ab");
  const std::string want = std::string("\xab", 1) + std::string("\x02\x01", 2) + std::string("\x04\x03\x02\x01", 4) +
                           std::string("\x08\x07\x06\x05\x04\x03\x02\x01", 8) + std::string("\xfe\xff\xff\xff", 4) +
                           std::string(8, '\xff') + std::string("\x00\x00\xc0\x3f", 4) +
                           std::string("\x9a\x99\x99\x99\x99\x99\xb9\xbf", 8) +
                           std::string(
                               "\x02\x00\x00\x00"
                               "ab",
                               6);
  EXPECT_EQ(w.bytes(), want);
}

TEST(Bytes, ReadsBackWhatWasWritten) {
  ByteWriter w;
  w.u16(65535);
  w.u32(0xdeadbeefu);
  w.u64(std::numeric_limits<uint64_t>::max());
  w.i32(std::numeric_limits<int32_t>::min());
  w.i64(std::numeric_limits<int64_t>::min());
  w.f32(-std::numeric_limits<float>::infinity());
  const float fs[3] = {0.25f, -3.0f, std::numeric_limits<float>::denorm_min()};
  w.f32s(fs, 3);
  w.str(std::string("x\0y", 3));
  std::string bytes = w.take();

  ByteReader r(bytes);
  uint16_t a;
  uint32_t b;
  uint64_t c;
  int32_t d;
  int64_t e;
  float f, g[3];
  std::string s;
  ASSERT_TRUE(r.u16(&a) && r.u32(&b) && r.u64(&c) && r.i32(&d) && r.i64(&e) && r.f32(&f) && r.f32s(g, 3) && r.str(&s));
  EXPECT_EQ(a, 65535);
  EXPECT_EQ(b, 0xdeadbeefu);
  EXPECT_EQ(c, std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(d, std::numeric_limits<int32_t>::min());
  EXPECT_EQ(e, std::numeric_limits<int64_t>::min());
  EXPECT_TRUE(std::isinf(f) && f < 0);
  EXPECT_EQ(g[0], 0.25f);
  EXPECT_EQ(g[1], -3.0f);
  EXPECT_EQ(g[2], std::numeric_limits<float>::denorm_min());
  EXPECT_EQ(s, std::string("x\0y", 3));
  EXPECT_TRUE(r.at_end());
}

TEST(Bytes, AShortInputIsRefusedWithoutMovingOrReadingPastTheEnd) {
  // A string whose length says 5 but only 2 bytes follow, then nothing.
  std::string bytes = std::string(
      "\x05\x00\x00\x00"
      "ab",
      6);
  ByteReader r(std::string_view(bytes).substr(0, 6));
  std::string s = "unchanged";
  EXPECT_FALSE(r.str(&s));
  EXPECT_EQ(s, "unchanged");
  EXPECT_EQ(r.offset(), 0u);
  uint64_t big;
  EXPECT_FALSE(r.u64(&big));
  EXPECT_EQ(r.offset(), 0u);
  uint32_t n;
  ASSERT_TRUE(r.u32(&n));
  EXPECT_EQ(n, 5u);
  float f[1];
  EXPECT_FALSE(r.f32s(f, 1));  // 2 bytes left
  EXPECT_FALSE(r.skip(3));
  EXPECT_TRUE(r.skip(2));
  EXPECT_TRUE(r.at_end());
  uint8_t u;
  EXPECT_FALSE(r.u8(&u));
}

TEST(Bytes, LoadAndStoreAgreeWithTheWriter) {
  unsigned char b[8];
  store_le(b, 0x1122334455667788ull, 8);
  EXPECT_EQ(b[0], 0x88);
  EXPECT_EQ(b[7], 0x11);
  EXPECT_EQ(load_u64(b), 0x1122334455667788ull);
  EXPECT_EQ(load_u32(b), 0x55667788u);
  EXPECT_EQ(load_le(b, 3), 0x667788u);
}

}  // namespace
}  // namespace vinci
