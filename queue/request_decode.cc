// decode_queue_request (queue/protocol.h): what a worker reads from the network, on its own so
// the fuzz build (fuzz/queue_request.cc) compiles it without the evaluators.
#include <nlohmann/json.hpp>

#include "queue/protocol.h"

namespace vinci {

Result<QueueRequest> decode_queue_request(const std::string& body) {
  QueueRequest q;
  auto digest = [](const nlohmann::json& j, const char* key, Digest* out) -> Status {
    std::string hex = j.at(key).get<std::string>();
    if (hex.empty()) {
      *out = Digest();
      return Status();
    }
    if (!Digest::parse_hex(hex, out))
      return invalid_argument(std::string("queue request: '") + key + "' is not an address: '" + hex + "'");
    return Status();
  };
  // A whole number from 1 to 1e9.
  auto count = [](const nlohmann::json& j, const char* key) -> Result<int> {
    const nlohmann::json& v = j.at(key);
    if (!v.is_number_unsigned() || v.get<uint64_t>() < 1 || v.get<uint64_t>() > 1000000000)
      return invalid_argument(std::string("queue request: '") + key + "' must be an integer from 1 to 1e9, found " +
                              v.dump());
    return static_cast<int>(v.get<uint64_t>());
  };
  try {
    nlohmann::json j = nlohmann::json::parse(body);
    VINCI_RETURN_IF_ERROR(digest(j, "address", &q.address));
    q.task_id = j.at("task").get<std::string>();
    q.task_path = j.at("task_path").get<std::string>();
    VINCI_RETURN_IF_ERROR(digest(j, "task_file", &q.task_file));
    VINCI_RETURN_IF_ERROR(digest(j, "plan", &q.plan));
    VINCI_RETURN_IF_ERROR(digest(j, "profile", &q.profile));
    std::string size = j.at("size").get<std::string>();
    if (size == "full")
      q.request.size = SizeName::kFull;
    else if (size == "small")
      q.request.size = SizeName::kSmall;
    else
      return invalid_argument("queue request: size must be full or small, found '" + size + "'");
    // Numbers are checked before they are converted: a float or an out-of-range integer is an
    // error, not a conversion.
    const nlohmann::json& seed = j.at("seed");
    if (!seed.is_number_unsigned())
      return invalid_argument("queue request: 'seed' must be an integer >= 0, found " + seed.dump());
    q.request.seed = seed.get<uint64_t>();
    VINCI_ASSIGN_OR_RETURN(q.request.trials, count(j, "trials"));
    VINCI_ASSIGN_OR_RETURN(q.request.samples, count(j, "samples"));
    q.request.strict = j.at("strict").get<bool>();
    if (j.contains("timing")) {
      VINCI_ASSIGN_OR_RETURN(q.request.adaptive_rule,
                             adaptive_timing_from_json(j.at("timing"), "queue request: timing"));
      q.request.adaptive = true;
      q.request.adaptive_rule.max_samples = q.request.samples;
    }
    q.spec.kind = j.at("evaluator").get<std::string>();
    if (q.spec.kind != "sim" && q.spec.kind != "cuda")
      return invalid_argument("queue request: evaluator must be sim or cuda, found '" + q.spec.kind + "'");
    for (const auto& [k, v] : j.at("settings").items()) q.spec.settings[k] = v.get<std::string>();
    VINCI_ASSIGN_OR_RETURN(q.attempts, count(j, "attempts"));
  } catch (const nlohmann::json::exception& e) {
    return invalid_argument(std::string("queue request: ") + e.what());
  }
  return q;
}

}  // namespace vinci
