// The language-model agent model (backbone.kind = "openai"): the three agents as chat requests to
// an OpenAI-compatible server (vLLM, SGLang, a hosted API, or `harness serve`).
//
//   select     system: prompts/selection_system.md; user: the task and the BM25 candidates (name,
//              scope, tags, description). The reply's select_skills call (agents/tool_calls.h:
//              Qwen3 XML, Hermes JSON, a json block, or structured tool_calls) names the skills;
//              unknown names are dropped, the loop keeps at most max_skills.
//   write_plan system: prompts/policy_system.md + the chosen skills' block; user: the task header
//              and its PyTorch reference (gpu/task_prompt.h) + prompts/policy_format.md; then per
//              earlier turn the model's reply and the evaluator's feedback
//              (prompts/policy_feedback.md). The reply's content (reasoning removed) is read by
//              gpu/model_plan.h; a reply that does not parse, or a call that failed, is a turn
//              without a candidate whose feedback says exactly why.
//   summarise  system: prompts/summary_system.md; user: the task, the injected skills and the
//              winning rollout's turns (reply, feedback, speedup). The reply's update_skill_library
//              call proposes at most 2 skills; incomplete or lazy ones are dropped.
//
// Every call goes through a ChatTransport: HTTP to the server, or in replay the run's log. A call
// is keyed (the question's key): its per-call `seed` (backbone.seed) and its retry jitter derive
// from the key, and replay finds its reply by it and checks that the rebuilt request hashes to the
// recorded one.
#ifndef VINCI_HARNESS_LLM_AGENTS_H_
#define VINCI_HARNESS_LLM_AGENTS_H_

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "agents/backbone.h"
#include "agents/chat_client.h"
#include "core/atomic_file.h"
#include "harness/agent_model.h"
#include "harness/settings.h"

namespace vinci {

// The prompt templates (files of backbone.prompts; prompts/README.md), by file name.
struct PromptTemplates {
  std::map<std::string, std::string> text;  // "policy_system.md" -> its text

  static const char* const kFiles[5];
  // Read only when the experiment's policy.languages holds triton (so runs without it record
  // what they did before): the answer format's Triton part, {languages} the accepted languages.
  static constexpr const char* kTritonFormat = "policy_format_triton.md";
  // Read only with policy.format = "kernelbench": the whole policy user message for a module of
  // that backend (its instruction and example), {architecture} the task as a PyTorch module.
  static std::string kernelbench_file(const std::string& language) { return "policy_kernelbench_" + language + ".md"; }
  // Reads every template file of the folder (and kTritonFormat when languages holds triton, or
  // with format "kernelbench" the kernelbench_file of each language); a missing one is an error
  // naming it.
  static Result<PromptTemplates> load(const std::string& dir, const std::vector<std::string>& languages = {"cuda"},
                                      PolicyFormat format = PolicyFormat::kPlan);
  // The templates a run recorded (its blob records of kind "prompt_template").
  static Result<PromptTemplates> recorded(const std::string& run_dir);
  // `file`'s text with each {name} of vars replaced by its value. REQUIRES: file is loaded.
  std::string render(const std::string& file, const std::map<std::string, std::string>& vars = {}) const;
};

// Where a chat request goes. complete() returns a failed call as an outcome, not an error.
class ChatTransport {
 public:
  virtual ~ChatTransport() = default;
  virtual Result<ChatOutcome> complete(const std::string& body, const RngKey& key) = 0;
};

// HTTP through ChatClient, with at most `concurrency` requests in flight. Only an answer is an
// outcome: a call that failed says nothing of the model, so it is an error that stops the run,
// keeping what it recorded, for `harness run --resume` to continue once the cause is fixed:
//   FailedPrecondition: the server refused the setup (HTTP 400, 401, 403, 404, 413, 422: a wrong
//     key, model name or parameter), with its own message;
//   IoError: the server could not be reached, or failed every attempt (timeouts, connection
//     errors, 408/429/5xx, malformed bodies) within the call's retries and deadline.
class HttpChatTransport : public ChatTransport {
 public:
  HttpChatTransport(ChatSettings settings, int concurrency);
  Result<ChatOutcome> complete(const std::string& body, const RngKey& key) override;
  const ChatSettings& settings() const { return client_.settings(); }

 private:
  ChatClient client_;
  int free_slots_;
  std::mutex mu_;
  std::condition_variable cv_;
};

// The status a failed live call stops the run with (HttpChatTransport's rule above).
Status failed_call_status(const ChatOutcome& outcome, const std::string& base_url);

// Every answer a run paid for, on disk before the call that asked for it returns: RUN/llm_journal.jsonl,
// one JSON object a line {"key", "request", "reply", "check"} (the call key and request address
// in hex, the recorded reply bytes, and the hex of hash_tagged("llm_journal", key, request,
// reply)), appended and fdatasync'd per call. The log keeps a run's records in their
// deterministic order, which a call's reply can reach long after it was paid for; the journal
// is where `harness run --resume` finds it after a kill. It is not part of the run (no digest
// reads it) and is removed when the run completes. A torn or damaged last line (a kill mid-write)
// ends the journal there. Thread-safe.
constexpr FileKind kCallJournalFile{"model call journal", 8ull << 30};

class CallJournal {
 public:
  explicit CallJournal(std::string path) : path_(std::move(path)) {}
  ~CallJournal();
  CallJournal(const CallJournal&) = delete;
  CallJournal& operator=(const CallJournal&) = delete;

