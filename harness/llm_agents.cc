#include "harness/llm_agents.h"

#include <algorithm>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>

#include <capnp/message.h>

#include "agents/prompts.h"
#include "agents/tool_calls.h"
#include "core/atomic_file.h"
#include "gpu/kernelbench_module.h"
#include "gpu/knob_answer.h"
#include "gpu/model_plan.h"
#include "gpu/task_prompt.h"
#include "harness/records.h"
#include "recorder/object_store.h"
#include "recorder/run.h"
#include "recorder/vinci.capnp.h"

namespace vinci {

const char* const PromptTemplates::kFiles[5] = {"selection_system.md", "policy_system.md", "policy_format.md",
                                                "policy_feedback.md", "summary_system.md"};

Result<PromptTemplates> PromptTemplates::load(const std::string& dir, const std::vector<std::string>& languages,
                                              PolicyFormat format) {
  PromptTemplates t;
  std::vector<std::string> files(std::begin(kFiles), std::end(kFiles));
  if (format == PolicyFormat::kKernelbench) {
    for (const std::string& l : languages) files.push_back(kernelbench_file(l));
  } else if (std::find(languages.begin(), languages.end(), "triton") != languages.end()) {
    files.push_back(kTritonFormat);
  }
  for (const std::string& file : files) {
    std::string path = dir + "/" + file;
    auto text = read_file(path, kPromptTemplateFile);
    if (!text.ok()) {
      return not_found("backbone.prompts: cannot read the prompt template " + path + " (" + text.status().message() +
                       ")");
    }
    std::string s = std::move(text).value();
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
    t.text[file] = std::move(s);
  }
  return t;
}

Result<PromptTemplates> PromptTemplates::recorded(const std::string& run_dir) {
  VINCI_ASSIGN_OR_RETURN(auto reader, RunReader::open(run_dir));
  ObjectStore store(reader->location().store_dir);
  PromptTemplates t;
  while (RecordView* view = reader->next()) {
    auto r = view->message().getRoot<schema::Record>();
    if (!r.isBlob()) continue;
    BlobRecord b = read_blob(r.getBlob());
    if (b.kind != "prompt_template") continue;
    auto text = store.get(b.address);
    if (!text.ok()) {
      return corruption("run " + run_dir + ", record " + std::to_string(r.getSeq()) + ": the prompt template " +
                        b.name + ": " + text.status().message());
    }
    t.text[b.name] = std::move(text->bytes);
  }
  VINCI_RETURN_IF_ERROR(reader->status());
  for (const char* file : kFiles) {
    if (!t.text.count(file)) {
      return not_found("run " + run_dir + " records no prompt template " + file);
    }
  }
  return t;
}

std::string PromptTemplates::render(const std::string& file, const std::map<std::string, std::string>& vars) const {
  auto it = text.find(file);
  VINCI_REQUIRE(it != text.end(), "prompt template " << file << " is not loaded");
  std::string out = it->second;
  for (const auto& [name, value] : vars) {
    std::string token = "{" + name + "}";
    for (size_t pos = out.find(token); pos != std::string::npos; pos = out.find(token, pos + value.size())) {
      out.replace(pos, token.size(), value);
    }
  }
  return out;
}

// ---- transports

HttpChatTransport::HttpChatTransport(ChatSettings settings, int concurrency)
    : client_(std::move(settings)), free_slots_(concurrency < 1 ? 1 : concurrency) {}

Result<ChatOutcome> HttpChatTransport::complete(const std::string& body, const RngKey& key) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return free_slots_ > 0; });
    --free_slots_;
  }
  Result<ChatOutcome> out = client_.complete(body, key.with("purpose", "retry-jitter"));
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++free_slots_;
  }
  cv_.notify_one();
  if (out.ok() && !out->ok) return failed_call_status(*out, client_.settings().base_url);
  return out;
}

