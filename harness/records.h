// The records of a run (recorder/vinci.capnp), each kind written and read here: a plain value
// struct per kind, the writer that appends it to a RecordBuf at a RecordPos, and the reader that
// turns a logged record back into the struct. The loop, the cold start and test-time scaling write
// through these; replay, export and the recorded backbone read through them. docs/log_format.md
// says what each field means.
//
// Byte order matters: Cap'n Proto lays out a record's text, data and lists in the order they are
// set, and `replay verify` compares records byte for byte with the log. Each writer therefore sets
// its fields in the order runs have always been recorded in; where two writers of one kind differ
// (a summary sample, a staged skill) each keeps its own writer, and a comment says so.
//
// A measurement's value type is EvalResult; its codec (to_measurement, from_measurement) sits
// beside it in gpu/eval_result.h, and write_measurement and read_measurement here call it.
#ifndef VINCI_HARNESS_RECORDS_H_
#define VINCI_HARNESS_RECORDS_H_

#include <capnp/message.h>

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/hash.h"
#include "core/status.h"
#include "gpu/eval_result.h"
#include "harness/rl.h"
#include "recorder/object_store.h"
#include "recorder/vinci.capnp.h"

namespace vinci {

// ---- where a record sits ----

// Its step and task and, where they apply, its scheme (or sample), rollout and turn, -1 where one
// does not; and the phase that wrote it. Every writer takes one, so call sites name a position
// instead of passing five loose integers.
struct RecordPos {
  using Phase = schema::Record::Phase;

  int32_t step = -1;
  std::string task;  // "" for run-wide records (metrics, library snapshots)
  int32_t scheme = -1;
  int32_t rollout = -1;
  int32_t turn = -1;
  Phase phase = Phase::TRAIN;

  // A run-wide record of a step.
  static RecordPos of_step(int32_t step, Phase phase = Phase::TRAIN) {
    RecordPos p;
    p.step = step;
    p.phase = phase;
    return p;
  }
  // A record of one task in a step.
  static RecordPos of_task(int32_t step, const std::string& task, Phase phase) {
    RecordPos p = of_step(step, phase);
    p.task = task;
    return p;
  }
  RecordPos at_scheme(int32_t v) const { return with(&RecordPos::scheme, v); }
  RecordPos at_rollout(int32_t v) const { return with(&RecordPos::rollout, v); }
  RecordPos at_turn(int32_t v) const { return with(&RecordPos::turn, v); }
  RecordPos in_phase(Phase v) const { return with(&RecordPos::phase, v); }

  bool operator==(const RecordPos& o) const {
    return step == o.step && task == o.task && scheme == o.scheme && rollout == o.rollout && turn == o.turn &&
           phase == o.phase;
  }

 private:
  template <typename T>
  RecordPos with(T RecordPos::*field, T v) const {
    RecordPos p = *this;
    p.*field = v;
    return p;
  }
};

RecordPos read_position(schema::Record::Reader r);

// Records a piece of work produces, in order; seq is set when they reach the sink.
struct RecordBuf {
  std::vector<std::unique_ptr<capnp::MallocMessageBuilder>> records;

