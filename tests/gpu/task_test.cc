// The task suite as data: loading, validation errors, symbolic shapes, expressions.
#include "gpu/task.h"

#include <cstdio>
#include <map>
#include <set>

#include <gtest/gtest.h>

#include "gpu/expr.h"
#include "gpu/ops.h"
#include "gpu/shapes.h"

namespace vinci {
namespace {

TaskSuite load_suite() {
  Result<TaskSuite> suite = load_task_suite(default_task_dir());
  EXPECT_TRUE(suite.ok()) << suite.status().to_string();
  return suite.ok() ? *suite : TaskSuite();
}

// The op vocabulary as values: every op of the table has its code, and the code its name; the
// predicates the dispatch uses agree with what the names say (the way the code read them before).
TEST(OpCode, EveryOpRoundTripsAndThePredicatesMatchTheNames) {
  std::set<std::string> names;
  for (size_t i = 0; i < kOpCount; ++i) {
    const OpCode code = static_cast<OpCode>(i);
    const std::string name = op_name(code);
    EXPECT_TRUE(names.insert(name).second) << name;
    ASSERT_NE(find_op(name), nullptr) << name;
    EXPECT_EQ(find_op(name)->code, code) << name;
    EXPECT_EQ(op_code(name), code) << name;
    EXPECT_EQ(op_is_conv(code), name.rfind("conv", 0) == 0) << name;
    EXPECT_EQ(op_is_transposed_conv(code), name.rfind("conv_transpose", 0) == 0) << name;
    EXPECT_EQ(op_is_pool(code), name.find("pool") != std::string::npos) << name;
    const bool windowed = op_is_conv(code) || (op_is_pool(code) && name.rfind("adaptive", 0) != 0);
    EXPECT_EQ(op_spatial_rank(code), windowed ? name[name.size() - 2] - '0' : 0) << name;
  }
  EXPECT_EQ(names.size(), kOpCount);
  EXPECT_EQ(op_code("no_such_op"), OpCode::kUnknown);
  EXPECT_EQ(op_code("Relu"), OpCode::kUnknown);
  OpSpec spec;
  spec.op = "layer_norm";
  EXPECT_EQ(spec.code(), OpCode::kLayerNorm);
}

TEST(TaskSuite, HasThreeLevelsAndEveryOpFamily) {
  TaskSuite suite = load_suite();
  EXPECT_GE(suite.tasks.size(), 40u);
  EXPECT_GE(suite.at_level(1).size(), 20u);
  EXPECT_GE(suite.at_level(2).size(), 15u);
  EXPECT_GE(suite.at_level(3).size(), 5u);
  for (const char* family :
       {"gemm", "elementwise", "softmax", "norm", "reduction", "pooling", "conv", "loss", "scan"}) {
    bool found = false;
    for (const Task* t : suite.at_level(1)) found |= std::string(t->family_name()) == family;
    EXPECT_TRUE(found) << "no level-1 task of family " << family;
  }
  for (const char* name :
       {"mlp", "lenet5", "transformer_encoder_layer", "causal_self_attention", "resnet_basic_block"}) {
    bool found = false;
    for (const Task* t : suite.at_level(3)) found |= t->name == name;
    EXPECT_TRUE(found) << "no level-3 task " << name;
  }
}

// Every KernelBench v0.1 problem is a task, numbered as KernelBench numbers it. vinci's own tasks
// are marked as such.
TEST(TaskSuite, HoldsEveryKernelBenchProblem) {
  TaskSuite suite = load_suite();
  std::map<int, std::set<int>> numbers;
  for (const Task& t : suite.tasks) {
    if (!t.is_kernelbench()) {
      EXPECT_STREQ(t.set_name(), "vinci") << t.id;
      continue;
    }
    int number = std::stoi(t.id.substr(3));
    EXPECT_TRUE(numbers[t.level].insert(number).second) << t.id;
    char prefix[16];
    std::snprintf(prefix, sizeof prefix, "level%d/%d_", t.level, number);
    EXPECT_EQ(t.kernelbench_problem.rfind(prefix, 0), 0u) << t.id << " names " << t.kernelbench_problem;
  }
  const std::map<int, int> expected = {{1, 100}, {2, 100}, {3, 50}};
  for (const auto& [level, count] : expected) {
    for (int n = 1; n <= count; ++n) {
      EXPECT_TRUE(numbers[level].count(n)) << "KernelBench level " << level << " problem " << n << " is not a task";
    }
  }
  EXPECT_EQ(numbers[1].size(), 100u);
  EXPECT_EQ(numbers[2].size(), 100u);
  EXPECT_EQ(numbers[3].size(), 50u);
  const Task* own = suite.find("L3_101");
  ASSERT_NE(own, nullptr);
  EXPECT_FALSE(own->is_kernelbench());
}

TEST(TaskSuite, DegenerateKernelBenchTasksAreFlagged) {
  TaskSuite suite = load_suite();
  for (const char* id : {"L2_014", "L2_018", "L2_023"}) {
    const Task* t = suite.find(id);
    ASSERT_NE(t, nullptr) << id;
    EXPECT_FALSE(t->flag.empty()) << id;
    EXPECT_STREQ(t->set_name(), "kernelbench-flagged") << id;
  }
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
  EXPECT_EQ((*r)[0].family, TaskFamily::kElementwise);
}

TEST(TaskFamily, EveryNameParsesBackToItsFamily) {
  std::set<std::string> names;
  for (int i = 0; i < kTaskFamilyCount; ++i) {
    auto f = static_cast<TaskFamily>(i);
    names.insert(task_family_name(f));
    Result<TaskFamily> back = parse_task_family(task_family_name(f));
    ASSERT_TRUE(back.ok()) << task_family_name(f);
    EXPECT_EQ(*back, f);
  }
  EXPECT_EQ(names.size(), static_cast<size_t>(kTaskFamilyCount));
  EXPECT_EQ(names.count("?"), 0u);
  EXPECT_FALSE(parse_task_family("Conv").ok());
}

TEST(TaskFile, KernelBenchGlobalsMayBeTuplesOfSizes) {
  std::string text =
      std::string(kGoodTask) +
      "kernelbench = { problem = \"level2/82_X.py\", globals = { n = \"N\", bias_shape = [\"N\", 1, 1] } }\n";
  Result<std::vector<Task>> r = parse_task_file("t.toml", text);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const Task& t = (*r)[0];
  EXPECT_EQ(t.kernelbench_globals.at("n").values, (std::vector<std::string>{"N"}));
  EXPECT_FALSE(t.kernelbench_globals.at("n").list);
  EXPECT_EQ(t.kernelbench_globals.at("bias_shape").values, (std::vector<std::string>{"N", "1", "1"}));
  EXPECT_TRUE(t.kernelbench_globals.at("bias_shape").list);
  EXPECT_STREQ(t.set_name(), "kernelbench");
  Result<std::vector<Task>> bad = parse_task_file(
      "bad.toml", std::string(kGoodTask) +
                      "kernelbench = { problem = \"level2/82_X.py\", globals = { bias_shape = [\"N\", 1.5] } }\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("globals.bias_shape: expected a size expression, an integer or a list of them"),
            std::string::npos)
      << bad.status().message();
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

// kernelbench.init and .signature: the problem's constructor (gpu/task.h), read as written.
TEST(TaskFile, KernelBenchConstructorIsReadAndChecked) {
  const std::string kb = "kernelbench = { problem = \"level1/1_X.py\", globals = { n = \"N\" }";
  Result<std::vector<Task>> r =
      parse_task_file("t.toml", std::string(kGoodTask) + kb +
                                    ", init = [\"N\", \"N * 2\", 2.5, true, [\"N\", 1]], "
                                    "signature = \"n, m: int, scale: float, flag=True, shape=(1, 2)\" }\n");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const Task& t = (*r)[0];
  EXPECT_TRUE(t.kernelbench_constructor);
  EXPECT_EQ(t.kernelbench_signature, "n, m: int, scale: float, flag=True, shape=(1, 2)");
  EXPECT_EQ(t.kernelbench_init.dump(), R"(["N","N * 2",2.5,true,["N",1]])");
  // An empty constructor is one too (Model.__init__(self), get_init_inputs() returning []).
  Result<std::vector<Task>> empty =
      parse_task_file("t.toml", std::string(kGoodTask) + kb + ", init = [], signature = \"\" }\n");
  ASSERT_TRUE(empty.ok()) << empty.status().to_string();
  EXPECT_TRUE((*empty)[0].kernelbench_constructor);
  Result<std::vector<Task>> none = parse_task_file("t.toml", std::string(kGoodTask) + kb + " }\n");
  ASSERT_TRUE(none.ok()) << none.status().to_string();
  EXPECT_FALSE((*none)[0].kernelbench_constructor);

  auto bad = [&](const std::string& keys, const std::string& needle) {
    expect_error(std::string(kGoodTask) + kb + ", " + keys + " }\n", "kernelbench", needle);
  };
  bad("init = [\"N\"]", "init and signature go together");
  bad("signature = \"n\"", "init and signature go together");
  bad("init = [\"N\"], signature = 3", "signature: expected a string");
  bad("init = [\"N\"], signature = \"n):\\n    import os\"", "on one line, brackets balanced, found");
  bad("init = [\"N\"], signature = \"n, (m\"", "brackets balanced");
  bad("init = [\"N\"], signature = \"n; import os\"", "on one line");
  bad("init = \"N\", signature = \"n\"", "init: expected an array");
  bad("init = [{ a = 1 }], signature = \"n\"", "init[0]: expected a size expression");
  bad("init = [[\"N\", \"N +\"]], signature = \"n\"", "init[0][1]");
  bad("init = [\"N\", [\"M\"]], signature = \"n, m\"", "kernelbench.init[1][0]' at size");
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
  // Dimension attributes out of the input's range (a crash the task-file fuzzer found).
  const std::string relu = "ops = [{ op = \"relu\", in = [\"x\"], out = \"y\" }]";
  expect_error(replace(kGoodTask, relu, "ops = [{ op = \"permute\", in = [\"x\"], out = \"y\", dims = [1] }]"),
               "key 'dims'", "dimension 1 is out of range for rank 1");
  expect_error(
      replace(kGoodTask, relu, "ops = [{ op = \"transpose\", in = [\"x\"], out = \"y\", dim0 = 0, dim1 = -2 }]"),
      "key 'dim1'", "out of range");
  expect_error(replace(kGoodTask, relu, "ops = [{ op = \"flatten\", in = [\"x\"], out = \"y\", start_dim = 5 }]"),
               "key 'start_dim'", "out of range");
  expect_error(
      replace(kGoodTask, "family = \"elementwise\"", "family = \"elementwize\""), "key 'family'",
      "expected an op family (attention, conv, conv_epilogue, elementwise, gemm, gemm_epilogue, loss, network, "
      "norm, pooling, recurrent, reduction, scan, softmax or ssm), found 'elementwize'");
  expect_error("[[task]]\nid = 3\n", "key 'id'", "expected a string");
  expect_error("[[task]\n", "bad.toml:", "");
}

// Blocks: a conv-bn-relu unit used by a residual unit, repeated with a growing channel count.
const char* kBlockTask = R"(
[[block]]
name = "cbr"
params = ["Cin", "Cout", "stride"]
defaults = { stride = 1 }
inputs = ["x"]
outputs = ["y"]
modules = [
  { name = "conv", type = "conv2d", in = "Cin", out = "Cout", kernel = 3, stride = "stride", padding = 1, bias = false },
  { name = "bn", type = "batch_norm", features = "Cout" },
]
ops = [
  { op = "conv2d", in = ["x"], out = "c", module = "conv" },
  { op = "batch_norm", in = ["c"], out = "b", module = "bn" },
  { op = "relu", in = ["b"], out = "y" },
]

[[block]]
name = "grow"
params = ["C", "G"]
inputs = ["x"]
outputs = ["y"]
modules = [{ name = "unit", type = "block", block = "cbr", Cin = "C + i*G", Cout = "C + i*G + G" }]
ops = [
  { op = "block", in = ["x"], out = "n", module = "unit" },
  { op = "sigmoid", in = ["n"], out = "y" },
]

[[task]]
id = "T_2"
level = 3
name = "blocks"
family = "network"
description = "blocks"
sizes.full = { B = 2, C = 8, G = 4, H = 16 }
sizes.small = { B = 1, C = 3, G = 2, H = 5 }
inputs = [{ name = "x", shape = ["B", "C", "H", "H"] }]
modules = [
  { name = "stem", type = "block", block = "cbr", Cin = "C", Cout = "C", stride = 2 },
  { name = "dense", type = "block", block = "grow", C = "C", G = "G", repeat = 3 },
  { name = "fc", type = "linear", in = "C + 3*G", out = 5 },
]
ops = [
  { op = "block", in = ["x"], out = "s", module = "stem" },
  { op = "block", in = ["s"], out = "d", module = "dense" },
  { op = "mean", in = ["d"], out = "m", dim = 3 },
  { op = "mean", in = ["m"], out = "p", dim = 2 },
  { op = "linear", in = ["p"], out = "y", module = "fc" },
]
output = "y"
)";

TEST(TaskFile, BlocksExpandIntoFlatModulesAndOps) {
  Result<std::vector<Task>> r = parse_task_file("b.toml", kBlockTask);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const Task& t = (*r)[0];
  std::vector<std::string> modules;
  for (const auto& m : t.modules) modules.push_back(m.name + ":" + m.type);
  EXPECT_EQ(modules, (std::vector<std::string>{"stem_conv:conv2d", "stem_bn:batch_norm", "dense_0_unit_conv:conv2d",
                                               "dense_0_unit_bn:batch_norm", "dense_1_unit_conv:conv2d",
                                               "dense_1_unit_bn:batch_norm", "dense_2_unit_conv:conv2d",
                                               "dense_2_unit_bn:batch_norm", "fc:linear"}));
  // A string that is exactly a parameter takes its value (an integer stays an integer); inside an
  // expression the value goes in parentheses.
  EXPECT_EQ(t.modules[0].attrs["stride"], 2);
  EXPECT_EQ(t.modules[0].attrs["in"], "C");
  EXPECT_EQ(t.modules[2].attrs["stride"], 1);
  EXPECT_EQ(t.modules[6].attrs["in"], "(C) + (2)*(G)");
  std::vector<std::string> ops;
  for (const auto& op : t.ops) {
    std::string s = op.op + "(";
    for (const auto& in : op.inputs) s += in + (&in == &op.inputs.back() ? "" : ",");
    s += ")->" + op.outputs[0];
    if (!op.module.empty()) s += "@" + op.module;
    ops.push_back(s);
  }
  EXPECT_EQ(ops, (std::vector<std::string>{
                     "conv2d(x)->stem_c@stem_conv", "batch_norm(stem_c)->stem_b@stem_bn", "relu(stem_b)->s",
                     "conv2d(s)->dense_0_unit_c@dense_0_unit_conv",
                     "batch_norm(dense_0_unit_c)->dense_0_unit_b@dense_0_unit_bn", "relu(dense_0_unit_b)->dense_0_n",
                     "sigmoid(dense_0_n)->dense_0_y", "conv2d(dense_0_y)->dense_1_unit_c@dense_1_unit_conv",
                     "batch_norm(dense_1_unit_c)->dense_1_unit_b@dense_1_unit_bn", "relu(dense_1_unit_b)->dense_1_n",
                     "sigmoid(dense_1_n)->dense_1_y", "conv2d(dense_1_y)->dense_2_unit_c@dense_2_unit_conv",
                     "batch_norm(dense_2_unit_c)->dense_2_unit_b@dense_2_unit_bn", "relu(dense_2_unit_b)->dense_2_n",
                     "sigmoid(dense_2_n)->d", "mean(d)->m", "mean(m)->p", "linear(p)->y@fc"}));
  Result<ShapeMap> shapes = infer_shapes(t);
  ASSERT_TRUE(shapes.ok()) << shapes.status().to_string();
  EXPECT_EQ(*eval_shape(shapes->at("d"), t.size_map(SizeName::kFull)), (std::vector<int64_t>{2, 20, 8, 8}));
}

TEST(TaskFile, BlockErrorsNameTheBlockAndTheKey) {
  expect_error(replace(kBlockTask, "Cin = \"C\", Cout = \"C\", stride = 2", "Cin = \"C\", Cout = \"C\", strde = 2"),
               "module 'stem'", "key 'strde': not a parameter of block 'cbr'");
  expect_error(replace(kBlockTask, "Cin = \"C\", Cout = \"C\", stride = 2", "Cin = \"C\", stride = 2"), "module 'stem'",
               "key 'Cout' missing: block 'cbr'");
  expect_error(replace(kBlockTask, "block = \"grow\"", "block = \"shrink\""), "module 'dense'",
               "no [[block]] named 'shrink'");
  expect_error(replace(kBlockTask, "C = \"C\", G = \"G\"", "C = \"C\", G = \"G +\""), "block 'grow'",
               "not a size expression");
  expect_error(replace(kBlockTask, "{ op = \"block\", in = [\"x\"], out = \"n\", module = \"unit\" },", ""),
               "module 'dense_0_unit'", "never run");
  expect_error(replace(kBlockTask, "in = [\"s\"], out = \"d\"", "in = [\"s\", \"x\"], out = \"d\""), "block 'grow'",
               "key 'in': expected 1 inputs");
  expect_error(replace(kBlockTask, "name = \"cbr\"\n", "name = \"cbr\"\nlayers = 3\n"), "block 'cbr'",
               "unknown key 'layers'");
  expect_error(
      replace(kBlockTask, "Cout = \"C + i*G + G\" }]",
              "Cout = \"C + i*G + G\" }, { name = \"u2\", type = \"block\", block = \"grow\", C = 1, G = 1 }]"),
      "module 'u2'", "nested deeper");
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
  // The syntax check does not evaluate '/' and '%': it must not find an overflow the expression
  // does not have.
  EXPECT_EQ(*eval_expr("9922357268 % 48 * 3685477036851", env), 20 * 3685477036851);
  EXPECT_TRUE(check_expr_syntax("9922357268 % 48 * 3685477036851").ok());
  EXPECT_FALSE(check_expr_syntax("99999999999999999999").ok());  // a literal past int64
  EXPECT_EQ(expr_mul("1", "N"), "N");
  EXPECT_EQ(expr_mul("3", "4"), "12");
  EXPECT_EQ(*eval_expr(expr_ceil_div(expr_add("N", "M"), "8"), env), 14);
}

TEST(Expr, OverflowIsAnErrorNamingTheExpressionAndItsValues) {
  ExprEnv env;
  env.symbols = {{"N", 65536}, {"M", 3}};
  env.buffer_shape = [](const std::string& b) -> Result<std::vector<int64_t>> {
    if (b == "x") return std::vector<int64_t>{int64_t{1} << 40, int64_t{1} << 30};
    return not_found("no buffer " + b);
  };
  // 65536^4 = 2^64: one past int64, which would wrap to 0 (a launch of no blocks).
  Result<int64_t> r = eval_expr("N*N*N*N", env);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "size expression 'N*N*N*N': overflows 64 bits at N=65536");
  EXPECT_EQ(*eval_expr("N*N*N*M", env), int64_t{3} << 48);  // just below: exact
  r = eval_expr("M*N*N*N*N - N", env);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "size expression 'M*N*N*N*N - N': overflows 64 bits at M=3, N=65536");
  r = eval_expr("9223372036854775807 + 1", env);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "size expression '9223372036854775807 + 1': overflows 64 bits");
  EXPECT_FALSE(eval_expr("0 - 9223372036854775807 - 2", env).ok());
  EXPECT_FALSE(eval_expr("-(0 - 9223372036854775807 - 1)", env).ok());
  EXPECT_FALSE(eval_expr("(0 - 9223372036854775807 - 1) / (0 - 1)", env).ok());
  r = eval_expr("numel(x)", env);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "size expression 'numel(x)': overflows 64 bits at shape(x)=[1099511627776,1073741824]");
  // ceil_div near the top of the range is exact, not an overflow of its a + b - 1.
  EXPECT_EQ(*eval_expr("ceil_div(9223372036854775807, 2)", env), int64_t{4611686018427387904});
  // The builders do not fold constants past 64 bits: the evaluation reports them.
  EXPECT_FALSE(eval_expr(expr_mul("4294967296", "4294967296"), env).ok());
  EXPECT_FALSE(eval_expr(expr_add("9223372036854775807", "1"), env).ok());
  EXPECT_FALSE(eval_expr(expr_mul("99999999999999999999", "1"), env).ok());
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

  // Per-dim stride, padding, dilation and output_padding of different values, transposed and not.
  const std::pair<const char*, std::vector<int64_t>> full_outputs[] = {
      {"L1_072", {8, 32, 24, 48, 96}},  // ConvTranspose3d (3,5,7), stride 2, padding (1,2,3), output_padding 1
      {"L1_075", {16, 64, 257, 766}},   // ConvTranspose2d (3,5), stride (2,3), padding (1,2), dilation (2,1)
      {"L1_076", {64, 128, 174758}},    // Conv1d 3, stride 3, dilation 4
      {"L1_079", {16, 64, 262145}},     // ConvTranspose1d 3, stride 2, padding 1, dilation 2
      {"L1_080", {8, 64, 508, 496}},    // Conv2d (5,9), padding (2,4), dilation (2,3)
      {"L1_081", {16, 64, 318, 638}},   // ConvTranspose2d 3, stride 5, padding 1, dilation 2
  };
  for (const auto& [id, want] : full_outputs) {
    const Task* t = suite.find(id);
    ASSERT_NE(t, nullptr) << id;
    Result<ShapeMap> s = infer_shapes(*t);
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    Result<std::vector<int64_t>> y = eval_shape(s->at(t->output), t->size_map(SizeName::kFull));
    ASSERT_TRUE(y.ok()) << id;
    EXPECT_EQ(*y, want) << id;
  }
}

