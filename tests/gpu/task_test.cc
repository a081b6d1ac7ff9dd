// The task suite as data: loading, validation errors, symbolic shapes, expressions.
#include "gpu/task.h"

#include <gtest/gtest.h>

#include "gpu/expr.h"
#include "gpu/shapes.h"

namespace vinci {
namespace {

TaskSuite load_suite() {
  Result<TaskSuite> suite = load_task_suite(default_task_dir());
  EXPECT_TRUE(suite.ok()) << suite.status().to_string();
  return suite.ok() ? *suite : TaskSuite();
}

TEST(TaskSuite, HasTheLevelsIssueThreeAsksFor) {
  TaskSuite suite = load_suite();
  EXPECT_GE(suite.tasks.size(), 40u);
  EXPECT_GE(suite.at_level(1).size(), 20u);
  EXPECT_GE(suite.at_level(2).size(), 15u);
  EXPECT_GE(suite.at_level(3).size(), 5u);
  for (const char* family : {"gemm", "elementwise", "softmax", "norm", "reduction", "pooling",
                             "conv", "loss", "scan"}) {
    bool found = false;
    for (const Task* t : suite.at_level(1)) found |= t->family == family;
    EXPECT_TRUE(found) << "no level-1 task of family " << family;
  }
  for (const char* name : {"mlp", "lenet5", "transformer_encoder_layer", "causal_self_attention",
                           "resnet_basic_block"}) {
    bool found = false;
    for (const Task* t : suite.at_level(3)) found |= t->name == name;
    EXPECT_TRUE(found) << "no level-3 task " << name;
  }
}

TEST(TaskSuite, DegenerateKernelBenchTasksAreLeftOut) {
  TaskSuite suite = load_suite();
  for (const char* id : {"L2_014", "L2_018"}) EXPECT_EQ(suite.find(id), nullptr) << id;
}

TEST(TaskSuite, IdsAreUniqueAndSorted) {
  TaskSuite suite = load_suite();
  for (size_t i = 1; i < suite.tasks.size(); ++i) {
    const Task& a = suite.tasks[i - 1];
    const Task& b = suite.tasks[i];
    EXPECT_TRUE(a.level < b.level || (a.level == b.level && a.id < b.id)) << a.id << " " << b.id;
  }
}

const char* kGoodTask = R"(
[[task]]
id = "T_1"
level = 1
name = "relu"
family = "elementwise"
description = "relu"
sizes.full = { N = 8 }
sizes.small = { N = 4 }
inputs = [{ name = "x", shape = ["N"] }]
ops = [{ op = "relu", in = ["x"], out = "y" }]
output = "y"
)";

TEST(TaskFile, ParsesAMinimalTask) {
  Result<std::vector<Task>> r = parse_task_file("t.toml", kGoodTask);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(r->size(), 1u);
  EXPECT_EQ((*r)[0].id, "T_1");
  EXPECT_EQ((*r)[0].size_map(SizeName::kSmall).at("N"), 4);
  EXPECT_DOUBLE_EQ((*r)[0].atol, 1e-2);
}

TEST(TaskFile, KernelBenchGlobalsMayBeTuplesOfSizes) {
  std::string text = std::string(kGoodTask) +
                     "kernelbench = { problem = \"level2/82_X.py\", globals = { n = \"N\", bias_shape = [\"N\", 1, 1] } }\n";
  Result<std::vector<Task>> r = parse_task_file("t.toml", text);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const Task& t = (*r)[0];
  EXPECT_EQ(t.kernelbench_globals.at("n"), "N");
  EXPECT_EQ(t.kernelbench_tuple_globals.at("bias_shape"), (std::vector<std::string>{"N", "1", "1"}));
  EXPECT_EQ(t.kernelbench_globals.count("bias_shape"), 0u);
  Result<std::vector<Task>> bad = parse_task_file("bad.toml", std::string(kGoodTask) +
      "kernelbench = { problem = \"level2/82_X.py\", globals = { bias_shape = [\"N\", 1.5] } }\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("kernelbench.globals.bias_shape"), std::string::npos) << bad.status().message();
}

void expect_error(const std::string& text, const std::string& needle1, const std::string& needle2) {
  Result<std::vector<Task>> r = parse_task_file("bad.toml", text);
  ASSERT_FALSE(r.ok()) << "accepted: " << text;
  const std::string& m = r.status().message();
  EXPECT_NE(m.find("bad.toml"), std::string::npos) << m;
  EXPECT_NE(m.find(needle1), std::string::npos) << m;
  EXPECT_NE(m.find(needle2), std::string::npos) << m;
}

std::string replace(std::string s, const std::string& from, const std::string& to) {
  size_t p = s.find(from);
  EXPECT_NE(p, std::string::npos) << from;
  return s.replace(p, from.size(), to);
}

TEST(TaskFile, ErrorsNameFileKeyAndWhatWasExpected) {
  expect_error(replace(kGoodTask, "op = \"relu\"", "op = \"frobnicate\""), "frobnicate", "expected one of");
  expect_error(replace(kGoodTask, "in = [\"x\"]", "in = [\"z\"]"), "key 'in'", "'z'");
  expect_error(replace(kGoodTask, "level = 1", "level = 7"), "key 'level'", "expected 1, 2 or 3");
  expect_error(replace(kGoodTask, "sizes.small = { N = 4 }", "sizes.small = { M = 4 }"), "size small",
               "unknown name 'N'");
  expect_error(replace(kGoodTask, "output = \"y\"", "output = \"q\""), "key 'output'", "'q'");
  expect_error(replace(kGoodTask, "ops = [{ op = \"relu\", in = [\"x\"], out = \"y\" }]",
                       "ops = [{ op = \"linear\", in = [\"x\"], out = \"y\", module = \"fc\" }]"),
               "key 'module'", "linear");
  expect_error("[[task]]\nid = 3\n", "key 'id'", "expected a string");
  expect_error("[[task]\n", "bad.toml:", "");
}

TEST(Expr, EvaluatesArithmeticFunctionsAndBuffers) {
  ExprEnv env;
  env.symbols = {{"N", 100}, {"M", 7}};
  env.buffer_shape = [](const std::string& b) -> Result<std::vector<int64_t>> {
    if (b == "x") return std::vector<int64_t>{4, 5, 6};
    return not_found("no buffer " + b);
  };
  EXPECT_EQ(*eval_expr("N*M + 3", env), 703);
  EXPECT_EQ(*eval_expr("ceil_div(N, 32)", env), 4);
  EXPECT_EQ(*eval_expr("(N - 1) / M % 5", env), 4);
  EXPECT_EQ(*eval_expr("numel(x) / dim(x, -1) + rank(x)", env), 23);
  EXPECT_EQ(*eval_expr("min(N, M) * max(2, -3)", env), 14);
  EXPECT_FALSE(eval_expr("N / 0", env).ok());
  EXPECT_FALSE(eval_expr("Q + 1", env).ok());
  EXPECT_FALSE(eval_expr("dim(x, 3)", env).ok());
  EXPECT_FALSE(eval_expr("numel(y)", env).ok());
  EXPECT_FALSE(check_expr_syntax("N +").ok());
  EXPECT_EQ(expr_mul("1", "N"), "N");
  EXPECT_EQ(expr_mul("3", "4"), "12");
  EXPECT_EQ(*eval_expr(expr_ceil_div(expr_add("N", "M"), "8"), env), 14);
}

TEST(Shapes, ConvAndPoolRulesMatchTheirFormulas) {
  TaskSuite suite = load_suite();
  const Task* lenet = suite.find("L3_004");
  ASSERT_NE(lenet, nullptr);
  Result<ShapeMap> shapes = infer_shapes(*lenet);
  ASSERT_TRUE(shapes.ok()) << shapes.status().to_string();
  Result<std::vector<int64_t>> f = eval_shape(shapes->at("f"), lenet->size_map(SizeName::kFull));
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(*f, (std::vector<int64_t>{4096, 400}));  // 16 x 5 x 5 after two conv+pool stages
}

}  // namespace
}  // namespace vinci