Status failed_call_status(const ChatOutcome& out, const std::string& base_url) {
  // Not an answer of the model: recorded as a failed call, it would make the server's health or
  // the user's setup part of the experiment's record.
  const std::string kept =
      "; the run stops here, keeping every answer it has (resume it with `harness run --resume RUN`";
  if (out.unreachable) {
    return io_error("the model server at " + base_url + " cannot be reached (" + out.failure + ")" + kept +
                    " once it answers)");
  }
  switch (out.http_status) {
    case 400:
    case 401:
    case 403:
    case 404:
    case 413:
    case 422: {
      std::string what = out.http_status == 401 || out.http_status == 403 ? "refused the API key (backbone.api_key_env)"
                         : out.http_status == 404
                             ? "does not know the model or the path (backbone.model, backbone.base_url)"
                             : "refused the request (a parameter of [backbone])";
      return failed_precondition("the model server at " + base_url + " " + what + ": " + out.failure + kept +
                                 " after fixing the setup)");
    }
    default:
      return io_error("the model server at " + base_url + " failed the call: " + out.failure + kept +
                      " when the server is healthy)");
  }
}

// ---- the journal

namespace {

Digest journal_check(const Digest& key, const Digest& request, std::string_view reply) {
  Hasher h("llm_journal");
  h.update_str(key.hex());
  h.update_str(request.hex());
  h.update_str(reply);
  return h.finish();
}

}  // namespace

CallJournal::~CallJournal() {
  if (fd_ >= 0) ::close(fd_);
}

Status CallJournal::add(const Digest& key, const Digest& request, const std::string& reply) {
  nlohmann::json line = {{"key", key.hex()},
                         {"request", request.hex()},
                         {"reply", reply},
                         {"check", journal_check(key, request, reply).hex()}};
  std::string text = line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  std::lock_guard<std::mutex> lock(mu_);
  if (fd_ < 0) {
    bool existed = ::access(path_.c_str(), F_OK) == 0;
    fd_ = ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) return io_error("cannot open the model call journal " + path_ + ": " + std::strerror(errno));
    if (!existed) {
      // The new file's name must survive a crash too.
      std::string dir = path_.substr(0, path_.rfind('/') == std::string::npos ? 0 : path_.rfind('/'));
      int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      if (dfd >= 0) {
        ::fsync(dfd);
        ::close(dfd);
      }
    }
  }
  for (size_t done = 0; done < text.size();) {
    ssize_t n = ::write(fd_, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return io_error("cannot write the model call journal " + path_ + ": " + std::strerror(errno));
    done += static_cast<size_t>(n);
  }
  if (::fdatasync(fd_) != 0)
    return io_error("cannot sync the model call journal " + path_ + ": " + std::strerror(errno));
  return Status();
}

Result<std::vector<CallJournal::Entry>> CallJournal::read(const std::string& path, std::string* dropped) {
  std::vector<Entry> out;
  if (::access(path.c_str(), F_OK) != 0) return out;
  VINCI_ASSIGN_OR_RETURN(std::string text, read_file(path, kCallJournalFile));
  size_t at = 0;
  int64_t line_no = 0;
  while (at < text.size()) {
    ++line_no;
    size_t end = text.find('\n', at);
    std::string why;
    if (end == std::string::npos) {
      why = "a last line without its end (a write cut short)";
    } else {
      nlohmann::json j = nlohmann::json::parse(text.begin() + static_cast<std::ptrdiff_t>(at),
                                               text.begin() + static_cast<std::ptrdiff_t>(end), nullptr, false);
      Entry e;
      bool shaped = j.is_object() && j.contains("key") && j["key"].is_string() && j.contains("request") &&
                    j["request"].is_string() && j.contains("reply") && j["reply"].is_string() && j.contains("check") &&
                    j["check"].is_string();
      bool parsed = shaped && Digest::parse_hex(j["key"].get<std::string>(), &e.key) &&
                    Digest::parse_hex(j["request"].get<std::string>(), &e.request);
      if (!parsed) {
        why = "line " + std::to_string(line_no) + " is not a journal entry";
      } else {
        e.reply = j["reply"].get<std::string>();
        if (journal_check(e.key, e.request, e.reply).hex() != j["check"].get<std::string>()) {
          why = "line " + std::to_string(line_no) + " fails its check";
        } else {
          out.push_back(std::move(e));
          at = end + 1;
          continue;
        }
      }
    }
    if (dropped) *dropped = why + ": " + std::to_string(text.size() - at) + " bytes from there are ignored";
    break;
  }
  return out;
}

