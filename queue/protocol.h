// What travels through vinci's evaluation queue (docs/distributed.md), and the keys it uses.
//
// A request names everything an evaluation depends on by content address: the task (the text of
// the task file it was read from, and its id there), the plan (its canonical bytes), the
// EvalRequest fields and the evaluator's settings (for the sim world the device profile's text
// too). All of it travels with the request, so a worker on another machine needs nothing but the
// queue: the plan, nearly always new, inside the request (gone with it once answered); the task
// file and the profile, which every request of a run names, stored once as objects. The request's
// address hashes all of it: equal addresses are equal evaluations, and a result delivered twice
// is stored once.
//
// A result is the evaluator's Measurement (Cap'n Proto, flat) and the compile log's text, keyed by
// the request's address; or, for a request that failed on `attempts` deliveries in a row, the
// reasons, which the harness records as a failed evaluation.
//
// Keys under the queue's name P (redis://HOST:PORT/P, default "vinci"):
//   P:requests:KIND     stream of requests for the sim or cuda evaluator; consumer group "workers"
//   P:obj:<hex>         an object's bytes (task file, device profile), with a TTL
//   P:why:<hex>         a request's failure reasons so far (list)
//   P:worker:<name>     a worker's heartbeat (JSON), with a TTL: the worker is alive
//   P:reply:<client>    a harness's stream of results
//   P:done              results answered by all workers (a counter, for throughput)
#ifndef VINCI_QUEUE_PROTOCOL_H_
#define VINCI_QUEUE_PROTOCOL_H_

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/hash.h"
#include "core/status.h"
#include "gpu/eval_result.h"
#include "gpu/plan.h"
#include "gpu/task.h"

namespace vinci {

constexpr const char* kQueueGroup = "workers";

struct QueueKeys {
  std::string prefix;  // "vinci:" (the queue's name and a colon)
  explicit QueueKeys(const std::string& name) : prefix(name + ":") {}
  // One stream per evaluator kind: a sim worker never takes a request for a GPU.
  std::string requests(const std::string& kind) const { return prefix + "requests:" + kind; }
  std::string object(const Digest& d) const { return prefix + "obj:" + d.hex(); }
  std::string why(const Digest& d) const { return prefix + "why:" + d.hex(); }
  std::string worker(const std::string& name) const { return prefix + "worker:" + name; }
  std::string workers_pattern() const { return prefix + "worker:*"; }
  std::string reply(const std::string& client) const { return prefix + "reply:" + client; }
  std::string done() const { return prefix + "done"; }
};

// Which evaluator answers and with what settings. kind: "sim" or "cuda". settings: the
// evaluator's options as strings (sorted); profile_text: the device profile's TOML (the sim
// prices with it; the live evaluator takes its roofline floor from it).
struct EvaluatorSpec {
  std::string kind = "sim";
  std::map<std::string, std::string> settings;
  std::string profile_text;
};

// The sim evaluator's spec (noise, limits) and the live evaluator's (reference precision, limits).
EvaluatorSpec sim_spec(const std::string& profile_text, double noise, const PlanLimits& limits);
// timing_budget_s > 0: a slow candidate's timed runs stop after that many seconds (>= 5 samples),
// as `replay rescore --timing-budget` does in process.
EvaluatorSpec cuda_spec(const std::string& profile_text, ReferencePrecision reference_precision,
                        const PlanLimits& limits, double timing_budget_s = 0);
// The spec's options back (errors name the setting).
Result<PlanLimits> spec_limits(const EvaluatorSpec& spec);
Result<double> spec_noise(const EvaluatorSpec& spec);
Result<double> spec_timing_budget(const EvaluatorSpec& spec);  // 0 when the spec sets none

// The address of a task: the text of its task file and its id there.
Digest task_file_address(const std::string& file_text);
Digest task_address(const Digest& file_address, const std::string& task_id);

struct EncodedRequest {
  Digest address;                         // the request's content address
  std::string body;                       // JSON
  std::string plan;                       // the plan's canonical bytes, sent inside the request
  std::map<Digest, std::string> objects;  // address -> bytes, to store before the request is sent
};

// task_file_text: the text of the file task.source_file names (the task as the worker will parse
// it). attempts: deliveries before the request counts as failed (not part of the address).
EncodedRequest encode_queue_request(const Task& task, const std::string& task_file_text, const Plan& plan,
                                    const EvalRequest& request, const EvaluatorSpec& spec, int attempts);
Digest queue_request_address(const Digest& task_file, const std::string& task_id, const Digest& plan,
                             const EvalRequest& request, const EvaluatorSpec& spec);

struct QueueRequest {
  Digest address;  // as the sender computed it
  std::string task_id;
  std::string task_path;  // where the sender read the task file (error messages only)
  Digest task_file;
  Digest plan;
  Digest profile;  // zero: no profile text
  EvalRequest request;
  EvaluatorSpec spec;  // without profile_text (an object)
  int attempts = 3;
};
Result<QueueRequest> decode_queue_request(const std::string& body);

// A result on the wire: the Measurement (flat Cap'n Proto) and the compile log beside it.
std::string encode_queue_result(const EvalResult& r);
Result<EvalResult> decode_queue_result(const std::string& measurement, const std::string& compile_log);

// The record of a request that failed on every delivery: not compiled, not correct, every trial
// unreached, flagged "rejected: queue_failed", the reasons in the error.
EvalResult failed_queue_result(const std::string& evaluator, const Task& task, const Plan& plan,
                               const EvalRequest& request, const std::string& reasons);

}  // namespace vinci

#endif  // VINCI_QUEUE_PROTOCOL_H_
