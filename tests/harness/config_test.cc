#include "harness/config.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <set>
#include <sstream>

#include "core/atomic_file.h"
#include "gpu/eval_result.h"
#include "harness/experiment.h"

namespace vinci {
namespace {

ConfigSchema test_schema() {
  ConfigSchema s;
  s.add({"run.name", ConfigType::kString, std::string("main"), "Run name.", {}});
  s.add({"run.seed", ConfigType::kInt, int64_t{1}, "Experiment seed.", {}, 0, 1e18});
  s.add({"run.world", ConfigType::kString, std::string("sim"), "World.", {"sim", "live"}});
  s.add({"loop.lr", ConfigType::kFloat, 1e-3, "Learning rate.", {}, 0, 1});
  s.add({"loop.joint", ConfigType::kBool, true, "Train all heads.", {}});
  s.add({"eval.thresholds", ConfigType::kFloatList, std::vector<double>{1.0, 1.2, 1.5, 2.0}, "fast_p thresholds.", {}});
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
  auto c = Config::parse(test_schema(), "[run]\nname = \"x\"\n\n[loop]\nlearning_rate = 0.1\n", "experiments/x.toml");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(),
            "experiments/x.toml:5:1: unknown key 'loop.learning_rate' (keys of [loop]: lr, joint)");
}

TEST(Config, UnknownSectionAndWrongTypeAndRange) {
  auto a = Config::parse(test_schema(), "[runn]\nname = 1\n", "x.toml");
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("x.toml:1:1: unknown section [runn]"), std::string::npos) << a.status().message();
  auto b = Config::parse(test_schema(), "[run]\nseed = \"one\"\n", "x.toml");
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().message(), "x.toml:2:8: key 'run.seed' expects an integer, found a string");
  auto d = Config::parse(test_schema(), "[run]\nworld = \"gpu\"\n", "x.toml");
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().message(),
            "x.toml:2:9: key 'run.world' expects a string (one of \"sim\" \"live\"), found \"gpu\"");
  auto e = Config::parse(test_schema(), "[eval]\nlevels = [1, 4]\n", "x.toml");
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("must be in [1.0, 3.0], found 4.0"), std::string::npos) << e.status().message();
  auto f = Config::parse(test_schema(), "[run]\nname = \n", "x.toml");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().message().rfind("x.toml:2:", 0), 0u) << f.status().message();
}

TEST(Config, BadOverridesAreErrors) {
  ConfigSchema s = test_schema();
  EXPECT_EQ(Config::parse(s, "", "x", {"run.seed"}).status().message(), "--set run.seed: expected key=value");
  EXPECT_EQ(Config::parse(s, "", "x", {"run.sed=1"}).status().message(), "--set run.sed=1: unknown key 'run.sed'");
  auto bad = Config::parse(s, "", "x", {"loop.lr=fast"});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--set loop.lr=fast: value does not parse as a number"), std::string::npos)
      << bad.status().message();
}

// nan passes every range comparison; it is refused wherever a number is read, in files, lists and
// --set alike. (A key without a declared range takes any other number.)
TEST(Config, NanIsNeverANumber) {
  ConfigSchema s = test_schema();
  s.add({"reward.base", ConfigType::kFloat, 0.5, "No range.", {}});
  auto a = Config::parse(s, "[reward]\nbase = nan\n", "x.toml");
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().message(), "x.toml:2:8: key 'reward.base' expects a number, found nan");
  auto b = Config::parse(s, "[eval]\nthresholds = [1.0, -nan]\n", "x.toml");
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("key 'eval.thresholds' expects a number, found nan"), std::string::npos)
      << b.status().message();
  auto c = Config::parse(s, "", "x", {"loop.lr=nan"});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(), "--set loop.lr=nan: key 'loop.lr' expects a number, found nan");
  EXPECT_TRUE(Config::parse(s, "[reward]\nbase = -3.5\n", "x.toml").ok());
}

// A config file that sets nothing would run every default; it is refused, naming the file.
TEST(Config, AFileThatSetsNothingIsRefused) {
  std::string dir = testing::TempDir();
  for (const char* text : {"", "\n  \n", "# only a comment\n"}) {
    std::string path = dir + "/vinci_empty_config.toml";
    ASSERT_TRUE(write_file_atomic(path, text).ok());
    auto c = Config::load(test_schema(), path);
    ASSERT_FALSE(c.ok());
    EXPECT_EQ(c.status().message().rfind("experiment config " + path + " sets nothing: expected at least one key", 0),
              0u)
        << c.status().message();
  }
  // Text that is not a file (a recorded config, the defaults) is not a file that sets nothing.
  EXPECT_TRUE(Config::parse(test_schema(), "", "defaults").ok());
}

