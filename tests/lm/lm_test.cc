// vinci's tiny language model: the tokenizer and template, the base model's digest, generation as
// a pure function of (weights, request), SFT lowering its loss (in process); and `harness lm` over
// real HTTP on loopback: an RL update raises the log-probability of a positive-advantage reply and
// lowers a negative one's, the same parent and request give the same adapter digest also after a
// restart on the same store, unknown adapters are 404 and bad update bodies 400 naming the field.
#include <gtest/gtest.h>
#include <signal.h>

#include <regex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "lm/model.h"
#include "lm/service.h"
#include "lm/tokenizer.h"
#include "tests/cli_test_util.h"

namespace vinci {
namespace {

using clitest::sh;
using nlohmann::json;
const std::string kHarness = std::string(VINCI_BINARY_DIR) + "/bin/harness";

// Small enough that every test runs in seconds on one core.
lm::Shape small_shape() {
  lm::Shape s;
  s.layers = 1;
  s.d_model = 32;
  s.heads = 2;
  s.context = 128;
  return s;
}

json chat_request(const std::string& user, int64_t seed = 1) {
  return {
      {"model", "vinci-tiny"},
      {"messages", {{{"role", "system"}, {"content", "You write kernels."}}, {{"role", "user"}, {"content", user}}}},
      {"temperature", 1.0},
      {"max_tokens", 24},
      {"seed", seed}};
}

// ----- in process ------------------------------------------------------------------------------

TEST(LmTokenizer, TemplateRendersRolesPartsAndToolCalls) {
  json request = {
      {"messages",
       {{{"role", "user"},
         {"content", json::array({{{"type", "text"}, {"text", "a"}}, {{"type", "text"}, {"text", "b"}}})}},
        {{"role", "assistant"},
         {"content", "c"},
         {"tool_calls", {{{"type", "function"}, {"function", {{"name", "f"}, {"arguments", "{\"x\":1}"}}}}}}}}}};
  auto p = lm::encode_prompt(request);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(lm::decode(*p),
            "<|user|>ab<|end|><|assistant|>c<tool_call>{\"arguments\":{\"x\":1},\"name\":\"f\"}</tool_call><|end|>"
            "<|assistant|>");
  EXPECT_EQ(lm::encode_reply("hi"), (std::vector<int32_t>{'h', 'i', lm::kTokEnd}));
  auto bad = lm::encode_prompt({{"messages", {{{"role", "robot"}, {"content", "x"}}}}});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("messages[0].role"), std::string::npos) << bad.status().message();
}

TEST(LmTokenizer, ALongPromptIsCutOnTheLeft) {
  std::vector<int32_t> prompt;
  for (int32_t i = 0; i < 300; ++i) prompt.push_back(i % 256);
  // Context 128: the prompt is promised 64 positions, a 100-token reply gets the other 64.
  int32_t reply = lm::fit_to_context(128, &prompt, 100);
  EXPECT_EQ(reply, 64);
  ASSERT_EQ(prompt.size(), 64u);
  EXPECT_EQ(prompt.back(), 299 % 256);  // the end of the prompt is kept
  std::vector<int32_t> short_prompt = {1, 2, 3};
  EXPECT_EQ(lm::fit_to_context(128, &short_prompt, 1000), 125);
  EXPECT_EQ(short_prompt.size(), 3u);
}

TEST(LmModel, InitDigestIsDeterministic) {
  auto a = lm::Model::init(small_shape(), 7);
  auto b = lm::Model::init(small_shape(), 7);
  auto c = lm::Model::init(small_shape(), 8);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  const std::string da = lm::state_digest((*a)->to_bytes());
  EXPECT_EQ(da.size(), 64u);
  EXPECT_EQ(da, lm::state_digest((*b)->to_bytes()));
  EXPECT_NE(da, lm::state_digest((*c)->to_bytes()));
  // The parameters come from vinci's keyed RNG alone (no torch generator, no torch arithmetic), so
  // the base digest is the same on every machine: pinned here.
  EXPECT_EQ(lm::state_digest((*lm::Model::init(lm::Shape{}, 0))->to_bytes()),
            "14190f5c7068d8ee7dd9af0b834604a1545bd37d4a52ac215fa3c6677db40357");
  // A state read back is the same state.
  auto back = lm::Model::from_bytes((*a)->to_bytes());
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(lm::state_digest((*back)->to_bytes()), da);
  std::string damaged = (*a)->to_bytes();
  damaged.resize(damaged.size() - 3);
  EXPECT_EQ(lm::Model::from_bytes(damaged).status().code(), StatusCode::kCorruption);
}

lm::ServiceOptions service_options(const std::string& store) {
  lm::ServiceOptions o;
  o.store = store;
  o.shape = small_shape();
  return o;
}

TEST(LmModel, GenerationIsAPureFunctionOfWeightsAndRequest) {
  std::string dir = clitest::temp_dir("vinci_lm_");
  auto s = lm::Service::open(service_options(dir + "/store"));
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  auto a = (*s)->chat(chat_request("Task L1_019: ReLU"));
  auto b = (*s)->chat(chat_request("Task L1_019: ReLU"));
  ASSERT_TRUE(a.ok() && b.ok()) << a.status().to_string();
  EXPECT_EQ(a->content, b->content);
  EXPECT_EQ(a->finish_reason, b->finish_reason);
  EXPECT_FALSE(a->content.empty());
  // Another seed draws another reply (24 tokens of a near-uniform model cannot all agree).
  auto c = (*s)->chat(chat_request("Task L1_019: ReLU", 2));
  ASSERT_TRUE(c.ok());
  EXPECT_NE(a->content, c->content);
  // Greedy is greedy: the same reply for any seed.
  json g1 = chat_request("hello", 1), g2 = chat_request("hello", 2);
  g1["temperature"] = g2["temperature"] = 0;
  EXPECT_EQ((*s)->chat(g1)->content, (*s)->chat(g2)->content);
  // A second service on the same store (a restarted server) answers the same.
  auto s2 = lm::Service::open(service_options(dir + "/store"));
  ASSERT_TRUE(s2.ok());
  EXPECT_EQ((*s2)->chat(chat_request("Task L1_019: ReLU"))->content, a->content);
  EXPECT_EQ((*s2)->base_digest(), (*s)->base_digest());
  // max_tokens bounds the reply.
  json one = chat_request("x");
  one["max_tokens"] = 3;
  auto r = (*s)->chat(one);
  ASSERT_TRUE(r.ok());
  EXPECT_LE(r->completion_tokens, 3);
}

json update_body(const std::string& kind, const std::string& parent,
                 const std::vector<std::pair<std::string, double>>& samples, json options = json::object()) {
  json list = json::array();
  for (const auto& [completion, adv] : samples) {
    list.push_back({{"role", "policy"},
                    {"request", chat_request("Task L1_019: ReLU\nWrite the kernel.")},
                    {"completion", completion},
                    {"advantage", adv},
                    {"scale", 1}});
  }
  return {{"protocol", "vinci.trainer/1"},
          {"kind", kind},
          {"run", "test"},
          {"step", kind == "sft" ? -1 : 0},
          {"base_model", "vinci-tiny"},
          {"parent", parent},
          {"roles", {"policy"}},
          {"seed", "00000000000000ab"},
          {"options", options},
          {"samples", list}};
}

TEST(LmModel, SftLowersTheLossOnItsData) {
  std::string dir = clitest::temp_dir("vinci_lm_");
  auto s = lm::Service::open(service_options(dir + "/store"));
  ASSERT_TRUE(s.ok());
  auto r = (*s)->update(update_body(
      "sft", "",
      {{"__global__ void relu(float* x) { x[0] = 0; }", 1}, {"# knobs: block = 256", 1}, {"tile = 64, unroll = 4", 1}},
      {{"lr", 3e-3}, {"epochs", 5}, {"batch", 2}}));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_LT((*r)["loss_after"].get<double>(), (*r)["loss_before"].get<double>() - 0.1) << r->dump();
  EXPECT_EQ((*r)["samples"], 3);
  EXPECT_EQ((*r)["model"], "vinci-tiny-" + (*r)["adapter"].get<std::string>().substr(0, 16));
}

// Byte tokens of a text, closed by <|end|> when `end`.
std::vector<int32_t> bytes_of(const std::string& text, bool end) {
  std::vector<int32_t> out(text.begin(), text.end());
  for (auto& t : out) t &= 0xff;
  if (end) out.push_back(lm::kTokEnd);
  return out;
}

// Sequences of unequal prompt and reply lengths, so a padded pass pads every row but one.
std::vector<lm::Sequence> uneven_sequences() {
  const char* prompts[] = {"Task L1_019: ReLU", "Write a softmax kernel for rows of 4096 floats.", "hi",
                           "Task L2_003: fused matmul + bias + GELU, tile it", "x"};
  const char* replies[] = {"__global__ void relu(float* x, int n) { if (threadIdx.x < n) x[threadIdx.x] = 0; }", "ok",
                           "__global__ void k() {}", "# knobs: block = 256, unroll = 4", "tile = 64"};
  std::vector<lm::Sequence> out;
  for (size_t i = 0; i < 5; ++i) {
    lm::Sequence s;
    s.prompt = bytes_of(prompts[i], false);
    s.prompt.push_back(lm::kTokAssistant);
    s.reply = bytes_of(replies[i], true);
    s.advantage = i % 2 == 0 ? 1.5 : -0.5;
    out.push_back(std::move(s));
  }
  return out;
}

TEST(LmModel, ABatchedPassGivesTheLossesOfOneSampleAtATime) {
  auto base = lm::Model::init(small_shape(), 3);
  ASSERT_TRUE(base.ok()) << base.status().to_string();
  // An rl step with the KL term moves off the base first, so the reference differs from the policy.
  auto parent = (*base)->clone();
  lm::UpdateOptions warm;
  warm.lr = 3e-3;
  ASSERT_TRUE(parent->update(true, uneven_sequences(), warm, RngKey::root(1), base->get()).ok());
  for (bool rl : {false, true}) {
    lm::UpdateOptions o;
    o.kl = rl ? 0.1 : 0;
    o.batch = 5;  // one optimizer step: its loss and gradient norm are measured before it
    std::vector<lm::UpdateStats> stats;
    for (int32_t pass : {1, 2, 5}) {
      o.pass = pass;
      auto m = parent->clone();
      auto r = m->update(rl, uneven_sequences(), o, RngKey::root(2), base->get());
      ASSERT_TRUE(r.ok()) << r.status().to_string();
      stats.push_back(*r);
    }
    for (size_t i = 1; i < stats.size(); ++i) {
      SCOPED_TRACE(std::string(rl ? "rl" : "sft") + ", pass " + std::to_string(i));
      EXPECT_NEAR(stats[i].loss, stats[0].loss, 1e-5);
      EXPECT_NEAR(stats[i].grad_norm, stats[0].grad_norm, 1e-5 * std::max(1.0, stats[0].grad_norm));
      EXPECT_EQ(stats[i].prompt_tokens, stats[0].prompt_tokens);
      EXPECT_EQ(stats[i].reply_tokens, stats[0].reply_tokens);
      if (!rl) {
        EXPECT_NEAR(stats[i].loss_before, stats[0].loss_before, 1e-5);
        EXPECT_NEAR(stats[i].loss_after, stats[0].loss_after, 1e-4);
      }
    }
  }
}

TEST(LmModel, CudaNeedsALibtorchWithCudaAndStatesDoNotDependOnTheDevice) {
  EXPECT_EQ(*lm::prepare_device("cpu"), "cpu");
  EXPECT_EQ(lm::prepare_device("gpu").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(lm::prepare_device("cuda:x").status().code(), StatusCode::kInvalidArgument);
  auto cuda = lm::prepare_device("cuda");
  if (!cuda.ok()) {
    // This build's libtorch is CPU-only (or sees no GPU): --device cuda fails at start, saying so.
    EXPECT_EQ(cuda.status().code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(cuda.status().message().find("libtorch has"), std::string::npos) << cuda.status().to_string();
    std::string dir = clitest::temp_dir("vinci_lm_"), out;
    EXPECT_EQ(sh(kHarness + " lm --port 0 --store " + dir + "/store --device cuda 2>&1", &out), 2) << out;
    EXPECT_NE(out.find("--device cuda: this vinci's libtorch has"), std::string::npos) << out;
    EXPECT_EQ(sh(kHarness + " lm --port 0 --store " + dir + "/store --train-batch 0 2>&1", &out), 2) << out;
    EXPECT_NE(out.find("--train-batch"), std::string::npos) << out;
    return;
  }
  // A GPU: the base is drawn on the CPU and moved, so its digest is the CPU's; a state moves
  // between devices unchanged; generation and updates run there.
  auto cpu = lm::Model::init(small_shape(), 7);
  auto gpu = lm::Model::init(small_shape(), 7, *cuda);
  ASSERT_TRUE(cpu.ok() && gpu.ok()) << gpu.status().to_string();
  EXPECT_EQ((*gpu)->device(), *cuda);
  const std::string digest = lm::state_digest((*cpu)->to_bytes());
  EXPECT_EQ(lm::state_digest((*gpu)->to_bytes()), digest);
  EXPECT_EQ(lm::state_digest((*lm::Model::from_bytes((*cpu)->to_bytes(), *cuda))->to_bytes()), digest);
  lm::UpdateOptions o;
  o.pass = 3;
  auto r = (*gpu)->update(false, uneven_sequences(), o, RngKey::root(2), nullptr);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  auto on_cpu = lm::Model::from_bytes((*gpu)->to_bytes());
  ASSERT_TRUE(on_cpu.ok());
  EXPECT_EQ(lm::state_digest((*on_cpu)->to_bytes()), lm::state_digest((*gpu)->to_bytes()));
  lm::SampleOptions greedy;
  greedy.temperature = 0;
  greedy.max_tokens = 8;
  auto g = (*gpu)->generate(bytes_of("hello", false), greedy, RngKey::root(1));
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  EXPECT_EQ(g->prompt_tokens, 5);
}

// ----- `harness lm` over HTTP ----------------------------------------------------------------------

class LmServer {
 public:
  explicit LmServer(const std::string& dir, const std::string& store) {
    if (!child_.start({kHarness, "lm", "--port", "0", "--store", store, "--layers", "1", "--d-model", "32", "--heads",
                       "2", "--context", "128"},
                      dir + "/lm.out")) {
      ADD_FAILURE() << child_.why();
      return;
    }
    std::vector<std::string> m;
    if (!child_.wait_for(std::regex("listening on [^:\\s]+:(\\d+)"), &m)) {
      ADD_FAILURE() << child_.why();
      return;
    }
    port_ = std::stoi(m[1]);
    dir_ = dir;
  }
  ~LmServer() { child_.stop(SIGTERM); }
  int port() const { return port_; }
  std::string log() const { return child_.output(); }
  void kill() { child_.stop(SIGKILL); }

  struct Reply {
    int status = 0;
    json body;
  };
  Reply post(const std::string& path, const json& body) const {
    EXPECT_TRUE(write_file_atomic(dir_ + "/body", body.dump(), false).ok());
    return curl("-H 'Content-Type: application/json' --data-binary @" + dir_ + "/body", path);
  }
  Reply get(const std::string& path) const { return curl("", path); }

 private:
  Reply curl(const std::string& args, const std::string& path) const {
    std::string out;
    std::string cmd =
        "curl -s -o " + dir_ + "/reply -w '%{http_code}' " + args + " http://127.0.0.1:" + std::to_string(port_) + path;
    EXPECT_EQ(sh(cmd, &out), 0) << cmd << ": " << out;
    Reply r;
    r.status = std::atoi(out.c_str());
    auto text = read_file(dir_ + "/reply");
    r.body = json::parse(text.ok() ? *text : "", nullptr, false);
    return r;
  }

  clitest::Child child_;
  int port_ = 0;
  std::string dir_;
};

const char kGood[] =
    "__global__ void relu(float* x, int n) { int i = threadIdx.x; if (i < n) x[i] = x[i] > 0 ? x[i] : 0; }";
const char kBad[] = "I cannot write this kernel, sorry.";

double logprob(const LmServer& s, const std::string& model, const std::string& completion) {
  auto r = s.post("/v1/vinci/logprob", {{"model", model},
                                        {"request", chat_request("Task L1_019: ReLU\nWrite the kernel.")},
                                        {"completion", completion}});
  EXPECT_EQ(r.status, 200) << r.body.dump();
  return r.body.value("logprob", 0.0);
}

TEST(LmServer, RlUpdateRaisesAPositiveReplyAndLowersANegativeOne) {
  std::string dir = clitest::temp_dir("vinci_lm_");
  LmServer s(dir, dir + "/store");
  ASSERT_GT(s.port(), 0) << s.log();
  const double good0 = logprob(s, "vinci-tiny", kGood), bad0 = logprob(s, "vinci-tiny", kBad);
  auto up = s.post("/v1/vinci/update", update_body("rl", "", {{kGood, 1.0}, {kBad, -1.0}}, {{"lr", 1e-3}}));
  ASSERT_EQ(up.status, 200) << up.body.dump() << s.log();
  const std::string model = up.body["model"];
  EXPECT_EQ(up.body["adapter"].get<std::string>().size(), 64u);
  EXPECT_EQ(up.body["samples"], 2);
  EXPECT_GT(up.body["tokens"]["completion"].get<int64_t>(), 0);
  const double good1 = logprob(s, model, kGood), bad1 = logprob(s, model, kBad);
  EXPECT_GT(good1, good0) << "before " << good0 << ", after " << good1;
  EXPECT_LT(bad1, bad0) << "before " << bad0 << ", after " << bad1;
  // The new model answers chat requests by its name, and the list names it.
  json req = chat_request("hi");
  req["model"] = model;
  EXPECT_EQ(s.post("/v1/chat/completions", req).status, 200);
  auto models = s.get("/v1/models");
  ASSERT_EQ(models.status, 200);
  EXPECT_NE(models.body.dump().find(model), std::string::npos) << models.body.dump();
  EXPECT_EQ(models.body["data"][0]["id"], "vinci-tiny");
  EXPECT_EQ(models.body["data"][0]["max_model_len"], 128);
  // A second step from the first one moves further.
  auto up2 =
      s.post("/v1/vinci/update", update_body("rl", up.body["adapter"], {{kGood, 1.0}, {kBad, -1.0}}, {{"lr", 1e-3}}));
  ASSERT_EQ(up2.status, 200) << up2.body.dump();
  EXPECT_GT(logprob(s, up2.body["model"], kGood), good1);
}

TEST(LmServer, SameParentAndRequestGiveTheSameAdapterAlsoAfterARestart) {
  std::string dir = clitest::temp_dir("vinci_lm_");
  const json body = update_body("rl", "", {{kGood, 0.5}, {kBad, -0.25}}, {{"lr", 2e-3}, {"kl", 0.1}});
  std::string first, second_step;
  json chat;
  {
    LmServer s(dir, dir + "/store");
    ASSERT_GT(s.port(), 0) << s.log();
    auto a = s.post("/v1/vinci/update", body);
    auto b = s.post("/v1/vinci/update", body);
    ASSERT_EQ(a.status, 200) << a.body.dump();
    ASSERT_EQ(b.status, 200) << b.body.dump();
    first = a.body["adapter"];
    EXPECT_EQ(b.body["adapter"], first);
    auto c = s.post("/v1/vinci/update", update_body("rl", first, {{kGood, 1.0}}));
    ASSERT_EQ(c.status, 200);
    second_step = c.body["adapter"];
    json req = chat_request("Task L1_019");
    req["model"] = a.body["model"];
    chat = s.post("/v1/chat/completions", req).body;
    s.kill();  // SIGKILL: the store holds whole states only
  }
  LmServer s(dir, dir + "/store");
  ASSERT_GT(s.port(), 0) << s.log();
  // The adapter is served after the restart (read from the store), and answers the same.
  auto loaded = s.post("/v1/vinci/load", {{"protocol", "vinci.trainer/1"}, {"adapter", first}});
  ASSERT_EQ(loaded.status, 200) << loaded.body.dump();
  EXPECT_EQ(loaded.body["model"], "vinci-tiny-" + first.substr(0, 16));
  json req = chat_request("Task L1_019");
  req["model"] = loaded.body["model"];
  EXPECT_EQ(s.post("/v1/chat/completions", req).body["choices"], chat["choices"]);
  EXPECT_EQ(s.post("/v1/vinci/update", body).body["adapter"], first);
  EXPECT_EQ(s.post("/v1/vinci/update", update_body("rl", first, {{kGood, 1.0}})).body["adapter"], second_step);
}

TEST(LmServer, UnknownAdapterIs404) {
  std::string dir = clitest::temp_dir("vinci_lm_");
  LmServer s(dir, dir + "/store");
  ASSERT_GT(s.port(), 0) << s.log();
  json req = chat_request("hi");
  req["model"] = "vinci-tiny-0123456789abcdef";
  auto chat = s.post("/v1/chat/completions", req);
  EXPECT_EQ(chat.status, 404) << chat.body.dump();
  EXPECT_EQ(chat.body["error"]["type"], "not_found");
  req["model"] = "gpt-4";
  EXPECT_EQ(s.post("/v1/chat/completions", req).status, 404);
  const std::string missing(64, 'e');
  auto load = s.post("/v1/vinci/load", {{"protocol", "vinci.trainer/1"}, {"adapter", missing}});
  EXPECT_EQ(load.status, 404);
  EXPECT_NE(load.body["error"]["message"].get<std::string>().find("unknown adapter"), std::string::npos);
  EXPECT_EQ(s.post("/v1/vinci/update", update_body("rl", missing, {{kGood, 1.0}})).status, 404);
  EXPECT_EQ(
      s.post("/v1/vinci/logprob", {{"model", "nope"}, {"request", chat_request("x")}, {"completion", "y"}}).status,
      404);
}

TEST(LmServer, BadUpdateBodiesAre400NamingTheField) {
  std::string dir = clitest::temp_dir("vinci_lm_");
  LmServer s(dir, dir + "/store");
  ASSERT_GT(s.port(), 0) << s.log();
  const json good = update_body("rl", "", {{kGood, 1.0}});
  struct Case {
    std::function<void(json&)> damage;
    std::string field;
  } cases[] = {
      {[](json& b) { b.erase("protocol"); }, "protocol"},
      {[](json& b) { b["protocol"] = "vinci.trainer/0"; }, "protocol"},
      {[](json& b) { b["kind"] = "ppo"; }, "kind"},
      {[](json& b) { b["parent"] = "abc"; }, "parent"},
      {[](json& b) { b["seed"] = 12; }, "seed"},
      {[](json& b) { b["base_model"] = "other"; }, "base_model"},
      {[](json& b) { b["options"]["lr"] = -1; }, "options.lr"},
      {[](json& b) { b["options"]["epochs"] = 0; }, "options.epochs"},
      {[](json& b) { b["samples"] = "none"; }, "samples"},
      {[](json& b) { b["samples"][0]["advantage"] = "high"; }, "samples[0].advantage"},
      {[](json& b) { b["samples"][0].erase("completion"); }, "samples[0].completion"},
      {[](json& b) { b["samples"][0]["request"]["messages"][0]["role"] = 3; }, "samples[0].request.messages[0].role"},
  };
  for (const auto& c : cases) {
    json body = good;
    c.damage(body);
    auto r = s.post("/v1/vinci/update", body);
    EXPECT_EQ(r.status, 400) << c.field << ": " << r.body.dump();
    std::string message = r.body.is_object() ? r.body["error"].value("message", "") : "";
    EXPECT_EQ(message.rfind(c.field + ":", 0), 0u) << c.field << ": " << message;
  }
  auto chat = s.post("/v1/chat/completions", [] {
    json r = chat_request("x");
    r["temperature"] = -1;
    return r;
  }());
  EXPECT_EQ(chat.status, 400);
  EXPECT_NE(chat.body["error"]["message"].get<std::string>().find("temperature"), std::string::npos);
  EXPECT_EQ(s.post("/v1/vinci/update", json::array()).status, 400);
}

}  // namespace
}  // namespace vinci
