// The libtorch executor against hand-built libtorch computations and torch's own modules.
#include "gpu/executor.h"

#include <algorithm>
#include <cmath>
#include <set>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "gpu/shapes.h"
#include "tests/gpu/sim_test_util.h"

namespace vinci {
namespace {

using simtest::suite;

TaskInstance instance(const std::string& id) {
  const Task* t = suite().find(id);
  VINCI_REQUIRE(t != nullptr, "no task " << id);
  Result<TaskInstance> r = TaskInstance::create(*t, SizeName::kSmall, "cpu");
  VINCI_REQUIRE(r.ok(), r.status().to_string());
  return std::move(r).value();
}

torch::Tensor weight(const TaskInstance& inst, const std::string& name) {
  for (const auto& [n, w] : inst.weights())
    if (n == name) return w;
  ADD_FAILURE() << "no weight " << name;
  return torch::Tensor();
}

void expect_equal(const torch::Tensor& a, const torch::Tensor& b, const std::string& what) {
  ASSERT_EQ(a.sizes(), b.sizes()) << what;
  EXPECT_TRUE(torch::equal(a, b)) << what << ": max diff " << (a - b).abs().max().item<double>();
}

// Every task runs at its small size on the CPU under every distribution; every value has the
// shape the symbolic rules predict; outputs on U[0,1) inputs are finite.
TEST(Executor, EveryTaskRunsAndShapesMatchTheSymbolicRules) {
  for (const Task& task : suite().tasks) {
    SCOPED_TRACE(task.id);
    Result<TaskInstance> inst = TaskInstance::create(task, SizeName::kSmall, "cpu");
    ASSERT_TRUE(inst.ok()) << inst.status().to_string();
    Result<ShapeMap> shapes = infer_shapes(task);
    ASSERT_TRUE(shapes.ok()) << shapes.status().to_string();
    for (auto dist : {InputDistribution::kUniform01, InputDistribution::kSigned, InputDistribution::kHeavyTailed}) {
      Result<std::vector<at::Tensor>> in = inst->make_inputs(dist, input_seed(1, task.id, 0, dist));
      ASSERT_TRUE(in.ok()) << in.status().to_string();
      Result<std::map<std::string, at::Tensor>> values = inst->run_all(*in);
      ASSERT_TRUE(values.ok()) << values.status().to_string();
      for (const auto& [name, shape] : *shapes) {
        Result<std::vector<int64_t>> want = eval_shape(shape, inst->sizes());
        ASSERT_TRUE(want.ok());
        EXPECT_EQ(values->at(name).sizes().vec(), *want) << task.id << " value " << name;
      }
      if (dist == InputDistribution::kUniform01) {
        EXPECT_TRUE(torch::isfinite(values->at(task.output)).all().item<bool>()) << task.id;
      }
    }
  }
}

// The float64 reference runs every op of the vocabulary: for each op, the task with the fewest
// input elements that uses it (every task would take 40 s of CPU in double). Its output is FP64
// where the FP32 one is a float, of the same shape, and within KernelBench's tolerance of the FP32
// reference on U[0,1) inputs.
TEST(Executor, Float64ReferenceRunsEveryOpAndAgreesWithTheFp32One) {
  std::vector<std::pair<int64_t, const Task*>> by_size;
  for (const Task& task : suite().tasks) {
    Result<TaskInstance> inst = TaskInstance::create(task, SizeName::kSmall, "cpu");
    ASSERT_TRUE(inst.ok()) << inst.status().to_string();
    by_size.emplace_back(inst->input_elements().value(), &task);
  }
  std::stable_sort(by_size.begin(), by_size.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
  std::set<std::string> covered;
  int ran = 0;
  for (const auto& [elements, task] : by_size) {
    bool adds = false;
    for (const OpSpec& op : task->ops) adds |= covered.insert(op.op).second;
    if (!adds) continue;
    SCOPED_TRACE(task->id);
    ++ran;
    TaskInstance inst = instance(task->id);
    Result<std::vector<at::Tensor>> in =
        inst.make_inputs(InputDistribution::kUniform01, input_seed(1, task->id, 0, InputDistribution::kUniform01));
    ASSERT_TRUE(in.ok()) << in.status().to_string();
    Result<at::Tensor> ref = inst.run(*in);
    ASSERT_TRUE(ref.ok()) << ref.status().to_string();
    Result<at::Tensor> ref64 = inst.run_float64(*in);
    ASSERT_TRUE(ref64.ok()) << ref64.status().to_string();
    ASSERT_EQ(ref64->sizes(), ref->sizes());
    if (ref->scalar_type() != torch::kFloat32) {
      EXPECT_TRUE(torch::equal(*ref64, *ref));  // indices
      continue;
    }
    EXPECT_EQ(ref64->scalar_type(), torch::kFloat64);
    EXPECT_TRUE(torch::allclose(ref->to(torch::kFloat64), *ref64, 1e-2, 1e-2, /*equal_nan=*/true))
        << "max diff " << (ref->to(torch::kFloat64) - *ref64).abs().nan_to_num(0, 0, 0).max().item<double>();
  }
  EXPECT_GT(ran, 20);
  EXPECT_GT(covered.size(), 80u);
}

// EfficientNet-B2 as KernelBench writes it normalises, in training mode, 1 x 1 maps over a batch of
// 2: each BatchNorm divides by the spread of two numbers, and the FP32 reference itself lands far
// from the exact result. The float64 reference shows it; no candidate could be judged by the FP32
// reference's last bits here.
TEST(Executor, Float64ReferenceShowsEfficientNetB2sFp32ReferenceIsIllConditioned) {
  TaskInstance inst = instance("L3_024");
  Result<std::vector<at::Tensor>> in =
      inst.make_inputs(InputDistribution::kUniform01, input_seed(1, "L3_024", 0, InputDistribution::kUniform01));
  ASSERT_TRUE(in.ok());
  Result<at::Tensor> ref = inst.run(*in);
  Result<at::Tensor> ref64 = inst.run_float64(*in);
  ASSERT_TRUE(ref.ok() && ref64.ok());
  double far = (ref->to(torch::kFloat64) - *ref64).abs().max().item<double>();
  EXPECT_GT(far, 0.1);
  // The same model in float64 twice is the same: the spread is the FP32 rounding, not the ops.
  EXPECT_TRUE(torch::equal(*inst.run_float64(*in), *ref64));
}

// The float64 reference is the task's ops on widened inputs and weights: a matrix-vector product
// equals torch's in double, not the FP32 one rounded up.
TEST(Executor, Float64ReferenceComputesInDouble) {
  TaskInstance inst = instance("L1_004");  // matvec
  Result<std::vector<at::Tensor>> in = inst.make_inputs(InputDistribution::kSigned, 5);
  ASSERT_TRUE(in.ok());
  Result<at::Tensor> ref64 = inst.run_float64(*in);
  ASSERT_TRUE(ref64.ok()) << ref64.status().to_string();
  torch::Tensor by_hand = torch::matmul((*in)[0].to(torch::kFloat64), (*in)[1].to(torch::kFloat64));
  expect_equal(*ref64, by_hand, "matvec in double");
  Result<at::Tensor> ref = inst.run(*in);
  ASSERT_TRUE(ref.ok());
  EXPECT_FALSE(torch::equal(ref->to(torch::kFloat64), *ref64));  // FP32 rounding shows
}

// A 16-bit library step: operands and weights rounded to BF16, the product computed in BF16, its
// output widened to FP32 (the CPU has BF16 products; FP16 ones run on the GPU).
TEST(Executor, Bf16LibraryStepRoundsOperandsAndWeights) {
  TaskInstance inst = instance("L2_081");
  const OpSpec* linear = nullptr;
  for (const OpSpec& op : inst.task().ops)
    if (op.op == "linear") linear = &op;
  ASSERT_NE(linear, nullptr);
  Result<std::vector<at::Tensor>> in = inst.make_inputs(InputDistribution::kSigned, 3);
  ASSERT_TRUE(in.ok());
  Result<std::vector<at::Tensor>> out = inst.run_op(*linear, {(*in)[0]}, StepType::kBFloat16);
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  ASSERT_EQ(out->size(), 1u);
  EXPECT_EQ((*out)[0].scalar_type(), torch::kFloat32);
  torch::Tensor w = weight(inst, linear->module + ".weight"), b = weight(inst, linear->module + ".bias");
  torch::Tensor by_hand =
      torch::linear((*in)[0].to(torch::kBFloat16), w.to(torch::kBFloat16), b.to(torch::kBFloat16)).to(torch::kFloat32);
  expect_equal((*out)[0], by_hand, "bf16 linear");
  Result<std::vector<at::Tensor>> fp32 = inst.run_op(*linear, {(*in)[0]});
  ASSERT_TRUE(fp32.ok());
  EXPECT_FALSE(torch::equal((*out)[0], (*fp32)[0]));  // the rounding shows
}

TEST(Executor, UniformInputsAreTorchRandAfterManualSeed) {
  TaskInstance inst = instance("L1_002");
  Result<std::vector<at::Tensor>> in = inst.make_inputs(InputDistribution::kUniform01, 1234);
  ASSERT_TRUE(in.ok());
  torch::manual_seed(1234);
  torch::Tensor a = torch::rand({48, 83});
  torch::Tensor b = torch::rand({83, 40});
  expect_equal((*in)[0], a, "A");
  expect_equal((*in)[1], b, "B");
}

TEST(Executor, InputSeedsAreKeyedByTaskTrialAndDistribution) {
  uint64_t s = input_seed(7, "L1_019", 0, InputDistribution::kUniform01);
  EXPECT_EQ(s, input_seed(7, "L1_019", 0, InputDistribution::kUniform01));
  EXPECT_NE(s, input_seed(7, "L1_019", 1, InputDistribution::kUniform01));
  EXPECT_NE(s, input_seed(7, "L1_020", 0, InputDistribution::kUniform01));
  EXPECT_NE(s, input_seed(7, "L1_019", 0, InputDistribution::kSigned));
  EXPECT_NE(s, input_seed(8, "L1_019", 0, InputDistribution::kUniform01));
  TaskInstance inst = instance("L1_019");
  auto a = inst.make_inputs(InputDistribution::kSigned, 5);
  auto b = inst.make_inputs(InputDistribution::kSigned, 5);
  expect_equal((*a)[0], (*b)[0], "same seed, same inputs");
  EXPECT_LT((*a)[0].min().item<float>(), 0.0f);  // signed really is signed
}

// Weights equal what torch's own modules draw after manual_seed(42) in construction order.
TEST(Executor, LinearWeightsEqualTorchDefaultsAfterManualSeed42) {
  TaskInstance inst = instance("L3_001");  // In 37, H 32, Out 19
  torch::manual_seed(42);
  torch::nn::Linear fc1(37, 32), fc2(32, 32), fc3(32, 19);
  expect_equal(weight(inst, "fc1.weight"), fc1->weight, "fc1.weight");
  expect_equal(weight(inst, "fc1.bias"), fc1->bias, "fc1.bias");
  expect_equal(weight(inst, "fc2.weight"), fc2->weight, "fc2.weight");
  expect_equal(weight(inst, "fc3.bias"), fc3->bias, "fc3.bias");
}

TEST(Executor, ConvWeightsEqualTorchDefaultsAfterManualSeed42) {
  TaskInstance inst = instance("L3_004");
  torch::manual_seed(42);
  torch::nn::Conv2d c1(torch::nn::Conv2dOptions(1, 6, 5)), c2(torch::nn::Conv2dOptions(6, 16, 5));
  torch::nn::Linear f1(400, 120);
  expect_equal(weight(inst, "conv1.weight"), c1->weight, "conv1.weight");
  expect_equal(weight(inst, "conv1.bias"), c1->bias, "conv1.bias");
  expect_equal(weight(inst, "conv2.weight"), c2->weight, "conv2.weight");
  expect_equal(weight(inst, "fc1.weight"), f1->weight, "fc1.weight");

  TaskInstance t = instance("L1_057");  // ConvTranspose2d(4, 6, 3, bias=False)
  torch::manual_seed(42);
  torch::nn::ConvTranspose2d ct(torch::nn::ConvTranspose2dOptions(4, 6, 3).bias(false));
  expect_equal(weight(t, "conv_transpose2d.weight"), ct->weight, "conv_transpose2d.weight");
  EXPECT_EQ(t.weights().size(), 1u);  // no bias

  TaskInstance t1 = instance("L1_079");  // ConvTranspose1d(5, 7, 3, stride 2, padding 1, dilation 2, bias=False)
  torch::manual_seed(42);
  torch::nn::ConvTranspose1d ct1(
      torch::nn::ConvTranspose1dOptions(5, 7, 3).stride(2).padding(1).dilation(2).bias(false));
  expect_equal(weight(t1, "conv1d_transpose.weight"), ct1->weight, "conv1d_transpose.weight");
  auto in = t1.make_inputs(InputDistribution::kSigned, 5);
  ASSERT_TRUE(in.ok());
  Result<at::Tensor> y = t1.run(*in);
  ASSERT_TRUE(y.ok()) << y.status().to_string();
  expect_equal(*y, ct1->forward((*in)[0]), "L1_079 output");

  // Per-dim lists and a size expression for groups (L1_075: grouped, strided, padded, dilated
  // ConvTranspose2d; L1_085: depthwise, groups = C).
  TaskInstance t2 = instance("L1_075");
  torch::manual_seed(42);
  torch::nn::ConvTranspose2d ct2(torch::nn::ConvTranspose2dOptions(8, 12, {3, 5})
                                     .stride({2, 3})
                                     .padding({1, 2})
                                     .dilation({2, 1})
                                     .groups(4)
                                     .bias(false));
  expect_equal(weight(t2, "conv_transpose2d.weight"), ct2->weight, "L1_075 weight");
  in = t2.make_inputs(InputDistribution::kSigned, 5);
  ASSERT_TRUE(in.ok());
  y = t2.run(*in);
  ASSERT_TRUE(y.ok()) << y.status().to_string();
  expect_equal(*y, ct2->forward((*in)[0]), "L1_075 output");
  TaskInstance t3 = instance("L1_085");
  torch::manual_seed(42);
  torch::nn::Conv2d dw(torch::nn::Conv2dOptions(5, 5, {3, 7}).groups(5).bias(false));
  expect_equal(weight(t3, "conv2d.weight"), dw->weight, "L1_085 weight");
}

TEST(Executor, ParameterModulesDrawRandnInConstructionOrder) {
  TaskInstance inst = instance("L2_037");  // Linear(24, 128), bias randn [128], GroupNorm
  torch::manual_seed(42);
  torch::nn::Linear fc(24, 128);
  torch::Tensor bias = torch::randn({128});
  expect_equal(weight(inst, "fc.weight"), fc->weight, "fc.weight");
  expect_equal(weight(inst, "bias"), bias, "bias");
  expect_equal(weight(inst, "gn.weight"), torch::ones({128}), "gn.weight");
}

TEST(Executor, GemmEpilogueTaskEqualsHandBuiltLibtorch) {
  TaskInstance inst = instance("L2_037");
  auto in = inst.make_inputs(InputDistribution::kSigned, 3);
  ASSERT_TRUE(in.ok());
  Result<at::Tensor> y = inst.run(*in);
  ASSERT_TRUE(y.ok()) << y.status().to_string();
  torch::Tensor h = torch::linear((*in)[0], weight(inst, "fc.weight"), weight(inst, "fc.bias"));
  h = h * torch::sigmoid(h);
  h = h + weight(inst, "bias");
  torch::Tensor want = torch::group_norm(h, 64, weight(inst, "gn.weight"), weight(inst, "gn.bias"), 1e-5);
  expect_equal(*y, want, "L2_037");
}

TEST(Executor, CausalAttentionEqualsHandBuiltLibtorch) {
  TaskInstance inst = instance("L3_043");  // B 2, T 7, C 192, H 2
  auto in = inst.make_inputs(InputDistribution::kUniform01, 11);
  Result<at::Tensor> y = inst.run(*in);
  ASSERT_TRUE(y.ok()) << y.status().to_string();
  const torch::Tensor& x = (*in)[0];
  int64_t B = 2, T = 7, C = 192, H = 2;
  auto qkv = torch::linear(x, weight(inst, "c_attn.weight"), weight(inst, "c_attn.bias")).split(C, 2);
  auto heads = [&](torch::Tensor t) { return t.view({B, T, H, C / H}).transpose(1, 2); };
  torch::Tensor q = heads(qkv[0]), k = heads(qkv[1]), v = heads(qkv[2]);
  torch::Tensor att = torch::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(96.0));
  torch::Tensor mask = torch::tril(torch::ones({T, T})).view({1, 1, T, T});
  att = att.masked_fill(mask == 0, -INFINITY).softmax(-1);
  torch::Tensor o = torch::matmul(att, v).transpose(1, 2).contiguous().view({B, T, C});
  torch::Tensor want = torch::linear(o, weight(inst, "c_proj.weight"), weight(inst, "c_proj.bias"));
  EXPECT_TRUE(torch::allclose(*y, want, 1e-5, 1e-6)) << (*y - want).abs().max().item<double>();
}

TEST(Executor, EncoderLayerMatchesTorchTransformerEncoderLayer) {
  TaskInstance inst = instance("L3_101");  // S 5, B 2, E 16, F 24, 8 heads
  auto in = inst.make_inputs(InputDistribution::kSigned, 21);
  Result<at::Tensor> y = inst.run(*in);
  ASSERT_TRUE(y.ok()) << y.status().to_string();
  torch::nn::TransformerEncoderLayer layer(
      torch::nn::TransformerEncoderLayerOptions(16, 8).dim_feedforward(24).dropout(0.0));
  torch::NoGradGuard g;
  auto params = layer->named_parameters();
  params["self_attn.in_proj_weight"].copy_(weight(inst, "self_attn.in_proj_weight"));
  params["self_attn.in_proj_bias"].copy_(weight(inst, "self_attn.in_proj_bias"));
  params["self_attn.out_proj.weight"].copy_(weight(inst, "self_attn.out_proj.weight"));
  params["self_attn.out_proj.bias"].copy_(weight(inst, "self_attn.out_proj.bias"));
  for (const char* n : {"linear1.weight", "linear1.bias", "linear2.weight", "linear2.bias", "norm1.weight",
                        "norm1.bias", "norm2.weight", "norm2.bias"})
    params[n].copy_(weight(inst, n));
  torch::Tensor want = layer->forward((*in)[0]);
  EXPECT_TRUE(torch::allclose(*y, want, 1e-4, 1e-5)) << (*y - want).abs().max().item<double>();
  // nn.MultiheadAttention zeroes its biases after drawing them.
  EXPECT_EQ(weight(inst, "self_attn.out_proj.bias").abs().sum().item<float>(), 0.0f);
}

TEST(Executor, BatchNormUsesBatchStatisticsAndLeavesWeightsAlone) {
  TaskInstance inst = instance("L1_033");
  auto in = inst.make_inputs(InputDistribution::kUniform01, 2);
  Result<at::Tensor> y1 = inst.run(*in);
  Result<at::Tensor> y2 = inst.run(*in);
  ASSERT_TRUE(y1.ok() && y2.ok());
  expect_equal(*y1, *y2, "second run");
  torch::Tensor x = (*in)[0];
  torch::Tensor mean = x.mean({0, 2, 3}, true);
  torch::Tensor var = x.var({0, 2, 3}, false, true);
  torch::Tensor want = (x - mean) / torch::sqrt(var + 1e-5);
  EXPECT_TRUE(torch::allclose(*y1, want, 1e-4, 1e-5));
  expect_equal(weight(inst, "bn.running_mean"), torch::zeros({3}), "running_mean untouched");
}

TEST(Executor, CudaDeviceIsAParameter) {
  const Task* t = suite().find("L1_019");
  Result<TaskInstance> bad = TaskInstance::create(*t, SizeName::kSmall, "tpu:9");
  EXPECT_FALSE(bad.ok());
}

// nn.LSTM / nn.GRU: weights drawn as torch's own modules draw them after manual_seed(42), in
// registration order, and the same outputs (bidirectional, six layers, batch-first LSTM).
TEST(Executor, RecurrentModulesMatchTorchLstmAndGru) {
  for (const char* id : {"L3_038", "L3_041"}) {
    SCOPED_TRACE(id);
    TaskInstance inst = instance(id);
    const SizeMap& sz = inst.sizes();
    bool lstm = std::string(id) == "L3_038";
    Result<std::vector<at::Tensor>> in = inst.make_inputs(InputDistribution::kSigned, 7);
    ASSERT_TRUE(in.ok());
    Result<std::map<std::string, at::Tensor>> values = inst.run_all(*in);
    ASSERT_TRUE(values.ok()) << values.status().to_string();
    torch::NoGradGuard no_grad;
    if (lstm) {
      torch::manual_seed(42);
      torch::nn::LSTM ref(
          torch::nn::LSTMOptions(sz.at("In"), sz.at("H")).num_layers(6).batch_first(true).bidirectional(true));
      for (const auto& p : ref->named_parameters()) expect_equal(weight(inst, "lstm." + p.key()), p.value(), p.key());
      auto r = ref->forward((*in)[0], std::make_tuple((*in)[1], (*in)[2]));
      expect_equal(values->at("out"), std::get<0>(r), "out");
      expect_equal(values->at("hn"), std::get<0>(std::get<1>(r)), "h_n");
      expect_equal(values->at("cn"), std::get<1>(std::get<1>(r)), "c_n");
    } else {
      torch::manual_seed(42);
      torch::nn::GRU ref(torch::nn::GRUOptions(sz.at("In"), sz.at("H")).num_layers(6).bidirectional(true));
      for (const auto& p : ref->named_parameters()) expect_equal(weight(inst, "gru." + p.key()), p.value(), p.key());
      auto r = ref->forward((*in)[0], (*in)[1]);
      expect_equal(values->at("out"), std::get<0>(r), "out");
      expect_equal(values->at("hn"), std::get<1>(r), "h_n");
    }
  }
}

// Swin V2's constant buffers and ops against independent constructions: the coordinate table from
// its closed form, the shift mask from region counts, the relative-position gather from Swin's own
// meshgrid recipe, normalize from libtorch's functional API, and the whole first block's attention
// logits rebuilt by hand.
TEST(Executor, SwinV2BuffersAndOpsMatchIndependentConstructions) {
  TaskInstance inst = instance("L3_030");
  torch::NoGradGuard no_grad;
  torch::Tensor table = weight(inst, "stage1_even_attn_relative_coords_table");
  ASSERT_EQ(table.sizes(), (std::vector<int64_t>{1, 13, 13, 2}));
  for (int64_t a = 0; a < 13; ++a) {
    double v = (a - 6) * 8.0 / 6.0;
    double sign = (v > 0) - (v < 0);
    double want = sign * std::log2(std::abs(v) + 1) / 3.0;
    EXPECT_NEAR(table[0][a][0][0].item<double>(), want, 1e-6) << a;  // dim 0 follows the row offset
    EXPECT_NEAR(table[0][0][a][1].item<double>(), want, 1e-6) << a;  // dim 1 the column offset
  }
  torch::Tensor mask = weight(inst, "stage1_odd_attn_mask");  // 56 x 56 map, window 7, shift 3
  ASSERT_EQ(mask.sizes(), (std::vector<int64_t>{64, 49, 49}));
  EXPECT_EQ(mask[0].abs().sum().item<double>(), 0.0);  // a window inside one region
  // The bottom-right window holds four regions of 4 x 4, 4 x 3, 3 x 4 and 3 x 3 tokens.
  EXPECT_EQ((mask[63] == 0).sum().item<int64_t>(), 16 * 16 + 12 * 12 + 12 * 12 + 9 * 9);
  EXPECT_EQ((mask[63] == -100).sum().item<int64_t>(), 49 * 49 - 625);
  EXPECT_TRUE(torch::equal(mask, mask.transpose(1, 2)));

  Result<std::vector<at::Tensor>> in = inst.make_inputs(InputDistribution::kSigned, 5);
  ASSERT_TRUE(in.ok());
  Result<std::map<std::string, at::Tensor>> v = inst.run_all(*in);
  ASSERT_TRUE(v.ok()) << v.status().to_string();
  const std::string p = "stage1_even_attn_";
  // normalize
  torch::Tensor q = v->at(p + "q");
  expect_equal(v->at(p + "qn"),
               torch::nn::functional::normalize(q, torch::nn::functional::NormalizeFuncOptions().p(2).dim(-1)),
               "normalize");
  // relative_position_bias: Swin's index from a meshgrid of window coordinates.
  torch::Tensor coords = torch::stack(torch::meshgrid({torch::arange(7), torch::arange(7)}, "ij")).flatten(1);
  torch::Tensor rel = (coords.unsqueeze(2) - coords.unsqueeze(1)).permute({1, 2, 0}).contiguous();
  torch::Tensor index = (rel.select(2, 0) + 6) * 13 + (rel.select(2, 1) + 6);
  torch::Tensor t = v->at(p + "table");  // [169, heads]
  expect_equal(v->at(p + "rpb"), t.index({index.view(-1)}).view({49, 49, -1}).permute({2, 0, 1}),
               "relative_position_bias");
  // The first block's attention logits by hand: 10 * cos(q, k) + 16 * sigmoid(bias).
  torch::Tensor k = v->at(p + "k");
  torch::Tensor cosine = torch::matmul(q / q.norm(2, {-1}, true), (k / k.norm(2, {-1}, true)).transpose(-2, -1));
  torch::Tensor want = cosine * 10 + 16 * torch::sigmoid(v->at(p + "rpb"));
  const torch::Tensor& logits = v->at("stage1_even_logits");  // the block's output, named by its caller
  EXPECT_TRUE(torch::allclose(logits, want, 1e-5, 1e-5)) << (logits - want).abs().max().item<double>();
  // roll: the shifted block's first step.
  expect_equal(v->at("stage1_odd_xs"), torch::roll(v->at("stage1_odd_x4"), {-3, -3}, {1, 2}), "roll");
}

}  // namespace
}  // namespace vinci