TEST(Shapes, ConvListsOfTheWrongLengthAreErrors) {
  std::string text = replace(kGoodTask, "inputs = [{ name = \"x\", shape = [\"N\"] }]",
                             "inputs = [{ name = \"x\", shape = [\"N\", 3, 9, 9] }]\n"
                             "modules = [{ name = \"c\", type = \"conv2d\", in = 3, out = 4, kernel = 3, "
                             "stride = [2, 2, 2] }]");
  text = replace(text, "ops = [{ op = \"relu\", in = [\"x\"], out = \"y\" }]",
                 "ops = [{ op = \"conv2d\", in = [\"x\"], out = \"y\", module = \"c\" }]");
  expect_error(text, "key 'stride'", "2 integers, found [2,2,2]");
  // groups may be a size expression (depthwise: groups = C).
  text = replace(text, "stride = [2, 2, 2]", "groups = \"N/2\"");
  text = replace(text, "in = 3, out = 4", "in = \"N/2\", out = \"N\"");
  text = replace(text, "shape = [\"N\", 3, 9, 9]", "shape = [1, \"N/2\", 9, 9]");
  Result<std::vector<Task>> r = parse_task_file("ok.toml", text);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  Result<std::vector<WeightSpec>> w = weight_specs((*r)[0]);
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  Result<std::vector<int64_t>> ws = eval_shape((*w)[0].shape, (*r)[0].size_map(SizeName::kSmall));
  ASSERT_TRUE(ws.ok());
  EXPECT_EQ(*ws, (std::vector<int64_t>{4, 1, 3, 3}));  // N = 4: Conv2d(2, 4, 3, groups=2)
}

