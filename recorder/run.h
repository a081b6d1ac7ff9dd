// A recorded run: manifest, log of records and the shared object store, as one unit.
//
// Layout of a run folder RUN (a child of its runs root):
//
//   RUN/manifest.bin     the Manifest (schema::Manifest, packed), rewritten atomically
//   RUN/log/*.vlog       the run log (recorder/run_log.h)
//   RUN/../objects/      the object store shared by every run under the same root
//
// A run is written by one RunWriter. It appends Records in order (each record's seq is its frame
// number) and ends with finish(): a RunEnd record carrying the digest of every record before it,
// and the manifest rewritten with completed = true, the record count and the run digest (the
// digest over all frames, RunEnd included). A run killed before finish() has completed = false
// and can be resumed after its last good record.
#ifndef VINCI_RECORDER_RUN_H_
#define VINCI_RECORDER_RUN_H_

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "core/hash.h"
#include "core/status.h"
#include "recorder/environment.h"
#include "recorder/object_store.h"
#include "recorder/run_log.h"

namespace capnp {
class MessageBuilder;
class MessageReader;
}  // namespace capnp

namespace vinci {

// Where a run's files are. Its objects are in RUN/objects when that folder exists (a rescored
// run: everything inside its --out folder), else in the runs root's shared store, ROOT/objects.
struct RunLocation {
  std::string run_dir;
  std::string log_dir;
  std::string manifest_path;
  std::string store_dir;
  // REQUIRES: run_dir names the run's folder (it need not exist yet).
  static RunLocation of(const std::string& run_dir);
};

// Which world made a run: the simulated device, a live GPU, or a rescore of another run (its
// kernels measured again, its decisions taken from its log). Text on disk (schema::Manifest.world).
enum class RunWorld { kSim, kLive, kRescore };
// "sim", "live", "rescore".
const char* run_world_name(RunWorld world);
// The inverse of run_world_name; anything else is an error naming the three names.
Result<RunWorld> parse_run_world(const std::string& name);

// The manifest as plain C++ (schema::Manifest on disk).
struct ManifestInfo {
  uint32_t format_version = 0;  // set by the writer
  std::string name;
  std::string config_path;
  std::string config_text;
  uint64_t seed = 0;
  RunWorld world = RunWorld::kSim;
  Environment environment;
  bool completed = false;
  uint64_t record_count = 0;
  Digest run_digest;
  std::string parent_run;
  std::map<std::string, std::string> annotations;  // recorded, never used in derived values
};

std::string encode_manifest(const ManifestInfo& m);
Result<ManifestInfo> decode_manifest(std::string_view bytes, const std::string& path_for_errors);
Result<ManifestInfo> read_manifest(const std::string& path);

// Where a completed run's log disagrees with its manifest (records and digest; a log cut short at
// a frame boundary, extended, or another run's), as a sentence for messages; empty when it agrees
// or the manifest is not completed (its log is still being written: nothing to compare with).
std::string log_disagreement(const ManifestInfo& manifest, uint64_t records, const Digest& digest);

// The RunEnd record that closes a run: the count and digest of every record before it.
void init_run_end(capnp::MessageBuilder& message, uint64_t record_count, const Digest& digest);

// A record message's frame payload: the packed Cap'n Proto encoding.
std::string encode_message(capnp::MessageBuilder& message);

// A decoded record. Owns a copy of its bytes; message() is valid until the next parse().
// A view can be reused for record after record without allocating (scanning a log).
class RecordView {
 public:
  RecordView();
  ~RecordView();
  RecordView(const RecordView&) = delete;
  RecordView& operator=(const RecordView&) = delete;

  // Fails with kCorruption when payload is not a valid packed message of a Record; every pointer
  // of the message is followed and checked here, so reading any field of a parsed record is safe.
  Status parse(std::string_view payload);
  static Result<std::unique_ptr<RecordView>> decode(std::string_view payload);

