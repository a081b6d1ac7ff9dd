// Where the loop's records go, in the order the loop defines.
//
// WriteSink appends them to a run. CheckSink compares each with the record already at its position
// in a run's log (resume and replay): a difference stops the loop with a kMismatch naming the
// position, the record's place (step, task, scheme, rollout, turn, kind) and both values as JSON.
// Given a writer (resume), it checks the records a run already has, then appends the rest.
#ifndef VINCI_HARNESS_RECORD_SINK_H_
#define VINCI_HARNESS_RECORD_SINK_H_

#include <capnp/message.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "recorder/run.h"
#include "recorder/vinci.capnp.h"

namespace vinci {

class RecordSink {
 public:
  virtual ~RecordSink() = default;
  // Sets the record's seq to its position and takes it.
  virtual Status put(capnp::MessageBuilder& record) = 0;
  virtual ObjectStore& store() = 0;
  virtual uint64_t position() const = 0;
  // The digest of every record taken so far (the run digest so far).
  virtual Digest digest() const = 0;
  // Makes every record written so far durable (a run's prompt templates before its first model
  // call); nothing to do where nothing is written.
  virtual Status sync() { return Status(); }
};

class WriteSink : public RecordSink {
 public:
  explicit WriteSink(RunWriter* writer) : writer_(writer) {}
  Status put(capnp::MessageBuilder& record) override;
  ObjectStore& store() override { return writer_->store(); }
  uint64_t position() const override { return writer_->record_count(); }
  Digest digest() const override { return writer_->digest(); }
  Status sync() override { return writer_->checkpoint(); }

 private:
  RunWriter* writer_;
};

// Compares with `expected` (the recorded payloads, in order); past their end, appends to writer
// (resume) or fails (writer == nullptr: verify, where the loop must not outrun the log).
// A resumed writer writes nothing until every recorded record has matched (RunWriter::resume): its
// first append calls start_writing (when given, else the writer's own), so a log that is not the
// run's is refused with the run's folder untouched.
class CheckSink : public RecordSink {
 public:
  CheckSink(std::vector<std::string> expected, ObjectStore* store, RunWriter* writer,
            std::function<Status()> start_writing = nullptr);
  Status put(capnp::MessageBuilder& record) override;
  ObjectStore& store() override { return *store_; }
  uint64_t position() const override { return position_; }
  Digest digest() const override { return digest_.value(); }
  Status sync() override { return writer_ && position_ > expected_.size() ? writer_->checkpoint() : Status(); }
  uint64_t checked() const { return checked_; }
  // How many records the log held to compare with.
  uint64_t expected() const { return expected_.size(); }
  // Whether a record differed from the log's (the mismatch put returned).
  bool diverged() const { return diverged_; }
  // Whether the loop produced a record past the log's end with no writer to take it (the mismatch
  // put returned): every record the log holds was produced and matched first.
  bool ran_past_log() const { return ran_past_log_; }

 private:
  std::vector<std::string> expected_;
  ObjectStore* store_;
  RunWriter* writer_;
  std::function<Status()> start_writing_;
  uint64_t position_ = 0;
  uint64_t checked_ = 0;
  bool diverged_ = false;
  bool ran_past_log_ = false;
  RunDigest digest_;
};

// "step 3 task L1_019 scheme 2 rollout 1 turn 0 measurement" for messages.
std::string describe_record(schema::Record::Reader record);

// Every record payload of a run's log; fails on damage unless allow_damage (then the good prefix,
// and the damage in *damage when given).
Result<std::vector<std::string>> read_payloads(const std::string& run_dir, bool allow_damage,
                                               std::optional<LogDamage>* damage = nullptr);

}  // namespace vinci

#endif  // VINCI_HARNESS_RECORD_SINK_H_
