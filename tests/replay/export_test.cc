// `replay export` end to end: a language-model run against `harness serve` (the sim backbone behind
// the chat completions API), exported and cross-checked record by record against `replay cat`;
// the other phases, roles, damaged objects and a sim run.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "core/atomic_file.h"
#include "tests/cli_test_util.h"

namespace vinci {
namespace {

using clitest::sh;
using nlohmann::json;

const std::string kBin = std::string(VINCI_BINARY_DIR) + "/bin/";
const std::string kSrc = std::string(VINCI_SOURCE_DIR) + "/";

// Runs a shell command; its stdout alone in *out (stderr dropped).
int stdout_of(const std::string& cmd, std::string* out) { return sh("{ " + cmd + " 2>/dev/null; }", out); }

std::vector<json> json_lines(const std::string& text) {
  std::vector<json> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    json j = json::parse(line, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << "not JSON: " << line.substr(0, 300);
    out.push_back(std::move(j));
  }
  return out;
}

// `harness serve --port 0` in the background, its output in DIR/serve.out; the port it listens on.
// The constructor returns once the server printed its port, or exited (a failure naming its exit
// status and output), however long its start takes.
class Server {
 public:
  // faults: harness serve's --faults list, for the first requests.
  explicit Server(const std::string& dir, const std::string& faults = "") {
    const std::string library = kSrc + "experiments/seed_skills.jsonl";
    if (!child_.start({kBin + "harness", "serve", "--port", "0", "--library", library, "--faults", faults},
                      dir + "/serve.out")) {
      ADD_FAILURE() << child_.why();
      return;
    }
    std::vector<std::string> m;
    if (!child_.wait_for(std::regex("listening on [^:\\s]+:(\\d+)"), &m)) {
      ADD_FAILURE() << child_.why();
      return;
    }
    port_ = std::stoi(m[1]);
  }
  ~Server() { stop(); }
  int port() const { return port_; }
  // SIGTERM; the server's exit code (-1 when it did not exit normally or was not running).
  int stop() {
    if (!child_.running()) return -1;
    int st = child_.stop(SIGTERM);
    return st >= 0 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  }

