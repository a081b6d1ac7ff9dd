#include "harness/config.h"

#include <gtest/gtest.h>

namespace vinci {
namespace {

ConfigSchema test_schema() {
  ConfigSchema s;
  s.add({"run.name", ConfigType::kString, std::string("main"), "Run name.", {}});
  s.add({"run.seed", ConfigType::kInt, int64_t{1}, "Experiment seed.", {}, 0, 1e18});
  s.add({"run.world", ConfigType::kString, std::string("sim"), "World.", {"sim", "live"}});
  s.add({"loop.lr", ConfigType::kFloat, 1e-3, "Learning rate.", {}, 0, 1});
  s.add({"loop.joint", ConfigType::kBool, true, "Train all heads.", {}});
  s.add({"eval.thresholds", ConfigType::kFloatList, std::vector<double>{1.0, 1.2, 1.5, 2.0},
         "fast_p thresholds.", {}});
  s.add({"eval.levels", ConfigType::kIntList, std::vector<int64_t>{1, 2, 3}, "Levels.", {}, 1, 3});
  return s;
}

TEST(Config, DefaultsOverridesAndEffectiveToml) {
  ConfigSchema s = test_schema();
  auto c = Config::parse(s, "[run]\nname = \"abl4\"\n[loop]\nlr = 1\n", "exp.toml",
                         {"run.seed=42", "eval.levels=[2, 3]", "run.world=live"});
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->get_string("run.name"), "abl4");
  EXPECT_EQ(c->get_int("run.seed"), 42);
  EXPECT_EQ(c->get_string("run.world"), "live");
  EXPECT_EQ(c->get_float("loop.lr"), 1.0);
  EXPECT_TRUE(c->get_bool("loop.joint"));
  EXPECT_EQ(c->get_int_list("eval.levels"), (std::vector<int64_t>{2, 3}));
  std::string eff = c->effective_toml();
  EXPECT_EQ(eff,
            "[run]\nname = \"abl4\"\nseed = 42\nworld = \"live\"\n\n[loop]\nlr = 1.0\njoint = true\n\n"
            "[eval]\nthresholds = [1.0, 1.2, 1.5, 2.0]\nlevels = [2, 3]\n");
  // The effective config reads back to itself.
  auto again = Config::parse(s, eff, "effective");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->effective_toml(), eff);
}

TEST(Config, UnknownKeyNamesFileLineAndKey) {
  auto c = Config::parse(test_schema(), "[run]\nname = \"x\"\n\n[loop]\nlearning_rate = 0.1\n",
                         "experiments/x.toml");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(),
            "experiments/x.toml:5:1: unknown key 'loop.learning_rate' (keys of [loop]: lr, joint)");
}

TEST(Config, UnknownSectionAndWrongTypeAndRange) {
  auto a = Config::parse(test_schema(), "[runn]\nname = 1\n", "x.toml");
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("x.toml:1:1: unknown section [runn]"), std::string::npos)
      << a.status().message();
  auto b = Config::parse(test_schema(), "[run]\nseed = \"one\"\n", "x.toml");
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().message(), "x.toml:2:8: key 'run.seed' expects an integer, found a string");
  auto d = Config::parse(test_schema(), "[run]\nworld = \"gpu\"\n", "x.toml");
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().message(),
            "x.toml:2:9: key 'run.world' expects a string (one of \"sim\" \"live\"), found \"gpu\"");
  auto e = Config::parse(test_schema(), "[eval]\nlevels = [1, 4]\n", "x.toml");
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("must be in [1.0, 3.0], found 4.0"), std::string::npos)
      << e.status().message();
  auto f = Config::parse(test_schema(), "[run]\nname = \n", "x.toml");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().message().rfind("x.toml:2:", 0), 0u) << f.status().message();
}

TEST(Config, BadOverridesAreErrors) {
  ConfigSchema s = test_schema();
  EXPECT_EQ(Config::parse(s, "", "x", {"run.seed"}).status().message(),
            "--set run.seed: expected key=value");
  EXPECT_EQ(Config::parse(s, "", "x", {"run.sed=1"}).status().message(),
            "--set run.sed=1: unknown key 'run.sed'");
  auto bad = Config::parse(s, "", "x", {"loop.lr=fast"});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--set loop.lr=fast: value does not parse as a number"),
            std::string::npos)
      << bad.status().message();
}

TEST(Config, ReferenceTomlParsesAndHoldsEveryKey) {
  ConfigSchema s = test_schema();
  std::string ref = s.reference_toml();
  EXPECT_NE(ref.find("# Learning rate.\nlr = 0.001\n"), std::string::npos) << ref;
  EXPECT_NE(ref.find("# one of: sim live\n"), std::string::npos) << ref;
  auto c = Config::parse(s, ref, "reference");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->effective_toml(), Config::parse(s, "", "empty")->effective_toml());
}

}  // namespace
}  // namespace vinci
