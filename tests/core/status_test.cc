#include "core/status.h"

#include <gtest/gtest.h>

namespace vinci {
namespace {

Result<int> parse_positive(int v) {
  if (v <= 0) return invalid_argument("expected a positive number, found " + std::to_string(v));
  return v;
}

Status use(int v, int* out) {
  VINCI_ASSIGN_OR_RETURN(int x, parse_positive(v));
  *out = x * 2;
  return Status();
}

TEST(Status, ResultCarriesValueOrError) {
  int out = 0;
  EXPECT_TRUE(use(3, &out).ok());
  EXPECT_EQ(out, 6);
  Status st = use(-1, &out);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.to_string(), "InvalidArgument: expected a positive number, found -1");
}

TEST(StatusDeathTest, ValueOfFailedResultAborts) {
  Result<int> r = not_found("x");
  EXPECT_DEATH((void)r.value(), "precondition failed");
}

}  // namespace
}  // namespace vinci
