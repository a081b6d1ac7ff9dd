// The seam between the loop and whatever trains a language model (trainer.kind; docs/training.md).
//
// After a step's rewards and advantages, the loop hands the step's model calls to a trainer: per
// call its role, its request and reply (by address and as text), its advantage (already scaled by
// the role's weight) and that weight, for the roles the experiment trains (backbone.train_*). The
// trainer answers with the name of the model the next step asks for, the digest of what it
// trained, its loss and token counts. The cold start's supervised examples go the same way, as
// one update of kind "sft" before step 0.
//
// The update request is canonical JSON (keys sorted), stored as an object of kind
// "trainer_update"; the reply, without its wall time, as "trainer_reply"; a ModelUpdate record
// names both. So replay needs no trainer: RecordedModelTrainer answers from the log, and checks
// that the rebuilt request is the recorded one.
#ifndef VINCI_HARNESS_MODEL_TRAINER_H_
#define VINCI_HARNESS_MODEL_TRAINER_H_

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "agents/backbone.h"
#include "core/hash.h"
#include "core/rng.h"
#include "core/status.h"
#include "harness/agent_model.h"
#include "harness/experiment.h"

namespace vinci {

constexpr const char* kTrainerProtocol = "vinci.trainer/1";

// One model call to train on.
struct TrainSample {
  AgentRole role = AgentRole::kPolicy;
  Digest request;            // the "llm_request" object
  Digest reply;              // the "llm_reply" object; zero for a cold-start example (never sent)
  std::string request_body;  // the request as sent (canonical JSON)
  std::string completion;    // what the model wrote: the reply message's content
  std::string tool_calls;    // the reply message's tool calls as JSON, empty when none
  double advantage = 0;      // after the role's scale
  double scale = 1;          // the role's weight
};

// The sample of one recorded call; nullopt when the call failed (nothing was written).
std::optional<TrainSample> train_sample(const LlmCall& call, double advantage, double scale);

// The roles the experiment trains, in role order.
std::vector<AgentRole> trained_roles(const Experiment& exp);
bool trains_role(const Experiment& exp, AgentRole role);

// The canonical update request (docs/training.md). parent: the adapter the update starts from
// ("" for the base model); key: the update's key (its "seed").
std::string update_request_body(const Experiment& exp, const std::string& kind, int32_t step, const std::string& parent,
                                const RngKey& key, const std::vector<TrainSample>& samples);

// A trainer's reply, read.
struct TrainerReply {
  std::string model;    // the name the next requests use
  std::string adapter;  // the digest of what was trained
  double loss = 0;
  uint64_t prompt_tokens = 0, completion_tokens = 0;
  uint32_t samples = 0;
  double seconds = 0;   // the trainer's wall time: reported, never recorded
  std::string failure;  // non-empty: the update failed (a non-finite loss); the model is unchanged
  std::string record;   // the canonical reply without its wall time (object kind "trainer_reply")
};
// Errors name the field that is missing or of the wrong type.
Result<TrainerReply> parse_trainer_reply(std::string_view body);

class ModelTrainer {
 public:
  virtual ~ModelTrainer() = default;
  virtual std::string kind() const = 0;      // trainer.kind: "http"
  virtual std::string endpoint() const = 0;  // what the records name
  // The trainer's reply to one update. An error stops the run, keeping what it recorded, for
  // `harness run --resume`.
  virtual Result<TrainerReply> update(const std::string& kind, int32_t step, const std::string& body) = 0;
};

// trainer.kind = "http": POST {url}/vinci/update, one attempt bounded by trainer.timeout_s.
class HttpModelTrainer : public ModelTrainer {
 public:
  HttpModelTrainer(std::string url, std::string api_key, double timeout_s)
      : url_(std::move(url)), api_key_(std::move(api_key)), timeout_s_(timeout_s) {}
  std::string kind() const override { return "http"; }
  std::string endpoint() const override { return url_; }
  Result<TrainerReply> update(const std::string& kind, int32_t step, const std::string& body) override;
  // POST {url}/vinci/load: the trainer serves `adapter` again (a resume). FailedPrecondition when
  // it does not hold it, IoError when it cannot be reached.
  Result<std::string> load(const std::string& adapter);

 private:
  std::string url_, api_key_;
  double timeout_s_;
};

// The updates a run recorded, answered from its log by (kind, step); an update the log does not
// hold goes to `live` (a resume) or, without one, keeps the model (`keep_unrecorded`, the verify
// of an unfinished run) or is an error.
class RecordedModelTrainer : public ModelTrainer {
 public:
  // check_requests: a rebuilt request must hash to the recorded one (not in a rescore, whose
  // advantages are new).
  static Result<std::unique_ptr<RecordedModelTrainer>> open(const std::string& run_dir, ModelTrainer* live,
                                                            bool keep_unrecorded, bool check_requests = true);
  std::string kind() const override { return kind_; }
  std::string endpoint() const override { return endpoint_; }
  Result<TrainerReply> update(const std::string& kind, int32_t step, const std::string& body) override;
  // The adapter of the last recorded update ("" when none): where a resumed trainer must start.
  const std::string& last_adapter() const { return last_adapter_; }
  size_t recorded() const { return updates_.size(); }

 private:
  struct Update {
    Digest request;
    std::string reply;
  };
  std::map<std::pair<std::string, int32_t>, Update> updates_;
  ModelTrainer* live_ = nullptr;
  bool keep_unrecorded_ = false;
  bool check_requests_ = true;
  std::string kind_ = "recorded", endpoint_, last_adapter_;
};

// Builds the trainer of a world: HTTP for a live run; the log (then HTTP, for a resume). Null
// when trainer.kind = "none". A resume checks first that the trainer holds the last recorded
// adapter, and refuses clearly when it does not.
struct TrainerParts {
  std::unique_ptr<ModelTrainer> trainer;  // what the loop calls
  std::unique_ptr<ModelTrainer> live;     // under a recorded one
};
enum class TrainerCalls { kLive, kRecorded, kRecordedPrefix, kRecordedThenLive, kRecordedDecisions };
Result<TrainerParts> build_trainer(const Experiment& exp, TrainerCalls calls, const std::string& run_dir);

}  // namespace vinci

#endif  // VINCI_HARNESS_MODEL_TRAINER_H_
