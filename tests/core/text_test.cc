#include "core/text.h"

#include <cstdlib>

#include <gtest/gtest.h>

#include <cmath>

namespace vinci {
namespace {

TEST(Text, FormatNumber) {
  EXPECT_EQ(format_number("%.3g", 0.000123456), "0.000123");
  EXPECT_EQ(format_number("%+.1f", -2.25), "-2.2");
  EXPECT_EQ(exact_number(0.1), "0.10000000000000001");
  EXPECT_EQ(shortest_exact_number(0.99), "0.99");
  EXPECT_EQ(shortest_exact_number(0.01), "0.01");
  EXPECT_EQ(shortest_exact_number(1.0 / 3), "0.3333333333333333");
  EXPECT_EQ(shortest_exact_number(0.1 + 0.2), "0.30000000000000004");  // needs all 17
  EXPECT_EQ(shortest_exact_number(-2.5e-7), "-2.5e-07");
  for (double v : {0.99, 1.0 / 3, 0.1 + 0.2, 123456.789, 5e-324, 1.7976931348623157e308})
    EXPECT_EQ(std::strtod(shortest_exact_number(v).c_str(), nullptr), v) << v;
}

// A verdict line never prints a number that reads as the other side of its threshold.
TEST(Text, NumberBesideItsThreshold) {
  EXPECT_EQ(number_beside(0.99963, 1), "0.9996");
  EXPECT_EQ(number_beside(1.00002, 1), "1");  // passes, and reads as passing
  EXPECT_EQ(number_beside(1, 1), "1");
  EXPECT_EQ(number_beside(0.255, 1.2), "0.255");
  EXPECT_EQ(number_beside(1.19999999, 1.2), "1.19999999");
  EXPECT_EQ(number_beside(3.8412, 2), "3.84");
  EXPECT_EQ(number_beside(std::nextafter(2.0, 0.0), 2), "1.9999999999999998");
}

TEST(Text, HexRoundTripsAndRejectsDamage) {
  std::string all;
  for (int c = 0; c < 256; ++c) all.push_back(static_cast<char>(c));
  std::string hex = hex_encode(all);
  EXPECT_EQ(hex.substr(0, 6), "000102");
  EXPECT_EQ(hex.substr(hex.size() - 4), "feff");
  std::string back;
  ASSERT_TRUE(hex_decode(hex, &back));
  EXPECT_EQ(back, all);
  EXPECT_TRUE(hex_decode("ABcd", &back));
  EXPECT_EQ(back, "\xab\xcd");
  EXPECT_FALSE(hex_decode("abc", &back));
  EXPECT_FALSE(hex_decode("zz", &back));
  EXPECT_EQ(back, "\xab\xcd");  // untouched on failure
}

}  // namespace
}  // namespace vinci