Result<ChatOutcome> JournalingTransport::complete(const std::string& body, const RngKey& key) {
  VINCI_ASSIGN_OR_RETURN(ChatOutcome out, inner_.complete(body, key));
  if (out.ok && out.attempts > 0) {
    VINCI_RETURN_IF_ERROR(journal_.add(key.digest(), chat_request_address(body), out.record));
  }
  return out;
}

Result<std::unique_ptr<RecordedChatTransport>> RecordedChatTransport::open(const std::string& run_dir,
                                                                           ChatTransport* fallback, bool check_requests,
                                                                           const std::string& journal,
                                                                           bool unrecorded_fail) {
  VINCI_ASSIGN_OR_RETURN(auto reader, RunReader::open(run_dir));
  ObjectStore store(reader->location().store_dir);
  std::unique_ptr<RecordedChatTransport> t(new RecordedChatTransport());
  t->fallback_ = fallback;
  t->check_requests_ = check_requests;
  t->unrecorded_fail_ = unrecorded_fail;
  while (RecordView* view = reader->next()) {
    auto r = view->message().getRoot<schema::Record>();
    if (!r.isLlmReply()) continue;
    LlmReplyRecord l = read_llm_reply(r.getLlmReply());
    std::string where = "run " + run_dir + ", record " + std::to_string(r.getSeq());
    if (l.key.is_zero() || l.request.is_zero()) {
      return invalid_argument(where + ": an LlmReply without a call key or request address");
    }
    Call call;
    call.request = l.request;
    call.failure = std::move(l.failure);
    if (call.failure.empty()) {
      auto reply = store.get(l.reply);
      if (!reply.ok()) return corruption(where + ": its reply object: " + reply.status().message());
      call.reply = std::move(reply->bytes);
    }
    if (!t->calls_.emplace(l.key, std::move(call)).second) {
      return invalid_argument(where + ": two model calls share the key " + l.key.hex());
    }
  }
  VINCI_RETURN_IF_ERROR(reader->status());
  // An unfinished run's log may end in a frame a kill cut short: the calls before it are its own.
  // Resumed (a live fallback) or verified as unfinished, the run's writer and verify judge that
  // tail; only a reader that must hold every call refuses it.
  if (reader->damage() && !unrecorded_fail && fallback == nullptr) {
    return corruption("run " + run_dir + ": " + reader->damage()->to_string());
  }
  if (!journal.empty()) {
    std::string dropped;
    VINCI_ASSIGN_OR_RETURN(std::vector<CallJournal::Entry> entries, CallJournal::read(journal, &dropped));
    if (!dropped.empty()) std::fprintf(stderr, "the model call journal %s: %s\n", journal.c_str(), dropped.c_str());
    for (CallJournal::Entry& e : entries) {
      if (t->calls_.count(e.key)) continue;  // the log's record of it is what counts
      Call call;
      call.request = e.request;
      call.reply = std::move(e.reply);
      t->calls_.emplace(e.key, std::move(call));
      ++t->journaled_;
    }
  }
  return t;
}

Result<ChatOutcome> RecordedChatTransport::complete(const std::string& body, const RngKey& key) {
  auto it = calls_.find(key.digest());
  if (it == calls_.end()) {
    if (fallback_) return fallback_->complete(body, key);
    if (unrecorded_fail_) {
      ChatOutcome out;
      out.ok = false;
      out.failure = kUnrecordedFailure;
      out.attempts = 0;
      return out;
    }
    return mismatch("the recorded run holds no model call with key " + key.digest().hex());
  }
  const Call& c = it->second;
  Digest request = chat_request_address(body);
  if (check_requests_ && request != c.request) {
    return mismatch("the request rebuilt for the model call with key " + key.digest().hex() + " hashes to " +
                    request.hex() + ", the recorded request to " + c.request.hex() +
                    " (changed prompts, task text or sampling settings)");
  }
  ChatOutcome out;
  out.ok = c.failure.empty();
  out.failure = c.failure;
  out.attempts = 0;
  if (out.ok) {
    out.body = c.reply;
    out.record = c.reply;
    out.http_status = 200;
    VINCI_ASSIGN_OR_RETURN(ChatReply reply, parse_chat_reply(c.reply));
    out.reply = std::move(reply);
  }
  return out;
}