  // Appends one answered call and makes it durable (the file and, when it was created, its folder).
  Status add(const Digest& key, const Digest& request, const std::string& reply);

  struct Entry {
    Digest key, request;
    std::string reply;
  };
  // The journal's entries up to its first torn or damaged line (*dropped gets a description of
  // what was ignored from there, if anything); none when the file does not exist.
  static Result<std::vector<Entry>> read(const std::string& path, std::string* dropped = nullptr);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::mutex mu_;
  int fd_ = -1;
};

// Journals every live answer of `inner` (a call answered with attempts > 0) before returning it.
class JournalingTransport : public ChatTransport {
 public:
  JournalingTransport(ChatTransport& inner, CallJournal& journal) : inner_(inner), journal_(journal) {}
  Result<ChatOutcome> complete(const std::string& body, const RngKey& key) override;

 private:
  ChatTransport& inner_;
  CallJournal& journal_;
};

// Answers from a recorded run's LlmReply records, by call key; the request must hash to the
// recorded address (unless !check_requests: rescore keeps a run's decisions while the feedback in
// its prompts changes with the new measurements). Keys the run does not hold go to `fallback`
// (resuming a stopped run asks the server only what was not recorded), or are an error naming the
// key without one; or, with unrecorded_fail (verify of an unfinished run, whose log ends before
// those calls, perhaps in a frame a kill cut short: the calls before it are read), failed calls
// saying kUnrecordedFailure: the loop goes on, so every record the log does hold is re-derived and
// compared, and the first one past its end stops it (a CheckSink).
class RecordedChatTransport : public ChatTransport {
 public:
  static constexpr const char* kUnrecordedFailure = "not in the recorded run: its log ends before this call";
  // With a journal path, the answers it holds for calls the log does not are taken too (resume).
  static Result<std::unique_ptr<RecordedChatTransport>> open(const std::string& run_dir,
                                                             ChatTransport* fallback = nullptr,
                                                             bool check_requests = true,
                                                             const std::string& journal = "",
                                                             bool unrecorded_fail = false);
  size_t journaled() const { return journaled_; }
  Result<ChatOutcome> complete(const std::string& body, const RngKey& key) override;
  size_t calls() const { return calls_.size(); }

 private:
  struct Call {
    Digest request;
    std::string reply;  // the reply body; empty when the call failed
    std::string failure;
  };
  std::unordered_map<Digest, Call, DigestHash> calls_;
  ChatTransport* fallback_ = nullptr;
  bool check_requests_ = true;
  size_t journaled_ = 0;  // calls taken from the journal
  bool unrecorded_fail_ = false;
};

// What the records leave out of each call because it differs between two runs of one config:
// attempts, the HTTP status of each, latency, and the reply's envelope (the server's id, created,
// system_fingerprint, tool-call ids...). Appended to RUN/llm_calls.jsonl as calls end (one JSON
// object a line, in completion order: {"key", "role", "attempts", "statuses", "latency_s",
// "failure", "envelope"}), for people; nothing reads it back. Thread-safe.
class LlmCallLog {
 public:
  // An empty path keeps the counts only.
  explicit LlmCallLog(std::string path = "");
  // envelope: what the record of the reply leaves out (chat_reply_envelope), written as "envelope".
  void add(const LlmCall& call, const std::vector<int>& statuses,
           const nlohmann::json& envelope = nlohmann::json::object());

  struct Stats {
    uint64_t calls = 0, failed = 0, retries = 0;
    double latency_s = 0;             // sum
    std::vector<double> latencies_s;  // every call's, for the median
  };
  Stats stats() const;

