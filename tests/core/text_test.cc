#include "core/text.h"

#include <gtest/gtest.h>

#include <cmath>

namespace vinci {
namespace {

TEST(Text, FormatNumber) {
  EXPECT_EQ(format_number("%.3g", 0.000123456), "0.000123");
  EXPECT_EQ(format_number("%+.1f", -2.25), "-2.2");
  EXPECT_EQ(exact_number(0.1), "0.10000000000000001");
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

}  // namespace
}  // namespace vinci