// run.name is one folder inside run.out; run.out is not empty.
TEST(ExperimentConfigs, RunNameAndRootStayInsideTheRunsRoot) {
  for (const char* name : {"../escape", "objects", ".", "..", "a/b", ""}) {
    auto e = experiment_from_text(std::string("[run]\nname = \"") + name + "\"\n", "x.toml");
    ASSERT_FALSE(e.ok()) << name;
    EXPECT_EQ(e.status().message().rfind("x.toml: key 'run.name': expected a folder name inside the runs root", 0), 0u)
        << e.status().message();
  }
  auto out = experiment_from_text("[run]\nout = \"\"\n", "x.toml");
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().message(), "x.toml: key 'run.out': expected a folder (the runs root), found an empty string");
  EXPECT_TRUE(experiment_from_text("[run]\nname = \"a.b-c_d\"\nout = \"/\"\n", "x.toml").ok());
}

// policy.languages: cuda by default and then absent from the recorded config (runs from before the
// key keep their bytes); triton accepted, anything else refused naming the key.
TEST(ExperimentConfigs, PolicyLanguagesAreCheckedAndRecordedOnlyWhenSet) {
  auto d = experiment_from_text("[run]\nname = \"a\"\n", "x.toml");
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d->languages, (std::vector<std::string>{"cuda"}));
  EXPECT_EQ(d->effective_toml.find("languages"), std::string::npos) << d->effective_toml;
  auto t = experiment_from_text("[policy]\nlanguages = [\"cuda\", \"triton\"]\n", "x.toml");
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(t->languages, (std::vector<std::string>{"cuda", "triton"}));
  EXPECT_NE(t->effective_toml.find("[policy]\nlanguages = [\"cuda\", \"triton\"]"), std::string::npos)
      << t->effective_toml;
  auto bad = experiment_from_text("[policy]\nlanguages = [\"cuda\", \"python\"]\n", "x.toml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("policy.languages"), std::string::npos) << bad.status().message();
  auto none = experiment_from_text("[policy]\nlanguages = []\n", "x.toml");
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("expected at least one of cuda, triton"), std::string::npos)
      << none.status().message();
}

// device.timing chooses the timing rule: recorded only when set (fixed runs keep their configs
// and digests), checked, and carried into every request the run makes (set_timing).
TEST(ExperimentConfigs, AdaptiveTimingIsCheckedAndRecordedOnlyWhenSet) {
  auto d = experiment_from_text("[run]\nname = \"a\"\n", "x.toml");
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_FALSE(d->timing_adaptive);
  EXPECT_EQ(d->effective_toml.find("timing ="), std::string::npos) << d->effective_toml;
  EXPECT_EQ(d->effective_toml.find("timing_width"), std::string::npos) << d->effective_toml;
  EvalRequest fixed;
  fixed.samples = 40;
  set_timing(*d, &fixed);
  EXPECT_FALSE(fixed.adaptive);
  auto a =
      experiment_from_text("[device]\ntiming = \"adaptive\"\ntiming_width = 0.02\ntiming_samples = 200\n", "x.toml");
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  EXPECT_NE(a->effective_toml.find("timing = \"adaptive\""), std::string::npos) << a->effective_toml;
  EvalRequest req;
  req.samples = a->timing_samples;
  set_timing(*a, &req);
  EXPECT_TRUE(req.adaptive);
  EXPECT_EQ(req.adaptive_rule.rel_width, 0.02);
  EXPECT_EQ(req.adaptive_rule.max_samples, 200);
  auto bad = experiment_from_text("[device]\ntiming = \"sometimes\"\n", "x.toml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("device.timing"), std::string::npos) << bad.status().message();
  auto wide = experiment_from_text("[device]\ntiming_width = 1.5\n", "x.toml");
  ASSERT_FALSE(wide.ok());
  EXPECT_NE(wide.status().message().find("device.timing_width"), std::string::npos) << wide.status().message();
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

// A folder of config files for the `base` tests.
class ConfigBase : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/vinci_config_XXXXXX";
    dir_ = mkdtemp(tmpl);
  }
  void TearDown() override { std::system(("rm -rf '" + dir_ + "'").c_str()); }
  std::string write(const std::string& name, const std::string& text) {
    std::string path = dir_ + "/" + name;
    std::system(("mkdir -p \"$(dirname '" + path + "')\"").c_str());
    EXPECT_TRUE(write_file_atomic(path, text).ok());
    return path;
  }
  std::string dir_;
};

TEST_F(ConfigBase, KeysAreLaidOverTheBaseKeyByKey) {
  ConfigSchema s = test_schema();
  write("main.toml",
        "[run]\nname = \"main\"\nseed = 5\n[loop]\nlr = 0.5\njoint = true\n"
        "[eval]\nthresholds = [1.0, 2.0]\n");
  std::string abl = write("abl.toml",
                          "base = \"main.toml\"\n[run]\nname = \"abl\"\n[loop]\njoint = false\n"
                          "[eval]\nthresholds = [3.0]\n");
  auto c = Config::load(s, abl);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->get_string("run.name"), "abl");                                  // replaced
  EXPECT_EQ(c->get_int("run.seed"), 5);                                         // same table, kept from the base
  EXPECT_EQ(c->get_float("loop.lr"), 0.5);                                      // kept
  EXPECT_FALSE(c->get_bool("loop.joint"));                                      // replaced
  EXPECT_EQ(c->get_float_list("eval.thresholds"), (std::vector<double>{3.0}));  // arrays replace
  EXPECT_EQ(c->get_string("run.world"), "sim");                                 // neither sets it: the default
  // The effective config is the merged one, with no trace of `base`.
  EXPECT_EQ(c->effective_toml().find("base"), std::string::npos) << c->effective_toml();
  EXPECT_NE(c->effective_toml().find("seed = 5\n"), std::string::npos);
}

