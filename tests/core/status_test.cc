#include "core/status.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/enum_names.h"
#include "core/json_fields.h"

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
// A closed setting's names: one table, its parse naming every choice, and JSON fields read from
// outside vinci, which read a field of the wrong type as absent.
enum class Shade { kLight, kDark, kNone };
constexpr EnumNames<Shade, 3> kShades = {"shade", {"light", "dark", "none"}};

TEST(EnumNames, NamesParsesAndListsTheChoices) {
  EXPECT_STREQ(kShades.name(Shade::kDark), "dark");
  for (Shade s : {Shade::kLight, Shade::kDark, Shade::kNone}) EXPECT_EQ(*kShades.parse(kShades.name(s)), s);
  Result<Shade> bad = kShades.parse("Dark");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(), "shade: expected light, dark or none, found \"Dark\"");
  EXPECT_FALSE(kShades.parse("").ok());
  EXPECT_EQ(kShades.choices(), (std::vector<std::string>{"light", "dark", "none"}));
}

TEST(JsonFields, AFieldOfTheWrongTypeReadsAsAbsent) {
  nlohmann::json j = nlohmann::json::parse(R"({"s":"x","o":{"a":1},"i":3,"f":2.5,"l":[1,"y",2]})");
  EXPECT_EQ(text_field(j, "s"), "x");
  EXPECT_EQ(text_field(j, "o"), "");
  EXPECT_EQ(text_field(j, "missing"), "");
  EXPECT_EQ(int_field(j, "i"), 3);
  EXPECT_EQ(int_field(j, "f"), 0);
  EXPECT_EQ(number_field(j, "i"), 3.0);
  EXPECT_EQ(numbers_field(j, "l"), (std::vector<double>{1, 2}));
  EXPECT_EQ(texts_field(j, "l"), (std::vector<std::string>{"y"}));
  // Not an object at all: every field is absent.
  for (const char* text : {"[1,2]", "\"s\"", "7", "null"}) {
    nlohmann::json v = nlohmann::json::parse(text);
    EXPECT_EQ(text_field(v, "s"), "") << text;
    EXPECT_EQ(int_field(v, "i"), 0) << text;
    EXPECT_TRUE(texts_field(v, "l").empty()) << text;
  }
}

}  // namespace
}  // namespace vinci