// ---- the call log

LlmCallLog::LlmCallLog(std::string path) : path_(std::move(path)) {}

void LlmCallLog::add(const LlmCall& call, const std::vector<int>& statuses, const nlohmann::json& envelope) {
  nlohmann::json line = {{"key", call.key.hex()},   {"role", agent_role_name(call.role)},
                         {"model", call.model},     {"attempts", call.attempts},
                         {"statuses", statuses},    {"latency_s", call.latency_s},
                         {"failure", call.failure}, {"envelope", envelope}};
  std::lock_guard<std::mutex> lock(mu_);
  stats_.calls++;
  if (!call.failure.empty()) stats_.failed++;
  if (call.attempts > 1) stats_.retries += call.attempts - 1;
  stats_.latency_s += call.latency_s;
  stats_.latencies_s.push_back(call.latency_s);
  if (path_.empty()) return;
  if (FILE* f = std::fopen(path_.c_str(), "a")) {
    std::string text = line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    std::fwrite(text.data(), 1, text.size(), f);
    std::fclose(f);
  }
}

LlmCallLog::Stats LlmCallLog::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

// ---- the model

LlmAgentModel::LlmAgentModel(LlmSettings settings, PromptTemplates templates, ChatTransport& transport, LlmCallLog* log)
    : settings_(std::move(settings)), templates_(std::move(templates)), transport_(transport), log_(log) {}

std::vector<std::pair<std::string, std::string>> LlmAgentModel::attachments() const {
  return {templates_.text.begin(), templates_.text.end()};
}

std::string LlmAgentModel::task_text(const Task& task, SizeName size) const {
  std::string out = task_prompt_header(task, size);
  auto py = task_as_pytorch(task, size);
  // Every task of the suite renders (tests/gpu/task_prompt_test.cc); the description stands in
  // for one that would not.
  out += "\n\n```python\n" + (py.ok() ? *py : task.description + "\n") + "```";
  return out;
}

int64_t estimate_prompt_tokens(const std::vector<ChatMessage>& messages, const std::vector<nlohmann::json>& tools,
                               double bytes_per_token) {
  uint64_t bytes = 0;
  for (const ChatMessage& m : messages) bytes += m.role.size() + m.content.size();
  for (const nlohmann::json& t : tools) bytes += t.dump().size();
  double per = bytes_per_token > 0 ? bytes_per_token : 1.0;
  return static_cast<int64_t>(std::ceil(static_cast<double>(bytes) / per)) + 8 * static_cast<int64_t>(messages.size());
}

int64_t min_reply_tokens(const LlmSettings& s) { return std::min<int64_t>(1024, s.context_length / 4); }

RequestBudget budget_request(const LlmSettings& s, const std::vector<ChatMessage>& messages,
                             const std::vector<nlohmann::json>& tools) {
  RequestBudget b;
  b.estimated_prompt_tokens = estimate_prompt_tokens(messages, tools, s.bytes_per_token);
  if (s.max_tokens) {
    b.max_tokens = s.max_tokens;
  } else if (s.context_length > 0) {
    // The room the prompt leaves, capped; a prompt that leaves no room is still sent with one
    // token, so the server's own message (its context length) stops the run.
    int64_t room = s.context_length - b.estimated_prompt_tokens - kContextMargin;
    b.max_tokens = std::max<int64_t>(1, std::min(s.max_tokens_cap, room));
  }
  return b;
}