TEST_F(ConfigBase, ChainsResolveEachBaseAgainstItsOwnFolder) {
  ConfigSchema s = test_schema();
  write("root.toml", "[loop]\nlr = 0.25\njoint = false\n[run]\nseed = 3\n");
  write("sub/mid.toml", "base = \"../root.toml\"\n[loop]\nlr = 0.75\n");
  std::string top = write("top.toml", "base = \"sub/mid.toml\"\n[run]\nseed = 9\n");
  auto c = Config::load(s, top);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->get_float("loop.lr"), 0.75);
  EXPECT_FALSE(c->get_bool("loop.joint"));
  EXPECT_EQ(c->get_int("run.seed"), 9);
}

TEST_F(ConfigBase, ACycleIsAnErrorNamingFileAndKey) {
  ConfigSchema s = test_schema();
  std::string a = write("a.toml", "base = \"b.toml\"\n");
  std::string b = write("b.toml", "[run]\nseed = 2\nbase = \"a.toml\"\n");
  auto c = Config::load(s, a);
  ASSERT_FALSE(c.ok());
  // base inside [run] is a key of [run], not a base: an unknown key.
  EXPECT_NE(c.status().message().find("unknown key 'run.base'"), std::string::npos) << c.status().message();
  write("b.toml", "base = \"a.toml\"\n");
  c = Config::load(s, a);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(),
            b + ":1:8: key 'base': \"a.toml\" makes a cycle (" + a + " -> " + b + " -> " + a + ")");
  std::string self = write("self.toml", "base = \"./self.toml\"\n");
  EXPECT_NE(Config::load(s, self).status().message().find("makes a cycle"), std::string::npos);
}

TEST_F(ConfigBase, AMissingOrMistypedBaseIsAnError) {
  ConfigSchema s = test_schema();
  std::string a = write("a.toml", "base = \"nope.toml\"\n");
  auto c = Config::load(s, a);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(), a + ":1:8: key 'base': base config " + dir_ + "/nope.toml does not exist");
  std::string n = write("n.toml", "base = 1\n");
  EXPECT_EQ(Config::load(s, n).status().message(),
            n + ":1:8: key 'base' expects a string (a config file, relative to " + n + "), found an integer");
  // An error inside a base names the base's file.
  write("bad.toml", "[loop]\nrate = 1\n");
  std::string u = write("u.toml", "base = \"bad.toml\"\n");
  EXPECT_EQ(Config::load(s, u).status().message().rfind(dir_ + "/bad.toml:2:1: unknown key 'loop.rate'", 0), 0u)
      << Config::load(s, u).status().message();
}

TEST_F(ConfigBase, SetOverridesAnInheritedKey) {
  ConfigSchema s = test_schema();
  write("main.toml", "[loop]\nlr = 0.5\njoint = false\n");
  std::string abl = write("abl.toml", "base = \"main.toml\"\n[run]\nname = \"abl\"\n");
  auto c = Config::load(s, abl, {"loop.lr=0.125"});
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->get_float("loop.lr"), 0.125);
  EXPECT_FALSE(c->get_bool("loop.joint"));
  EXPECT_EQ(c->get_string("run.name"), "abl");
}

// Every ablation of the suite differs from main.toml in its one factor and nothing else.
TEST(ExperimentConfigs, EachAblationDiffersFromMainInExactlyItsFactor) {
  const std::string dir = std::string(VINCI_SOURCE_DIR) + "/experiments/";
  auto main = load_experiment(dir + "main.toml", {});
  ASSERT_TRUE(main.ok()) << main.status().to_string();
  auto m = effective_settings(main->effective_toml);
  const std::map<std::string, std::set<std::string>> factors = {
      {"drkernel_baseline", {"loop.schemes", "loop.rollouts", "selection.mode", "summary.enabled", "library.seed"}},
      {"abl1_noskill", {"eval.inject_skills"}},
      {"abl3_nojoint", {"backbone.train_selection", "backbone.train_summary"}},
      {"abl4_bm25only", {"selection.mode"}},
      {"main_nocoldstart", {"coldstart.enabled"}},
      {"main_coldstart_nodiversity", {"coldstart.diversity"}},
  };
  for (const auto& [name, factor] : factors) {
    auto e = load_experiment(dir + name + ".toml", {});
    ASSERT_TRUE(e.ok()) << e.status().to_string();
    EXPECT_EQ(e->name, name);
    auto a = effective_settings(e->effective_toml);
    ASSERT_EQ(a.size(), m.size()) << name;
    std::set<std::string> differ;
    for (const auto& [k, v] : a) {
      if (m.at(k) != v && k != "run.name") differ.insert(k);
    }
    EXPECT_EQ(differ, factor) << name;
  }
}

}  // namespace
}  // namespace vinci