 private:
  clitest::Child child_;
  int port_ = 0;
};

// The llm_smoke experiment recorded against a local server, under a new root. Returns the run.
std::string llm_run(const std::string& root, const std::string& faults = "") {
  Server server(root, faults);
  auto log = read_file(root + "/serve.out");
  EXPECT_GT(server.port(), 0) << (log.ok() ? *log : std::string());
  std::string out;
  EXPECT_EQ(sh(kBin + "harness run " + kSrc + "experiments/llm_smoke.toml --out " + root +
                   " --set backbone.base_url=http://127.0.0.1:" + std::to_string(server.port()) + "/v1",
               &out),
            0)
      << out;
  EXPECT_EQ(server.stop(), 0);
  return root + "/llm_smoke";
}

// The object file of an address under a runs root.
std::string object_path(const std::string& root, const std::string& hex) {
  return root + "/objects/" + hex.substr(0, 2) + "/" + hex.substr(2);
}

using TurnKey = std::tuple<int, std::string, int, int, int>;       // step, task, scheme, rollout, turn
using SampleKey = std::tuple<std::string, int, std::string, int>;  // role, step, task, sampleIndex

int field(const json& r, const char* name) { return r.value(name, -1); }

TEST(Export, ALanguageModelRunExportsEveryCallWithItsAdvantage) {
  const std::string root = clitest::temp_dir("vinci_export_");
  const std::string run = llm_run(root);
  if (testing::Test::HasFailure()) return;

  std::string out, records_text;
  ASSERT_EQ(sh(kBin + "replay export " + run + " --out " + root + "/train.jsonl", &out), 0) << out;
  EXPECT_NE(out.find("replay export: "), std::string::npos) << out;
  std::vector<json> lines = json_lines(read_file(root + "/train.jsonl").value());
  ASSERT_FALSE(lines.empty());
  // stdout carries the same lines.
  ASSERT_EQ(stdout_of(kBin + "replay export " + run, &out), 0);
  EXPECT_EQ(out, read_file(root + "/train.jsonl").value());

  // The records, through replay cat: advantages, rewards and model calls of the train phase.
  ASSERT_EQ(sh(kBin + "replay cat " + run + " --no-manifest", &records_text), 0);
  std::map<TurnKey, json> policy_adv, turn_reward;
  std::map<SampleKey, json> sample_adv, sample_reward;
  std::map<uint64_t, json> calls;          // seq -> llmReply
  std::map<std::string, int> train_calls;  // role -> LlmReply records of the train phase
  for (const json& r : json_lines(records_text)) {
    if (r.value("phase", "train") != "train") continue;
    TurnKey tk{field(r, "step"), r.value("task", ""), field(r, "scheme"), field(r, "rollout"), field(r, "turn")};
    if (r.contains("advantage")) {
      const json& a = r["advantage"];
      if (a["role"] == "policy") {
        policy_adv[tk] = a;
      } else {
        sample_adv[{a["role"].get<std::string>(), field(r, "step"), r["task"].get<std::string>(),
                    a.value("sampleIndex", -1)}] = a;
      }
    } else if (r.contains("reward")) {
      const json& w = r["reward"];
      if (w.value("kind", "turn") == "turn") {
        turn_reward[tk] = w;
      } else {
        std::string role = w["kind"] == "scheme" ? "selection" : "summary";
        sample_reward[{role, field(r, "step"), r["task"].get<std::string>(), w.value("sampleIndex", -1)}] = w;
      }
    } else if (r.contains("llmReply")) {
      calls[std::stoull(r["seq"].get<std::string>())] = r["llmReply"];
      train_calls[r["llmReply"]["role"].get<std::string>()]++;
    }
  }

  std::map<std::string, int> by_role;
  std::map<std::tuple<int, std::string, int, int>, size_t> turn0_messages;  // per rollout
  uint64_t last_seq = 0;
  for (const json& l : lines) {
    const std::string role = l.at("role").get<std::string>();
    by_role[role]++;
    SCOPED_TRACE(l.dump().substr(0, 400));
    // Log order.
    const uint64_t seq = l.at("seq").get<uint64_t>();
    EXPECT_GT(seq, last_seq);
    last_seq = seq;
    EXPECT_EQ(l.at("phase"), "train");
    // The call it came from.
    ASSERT_TRUE(calls.count(seq));
    const json& call = calls[seq];
    EXPECT_EQ(call["role"], role);
    EXPECT_EQ(l.at("request"), call["prompt"]);
    EXPECT_EQ(l.at("model"), call["model"]);
    EXPECT_EQ(l.at("finish_reason"), call["finishReason"]);
    EXPECT_EQ(l.at("sample_index"), call.value("sampleIndex", -1));
    // The request's messages, as sent: the system prompt first.
    ASSERT_TRUE(l.at("messages").is_array());
    ASSERT_GE(l["messages"].size(), 2u);
    EXPECT_EQ(l["messages"][0].at("role"), "system");
    EXPECT_EQ(l["messages"][1].at("role"), "user");
    // The reply as received.
    ASSERT_TRUE(l.at("reply").is_object());
    EXPECT_EQ(l["reply"].at("role"), "assistant");
    EXPECT_FALSE(l["reply"].at("content").get<std::string>().empty());
    EXPECT_FALSE(l.contains("failure"));
    // The advantage and the reward it matches.
    const json* adv = nullptr;
    const json* reward = nullptr;
    if (role == "policy") {
      TurnKey tk{l["step"].get<int>(), l["task"].get<std::string>(), l["scheme"].get<int>(), l["rollout"].get<int>(),
                 l["turn"].get<int>()};
      ASSERT_TRUE(policy_adv.count(tk));
      adv = &policy_adv[tk];
      ASSERT_TRUE(turn_reward.count(tk));
      reward = &turn_reward[tk];
      // Turn t holds the earlier turns' replies and feedback: two messages each.
      auto rk = std::make_tuple(l["step"].get<int>(), l["task"].get<std::string>(), l["scheme"].get<int>(),
                                l["rollout"].get<int>());
      const int turn = l["turn"].get<int>();
      if (turn == 0) {
        turn0_messages[rk] = l["messages"].size();
      } else {
        ASSERT_TRUE(turn0_messages.count(rk));
        EXPECT_EQ(l["messages"].size(), turn0_messages[rk] + 2 * static_cast<size_t>(turn));
        EXPECT_EQ(l["messages"][l["messages"].size() - 2].at("role"), "assistant");
      }
    } else {
      SampleKey sk{role, l["step"].get<int>(), l["task"].get<std::string>(), l["sample_index"].get<int>()};
      ASSERT_TRUE(sample_adv.count(sk));
      adv = &sample_adv[sk];
      ASSERT_TRUE(sample_reward.count(sk));
      reward = &sample_reward[sk];
      if (role == "selection") {
        EXPECT_EQ(l["sample_index"], l["scheme"]);
      }
    }
    EXPECT_EQ(l.at("advantage").get<double>(), adv->value("value", 0.0));
    EXPECT_EQ(l.at("return").get<double>(), adv->value("returnValue", 0.0));
    EXPECT_EQ(l.at("baseline").get<double>(), adv->value("baseline", 0.0));
    EXPECT_EQ(l.at("scale").get<double>(), adv->value("scale", 0.0));
    EXPECT_EQ(l.at("group_size").get<int>(), adv->value("groupSize", 0));
    EXPECT_EQ(l.at("reward").get<double>(), reward->value("value", 0.0));
  }
  // One policy line per policy advantage of the train phase; every selection and summary call of
  // the train phase exported.
  EXPECT_EQ(by_role["policy"], static_cast<int>(policy_adv.size()));
  EXPECT_EQ(by_role["policy"], train_calls["policy"]);
  EXPECT_GT(train_calls["selection"], 0);
  EXPECT_GT(train_calls["summary"], 0);
  EXPECT_EQ(by_role["selection"], train_calls["selection"]);
  EXPECT_EQ(by_role["summary"], train_calls["summary"]);
  EXPECT_FALSE(turn0_messages.empty());

  // One role.
  ASSERT_EQ(stdout_of(kBin + "replay export " + run + " --role summary", &out), 0);
  auto summary_lines = json_lines(out);
  EXPECT_EQ(static_cast<int>(summary_lines.size()), train_calls["summary"]);
  for (const json& l : summary_lines) EXPECT_EQ(l["role"], "summary");

  // The evaluation records no advantages: an error unless every call is asked for.
  ASSERT_EQ(sh(kBin + "replay export " + run + " --phase eval", &out), 2) << out;
  EXPECT_NE(out.find("only the train phase records advantages"), std::string::npos) << out;
  ASSERT_EQ(stdout_of(kBin + "replay export " + run + " --phase eval --all-calls", &out), 0);
  auto eval_lines = json_lines(out);
  EXPECT_FALSE(eval_lines.empty());
  for (const json& l : eval_lines) {
    EXPECT_EQ(l["phase"], "eval");
    EXPECT_TRUE(l["advantage"].is_null());
    if (l["role"] == "policy") {
      EXPECT_TRUE(l["reward"].is_number());
    }
  }
  EXPECT_EQ(sh(kBin + "replay export " + run + " --phase nope", &out), 2);
  EXPECT_NE(out.find("unknown phase 'nope'"), std::string::npos) << out;

  // A damaged object is an error naming the record; --out keeps its old contents.
  const std::string target = root + "/keep.jsonl";
  ASSERT_TRUE(write_file_atomic(target, "old\n").ok());
  const std::string reply_hex = calls[lines[0]["seq"].get<uint64_t>()]["reply"].get<std::string>();
  const std::string good = read_file(object_path(root, reply_hex)).value();
  std::string bytes = good;
  bytes[bytes.size() - 3] ^= 0x20;
  ASSERT_TRUE(write_file_atomic(object_path(root, reply_hex), bytes).ok());
  EXPECT_EQ(sh(kBin + "replay export " + run + " --out " + target, &out), 1) << out;
  EXPECT_NE(out.find("record " + std::to_string(lines[0]["seq"].get<uint64_t>()) + " (llmReply"), std::string::npos)
      << out;
  EXPECT_EQ(read_file(target).value(), "old\n");
  ASSERT_TRUE(write_file_atomic(object_path(root, reply_hex), good).ok());
  // A missing one too.
  const std::string request_hex = lines[1]["request"].get<std::string>();
  ASSERT_EQ(::unlink(object_path(root, request_hex).c_str()), 0);
  EXPECT_EQ(
      sh(kBin + "replay export " + run + " --role " + lines[1]["role"].get<std::string>() + " --out " + target, &out),
      2)
      << out;
  EXPECT_NE(out.find("record " + std::to_string(lines[1]["seq"].get<uint64_t>()) + " (llmReply"), std::string::npos)
      << out;
  EXPECT_NE(out.find(request_hex), std::string::npos) << out;
  EXPECT_EQ(read_file(target).value(), "old\n");
}

// A reply that holds no kernel or tool call (prose) is the model's answer: exported as it was
// written, with its advantage, and nothing marks it failed. (A call the server never answered
// stops the run and is not recorded, so it is never exported; runs recorded before that rule
// export such calls with their "failure".)
TEST(Export, RepliesWithoutAKernelAreExportedAsWrittenWithTheirAdvantage) {
  const std::string root = clitest::temp_dir("vinci_export_prose_");
  // The first 24 replies are prose: the 12 calls of the evaluation before step 0, then 12 of the
  // training step's.
  std::string faults = "no_tool_call";
  for (int i = 1; i < 24; ++i) faults += ",no_tool_call";
  const std::string run = llm_run(root, faults);
  if (testing::Test::HasFailure()) return;
  std::string out, records_text;
  ASSERT_EQ(stdout_of(kBin + "replay export " + run, &out), 0) << out;
  std::vector<json> lines = json_lines(out);
  ASSERT_EQ(sh(kBin + "replay cat " + run + " --no-manifest", &records_text), 0);
  std::map<uint64_t, json> calls;
  for (const json& r : json_lines(records_text)) {
    if (r.contains("llmReply") && r.value("phase", "train") == "train") {
      calls[std::stoull(r["seq"].get<std::string>())] = r["llmReply"];
    }
  }
  EXPECT_EQ(lines.size(), calls.size());
  int prose = 0;
  for (const json& l : lines) {
    EXPECT_FALSE(l.contains("failure")) << l.dump().substr(0, 300);
    EXPECT_EQ(calls[l.at("seq").get<uint64_t>()].value("failure", ""), "");
    EXPECT_TRUE(l.at("advantage").is_number());
    ASSERT_TRUE(l.at("reply").is_object()) << l.dump().substr(0, 300);
    if (l["reply"].value("content", "").find("I would rather describe the kernel in prose.") != std::string::npos)
      ++prose;
  }
  EXPECT_EQ(prose, 12);
}

TEST(Export, ASimRunHasNothingToExport) {
  const std::string root = clitest::temp_dir("vinci_export_sim_");
  std::string out;
  // A copy of the sim smoke config (its paths resolve against the source tree).
  ASSERT_TRUE(write_file_atomic(root + "/smoke.toml", read_file(kSrc + "experiments/smoke.toml").value()).ok());
  ASSERT_EQ(sh(kBin + "harness run " + root + "/smoke.toml --out " + root, &out), 0) << out;
  const std::string run = root + "/smoke";
  EXPECT_EQ(sh(kBin + "replay export " + run + " --out " + root + "/x.jsonl", &out), 2) << out;
  EXPECT_NE(out.find("has no model calls"), std::string::npos) << out;
  EXPECT_NE(out.find("--allow-empty"), std::string::npos) << out;
  EXPECT_FALSE(read_file(root + "/x.jsonl").ok());
  // --allow-empty: an empty export, and a note on the advantages that had no call.
  ASSERT_EQ(sh(kBin + "replay export " + run + " --allow-empty --out " + root + "/x.jsonl", &out), 0) << out;
  EXPECT_EQ(read_file(root + "/x.jsonl").value(), "");
  EXPECT_NE(out.find("advantages without a model call skipped"), std::string::npos) << out;
}

}  // namespace
}  // namespace vinci