Result<std::optional<std::string>> LlmAgentModel::call(AgentRole role, const std::vector<ChatMessage>& messages,
                                                       const std::vector<nlohmann::json>& tools, const RngKey& key,
                                                       bool greedy, LlmCall* record) {
  ChatSampling sampling;
  sampling.temperature = greedy ? 0.0 : settings_.temperature;
  sampling.top_p = settings_.top_p;
  sampling.max_tokens =
      budget_request(settings_, messages, settings_.send_tools ? tools : std::vector<nlohmann::json>{}).max_tokens;
  if (settings_.send_seed) {
    sampling.seed = static_cast<int64_t>(Stream(key.with("purpose", "llm-seed")).next_u64() & 0x7fffffff);
  }
  std::string body = chat_request_body(settings_.model, messages,
                                       settings_.send_tools ? tools : std::vector<nlohmann::json>{}, sampling)
                         .dump();
  VINCI_ASSIGN_OR_RETURN(ChatOutcome outcome, transport_.complete(body, key));
  record->role = role;
  record->endpoint = settings_.endpoint;
  record->model = settings_.model;
  record->request = std::move(body);
  record->temperature = *sampling.temperature;
  record->key = key.digest();
  record->attempts = static_cast<uint32_t>(outcome.attempts);
  record->latency_s = outcome.latency_s;
  // A call answered from the log (attempts 0) happened in an earlier process: not counted again.
  auto log_call = [&] {
    if (log_ == nullptr || outcome.attempts == 0) return;
    std::vector<int> statuses;
    for (const auto& a : outcome.attempt_log) statuses.push_back(a.http_status);
    log_->add(*record, statuses, chat_reply_envelope(outcome.body));
  };
  if (!outcome.ok || !outcome.reply) {
    record->failure = outcome.failure.empty() ? "the call failed" : outcome.failure;
    log_call();
    return std::optional<std::string>();
  }
  record->reply = outcome.record.empty() ? outcome.body : outcome.record;
  record->finish_reason = outcome.reply->finish_reason;
  record->prompt_tokens = static_cast<uint32_t>(std::max<int64_t>(0, outcome.reply->prompt_tokens));
  record->completion_tokens = static_cast<uint32_t>(std::max<int64_t>(0, outcome.reply->completion_tokens));
  log_call();
  return std::optional<std::string>(chat_reply_text(*outcome.reply));
}

Result<SelectionAnswer> LlmAgentModel::select(const SelectionQuestion& q) {
  std::vector<ChatMessage> messages = {
      {"system", templates_.render("selection_system.md", {{"max_skills", std::to_string(q.max_pick)}})},
      {"user", selection_user_message(task_text(*q.task, q.size), q.candidates)}};
  SelectionAnswer a;
  a.call.emplace();
  VINCI_ASSIGN_OR_RETURN(
      auto text, call(AgentRole::kSelection, messages, {select_skills_tool_schema()}, q.key, q.greedy, &*a.call));
  if (!text) return a;  // a failed call picks nothing
  std::vector<std::string> names;
  for (const Skill* s : q.candidates) names.push_back(s->name);
  auto parsed = parse_select_skills(*text, names, static_cast<size_t>(q.max_pick));
  if (!parsed.ok()) return a;  // a reply without a select_skills call picks nothing
  for (const SelectedSkill& s : parsed->selected) {
    for (size_t i = 0; i < names.size(); ++i) {
      if (names[i] == s.name) a.picked.push_back(static_cast<int32_t>(i));
    }
  }
  return a;
}

std::string history_reply_text(const PolicyTurn& turn) {
  if (!turn.reply_text.empty()) return turn.reply_text;
  if (turn.call && turn.call->finish_reason == "length")
    return "(no answer: the reply reached the token limit while still reasoning, inside its <think> block)";
  return "(no reply)";
}

