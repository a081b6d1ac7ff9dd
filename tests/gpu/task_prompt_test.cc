// The task as a model sees it: every task renders as valid Python (checked by Python's own
// parser), two renderings word for word, the constants of a sample of tasks, errors, and the
// plain-text header.
#include "gpu/task_prompt.h"

#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>

#include "gpu/ops.h"
#include "tests/cli_test_util.h"

namespace vinci {
namespace {

TaskSuite load_suite() {
  Result<TaskSuite> suite = load_task_suite(VINCI_TASK_DIR);
  EXPECT_TRUE(suite.ok()) << suite.status().to_string();
  return suite.ok() ? *suite : TaskSuite();
}

std::string render(const TaskSuite& suite, const std::string& id, SizeName size = SizeName::kFull) {
  const Task* t = suite.find(id);
  EXPECT_NE(t, nullptr) << id;
  if (!t) return "";
  Result<std::string> r = task_as_pytorch(*t, size);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? *r : "";
}

// Writes each source to its own file and parses them all with Python's ast module (torch is not
// needed to parse). Returns Python's complaint, empty when every file parses.
std::string python_parse_errors(const std::vector<std::pair<std::string, std::string>>& sources) {
  std::string dir = clitest::temp_dir("vinci_task_prompt_");
  std::string files;
  for (const auto& [name, text] : sources) {
    std::string path = dir + "/" + name + ".py";
    std::ofstream(path) << text;
    files += " " + path;
  }
  std::string out;
  int rc =
      clitest::sh("python3 -c \"import ast,sys; [ast.parse(open(f).read(), f) for f in sys.argv[1:]]\"" + files, &out);
  std::string ignored;
  clitest::sh("rm -rf " + dir, &ignored);
  return rc == 0 ? "" : "python3 exit " + std::to_string(rc) + ": " + out;
}

// Ops of the vocabulary the suite does not use, and names that collide with Python's.
const char* kExtraTasks = R"(
[[task]]
id = "T_001"
level = 1
name = "vocabulary_1d"
family = "elementwise"
description = "Ops of the vocabulary the suite does not use."
sizes.full = { N = 4, C = 6, L = 10 }
sizes.small = { N = 2, C = 3, L = 8 }
inputs = [{ name = "x", shape = ["N", "C", "L"], domain = "positive" }]
modules = [{ name = "c1", type = "conv1d", in = "C", out = "C", kernel = 3, padding = 1 }]
ops = [
  { op = "conv1d", in = ["x"], out = "a", module = "c1" },
  { op = "selu", in = ["a"], out = "a1" },
  { op = "silu", in = ["a1"], out = "b" },
  { op = "softsign", in = ["b"], out = "c" },
  { op = "hardsigmoid", in = ["c"], out = "d" },
  { op = "abs", in = ["d"], out = "e" },
  { op = "exp", in = ["e"], out = "f" },
  { op = "log", in = ["f"], out = "g" },
  { op = "sqrt", in = ["g"], out = "h" },
  { op = "square", in = ["h"], out = "i" },
  { op = "sub", in = ["i", "x"], out = "j" },
  { op = "div", in = ["j", "x"], out = "k" },
  { op = "max_pool1d", in = ["k"], out = "p", kernel = 2 },
  { op = "cumprod", in = ["p"], out = "q", dim = 2 },
  { op = "permute", in = ["q"], out = "r", dims = [0, 2, 1] },
  { op = "norm_l2", in = ["r"], out = "y", dim = 1, keepdim = true },
]
output = "y"

[[task]]
id = "T_002"
level = 2
name = "vocabulary_3d"
family = "elementwise"
description = "A transposed 3-D convolution."
sizes.full = { N = 2, C = 4, D = 5 }
sizes.small = { N = 1, C = 2, D = 3 }
inputs = [{ name = "x", shape = ["N", "C", "D", "D", "D"] }]
modules = [{ name = "ct", type = "conv_transpose3d", in = "C", out = "2*C", kernel = [3, 3, 2], stride = 2, output_padding = 1 }]
ops = [{ op = "conv_transpose3d", in = ["x"], out = "y", module = "ct" }]
output = "y"

[[task]]
id = "T_003"
level = 3
name = "python_names"
family = "elementwise"
description = "Names that are Python's: a \"quoted\" word and a back\\slash."
sizes.full = { F = 8, B = 4, lambda = 3 }
sizes.small = { F = 5, B = 2, lambda = 2 }
inputs = [{ name = "in", shape = ["lambda", "F"] }]
modules = [{ name = "train", type = "linear", in = "F", out = "B" }]
ops = [
  { op = "linear", in = ["in"], out = "self", module = "train" },
  { op = "gelu", in = ["self"], out = "B" },
  { op = "reshape", in = ["B"], out = "torch", shape = ["lambda*B"] },
]
output = "torch"

[[task]]
id = "T_004"
level = 1
name = "cosine_loss"
family = "elementwise"
description = "mean(1 - cosine_similarity(p, t, dim=1)) (no KernelBench task since problem 97 became attention)."
sizes.full = { B = 4, D = 8 }
sizes.small = { B = 2, D = 3 }
inputs = [{ name = "p", shape = ["B", "D"] }, { name = "t", shape = ["B", "D"] }]
ops = [{ op = "cosine_similarity_loss", in = ["p", "t"], out = "loss" }]
output = "loss"
)";

std::vector<Task> extra_tasks() {
  Result<std::vector<Task>> r = parse_task_file("extra.toml", kExtraTasks);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? *r : std::vector<Task>();
}

TEST(TaskPrompt, EveryTaskRendersAsValidPythonAtBothSizes) {
  TaskSuite suite = load_suite();
  ASSERT_GE(suite.tasks.size(), 250u);  // every KernelBench problem, and vinci's own
  std::vector<std::pair<std::string, std::string>> sources;
  for (const Task& t : suite.tasks) {
    for (SizeName size : {SizeName::kFull, SizeName::kSmall}) {
      Result<std::string> r = task_as_pytorch(t, size);
      ASSERT_TRUE(r.ok()) << t.id << ": " << r.status().to_string();
      EXPECT_NE(r->find("class Model(nn.Module):"), std::string::npos) << t.id;
      EXPECT_NE(r->find("\ndef get_inputs():\n"), std::string::npos) << t.id;
      EXPECT_NE(r->find("\ndef get_init_inputs():\n"), std::string::npos) << t.id;
      // F is imported exactly where it is used.
      EXPECT_EQ(r->find("import torch.nn.functional as F") != std::string::npos,
                r->find(" F.") != std::string::npos || r->find("(F.") != std::string::npos)
          << t.id;
      for (const auto& [sym, value] : t.size_map(size))
        EXPECT_NE(r->find("\n" + sym + " = " + std::to_string(value) + "\n"), std::string::npos) << t.id << " " << sym;
      sources.emplace_back(t.id + "_" + size_name(size), *r);
    }
  }
  EXPECT_EQ(sources.size(), 2 * suite.tasks.size());
  EXPECT_EQ(python_parse_errors(sources), "");
}

TEST(TaskPrompt, EveryOpOfTheVocabularyRenders) {
  TaskSuite suite = load_suite();
  std::vector<Task> tasks = suite.tasks;
  for (Task& t : extra_tasks()) tasks.push_back(std::move(t));
  std::set<std::string> rendered;
  std::vector<std::pair<std::string, std::string>> sources;
  for (const Task& t : tasks) {
    Result<std::string> r = task_as_pytorch(t, SizeName::kSmall);
    ASSERT_TRUE(r.ok()) << t.id << ": " << r.status().to_string();
    for (const auto& op : t.ops) rendered.insert(op.op);
    sources.emplace_back(t.id, *r);
  }
  std::stringstream known(known_op_names());
  for (std::string op; std::getline(known, op, ',');) {
    op.erase(0, op.find_first_not_of(' '));
    EXPECT_TRUE(rendered.count(op)) << "no task renders op " << op;
  }
  EXPECT_EQ(python_parse_errors(sources), "");
}

TEST(TaskPrompt, RendersReluWordForWord) {
  TaskSuite suite = load_suite();
  EXPECT_EQ(render(suite, "L1_019"), R"(import torch
import torch.nn as nn


class Model(nn.Module):
    """Apply ReLU elementwise to x of shape [B, D]: y = max(x, 0)."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        y = torch.relu(x)
        return y


B = 4096
D = 393216


def get_inputs():
    x = torch.rand(B, D)
    return [x]


def get_init_inputs():
    return []
)");
}

TEST(TaskPrompt, RendersAGemmEpilogueWordForWord) {
  TaskSuite suite = load_suite();
  EXPECT_EQ(render(suite, "L2_012"), R"(import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """y = LeakyReLU(0.1)(Linear(In, Out)(x) * 2.0) for x of shape [B, In]."""

    def __init__(self, in_features, out_features, multiplier, negative_slope):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x):
        h = self.fc(x)
        m = h * 2.0
        y = F.leaky_relu(m, negative_slope=0.1)
        return y


B = 1024
In = 8192
Out = 8192


def get_inputs():
    x = torch.rand(B, In)
    return [x]


def get_init_inputs():
    return [In, Out, 2.0, 0.1]
)");
}

void expect_contains(const std::string& text, const std::vector<std::string>& needles, const std::string& id) {
  for (const auto& n : needles) EXPECT_NE(text.find(n), std::string::npos) << id << ": no '" << n << "' in\n" << text;
}

TEST(TaskPrompt, ConstantsAndAttributesComeThrough) {
  TaskSuite suite = load_suite();
  expect_contains(render(suite, "L1_019", SizeName::kSmall), {"\nB = 8\nD = 1001\n"}, "L1_019 small");
  expect_contains(render(suite, "L1_020"), {"F.leaky_relu(x, negative_slope=0.01)"}, "L1_020");
  expect_contains(render(suite, "L1_023"), {"torch.softmax(x, dim=1)"}, "L1_023");
  expect_contains(render(suite, "L1_024"), {"torch.log_softmax(x, dim=1)"}, "L1_024");
  expect_contains(render(suite, "L1_031"), {"F.elu(x, alpha=1.0)"}, "L1_031");
  expect_contains(render(suite, "L1_032"), {"F.hardtanh(x, min_val=-1.0, max_val=1.0)"}, "L1_032");
  expect_contains(render(suite, "L1_017"), {"torch.matmul(A, B.T)"}, "L1_017");
  expect_contains(render(suite, "L1_033"), {"self.bn = nn.BatchNorm2d(num_features, eps=1e-05)"}, "L1_033");
  expect_contains(render(suite, "L1_035"), {"nn.GroupNorm(num_groups=8, num_channels=num_features, eps=1e-05)"},
                  "L1_035");
  expect_contains(render(suite, "L1_036"), {"y = x / torch.sqrt((x * x).mean(dim=1, keepdim=True) + 1e-05)"}, "L1_036");
  expect_contains(render(suite, "L1_040"),
                  {"nn.LayerNorm((C, H, W), eps=1e-05)", "def __init__(self, normalized_shape: tuple)",
                   "def get_init_inputs():\n    return [[C, H, W]]\n"},
                  "L1_040");
  expect_contains(render(suite, "L1_042"), {"F.max_pool2d(x, kernel_size=4, stride=1, padding=1, dilation=1)"},
                  "L1_042");
  expect_contains(render(suite, "L1_045"), {"F.avg_pool2d(x, kernel_size=11)"}, "L1_045");
  expect_contains(render(suite, "L1_047"), {"y = x.sum(dim=1, keepdim=True)"}, "L1_047");
  expect_contains(render(suite, "L1_049"), {"y = x.amax(dim=1)"}, "L1_049");
  expect_contains(render(suite, "L1_053"), {"y = x.amin(dim=1)"}, "L1_053");
  expect_contains(render(suite, "L1_082"),
                  {"nn.Conv2d(in_channels, in_channels, kernel_size=3, groups=in_channels, bias=False)",
                   "x = torch.rand(N, C, H, W)"},
                  "L1_082");
  expect_contains(render(suite, "L1_075"),
                  {"nn.ConvTranspose2d(in_channels, out_channels, kernel_size=(3, 5), stride=(2, 3), padding=(1, 2), "
                   "dilation=(2, 1), groups=4, bias=False)"},
                  "L1_075");
  expect_contains(
      render(suite, "L1_079"),
      {"nn.ConvTranspose1d(in_channels, out_channels, kernel_size=3, stride=2, padding=1, dilation=2, bias=False)"},
      "L1_079");
  expect_contains(render(suite, "L1_093"), {"mask = torch.randint(0, 2, (B, D))", "y = torch.cumsum(m, dim=1)"},
                  "L1_093");
  expect_contains(render(suite, "L1_095"), {"target = torch.randint(0, C, (B,))", "F.cross_entropy(logits, target)"},
                  "L1_095");
  expect_contains(
      render(suite, "L1_098"),
      {"p = (torch.rand(()) * torch.rand(B, D)).softmax(dim=-1)", "F.kl_div(torch.log(p), t, reduction=\"batchmean\")"},
      "L1_098");
  expect_contains(
      render(suite, "L1_100"),
      {"t = torch.randint(0, 2, (N,), dtype=torch.float32) * 2 - 1", "torch.clamp(1 - p * t, min=0).mean()"}, "L1_100");
  expect_contains(render(suite, "L1_097"), {"out = F.scaled_dot_product_attention(Q, K, V)"}, "L1_097");
  expect_contains(render(suite, "L1_094"), {"p = torch.rand(()) * torch.rand(B, D)\n    t = torch.rand(B, D)\n"},
                  "L1_094");
  expect_contains(render(suite, "L1_013"), {"A = torch.rand(N, N)\n    A = (A + A.T) / 2\n"}, "L1_013");
  expect_contains(render(suite, "L1_014"), {"A = torch.triu(torch.rand(N, N))", "C = torch.triu(P)"}, "L1_014");
  expect_contains(render(suite, "L1_092"),
                  {"torch.cat((torch.zeros_like(x.select(1, 0).unsqueeze(1)), torch.cumsum(x.narrow(1, 0, x.size(1) - "
                   "1), dim=1)), dim=1)"},
                  "L1_092");
  expect_contains(render(suite, "L2_009"), {"s = h - 2.0", "m = s * 1.5"}, "L2_009");
  expect_contains(render(suite, "L2_033"),
                  {"self.scale = nn.Parameter(torch.randn(out_features))",
                   "self.bn = nn.BatchNorm1d(out_features, eps=1e-05)", "s = h * self.scale"},
                  "L2_033");
  expect_contains(render(suite, "L2_037"),
                  {"nn.GroupNorm(num_groups=64, num_channels=out_features, eps=1e-05)", "b = s + self.bias"}, "L2_037");
  expect_contains(render(suite, "L2_045"), {"y = torch.logsumexp(o, dim=1)"}, "L2_045");
  expect_contains(render(suite, "L2_053"), {"F.hardtanh(s, min_val=-2.0, max_val=2.0)"}, "L2_053");
  expect_contains(render(suite, "L2_076"), {"nn.Linear(in_features, out_features, bias=False)"}, "L2_076");
  expect_contains(render(suite, "L2_081"), {"d = s / 2.0", "y = torch.clamp(t, min=-1.0, max=1.0)"}, "L2_081");
  expect_contains(render(suite, "L2_001"), {"nn.Parameter(torch.randn(out_channels, 1, 1))"}, "L2_001");
  expect_contains(render(suite, "L2_006"),
                  {"nn.Conv3d(in_channels, out_channels, kernel_size=3)", "F.max_pool3d(s, kernel_size=2)"}, "L2_006");
  expect_contains(render(suite, "L2_067"), {"F.adaptive_avg_pool2d(g, 1)", "torch.flatten(p, start_dim=1)"}, "L2_067");
  expect_contains(
      render(suite, "L2_093"),
      {"nn.ConvTranspose2d(in_channels, out_channels, kernel_size=4, stride=2)", "m = torch.clamp(a, max=0.0)"},
      "L2_093");
  expect_contains(render(suite, "L3_008"),
                  {"nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1, bias=False)",
                   "nn.Conv2d(in_channels, out_channels, kernel_size=1, bias=False)", "s = b2 + d2"},
                  "L3_008");
  expect_contains(
      render(suite, "L3_043"),
      {"self.c_attn = nn.Linear(n_embd, 3 * n_embd)", "q0, k0, v0 = qkv.chunk(3, dim=2)",
       "q1 = q0.reshape(B, T, H, C // H)", "torch.matmul(q, k.transpose(-2, -1))", "ss = s * 0.10206207261596575",
       "m = ss.masked_fill(torch.ones_like(ss, dtype=torch.bool).triu(diagonal=1), float(\"-inf\"))",
       "torch.softmax(m, dim=-1)"},
      "L3_043");
  // A size named F keeps its name where the file does not import torch.nn.functional.
  std::string encoder = render(suite, "L3_101");
  expect_contains(encoder,
                  {"nn.MultiheadAttention(embed_dim=E, num_heads=8)", "self.linear1 = nn.Linear(E, F)",
                   "a = self.self_attn(x, x, x, need_weights=False)[0]", "\nF = 2048\n", "nn.LayerNorm(E, eps=1e-05)"},
                  "L3_101");
  EXPECT_EQ(encoder.find("functional"), std::string::npos);
}

TEST(TaskPrompt, NamesThatArePythonsAreRenamed) {
  std::vector<Task> tasks = extra_tasks();
  ASSERT_EQ(tasks.size(), 4u);
  Result<std::string> r = task_as_pytorch(tasks[2], SizeName::kFull);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_contains(*r,
                  {"\"\"\"Names that are Python's: a \\\"quoted\\\" word and a back\\\\slash.\"\"\"",
                   "def __init__(self, F_, B):", "self.train_ = nn.Linear(F_, B)", "def forward(self, in_):",
                   "self_ = self.train_(in_)", "B_ = F.gelu(self_)", "torch_ = B_.reshape(lambda_ * B)",
                   "return torch_", "\nlambda_ = 3\nF_ = 8\nB = 4\n", "in_ = torch.rand(lambda_, F_)"},
                  "T_003");
  expect_contains(*task_as_pytorch(tasks[1], SizeName::kFull),
                  {"nn.ConvTranspose3d(C, 2 * C, kernel_size=(3, 3, 2), stride=2, output_padding=1)"}, "T_002");
}

// A task with KernelBench's constructor (kernelbench.init, .signature) renders it: the signature as
// written, get_init_inputs() from init (a size by its global's name, another expression by its
// value), and a size that a parameter alone receives read from that parameter in the body.
std::string render_with_constructor(const std::string& init, const std::string& signature) {
  std::string text = R"(
[[task]]
id = "T_9"
level = 2
name = "gemm_scale"
family = "gemm_epilogue"
description = "y = Linear(In, Out)(x) * 2.0"
sizes.full = { B = 4, In = 8, Out = 6 }
sizes.small = { B = 2, In = 3, Out = 5 }
inputs = [{ name = "x", shape = ["B", "In"] }]
modules = [{ name = "fc", type = "linear", in = "In", out = "Out" }]
ops = [
  { op = "linear", in = ["x"], out = "h", module = "fc" },
  { op = "mul_scalar", in = ["h"], out = "y", value = 2.0 },
]
output = "y"
kernelbench = { problem = "level2/9_X.py", globals = { in_features = "In" }, init = )" +
                     init + ", signature = \"" + signature + "\" }\n";
  Result<std::vector<Task>> r = parse_task_file("ctor.toml", text);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  if (!r.ok()) return "";
  Result<std::string> py = task_as_pytorch((*r)[0], SizeName::kFull);
  EXPECT_TRUE(py.ok()) << py.status().to_string();
  return py.ok() ? *py : "";
}

TEST(TaskPrompt, RendersKernelBenchsConstructor) {
  expect_contains(render_with_constructor(R"(["In", "Out", 2.0, ["Out", 1], true, "In * 2"])",
                                          "in_features, out_features, scale, bias_shape, flag: bool, k=3"),
                  {"def __init__(self, in_features, out_features, scale, bias_shape, flag: bool, k=3):",
                   "self.fc = nn.Linear(in_features, out_features)",
                   "def get_init_inputs():\n    return [In, Out, 2.0, [Out, 1], True, 16]\n"},
                  "names");
  // A parameter named as another size keeps the globals (B would read the batch as In); so does a
  // size two parameters receive, and every parameter after a '*'.
  expect_contains(render_with_constructor(R"(["In", "Out"])", "B, out_features"),
                  {"def __init__(self, B, out_features):", "self.fc = nn.Linear(In, out_features)"}, "taken");
  expect_contains(render_with_constructor(R"(["In", "In", "Out"])", "a, b, c"),
                  {"def __init__(self, a, b, c):", "self.fc = nn.Linear(In, c)"}, "twice");
  expect_contains(render_with_constructor(R"(["In", "Out"])", "in_features, *args"),
                  {"def __init__(self, in_features, *args):", "self.fc = nn.Linear(in_features, Out)"}, "star");
  expect_contains(render_with_constructor("[]", ""),
                  {"def __init__(self):", "self.fc = nn.Linear(In, Out)", "def get_init_inputs():\n    return []\n"},
                  "empty");
}

TEST(TaskPrompt, AnOpWithoutARenderingIsAnErrorNamingTaskAndOp) {
  TaskSuite suite = load_suite();
  Task t = *suite.find("L1_019");
  t.ops[0].op = "frobnicate";
  Result<std::string> r = task_as_pytorch(t, SizeName::kFull);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("L1_019"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("frobnicate"), std::string::npos) << r.status().message();

  Task m = *suite.find("L2_012");
  m.modules[0].type = "bilinear";
  r = task_as_pytorch(m, SizeName::kFull);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("L2_012"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("bilinear"), std::string::npos) << r.status().message();

  Task s = *suite.find("L1_019");
  s.sizes.erase("small");
  EXPECT_FALSE(task_as_pytorch(s, SizeName::kSmall).ok());
}

TEST(TaskPrompt, HeaderNamesShapesDtypeAndTolerance) {
  TaskSuite suite = load_suite();
  std::string h = task_prompt_header(*suite.find("L2_012"), SizeName::kFull);
  expect_contains(
      h,
      {"Task L2_012: gemm_mul_leakyrelu (level 2, gemm_epilogue)\n", "Sizes (full): B = 1024, In = 8192, Out = 8192\n",
       "Input x: [B, In] = [1024, 8192], float32\n", "Output y: [B, Out] = [1024, 8192], float32\n",
       "dtype: float32; tolerance: atol = 0.01, rtol = 0.01\n"},
      "L2_012");
  expect_contains(task_prompt_header(*suite.find("L1_042"), SizeName::kFull),
                  {"Output y: [N, C, H - 2 + 1, W - 2 + 1] = [32, 64, 511, 511], float32\n"}, "L1_042");
  expect_contains(task_prompt_header(*suite.find("L1_051"), SizeName::kFull),
                  {"Output y: [B, D2] = [128, 4095], int64 (indices)\n"}, "L1_051");
  std::string ce = task_prompt_header(*suite.find("L1_095"), SizeName::kSmall);
  expect_contains(ce,
                  {"Sizes (small): B = 8, C = 5\n", "Input target: [B] = [8], int64 in [0, C)\n",
                   "Output loss: [] (a scalar), float32\n", "dtype: float32 (index inputs int64);"},
                  "L1_095");
  for (const Task& t : suite.tasks) {
    std::string all = task_prompt_header(t, SizeName::kSmall);
    EXPECT_EQ(all.find("unknown shape"), std::string::npos) << t.id;
    EXPECT_NE(all.find(t.description), std::string::npos) << t.id;
  }
}

}  // namespace
}  // namespace vinci
