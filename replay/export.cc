#include "replay/export.h"

#include <capnp/message.h>

#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <tuple>
#include <vector>

#include "harness/records.h"
#include "recorder/run.h"
#include "recorder/vinci.capnp.h"

namespace vinci {
namespace {

using Json = nlohmann::ordered_json;
using Phase = schema::Record::Phase;

const std::pair<const char*, Phase> kPhases[] = {
    {"train", Phase::TRAIN},         {"eval", Phase::EVAL}, {"verify", Phase::VERIFY},
    {"coldstart", Phase::COLDSTART}, {"tts", Phase::TTS},
};

std::optional<Phase> phase_named(const std::string& name) {
  for (const auto& [n, p] : kPhases) {
    if (name == n) return p;
  }
  return std::nullopt;
}

const char* phase_name(Phase phase) {
  for (const auto& [n, p] : kPhases) {
    if (p == phase) return n;
  }
  return "?";
}

const char* role_name(schema::Role role) {
  switch (role) {
    case schema::Role::SELECTION: return "selection";
    case schema::Role::POLICY: return "policy";
    case schema::Role::SUMMARY: return "summary";
  }
  return "?";
}

// (step, task, scheme, rollout, turn): a policy turn's position.
using TurnKey = std::tuple<int32_t, std::string, int32_t, int32_t, int32_t>;
// (step, task, sampleIndex): a selection or summary sample of a task.
using SampleKey = std::tuple<int32_t, std::string, int32_t>;

struct AdvantageEntry {
  uint64_t seq = 0;
  double value = 0, return_value = 0, baseline = 0, scale = 0;
  uint32_t group_size = 0;
  std::optional<uint64_t> matched_by;  // the seq of the call it matched
};

struct RewardEntry {
  uint64_t seq = 0;
  double value = 0;
};

struct Call {
  uint64_t seq = 0;
  schema::Role role = schema::Role::POLICY;
  int32_t step = -1, scheme = -1, rollout = -1, turn = -1, sample_index = -1;
  std::string task;
  std::string model;
  Digest request, reply;
  std::string finish_reason, failure;
  uint32_t prompt_tokens = 0, completion_tokens = 0;
  double temperature = 0;
};

// "record 105 (llmReply of role policy, step 0, task L1_003, scheme 0, rollout 0, turn 1)"
std::string describe(uint64_t seq, const std::string& what, int32_t step, const std::string& task, int32_t scheme,
                     int32_t rollout, int32_t turn, int32_t sample_index) {
  std::string s = "record " + std::to_string(seq) + " (" + what + ", step " + std::to_string(step) + ", task " +
                  (task.empty() ? "-" : task);
  if (scheme >= 0) s += ", scheme " + std::to_string(scheme);
  if (rollout >= 0) s += ", rollout " + std::to_string(rollout);
  if (turn >= 0) s += ", turn " + std::to_string(turn);
  if (sample_index >= 0) s += ", sampleIndex " + std::to_string(sample_index);
  return s + ")";
}

std::string describe(const Call& c) {
  return describe(c.seq, std::string("llmReply of role ") + role_name(c.role), c.step, c.task, c.scheme, c.rollout,
                  c.turn, c.sample_index);
}

template <typename Key, typename Entry>
Status put_unique(std::map<Key, Entry>* map, const Key& key, Entry entry, const std::string& what) {
  auto [it, fresh] = map->emplace(key, entry);
  if (!fresh) {
    return corruption(what + ": the run already has one for this key, record " + std::to_string(it->second.seq));
  }
  return Status();
}

// Everything the export needs from one scan of the log, for the phase asked for.
struct Scan {
  std::vector<Call> calls;  // of the phase and role asked for, in log order
  uint64_t run_calls = 0;
  std::map<TurnKey, AdvantageEntry> policy_advantages;
  std::map<SampleKey, AdvantageEntry> selection_advantages, summary_advantages;
  std::map<TurnKey, RewardEntry> turn_rewards;
  std::map<SampleKey, RewardEntry> scheme_rewards, summary_rewards;
};

bool role_wanted(const std::string& role, schema::Role r) { return role == "all" || role == role_name(r); }

Status scan_record(schema::Record::Reader r, Phase phase, const std::string& role, Scan* scan) {
  const uint64_t seq = r.getSeq();
  const int32_t step = r.getStep(), scheme = r.getScheme(), rollout = r.getRollout(), turn = r.getTurn();
  if (r.isLlmReply()) ++scan->run_calls;
  if (r.getPhase() != phase) return Status();
  const std::string task = r.getTask();
  if (r.isLlmReply()) {
    LlmReplyRecord l = read_llm_reply(r.getLlmReply());
    if (!role_wanted(role, l.role)) return Status();
    Call c;
    c.seq = seq;
    c.role = l.role;
    c.step = step;
    c.task = task;
    c.scheme = scheme;
    c.rollout = rollout;
    c.turn = turn;
    c.sample_index = l.sample_index;
    c.model = std::move(l.model);
    c.request = l.request;
    c.reply = l.reply;
    c.finish_reason = std::move(l.finish_reason);
    c.failure = std::move(l.failure);
    c.prompt_tokens = l.prompt_tokens;
    c.completion_tokens = l.completion_tokens;
    c.temperature = l.temperature;
    if (c.request.is_zero()) return corruption(describe(c) + " names no request object");
    if (c.reply.is_zero() && c.failure.empty()) {
      return corruption(describe(c) + " names no reply object and no failure");
    }
    scan->calls.push_back(std::move(c));
  } else if (r.isAdvantage()) {
    AdvantageRecord a = read_advantage(r.getAdvantage());
    if (!role_wanted(role, a.role)) return Status();
    AdvantageEntry e;
    e.seq = seq;
    e.value = a.value;
    e.return_value = a.return_value;
    e.baseline = a.baseline;
    e.scale = a.scale;
    e.group_size = a.group_size;
    const int32_t si = a.sample_index;
    std::string what =
        describe(seq, std::string("advantage of role ") + role_name(a.role), step, task, scheme, rollout, turn, si);
    switch (a.role) {
      case schema::Role::POLICY:
        return put_unique(&scan->policy_advantages, TurnKey{step, task, scheme, rollout, turn}, e, what);
      case schema::Role::SELECTION: return put_unique(&scan->selection_advantages, SampleKey{step, task, si}, e, what);
      case schema::Role::SUMMARY: return put_unique(&scan->summary_advantages, SampleKey{step, task, si}, e, what);
    }
  } else if (r.isReward()) {
    RewardRecord w = read_reward(r.getReward());
    RewardEntry e{seq, w.value};
    const int32_t si = w.sample_index;
    switch (w.kind) {
      case schema::Reward::Kind::TURN:
        return put_unique(&scan->turn_rewards, TurnKey{step, task, scheme, rollout, turn}, e,
                          describe(seq, "turn reward", step, task, scheme, rollout, turn, si));
      case schema::Reward::Kind::SCHEME:
        return put_unique(&scan->scheme_rewards, SampleKey{step, task, si}, e,
                          describe(seq, "scheme reward", step, task, scheme, rollout, turn, si));
      case schema::Reward::Kind::SUMMARY:
        return put_unique(&scan->summary_rewards, SampleKey{step, task, si}, e,
                          describe(seq, "summary reward", step, task, scheme, rollout, turn, si));
    }
  }
  return Status();
}

// The stored object at `address`, of `kind`; errors name the record.
Result<std::string> read_object(ObjectStore& store, const Digest& address, const std::string& kind, const Call& call) {
  auto obj = store.get(address);
  if (!obj.ok()) {
    return Status(obj.status().code(), describe(call) + ": its " + kind + " object: " + obj.status().message());
  }
  if (obj->kind != kind) {
    return corruption(describe(call) + ": object " + address.hex() + " is of kind '" + obj->kind + "', not " + kind);
  }
  return std::move(obj->bytes);
}

Result<Json> parse_json(const std::string& bytes, const std::string& what, const Call& call) {
  Json j = Json::parse(bytes, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return corruption(describe(call) + ": its " + what + " is not a JSON object");
  }
  return j;
}

// The assistant message of a reply body as received: its content ("" when the server sent none),
// the server's separate reasoning field when present, its tool calls when any.
Result<Json> assistant_message(const Json& body, const Call& call) {
  auto choices = body.find("choices");
  if (choices == body.end() || !choices->is_array() || choices->empty() || !(*choices)[0].is_object()) {
    return corruption(describe(call) + ": its reply has no choices");
  }
  auto msg = (*choices)[0].find("message");
  if (msg == (*choices)[0].end() || !msg->is_object()) {
    return corruption(describe(call) + ": its reply's choice 0 has no message");
  }
  Json out = Json::object();
  out["role"] = "assistant";
  auto content = msg->find("content");
  out["content"] = content != msg->end() && content->is_string() ? content->get<std::string>() : "";
  for (const char* field : {"reasoning_content", "reasoning"}) {
    auto r = msg->find(field);
    if (r != msg->end() && r->is_string() && !r->get<std::string>().empty()) {
      out["reasoning"] = *r;
      break;
    }
  }
  auto calls = msg->find("tool_calls");
  if (calls != msg->end() && calls->is_array() && !calls->empty()) out["tool_calls"] = *calls;
  return out;
}

}  // namespace

Status check_export_options(const ExportOptions& options) {
  if (!phase_named(options.phase)) {
    return invalid_argument("unknown phase '" + options.phase + "': expected train, eval, verify, coldstart or tts");
  }
  const std::string& r = options.role;
  if (r != "all" && r != "policy" && r != "selection" && r != "summary") {
    return invalid_argument("unknown role '" + r + "': expected policy, selection, summary or all");
  }
  return Status();
}

Result<ExportSummary> export_run(const std::string& run_dir, const ExportOptions& options,
                                 const std::function<Status(const std::string&)>& line) {
  VINCI_RETURN_IF_ERROR(check_export_options(options));
  const Phase phase = *phase_named(options.phase);
  VINCI_ASSIGN_OR_RETURN(auto reader, RunReader::open(run_dir));
  ExportSummary summary;
  summary.run_completed = reader->manifest().completed;

  // Pass over the log: calls, rewards and advantages. Advantages follow every call of their task,
  // so no line can be written before the scan ends.
  Scan scan;
  while (RecordView* view = reader->next()) {
    VINCI_RETURN_IF_ERROR(scan_record(view->message().getRoot<schema::Record>(), phase, options.role, &scan));
  }
  VINCI_RETURN_IF_ERROR(reader->status());
  if (reader->damage()) {
    return corruption("run " + run_dir + " is damaged after record " + std::to_string(reader->records_read()) + ": " +
                      reader->damage()->to_string());
  }
  summary.run_calls = scan.run_calls;
  summary.calls = scan.calls.size();

  ObjectStore& store = reader->store();
  for (const Call& c : scan.calls) {
    AdvantageEntry* adv = nullptr;
    const RewardEntry* reward = nullptr;
    auto find = [](auto& map, const auto& key) {
      auto it = map.find(key);
      return it == map.end() ? nullptr : &it->second;
    };
    const TurnKey turn_key{c.step, c.task, c.scheme, c.rollout, c.turn};
    const SampleKey sample_key{c.step, c.task, c.sample_index};
    switch (c.role) {
      case schema::Role::POLICY:
        adv = find(scan.policy_advantages, turn_key);
        reward = find(scan.turn_rewards, turn_key);
        break;
      case schema::Role::SELECTION:
        adv = find(scan.selection_advantages, sample_key);
        reward = find(scan.scheme_rewards, sample_key);
        break;
      case schema::Role::SUMMARY:
        adv = find(scan.summary_advantages, sample_key);
        reward = find(scan.summary_rewards, sample_key);
        break;
    }
    if (adv) {
      if (adv->matched_by) {
        return corruption(describe(c) + " and record " + std::to_string(*adv->matched_by) +
                          " both match the advantage record " + std::to_string(adv->seq));
      }
      adv->matched_by = c.seq;
    } else {
      ++summary.calls_without_advantage;
      if (!options.all_calls) continue;
    }

    VINCI_ASSIGN_OR_RETURN(std::string request_bytes, read_object(store, c.request, "llm_request", c));
    VINCI_ASSIGN_OR_RETURN(Json request, parse_json(request_bytes, "request", c));
    auto messages = request.find("messages");
    if (messages == request.end() || !messages->is_array()) {
      return corruption(describe(c) + ": its request has no messages");
    }

    Json j = Json::object();
    j["role"] = role_name(c.role);
    j["phase"] = phase_name(phase);
    j["step"] = c.step;
    j["task"] = c.task;
    j["scheme"] = c.scheme;
    j["rollout"] = c.rollout;
    j["turn"] = c.turn;
    j["sample_index"] = c.sample_index;
    j["messages"] = std::move(*messages);
    auto tools = request.find("tools");
    if (tools != request.end()) j["tools"] = std::move(*tools);
    if (c.failure.empty()) {
      VINCI_ASSIGN_OR_RETURN(std::string reply_bytes, read_object(store, c.reply, "llm_reply", c));
      VINCI_ASSIGN_OR_RETURN(Json body, parse_json(reply_bytes, "reply", c));
      VINCI_ASSIGN_OR_RETURN(j["reply"], assistant_message(body, c));
      j["finish_reason"] = c.finish_reason;
    } else {
      j["reply"] = nullptr;
      j["finish_reason"] = nullptr;
    }
    j["reward"] = reward ? Json(reward->value) : Json(nullptr);
    j["return"] = adv ? Json(adv->return_value) : Json(nullptr);
    j["advantage"] = adv ? Json(adv->value) : Json(nullptr);
    j["baseline"] = adv ? Json(adv->baseline) : Json(nullptr);
    j["scale"] = adv ? Json(adv->scale) : Json(nullptr);
    j["group_size"] = adv ? Json(adv->group_size) : Json(nullptr);
    j["model"] = c.model;
    j["request"] = c.request.hex();
    j["temperature"] = c.temperature;
    j["prompt_tokens"] = c.prompt_tokens;
    j["completion_tokens"] = c.completion_tokens;
    j["seq"] = c.seq;
    if (!c.failure.empty()) {
      j["failure"] = c.failure;
      ++summary.failed;
    }
    // Strings from parsed JSON are valid UTF-8; record texts are replaced where they are not.
    VINCI_RETURN_IF_ERROR(line(j.dump(-1, ' ', false, Json::error_handler_t::replace)));
    ++summary.lines;
    ++summary.lines_by_role[role_name(c.role)];
  }

  for (const auto* map : {&scan.selection_advantages, &scan.summary_advantages}) {
    for (const auto& [key, e] : *map) summary.advantages_without_call += e.matched_by ? 0 : 1;
  }
  for (const auto& [key, e] : scan.policy_advantages) summary.advantages_without_call += e.matched_by ? 0 : 1;
  return summary;
}

}  // namespace vinci