  // REQUIRES: the last parse() succeeded.
  capnp::MessageReader& message();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

class RunWriter {
 public:
  // Starts a new run in run_dir; fails if it already holds a manifest. A writer holds an exclusive
  // lock on the run folder while it lives: a second writer of the same run is refused.
  static Result<std::unique_ptr<RunWriter>> create(const std::string& run_dir, ManifestInfo info,
                                                   RunLogOptions options = {});
  // Continues a run that was not finished, after its last good record. Takes the folder's lock and
  // writes nothing: the caller first checks that the log is this run's (harness run --resume
  // re-derives the recorded records and compares them), so a refused resume leaves every byte of
  // the folder as it was. The first write (start_writing, or append, checkpoint, finish,
  // mark_complete) removes the temporary files of writes the stopped writer left unfinished in the
  // run's folder and its log, and reopens the log after its last good frame, truncating a damaged
  // tail (recovery() says what it found).
  static Result<std::unique_ptr<RunWriter>> resume(const std::string& run_dir, RunLogOptions options = {});
  ~RunWriter();

  // Readies a resumed writer to write (above); nothing to do once done, or for a created writer.
  Status start_writing();
  bool writing() const { return log_ != nullptr; }
  // What start_writing found in a resumed run's log: the good frames kept, the damaged tail dropped.
  const LogRecovery& recovery() const { return recovery_; }

  ObjectStore& store() { return *store_; }
  const ManifestInfo& manifest() const { return manifest_; }
  const RunLocation& location() const { return loc_; }

  // Sets the record's seq to the next frame number and appends it. Returns that seq.
  // REQUIRES: message's root is a schema::Record.
  Result<uint64_t> append(capnp::MessageBuilder& message);
  // Appends an already encoded record (its seq must be the next frame number).
  Status append_encoded(std::string_view payload);
  // Writes out what is buffered; nothing for a resumed writer that has not started writing.
  Status flush() { return log_ ? log_->flush() : Status(); }
  // Makes everything so far durable (log and objects).
  Status checkpoint();
  // Appends RunEnd, syncs, and marks the manifest completed.
  Status finish();
  // Syncs and marks the manifest completed (the log ends with its RunEnd record, appended by the
  // caller): what a run writes after its records (its reports) goes between the two.
  Status mark_complete();

  // REQUIRES (these three): writing().
  uint64_t record_count() const;
  Digest digest() const;
  RunLogWriter& log();

 private:
  RunWriter() = default;
  RunLocation loc_;
  ManifestInfo manifest_;
  std::unique_ptr<ObjectStore> store_;
  std::unique_ptr<RunLogWriter> log_;  // null for a resumed writer until start_writing
  RunLogOptions log_options_;
  LogRecovery recovery_;
  int lock_fd_ = -1;  // the run folder, locked (flock) while this writer lives
};

class RunReader {
 public:
  static Result<std::unique_ptr<RunReader>> open(const std::string& run_dir);

  const ManifestInfo& manifest() const { return manifest_; }
  ObjectStore& store() { return *store_; }
  const RunLocation& location() const { return loc_; }

  // The next record, decoded; nullptr at the end, at damage (damage()) or on an error (status()).
  // The view is the reader's own and is valid until the next call.
  // A completed run's log is checked against its manifest: a log that holds other than the
  // manifest's record count, or whose digest is not the manifest's, is damage too (at its end).
  RecordView* next();
  const std::optional<LogDamage>& damage() const { return damage_; }
  const Status& status() const { return status_.ok() ? log_->status() : status_; }
  // The digest of the records read so far.
  Digest digest() const { return digest_.value(); }
  uint64_t records_read() const { return digest_.count(); }

 private:
  RunReader() = default;
  RunLocation loc_;
  ManifestInfo manifest_;
  std::unique_ptr<ObjectStore> store_;
  std::unique_ptr<RunLogReader> log_;
  RunDigest digest_;
  Status status_;
  std::optional<LogDamage> damage_;
  RecordView view_;
};

}  // namespace vinci

#endif  // VINCI_RECORDER_RUN_H_