 private:
  std::string path_;
  mutable std::mutex mu_;
  Stats stats_;
};

struct LlmSettings {
  std::string endpoint;  // base URL (recorded)
  std::string model;
  double temperature = 1.0;  // sampled calls; greedy calls send 0
  std::optional<double> top_p;
  std::optional<int64_t> max_tokens;  // set: every request's limit
  // Without max_tokens, a known context length (backbone.context_length, or the server's at the
  // run's start) sets each request's limit: min(max_tokens_cap, context_length - the prompt's
  // estimated tokens - kContextMargin); policy history that leaves less than min_reply_tokens is
  // trimmed, oldest turns first (budget_request()).
  int64_t context_length = 0;  // 0: unknown, no limit is sent
  int64_t max_tokens_cap = 8192;
  double bytes_per_token = 2.0;                   // the estimate: a prompt's UTF-8 bytes / this, plus 8 per message
  bool send_seed = true;                          // a per-call seed derived from the call's key
  bool send_tools = false;                        // offer the tools as structured schemas (tool_choice auto)
  int32_t max_skills = 3;                         // selection cap named in the prompt
  std::vector<std::string> languages = {"cuda"};  // policy.languages: cuda, triton
  // policy.format: "plan" (kernels in the model-facing format), "knobs" (gpu/knob_answer.h: the
  // user message holds the task's header without its PyTorch source, and policy_format.md gets
  // {knobs}, the task's knob menu) or "kernelbench" (a ModelNew module, gpu/kernelbench_module.h:
  // the user message is PromptTemplates::kernelbench_file of the one language, as KernelBench
  // prompts).
  PolicyFormat policy_format = PolicyFormat::kPlan;
};

class LlmAgentModel : public AgentModel {
 public:
  // log, when given, receives every call's attempts and latency.
  LlmAgentModel(LlmSettings settings, PromptTemplates templates, ChatTransport& transport, LlmCallLog* log = nullptr);

  std::string kind() const override { return "openai"; }
  Result<SelectionAnswer> select(const SelectionQuestion& q) override;
  Result<PolicyTurn> write_plan(const PolicyQuestion& q) override;
  Result<SummaryAnswer> summarise(const SummaryQuestion& q) override;
  std::vector<std::pair<std::string, std::string>> attachments() const override;
  void use_model(const std::string& name) override { settings_.model = name; }
  // The same model asking through another transport (the cold start renders its examples as the
  // calls this model makes, answered by a teacher).
  std::unique_ptr<LlmAgentModel> with_transport(ChatTransport& transport) const {
    return std::make_unique<LlmAgentModel>(settings_, templates_, transport, nullptr);
  }
  const LlmSettings& settings() const { return settings_; }

 private:
  // Sends messages (and tools) for a call with this key; fills the call record. The reply's text
  // for the parsers (content with tool calls as text, reasoning removed) is returned when the call
  // succeeded.
  Result<std::optional<std::string>> call(AgentRole role, const std::vector<ChatMessage>& messages,
                                          const std::vector<nlohmann::json>& tools, const RngKey& key, bool greedy,
                                          LlmCall* record);
  std::string task_text(const Task& task, SizeName size) const;
  // The policy's first user message (the task and the answer format), and the whole request with
  // the earlier turns that fit the context.
  std::string policy_user_message(const PolicyQuestion& q) const;
  std::vector<ChatMessage> policy_messages(const PolicyQuestion& q) const;
  // The candidate a policy reply holds, in the experiment's policy.format.
  Result<Plan> plan_of_reply(const std::string& text, const Task& task) const;

  LlmSettings settings_;
  PromptTemplates templates_;
  ChatTransport& transport_;
  LlmCallLog* log_;
};

// The request limit and history trimming without max_tokens (LlmSettings): tokens of a prompt are
// estimated as ceil(bytes / bytes_per_token) + 8 per message, tools' schemas included.
constexpr int64_t kContextMargin = 32;
int64_t estimate_prompt_tokens(const std::vector<ChatMessage>& messages, const std::vector<nlohmann::json>& tools,
                               double bytes_per_token);
struct RequestBudget {
  std::optional<int64_t> max_tokens;  // unset: none is sent
  int64_t estimated_prompt_tokens = 0;
};
RequestBudget budget_request(const LlmSettings& s, const std::vector<ChatMessage>& messages,
                             const std::vector<nlohmann::json>& tools);
// The least a reply gets before history is trimmed: min(1024, context_length / 4).
int64_t min_reply_tokens(const LlmSettings& s);

// What the next turn's history shows of a turn's reply: its text, or why there is none.
std::string history_reply_text(const PolicyTurn& turn);

// What the policy is told of an evaluated turn (the feedback of the next turn).
std::string turn_feedback_text(const PolicyTurn& turn);

// The parameters of a model that is not in this process: its identity (endpoint and model name)
// stands for them. Nothing is sampled or trained here (update() records zero loss; a language
// model is trained by the user's trainer on the exported rollouts); checkpoints are not available.
class ExternalModelParameters : public Backbone {
 public:
  ExternalModelParameters(const std::string& endpoint, const std::string& model);
  std::string kind() const override { return "openai"; }
  Result<PolicySample> sample_policy(const PolicyInput&, const RngKey&, bool) override;
  Result<SelectionSample> sample_selection(const SelectionInput&, const RngKey&, bool) override;
  Result<SummarySample> sample_summary(const SummaryInput&, const RngKey&, bool) override;
  Result<UpdateStats> update(const std::vector<Experience>& batch) override;
  Digest parameter_digest() const override { return digest_; }
  // Its trainer produced `model` (the digest of what it trained: `adapter`): the identity now
  // names both.
  void use_model(const std::string& model, const std::string& adapter);

 private:
  std::string endpoint_;
  Digest digest_;
};

}  // namespace vinci

#endif  // VINCI_HARNESS_LLM_AGENTS_H_