std::string turn_feedback_text(const PolicyTurn& turn) {
  const EvalResult& e = turn.eval;
  if (!turn.plan) return "Your answer held no kernel that could be run: " + turn.reply_error;
  std::string out;
  char line[256];
  out += std::string("compiled: ") + (e.compiled ? "yes" : "no") + "\n";
  if (!e.compiled) {
    out += "error: " + e.error + "\n";
    if (!e.compile_log.empty()) out += "compiler output:\n" + e.compile_log.substr(0, 4000) + "\n";
    return out;
  }
  out += std::string("correct: ") + (e.correct ? "yes" : "no") + "\n";
  double max_err = 0, mean_err = 0;
  bool compared = false;  // some trial's output was compared with the reference
  for (const auto& t : e.trials) {
    if (!std::isfinite(t.max_abs_err)) continue;
    compared = true;
    max_err = std::max(max_err, t.max_abs_err);
    if (std::isfinite(t.mean_abs_err)) mean_err = std::max(mean_err, t.mean_abs_err);
  }
  if (compared) {
    std::snprintf(line, sizeof line, "max difference: %.6g; mean difference: %.6g\n", max_err, mean_err);
    out += line;
  }
  if (e.decoy) out += "decoy: yes (none of your own kernels did the work)\n";
  if (!e.error.empty()) out += "error: " + e.error + "\n";
  for (const auto& f : e.flags) out += "flag: " + f + "\n";
  if (e.correct) {
    std::snprintf(line, sizeof line, "reference runtime: %.4g us; your runtime: %.4g us; speedup: %.4gx\n",
                  e.reference_us, e.kernel_us, e.speedup);
    out += line;
  }
  return out;
}

std::string LlmAgentModel::policy_user_message(const PolicyQuestion& q) const {
  if (settings_.policy_format == PolicyFormat::kKernelbench) {
    // KernelBench's form: the instruction and an example for the one backend, then the task as the
    // PyTorch module KernelBench shows (the experiment's check keeps languages to one).
    auto py = task_as_pytorch(*q.task, q.size);
    std::string arch = py.ok() ? *py : q.task->description + "\n";
    while (!arch.empty() && arch.back() == '\n') arch.pop_back();
    return templates_.render(PromptTemplates::kernelbench_file(settings_.languages.front()), {{"architecture", arch}});
  }
  // The answer format: CUDA's (the prompt of every run before languages existed), Triton's when
  // the experiment accepts it, or Triton's alone.
  auto allows = [&](const char* l) {
    return std::find(settings_.languages.begin(), settings_.languages.end(), l) != settings_.languages.end();
  };
  const bool knobs = settings_.policy_format == PolicyFormat::kKnobs;
  std::string format = knobs            ? templates_.render("policy_format.md", {{"knobs", knob_menu(*q.task)}})
                       : allows("cuda") ? templates_.render("policy_format.md")
                                        : "";
  if (allows("triton") && !knobs) {
    std::string names = allows("cuda") ? "CUDA (a ```cuda block) and Triton (a ```triton block)" : "Triton only";
    format +=
        (format.empty() ? "" : "\n\n") + templates_.render(PromptTemplates::kTritonFormat, {{"languages", names}});
  }
  return "# Task\n\n" + (knobs ? task_prompt_header(*q.task, q.size) : task_text(*q.task, q.size)) + "\n\n" + format;
}

std::vector<ChatMessage> LlmAgentModel::policy_messages(const PolicyQuestion& q) const {
  std::vector<ChatMessage> messages = {
      {"system", policy_system_prompt(templates_.render("policy_system.md"), q.skills)},
      {"user", policy_user_message(q)}};
  if (!q.history) return messages;
  // Oldest turns first out when the history leaves a reply too little of the context.
  size_t first = 0;
  auto with_history = [&](size_t from) {
    std::vector<ChatMessage> m = messages;
    if (from > 0) {
      m[1].content += "\n\n(" + std::to_string(from) + (from == 1 ? " earlier turn is" : " earlier turns are") +
                      " omitted to fit the model's context.)";
    }
    for (size_t i = from; i < q.history->size(); ++i) {
      const PolicyTurn& h = (*q.history)[i];
      m.push_back({"assistant", history_reply_text(h)});
      m.push_back({"user", templates_.render("policy_feedback.md", {{"feedback", turn_feedback_text(h)}})});
    }
    return m;
  };
  if (!settings_.max_tokens && settings_.context_length > 0) {
    while (first < q.history->size() &&
           settings_.context_length - estimate_prompt_tokens(with_history(first), {}, settings_.bytes_per_token) -
                   kContextMargin <
               min_reply_tokens(settings_))
      ++first;
  }
  return with_history(first);
}