  // A new record at pos, its payload still to be set.
  schema::Record::Builder add(const RecordPos& pos);
};

// ---- events: nondeterministic inputs, replayed from the log ----

// A backbone's sample (BackboneSample). Zero digests are left unset.
struct SampleRecord {
  schema::Role role = schema::Role::POLICY;
  std::string backbone;  // the kind of backbone that sampled it (Backbone::kind())
  std::vector<uint32_t> actions;
  double log_prob = 0;
  bool greedy = false;
  Digest output;  // what the role produced (a plan, a skill list)
  Digest prompt;  // the request of the model call behind it
  int32_t sample_index = -1;
  Digest key;  // the call's RngKey digest: the recorded backbone answers by it
};
// Policy, selection and cold-start search samples.
void write_sample(RecordBuf& buf, const RecordPos& pos, const SampleRecord& s);
// A summary sample: its fields in the summary's own recorded order (key, prompt, output), and no
// action list at all when it includes nothing.
void write_summary_sample(RecordBuf& buf, const RecordPos& pos, const SampleRecord& s);
SampleRecord read_sample(schema::BackboneSample::Reader r);

// A measurement (the evaluator's EvalResult).
void write_measurement(RecordBuf& buf, const RecordPos& pos, const EvalResult& eval);
// The log text objects are read through `log_text` when given (see from_measurement).
// What scoring needs of a measurement, without decoding its trials, samples and settings.
TurnOutcome read_turn_outcome(schema::Measurement::Reader r);
Result<EvalResult> read_measurement(schema::Measurement::Reader r,
                                    const std::function<Result<std::string>(const Digest&)>& log_text = nullptr);

// One language-model call (LlmReply); the request and reply bodies are objects in the store.
struct LlmReplyRecord {
  schema::Role role = schema::Role::POLICY;
  std::string endpoint;
  std::string model;
  Digest request;  // the "llm_request" object
  Digest reply;    // the "llm_reply" object; zero when the call failed
  std::string finish_reason;
  uint32_t prompt_tokens = 0;
  uint32_t completion_tokens = 0;
  double temperature = 0;
  std::string failure;  // why the call failed; empty when it succeeded
  Digest key;
  int32_t sample_index = -1;
};
void write_llm_reply(RecordBuf& buf, const RecordPos& pos, const LlmReplyRecord& l);
LlmReplyRecord read_llm_reply(schema::LlmReply::Reader r);

// One update of a language model by its trainer (schema ModelUpdate; harness/model_trainer.h).
struct ModelUpdateRecord {
  std::string trainer;
  std::string endpoint;
  std::string kind;  // "rl" | "sft"
  std::string base_model;
  std::string parent;  // empty: the base model
  std::string adapter;
  std::string model;
  double loss = 0;
  uint64_t prompt_tokens = 0;
  uint64_t completion_tokens = 0;
  uint32_t samples = 0;
  std::vector<schema::Role> roles;
  Digest request;       // the "trainer_update" object
  Digest reply;         // the "trainer_reply" object
  std::string failure;  // non-empty: the update failed and the model stayed the parent
};
void write_model_update(RecordBuf& buf, const RecordPos& pos, const ModelUpdateRecord& u);
ModelUpdateRecord read_model_update(schema::ModelUpdate::Reader r);

// ---- derived values, recomputed and compared by replay ----

struct SelectionCandidate {
  std::string name;
  double score = 0;
};
struct SelectionRecord {
  Digest query;
  std::vector<SelectionCandidate> candidates;  // BM25's top-k, in rank order
  std::vector<std::string> selected;
  bool random_fallback = false;
  bool reranked = false;
  int32_t sample_index = 0;
  Digest library_snapshot;
};
void write_selection(RecordBuf& buf, const RecordPos& pos, const SelectionRecord& s);
SelectionRecord read_selection(schema::SelectionDecision::Reader r);

struct RewardRecord {
  schema::Reward::Kind kind = schema::Reward::Kind::TURN;
  double value = 0;
  // Turn rewards: the measured turn behind the value.
  double speedup = 0;
  double time_coverage = 0;
  bool correct = false;
  bool decoy = false;
  int32_t sample_index = -1;  // scheme and summary rewards: the sample
};
void write_reward(RecordBuf& buf, const RecordPos& pos, const RewardRecord& w);
RewardRecord read_reward(schema::Reward::Reader r);

// One agent's advantage for one decision: the value trained on, the return it was computed from,
// the baseline subtracted and the scale applied (value = scale * (return - baseline), except
// where rejection sampling zeroes a policy turn), over a group of group_size decisions. Written
// in the train phase whatever the position's phase.
struct AdvantageRecord {
  schema::Role role = schema::Role::POLICY;
  double value = 0;
  double return_value = 0;
  double baseline = 0;
  double scale = 1;
  uint32_t group_size = 0;
  int32_t sample_index = -1;  // the selection or summary sample; -1 for policy turns
};
void write_advantage(RecordBuf& buf, const RecordPos& pos, const AdvantageRecord& a);
AdvantageRecord read_advantage(schema::Advantage::Reader r);

// A skill verification, or a diversity decision of the cold start (no skill object, no per-run
// correctness).
struct VerificationRecord {
  std::string skill_name;
  Digest skill;                  // the skill's object; zero: unset
  std::vector<double> speedups;  // one per verification run
  std::vector<bool> correct;     // ... empty: unset
  double baseline_turn1_speedup = 0;
  bool accepted = false;
  bool staged = false;
  std::string reason;
  int32_t sample_index = -1;
};
void write_verification(RecordBuf& buf, const RecordPos& pos, const VerificationRecord& v);
// The decision which accepted skill of a task is staged for the library: fields in its own
// recorded order (the reason before the speedup).
void write_staged_skill(RecordBuf& buf, const RecordPos& pos, const std::string& skill_name, double worst_speedup,
                        int32_t sample_index);
VerificationRecord read_verification(schema::VerificationDecision::Reader r);

struct LibrarySnapshotRecord {
  int32_t for_step = 0;  // the step that sees this library
  Digest snapshot;       // the library's canonical bytes
  uint32_t size = 0;
  std::vector<std::string> added;
};
void write_library_snapshot(RecordBuf& buf, const RecordPos& pos, const LibrarySnapshotRecord& s);
LibrarySnapshotRecord read_library_snapshot(schema::LibrarySnapshot::Reader r);

struct ParameterDigestRecord {
  Digest digest;
  Digest checkpoint;  // the serialized parameters' object, when saved; zero: unset
  double loss = 0;
  double grad_norm = 0;
};
void write_parameter_digest(RecordBuf& buf, const RecordPos& pos, const ParameterDigestRecord& p);
ParameterDigestRecord read_parameter_digest(schema::ParameterDigest::Reader r);

struct MetricRecord {
  std::string name;    // "fast_p", "reward_mean", ...
  std::string split;   // "train", "eval", "tts"
  int32_t level = -1;  // -1: all levels
  double threshold = 0;
  std::string turn_mode;    // "last", "best", or a turn index
  std::string denominator;  // "all", "correct"
  double value = 0;
  uint32_t numerator = 0;
  uint32_t count = 0;
};
// At pos (a run-wide position of the step; the phase follows the split).
void write_metric(RecordBuf& buf, int32_t step, const MetricRecord& m);
MetricRecord read_metric(schema::Metric::Reader r);

struct StepBeginRecord {
  std::vector<std::string> tasks;
  Digest library_snapshot;
  Digest param_digest;
};
void write_step_begin(RecordBuf& buf, const RecordPos& pos, const StepBeginRecord& s);
StepBeginRecord read_step_begin(schema::StepBegin::Reader r);

// The run digest over every record before this one.
void write_step_end(RecordBuf& buf, const RecordPos& pos, const Digest& digest_so_far);

// A named object attached to the run (a prompt template).
struct BlobRecord {
  std::string name;
  std::string kind;
  Digest address;
  uint64_t size = 0;
};
void write_blob(RecordBuf& buf, const RecordPos& pos, const BlobRecord& b);
BlobRecord read_blob(schema::BlobRef::Reader r);

// The parameters a run's training starts from.
struct CheckpointRecord {
  int32_t for_step = 0;
  Digest digest;   // their parameter digest
  Digest address;  // the checkpoint object
  uint64_t size = 0;
  std::string origin;  // "init", "coldstart", "run"
  // origin "run": the run folder as configured, its digest and the step taken. source_run empty:
  // none of the three is set.
  std::string source_run;
  Digest source_run_digest;
  int32_t source_step = -1;
};
void write_checkpoint(RecordBuf& buf, const RecordPos& pos, const CheckpointRecord& c);
CheckpointRecord read_checkpoint(schema::CheckpointRef::Reader r);

// Per role (selection, policy, summary).
using RoleDoubles = std::array<double, 3>;
using RoleCounts = std::array<uint32_t, 3>;

// One full-batch supervised step of the cold start.
struct SftEpochRecord {
  int32_t epoch = 0;
  double loss = 0;
  RoleDoubles cross_entropy{};  // mean per example, before the step
  RoleCounts examples{};
  Digest digest;  // the parameters after the step
};
void write_sft_epoch(RecordBuf& buf, const RecordPos& pos, const SftEpochRecord& s);
SftEpochRecord read_sft_epoch(schema::SftEpoch::Reader r);

// What the cold start built: its counts, the library and the fitted parameters.
struct ColdStartRecord {
  uint32_t trajectories = 0, kept = 0, proposed = 0, verified = 0;
  std::vector<std::string> added;
  bool diversity = false;
  RoleCounts examples{};
  RoleCounts examples_dropped{};
  RoleDoubles cross_entropy_before{};
  RoleDoubles cross_entropy_after{};
  Digest library;
  Digest checkpoint;
  Digest digest;
};
void write_cold_start(RecordBuf& buf, const RecordPos& pos, const ColdStartRecord& c);
ColdStartRecord read_cold_start(schema::ColdStartSummary::Reader r);

// The window a test-time-scaling iteration continues from: after iteration `iteration`, the turns
// start .. start + length - 1 (numbered over all iterations), the best by summed reward.
struct TtsWindowRecord {
  int32_t iteration = 0;
  int32_t start = 0;
  int32_t length = 0;
  double reward_sum = 0;
};
void write_tts_window(RecordBuf& buf, const RecordPos& pos, const TtsWindowRecord& w);
TtsWindowRecord read_tts_window(schema::TtsWindow::Reader r);

}  // namespace vinci

#endif  // VINCI_HARNESS_RECORDS_H_
