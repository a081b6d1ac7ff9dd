// Chat client overhead per call against a local ChatServer whose handler answers at once: request
// building, the HTTP round trip on loopback and reply parsing, with 1 and 8 calls in flight.
//
//   build/bin/chat_client_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
//
// "Time" of a Call/threads:N row is the wall time of the run divided by the calls of all N threads
// (the cost of a call in throughput terms); call_latency_us is the mean time one call takes from the
// caller's side (complete() only: with N in flight it includes waiting for the CPU). BuildRequest
// and ParseReply time the two ends alone; PolicyTurnRecorded a whole policy turn of the
// language-model backbone with its recording, PolicyTurnJournaled the same with the answer synced
// to the run's journal first (docs/llm.md, "Kills and resume"). A request is a policy-sized prompt (~2 KB) and a reply
// carries ~2 KB of content, so the JSON work is of the size a real rollout turn has.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "agents/chat_client.h"
#include "gpu/codegen/codegen.h"
#include "gpu/model_plan.h"
#include "harness/chat_server.h"
#include "harness/llm_agents.h"
#include "harness/loop_parts.h"
#include "recorder/object_store.h"

namespace vinci {
namespace {

std::string filler(const char* line, size_t bytes) {
  std::string out;
  while (out.size() < bytes) out += line;
  return out;
}

const std::string& task_prompt() {
  static const std::string p =
      filler("Write a CUDA kernel for a row softmax over a [4096, 4096] float32 tensor.\n", 2000);
  return p;
}

Result<ChatAnswer> instant(const nlohmann::json&) {
  static const std::string reply =
      filler("__global__ void softmax(const float* x, float* y, int n) { /* ... */ }\n", 2000);
  ChatAnswer a;
  a.content = reply;
  return a;
}

std::string request_bytes(int64_t i) {
  ChatSampling sampling;
  sampling.temperature = 0.7;
  sampling.seed = i;
  return chat_request_body("bench-model", {{"system", kDefaultPolicySystem}, {"user", task_prompt()}}, {}, sampling)
      .dump();
}

// One server and one client for all benchmarks and threads, as a rollout pool would share them.
struct Fixture {
  Fixture() : server(instant) {
    Status st = server.start();
    if (!st.ok()) {
      std::fprintf(stderr, "chat_client_bench: %s\n", st.to_string().c_str());
      std::exit(2);
    }
    ChatSettings s;
    s.base_url = server.base_url();
    s.model = "bench-model";
    s.timeout_s = 10;
    s.retries = 0;
    client = std::make_unique<ChatClient>(s);
  }
  ChatServer server;
  std::unique_ptr<ChatClient> client;
};

Fixture& fixture() {
  static Fixture f;
  return f;
}

void Call(benchmark::State& state) {
  ChatClient& client = *fixture().client;
  const RngKey root = RngKey::root(1).with("thread", state.thread_index());
  int64_t i = 0, failed = 0;
  double latency_us = 0;
  for (auto _ : state) {
    std::string body = request_bytes(i);
    auto out = client.complete(body, root.with("call", i++));
    if (!out.ok() || !out->ok) ++failed;
    if (out.ok()) latency_us += out->latency_s * 1e6;
    benchmark::DoNotOptimize(out);
  }
  if (failed > 0) state.SkipWithError("a call failed");
  // Summed over threads, then divided by all their calls: the mean latency of one call.
  state.counters["call_latency_us"] = benchmark::Counter(latency_us, benchmark::Counter::kAvgIterations);
}
BENCHMARK(Call)->Threads(1)->Threads(8)->UseRealTime()->Unit(benchmark::kMicrosecond);

void BuildRequest(benchmark::State& state) {
  int64_t i = 0;
  for (auto _ : state) {
    std::string body = request_bytes(i++);
    benchmark::DoNotOptimize(chat_request_address(body));
  }
}
BENCHMARK(BuildRequest)->Unit(benchmark::kMicrosecond);

void ParseReply(benchmark::State& state) {
  std::string request = request_bytes(0);
  ChatAnswer answer = *instant(nlohmann::json());
  std::string body = chat_completion_json(request, nlohmann::json::parse(request), answer, "bench-model").dump();
  for (auto _ : state) {
    auto reply = parse_chat_reply(body);
    benchmark::DoNotOptimize(reply);
  }
  state.counters["reply_bytes"] = static_cast<double>(body.size());
}
BENCHMARK(ParseReply)->Unit(benchmark::kMicrosecond);

// A whole policy turn of the language-model backbone as the loop makes it, against a server that
// answers at once with the code generator's plan for L2_012 in the model-facing format: the
// request rendered from the prompt templates and the task's PyTorch reference, the HTTP round
// trip, the reply parsed into a plan, and the call recorded (request and reply objects in an
// object store, the LlmReply record). All of it is client overhead but the server's answer.
struct TurnFixture {
  TurnFixture() : server([this](const nlohmann::json&) { return Result<ChatAnswer>(answer); }) {
    auto suite = load_task_suite(default_task_dir());
    auto templates = PromptTemplates::load(std::string(VINCI_SOURCE_DIR) + "/prompts");
    if (!suite.ok() || !templates.ok()) {
      std::fprintf(stderr, "chat_client_bench: cannot load the task suite or the prompt templates\n");
      std::exit(2);
    }
    tasks = std::move(suite).value();
    task = tasks.find("L2_012");
    auto plan = default_plan(*task);
    auto text = render_model_plan(*plan);
    answer.content = "Here is the kernel.\n\n" + *text;
    if (!server.start().ok()) std::exit(2);
    ChatSettings s;
    s.base_url = server.base_url();
    s.model = "bench-model";
    s.retries = 0;
    transport = std::make_unique<HttpChatTransport>(s, 64);
    LlmSettings ls;
    ls.endpoint = s.base_url;
    ls.model = s.model;
    model = std::make_unique<LlmAgentModel>(ls, *templates, *transport);
    char tmpl[] = "/tmp/vinci_chat_bench_XXXXXX";
    store_dir = mkdtemp(tmpl);
    store = std::make_unique<ObjectStore>(store_dir + "/objects");
    journal = std::make_unique<CallJournal>(store_dir + "/llm_journal.jsonl");
    journaling = std::make_unique<JournalingTransport>(*transport, *journal);
    journaled_model = std::make_unique<LlmAgentModel>(ls, *templates, *journaling);
  }
  ~TurnFixture() { std::system(("rm -rf '" + store_dir + "'").c_str()); }
  TaskSuite tasks;
  const Task* task = nullptr;
  ChatAnswer answer;
  ChatServer server;
  std::unique_ptr<HttpChatTransport> transport;
  std::unique_ptr<LlmAgentModel> model;
  std::string store_dir;
  std::unique_ptr<ObjectStore> store;
  std::unique_ptr<CallJournal> journal;
  std::unique_ptr<JournalingTransport> journaling;
  std::unique_ptr<LlmAgentModel> journaled_model;  // every answer synced to the journal first
};

TurnFixture& turn_fixture() {
  static TurnFixture f;
  return f;
}

template <bool kJournaled>
void PolicyTurn(benchmark::State& state) {
  TurnFixture& f = turn_fixture();
  LlmAgentModel& model = kJournaled ? *f.journaled_model : *f.model;
  const RngKey root = RngKey::root(2).with("thread", state.thread_index());
  int64_t i = 0, failed = 0;
  for (auto _ : state) {
    PolicyQuestion q;
    q.task = f.task;
    q.size = SizeName::kFull;
    q.key = root.with("call", i++);
    auto turn = model.write_plan(q);
    if (!turn.ok() || !turn->plan) {
      ++failed;
      continue;
    }
    RecordBuf records;
    auto pos = RecordPos::of_task(0, f.task->id, schema::Record::Phase::TRAIN).at_scheme(0).at_rollout(0).at_turn(0);
    auto request = loop::write_llm_call(records, *f.store, pos, *turn->call);
    benchmark::DoNotOptimize(request);
  }
  if (failed > 0) state.SkipWithError("a turn had no plan");
}
void PolicyTurnRecorded(benchmark::State& state) { PolicyTurn<false>(state); }
// The same with every answer appended to the run's journal and fdatasync'd before the call
// returns (what a run does): the cost of durability per call, beside the turn without it.
void PolicyTurnJournaled(benchmark::State& state) { PolicyTurn<true>(state); }
BENCHMARK(PolicyTurnRecorded)->Threads(1)->Threads(8)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(PolicyTurnJournaled)->Threads(1)->Threads(8)->UseRealTime()->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace vinci

BENCHMARK_MAIN();