Result<Plan> LlmAgentModel::plan_of_reply(const std::string& text, const Task& task) const {
  if (settings_.policy_format == PolicyFormat::kKnobs) return plan_from_knob_answer(text, task);
  if (settings_.policy_format == PolicyFormat::kKernelbench) {
    VINCI_ASSIGN_OR_RETURN(std::string module, extract_module_answer(text));
    Plan plan = module_plan(task.id, std::move(module));
    VINCI_RETURN_IF_ERROR(validate_plan(plan, task));
    return plan;
  }
  ModelPlanLimits limits;
  limits.languages = settings_.languages;
  return parse_model_plan(text, task, limits);
}

Result<PolicyTurn> LlmAgentModel::write_plan(const PolicyQuestion& q) {
  std::vector<ChatMessage> messages = policy_messages(q);
  PolicyTurn turn;
  turn.call.emplace();
  VINCI_ASSIGN_OR_RETURN(auto text, call(AgentRole::kPolicy, messages, {}, q.key, q.greedy, &*turn.call));
  if (!text) {
    turn.reply_error = "the model call failed: " + turn.call->failure;
    return turn;
  }
  turn.reply_text = *text;
  if (turn.call->finish_reason == "length") {
    turn.reply_error = text->empty() ? "the reply reached the token limit while still reasoning (finish_reason "
                                       "length, inside its <think> block): no answer was written"
                                     : "the reply was cut off at the token limit (finish_reason length)";
    return turn;
  }
  auto plan = plan_of_reply(*text, *q.task);
  if (!plan.ok()) {
    turn.reply_error = plan.status().message();
    return turn;
  }
  turn.plan = std::move(plan).value();
  return turn;
}

Result<SummaryAnswer> LlmAgentModel::summarise(const SummaryQuestion& q) {
  std::vector<RolloutTurnText> turns;
  for (size_t t = 0; t < q.turns->size(); ++t) {
    const PolicyTurn& p = (*q.turns)[t];
    turns.push_back(
        {static_cast<int>(t + 1), p.reply_text, turn_feedback_text(p), p.result.correct ? p.result.speedup : 0.0});
  }
  std::vector<ChatMessage> messages = {{"system", templates_.render("summary_system.md", {{"max_new_skills", "2"}})},
                                       {"user", summary_user_message(task_text(*q.task, q.size), q.injected, turns)}};
  SummaryAnswer a;
  a.call.emplace();
  VINCI_ASSIGN_OR_RETURN(
      auto text, call(AgentRole::kSummary, messages, {update_skill_library_tool_schema()}, q.key, q.greedy, &*a.call));
  if (!text) {
    a.dropped = "the model call failed: " + a.call->failure;
    return a;
  }
  auto parsed = parse_update_skill_library(*text, 2);
  if (!parsed.ok()) {
    a.dropped = "no update_skill_library call: " + parsed.status().message();
    return a;
  }
  a.skills = std::move(parsed->skills);
  if (!parsed->dropped.empty()) a.dropped = parsed->dropped.front().reason;
  return a;
}

// ---- parameters of an external model

ExternalModelParameters::ExternalModelParameters(const std::string& endpoint, const std::string& model)
    : endpoint_(endpoint) {
  Hasher h("external-model");
  h.update_str(endpoint);
  h.update_str(model);
  digest_ = h.finish();
}

void ExternalModelParameters::use_model(const std::string& model, const std::string& adapter) {
  Hasher h("external-model");
  h.update_str(endpoint_);
  h.update_str(model);
  h.update_str(adapter);
  digest_ = h.finish();
}

Result<PolicySample> ExternalModelParameters::sample_policy(const PolicyInput&, const RngKey&, bool) {
  return failed_precondition("a language model answers the policy through its agent model, not the sim network");
}
Result<SelectionSample> ExternalModelParameters::sample_selection(const SelectionInput&, const RngKey&, bool) {
  return failed_precondition("a language model answers the selection through its agent model, not the sim network");
}
Result<SummarySample> ExternalModelParameters::sample_summary(const SummaryInput&, const RngKey&, bool) {
  return failed_precondition("a language model answers the summary through its agent model, not the sim network");
}
Result<UpdateStats> ExternalModelParameters::update(const std::vector<Experience>& batch) {
  UpdateStats s;
  s.experiences = static_cast<int64_t>(batch.size());
  return s;
}

}  // namespace vinci
