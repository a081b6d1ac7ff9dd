#include "harness/model_trainer.h"

#include <cstdlib>
#include <limits>

#include <nlohmann/json.hpp>

#include "agents/chat_client.h"
#include "harness/records.h"
#include "recorder/address.h"
#include "recorder/run.h"
#include "recorder/vinci.capnp.h"

namespace vinci {
namespace {

using json = nlohmann::json;

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

}  // namespace

std::optional<TrainSample> train_sample(const LlmCall& call, double advantage, double scale) {
  if (!call.failure.empty() || call.reply.empty()) return std::nullopt;
  TrainSample s;
  s.role = call.role;
  s.request_body = call.request;
  s.request = hash_tagged("llm_request", call.request);
  s.reply = hash_tagged("llm_reply", call.reply);
  s.advantage = advantage;
  s.scale = scale;
  // The recorded reply is canonical (agents/chat_client.h): its first choice's message.
  json r = json::parse(call.reply, nullptr, false);
  if (r.is_object() && r.contains("choices") && r["choices"].is_array() && !r["choices"].empty()) {
    const json& c = r["choices"][0];
    if (c.is_object() && c.contains("message") && c["message"].is_object()) {
      const json& m = c["message"];
      if (m.contains("content") && m["content"].is_string()) s.completion = m["content"].get<std::string>();
      if (m.contains("tool_calls") && m["tool_calls"].is_array() && !m["tool_calls"].empty()) {
        s.tool_calls = dump(m["tool_calls"]);
      }
    }
  }
  return s;
}

bool trains_role(const Experiment& exp, AgentRole role) {
  switch (role) {
    case AgentRole::kSelection: return exp.train_selection;
    case AgentRole::kPolicy: return exp.train_policy;
    case AgentRole::kSummary: return exp.train_summary;
  }
  return false;
}

std::vector<AgentRole> trained_roles(const Experiment& exp) {
  std::vector<AgentRole> out;
  for (AgentRole r : {AgentRole::kSelection, AgentRole::kPolicy, AgentRole::kSummary}) {
    if (trains_role(exp, r)) out.push_back(r);
  }
  return out;
}

std::string update_request_body(const Experiment& exp, const std::string& kind, int32_t step, const std::string& parent,
                                const RngKey& key, const std::vector<TrainSample>& samples) {
  json body = json::object();
  body["protocol"] = kTrainerProtocol;
  body["kind"] = kind;
  body["step"] = step;
  body["base_model"] = exp.llm.model;
  body["parent"] = parent;
  json roles = json::array();
  for (AgentRole r : trained_roles(exp)) roles.push_back(agent_role_name(r));
  body["roles"] = roles;
  char seed[17];
  std::snprintf(seed, sizeof seed, "%016llx", static_cast<unsigned long long>(Stream(key).next_u64()));
  body["seed"] = seed;
  const bool sft = kind == "sft";
  body["options"] = {{"lr", sft ? exp.trainer.sft_lr : exp.trainer.lr},
                     {"epochs", sft ? exp.trainer.sft_epochs : exp.trainer.epochs},
                     {"clip", exp.trainer.clip},
                     {"kl", exp.trainer.kl},
                     {"batch", exp.trainer.batch}};
  json list = json::array();
  for (const TrainSample& s : samples) {
    json item = json::object();
    item["role"] = agent_role_name(s.role);
    item["request_digest"] = s.request.hex();
    item["reply_digest"] = s.reply.is_zero() ? "" : s.reply.hex();
    json request = json::parse(s.request_body, nullptr, false);
    item["request"] = request.is_discarded() ? json(s.request_body) : request;
    item["completion"] = s.completion;
    if (!s.tool_calls.empty()) item["tool_calls"] = json::parse(s.tool_calls, nullptr, false);
    item["advantage"] = s.advantage;
    item["scale"] = s.scale;
    list.push_back(std::move(item));
  }
  body["samples"] = std::move(list);
  return dump(body);  // nlohmann's object keys are sorted: canonical
}

Result<TrainerReply> parse_trainer_reply(std::string_view body) {
  json j = json::parse(body, nullptr, false);
  if (!j.is_object()) return corruption("the trainer's reply is not a JSON object");
  TrainerReply r;
  auto text = [&](const char* key, std::string* out) -> Status {
    if (!j.contains(key) || !j[key].is_string() || j[key].get<std::string>().empty()) {
      return corruption(std::string("the trainer's reply has no '") + key + "' (expected a non-empty string)");
    }
    *out = j[key].get<std::string>();
    return Status();
  };
  if (j.contains("failure")) {
    if (!j["failure"].is_string()) return corruption("the trainer's reply: 'failure' is not a string");
    r.failure = j["failure"].get<std::string>();
  }
  VINCI_RETURN_IF_ERROR(text("model", &r.model));
  VINCI_RETURN_IF_ERROR(text("adapter", &r.adapter));
  if (!r.failure.empty()) {
    // A failed update (docs/training.md): no loss to report, the model stays the parent.
    r.loss = std::numeric_limits<double>::quiet_NaN();
  } else if (!j.contains("loss") || !j["loss"].is_number()) {
    return corruption("the trainer's reply has no 'loss' (expected a number)");
  } else {
    r.loss = j["loss"].get<double>();
  }
  if (j.contains("tokens")) {
    const json& t = j["tokens"];
    if (!t.is_object()) return corruption("the trainer's reply: 'tokens' is not an object");
    for (const char* k : {"prompt", "completion"}) {
      if (t.contains(k) && !t[k].is_number_unsigned()) {
        return corruption(std::string("the trainer's reply: 'tokens.") + k + "' is not a count");
      }
    }
    if (t.contains("prompt")) r.prompt_tokens = t["prompt"].get<uint64_t>();
    if (t.contains("completion")) r.completion_tokens = t["completion"].get<uint64_t>();
  }
  if (j.contains("samples")) {
    if (!j["samples"].is_number_unsigned()) return corruption("the trainer's reply: 'samples' is not a count");
    r.samples = j["samples"].get<uint32_t>();
  }
  if (j.contains("seconds") && j["seconds"].is_number()) r.seconds = j["seconds"].get<double>();
  j.erase("seconds");  // wall time: not part of what the run records
  r.record = dump(j);
  return r;
}

Result<TrainerReply> HttpModelTrainer::update(const std::string& kind, int32_t step, const std::string& body) {
  const std::string url = url_ + "/vinci/update";
  const std::string what = kind == "sft" ? "the cold start's update" : "the update after step " + std::to_string(step);
  const std::string kept =
      "; the run stops here, keeping what it recorded (resume it with `harness run --resume RUN` once the trainer ";
  bool unreachable = false;
  Result<HttpPostReply> r = http_post_json(url, body, api_key_, timeout_s_, &unreachable);
  if (!r.ok()) {
    return io_error("the trainer at " + url_ + (unreachable ? " cannot be reached" : " did not answer") + " (" +
                    r.status().message() + ") for " + what + kept + "answers)");
  }
  if (r->status != 200) {
    std::string head = "the trainer at " + url_ + " answered HTTP " + std::to_string(r->status) + " to " + what + ": " +
                       r->server_message;
    if (r->status >= 400 && r->status < 500) return failed_precondition(head + kept + "setup is fixed)");
    return io_error(head + kept + "is healthy)");
  }
  Result<TrainerReply> reply = parse_trainer_reply(r->body);
  if (!reply.ok()) {
    return corruption("the trainer at " + url_ + " answered " + what + " with " + reply.status().message() + kept +
                      "answers in the protocol, docs/training.md)");
  }
  return reply;
}

Result<std::string> HttpModelTrainer::load(const std::string& adapter) {
  const std::string url = url_ + "/vinci/load";
  json body = {{"protocol", kTrainerProtocol}, {"adapter", adapter}};
  bool unreachable = false;
  Result<HttpPostReply> r = http_post_json(url, dump(body), api_key_, timeout_s_, &unreachable);
  if (!r.ok()) {
    return io_error("the trainer at " + url_ + (unreachable ? " cannot be reached" : " did not answer") + " (" +
                    r.status().message() + ")");
  }
  if (r->status != 200) {
    return failed_precondition("the trainer at " + url_ + " cannot load adapter " + adapter + ": HTTP " +
                               std::to_string(r->status) + ": " + r->server_message);
  }
  json j = json::parse(r->body, nullptr, false);
  if (!j.is_object() || !j.contains("model") || !j["model"].is_string()) {
    return corruption("the trainer at " + url_ + " answered the load of adapter " + adapter + " without a 'model'");
  }
  return j["model"].get<std::string>();
}

Result<std::unique_ptr<RecordedModelTrainer>> RecordedModelTrainer::open(const std::string& run_dir, ModelTrainer* live,
                                                                         bool keep_unrecorded, bool check_requests) {
  VINCI_ASSIGN_OR_RETURN(auto reader, RunReader::open(run_dir));
  std::unique_ptr<RecordedModelTrainer> t(new RecordedModelTrainer());
  t->check_requests_ = check_requests;
  t->live_ = live;
  t->keep_unrecorded_ = keep_unrecorded;
  while (RecordView* view = reader->next()) {
    auto r = view->message().getRoot<schema::Record>();
    if (!r.isModelUpdate()) continue;
    ModelUpdateRecord u = read_model_update(r.getModelUpdate());
    const std::string where = "run " + run_dir + ", record " + std::to_string(r.getSeq());
    auto reply = reader->store().get(u.reply);
    if (!reply.ok()) return corruption(where + ": the trainer's reply object: " + reply.status().message());
    Update up;
    up.request = u.request;
    up.reply = std::move(reply->bytes);
    if (!t->updates_.emplace(std::make_pair(u.kind, r.getStep()), std::move(up)).second) {
      return invalid_argument(where + ": two model updates of kind " + u.kind + " at step " +
                              std::to_string(r.getStep()));
    }
    t->kind_ = u.trainer;
    t->endpoint_ = u.endpoint;
    t->last_adapter_ = u.adapter;
  }
  VINCI_RETURN_IF_ERROR(reader->status());
  if (reader->damage() && !keep_unrecorded && live == nullptr) {
    return corruption("run " + run_dir + ": " + reader->damage()->to_string());
  }
  if (live) {
    t->kind_ = live->kind();
    t->endpoint_ = live->endpoint();
  }
  return t;
}

Result<TrainerReply> RecordedModelTrainer::update(const std::string& kind, int32_t step, const std::string& body) {
  auto it = updates_.find({kind, step});
  if (it == updates_.end()) {
    if (live_) return live_->update(kind, step, body);
    if (keep_unrecorded_) return not_found("no recorded update");
    return mismatch("the recorded run holds no model update of kind " + kind + " at step " + std::to_string(step));
  }
  Digest request = hash_tagged("trainer_update", body);
  if (check_requests_ && request != it->second.request) {
    return mismatch("the update request of kind " + kind + " at step " + std::to_string(step) + " hashes to " +
                    request.hex() + ", the recorded one to " + it->second.request.hex() +
                    ": the calls or advantages sent to the trainer differ");
  }
  return parse_trainer_reply(it->second.reply);
}

Result<TrainerParts> build_trainer(const Experiment& exp, TrainerCalls calls, const std::string& run_dir) {
  TrainerParts parts;
  if (exp.trainer.kind == TrainerKind::kNone) return parts;
  if (calls == TrainerCalls::kLive || calls == TrainerCalls::kRecordedThenLive) {
    std::string key;
    if (!exp.trainer.api_key_env.empty()) {
      const char* k = std::getenv(exp.trainer.api_key_env.c_str());
      if (k == nullptr || *k == 0) {
        return failed_precondition("trainer.api_key_env names the environment variable " + exp.trainer.api_key_env +
                                   ", which is not set");
      }
      key = k;
    }
    parts.live = std::make_unique<HttpModelTrainer>(exp.trainer.url, key, exp.trainer.timeout_s);
  }
  if (calls == TrainerCalls::kLive) {
    parts.trainer = std::move(parts.live);
    return parts;
  }
  VINCI_ASSIGN_OR_RETURN(auto recorded,
                         RecordedModelTrainer::open(run_dir, parts.live.get(), calls == TrainerCalls::kRecordedPrefix,
                                                    calls != TrainerCalls::kRecordedDecisions));
  if (calls == TrainerCalls::kRecordedThenLive && !recorded->last_adapter().empty()) {
    // Later updates start from the last recorded one: the trainer must still hold it.
    auto* http = static_cast<HttpModelTrainer*>(parts.live.get());
    Result<std::string> loaded = http->load(recorded->last_adapter());
    if (!loaded.ok()) {
      return failed_precondition(loaded.status().message() + "; the run's last update (" +
                                 std::to_string(recorded->recorded()) +
                                 " recorded) produced it, and its later steps must start from it: start the trainer "
                                 "with the store that holds it");
    }
  }
  parts.trainer = std::move(recorded);
  return parts;
}

}  // namespace vinci
