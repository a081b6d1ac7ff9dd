#include "replay/verify.h"

#include <capnp/message.h>

#include <chrono>
#include <cstdlib>

#include "core/scratch_dir.h"
#include "harness/checkpoints.h"
#include "harness/record_sink.h"
#include "harness/trainer.h"
#include "harness/world.h"
#include "recorder/run.h"
#include "recorder/vinci.capnp.h"
#include "replay/recorded_backbone.h"
#include "replay/recorded_evaluator.h"

namespace vinci {

namespace {

// A mismatch found under other numeric settings names them: they are the likely cause.
Status with_settings_note(Status st, const std::vector<std::string>& differ) {
  if (st.ok() || differ.empty() || st.code() != StatusCode::kMismatch) return st;
  std::string msg = st.message() + "\nthe run was recorded under other numeric settings, which may be why:";
  for (const auto& d : differ) msg += "\n  " + d;
  return Status(st.code(), msg);
}

// Where an unfinished run's log ends: "its log ends after 412 records, in step 3 (steps 0 to 7; the
// last record: step 3 task L1_019 ... measurement)".
std::string where_log_ends(const std::string& last_payload, uint64_t n, int32_t steps) {
  if (n == 0) return "its log holds no record yet";
  std::string out = "its log ends after " + std::to_string(n) + (n == 1 ? " record" : " records");
  RecordView last;
  if (!last.parse(last_payload).ok()) return out;
  auto r = last.message().getRoot<schema::Record>();
  int32_t step = r.getStep();
  std::string last_record = "the last record: " + describe_record(r);
  while (!last_record.empty() && last_record.back() == ' ') last_record.pop_back();
  if (step >= 0 && step < steps) {
    return out + ", in step " + std::to_string(step) + " (" +
           (steps == 1 ? std::string("its only step") : "steps 0 to " + std::to_string(steps - 1)) + "; " +
           last_record + ")";
  }
  if (step >= 0 && step == steps) {
    return out + ", in its final evaluation, after its " + std::to_string(steps) + " steps (" + last_record + ")";
  }
  return out + " (" + last_record + ")";
}

// What verify says of a run whose manifest is not complete (stopped, or still running) when
// re-driving it goes past what its log holds: the run is unfinished, not diverged.
Status unfinished_run(const std::string& run_dir, const std::string& where, const std::string& checked) {
  return failed_precondition(
      "run " + run_dir + " is unfinished (its manifest is not complete: stopped, or still running): " + where + "; " +
      checked + ". `harness run --resume " + run_dir + "` continues it; verify it once it is complete");
}

Status rederive(const std::string& run_dir, const ManifestInfo& manifest, bool recorded_backbone, VerifyReport* rep,
                std::vector<std::pair<Digest, std::string>>* objects) {
  RunLocation loc = RunLocation::of(run_dir);
  VINCI_ASSIGN_OR_RETURN(Experiment exp, experiment_from_text(manifest.config_text, loc.manifest_path + " (config)"));
  // A live run's measurements are events: the recorded evaluator answers them from the log (no
  // GPU is needed to verify). A rescored run's backbone decisions are events too.
  bool measured = manifest.world == RunWorld::kLive || manifest.world == RunWorld::kRescore;
  if (manifest.world == RunWorld::kRescore) recorded_backbone = true;
  if (measured) exp.device = DeviceKind::kSim;
  // A queued sim run is re-derived here: the queue is where its evaluations ran, not what they were.
  exp.queue.clear();
  // An unfinished run's log may end in a frame a kill cut short (resume drops it): its good prefix
  // is what it holds.
  std::optional<LogDamage> damage;
  VINCI_ASSIGN_OR_RETURN(std::vector<std::string> expected, read_payloads(run_dir, !manifest.completed, &damage));
  size_t n = expected.size();
  // A log cut at a frame boundary (or extended) holds only valid frames: its manifest's count
  // tells. (A log of the right length whose records differ is re-derived: the first differing
  // record is the useful report.)
  if (manifest.completed && n != manifest.record_count) {
    RunDigest digest;
    for (const auto& p : expected) digest.add(p);
    return corruption("run " + run_dir + " is damaged: " + log_disagreement(manifest, n, digest.value()));
  }
  // Objects the re-driven loop stores go to a scratch store, never into the run's: the records
  // name objects by address, so comparing records compares the objects too, and a diverging
  // replay must not leave new objects beside a recorded run.
  // The scratch folder is under $TMPDIR (verify is read-only: nothing goes into the run's folder),
  // removed on every return; one a killed verify left is removed by the next.
  VINCI_ASSIGN_OR_RETURN(ScratchDir scratch, ScratchDir::create("vinci_verify"));
  ObjectStore store(scratch.path() + "/objects");
  std::string where = manifest.completed ? "" : where_log_ends(n ? expected.back() : "", n, exp.steps);
  if (damage) {
    where += ", then a damaged frame (" + damage->to_string() + "), which `harness run --resume` drops";
  }
  CheckSink sink(std::move(expected), &store, nullptr);
  // A language model's replies are events too: they come from the log (no server is needed). An
  // unfinished run's log ends before some calls: they fail, and the loop goes on to the log's end.
  VINCI_ASSIGN_OR_RETURN(
      World world, build_world(exp, manifest.completed ? ModelCalls::kRecorded : ModelCalls::kRecordedPrefix, run_dir));
  if (measured) {
    VINCI_ASSIGN_OR_RETURN(auto recorded, RecordedEvaluator::open(run_dir, !manifest.completed));
    world.evaluator = std::move(recorded);
  }
  if (recorded_backbone && !world.model) {
    VINCI_ASSIGN_OR_RETURN(auto recorded, RecordedBackbone::open(run_dir, !manifest.completed));
    world.backbone = std::move(recorded);
  }
  Status ran = run_experiment(exp, world.suite, *world.evaluator, *world.backbone, world.seed_library, sink, nullptr,
                              world.model.get(), world.trainer.trainer.get())
                   .status();
  // An unfinished run: the loop went past its log's end (every record it holds matched), or it
  // stopped short of it asking for what the log does not hold (a live run's measurement, a
  // rescored run's decision) after matching the records before. A record that differs, or any
  // other mismatch, is a mismatch, as in a completed run.
  if (!ran.ok() && !manifest.completed && !sink.diverged() &&
      (sink.ran_past_log() || ran.code() != StatusCode::kMismatch)) {
    if (sink.ran_past_log()) {
      std::string checked = n == 0   ? "there is nothing in it to compare yet"
                            : n == 1 ? "the record it holds re-derived and matched"
                                     : "the " + std::to_string(n) + " records it holds re-derived and matched";
      return unfinished_run(run_dir, where, checked);
    }
    return unfinished_run(run_dir, where,
                          "re-deriving it matched its first " + std::to_string(sink.position()) +
                              " records, then stopped: " + ran.to_string());
  }
  VINCI_RETURN_IF_ERROR(ran);
  // A completed run's log ends with its RunEnd record; so may a run stopped after its last record
  // (while writing its reports), whose manifest is not marked complete yet.
  if (manifest.completed || sink.position() < n) {
    capnp::MallocMessageBuilder msg;
    init_run_end(msg, sink.position(), sink.digest());
    VINCI_RETURN_IF_ERROR(sink.put(msg));
  }
  if (sink.position() != n) {
    return mismatch("re-driving the run stopped after " + std::to_string(sink.position()) +
                    " records, but its log holds " + std::to_string(n));
  }
  if (manifest.completed && sink.digest() != manifest.run_digest) {
    return mismatch("the re-derived run digest " + sink.digest().hex() + " differs from the manifest's " +
                    manifest.run_digest.hex());
  }
  // The objects the re-derived run stored, by kind: the run's store must hold each of them whole.
  VINCI_ASSIGN_OR_RETURN(std::vector<Digest> made, store.list());
  for (const Digest& address : made) {
    auto obj = store.get(address);
    objects->emplace_back(address, obj.ok() ? obj->kind : std::string());
  }
  rep->records = sink.position();
  rep->digest = sink.digest();
  rep->unfinished = !manifest.completed;
  if (damage) rep->damage = damage->to_string();
  return Status();
}

}  // namespace

Result<VerifyReport> verify_run(const std::string& run_dir, bool recorded_backbone) {
  auto start = std::chrono::steady_clock::now();
  pin_numeric_settings();
  RunLocation loc = RunLocation::of(run_dir);
  VINCI_ASSIGN_OR_RETURN(ManifestInfo manifest, read_manifest(loc.manifest_path));
  VerifyReport rep;
  rep.settings_differ = numeric_differences(manifest.environment, capture_environment());
  std::vector<std::pair<Digest, std::string>> objects;
  VINCI_RETURN_IF_ERROR(
      with_settings_note(rederive(run_dir, manifest, recorded_backbone, &rep, &objects), rep.settings_differ));
  VINCI_ASSIGN_OR_RETURN(rep.checkpoints, check_run_checkpoints(run_dir));
  // Records name objects by address, so equal records mean the run stored the same objects; what
  // remains is that its store still holds each of them whole (checkpoints were read just above).
  ObjectStore stored(loc.store_dir);
  for (const auto& [address, kind] : objects) {
    auto obj = stored.get(address);
    if (obj.ok()) continue;
    std::string what = "run " + run_dir + ": object " + address.hex() +
                       (kind.empty() ? std::string() : " (a '" + kind + "' its records name)") + " ";
    if (obj.status().code() == StatusCode::kNotFound) {
      return not_found(what + "is missing from its store " + loc.store_dir);
    }
    return corruption(what + "is corrupt: " + obj.status().message());
  }
  rep.objects = objects.size();
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return rep;
}

}  // namespace vinci