TEST(Shapes, ConcatCeilModePoolingAndSymbolicGroups) {
  TaskSuite suite = load_suite();
  auto shape_of = [&](const char* id, const char* value, SizeName size) {
    const Task* t = suite.find(id);
    EXPECT_NE(t, nullptr) << id;
    if (!t) return std::vector<int64_t>();
    Result<ShapeMap> shapes = infer_shapes(*t);
    EXPECT_TRUE(shapes.ok()) << shapes.status().to_string();
    Result<std::vector<int64_t>> v = eval_shape(shapes->at(value), t->size_map(size));
    EXPECT_TRUE(v.ok()) << v.status().to_string();
    return v.ok() ? *v : std::vector<int64_t>();
  };
  // Inception: four branches concatenated on channels, 192 + 208 + 48 + 64.
  EXPECT_EQ(shape_of("L3_006", "y", SizeName::kFull), (std::vector<int64_t>{10, 512, 224, 224}));
  // SqueezeNet's ceil_mode pool: 16 x 17 -> ceil(13/2) + 1 = 8, ceil(14/2) + 1 = 8 (floor: 7, 8).
  EXPECT_EQ(shape_of("L3_018", "p1", SizeName::kSmall), (std::vector<int64_t>{2, 96, 8, 8}));
  // A depthwise convolution with groups = Cout/4: weight [Cm, 1, 3, 3].
  const Task* unit = suite.find("L3_025");
  ASSERT_NE(unit, nullptr);
  Result<std::vector<WeightSpec>> specs = weight_specs(*unit);
  ASSERT_TRUE(specs.ok()) << specs.status().to_string();
  bool found = false;
  for (const auto& w : *specs)
    if (w.name == "unit_body_conv2.weight") {
      found = true;
      EXPECT_EQ(*eval_shape(w.shape, unit->size_map(SizeName::kSmall)), (std::vector<int64_t>{9, 1, 3, 3}));
    }
  EXPECT_TRUE(found);
}

}  // namespace
}  // namespace vinci
