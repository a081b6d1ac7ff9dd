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

Status rederive(const std::string& run_dir, const ManifestInfo& manifest, bool recorded_backbone, VerifyReport* rep,
                std::vector<std::pair<Digest, std::string>>* objects) {
  RunLocation loc = RunLocation::of(run_dir);
  VINCI_ASSIGN_OR_RETURN(Experiment exp, experiment_from_text(manifest.config_text, loc.manifest_path + " (config)"));
  // A live run's measurements are events: the recorded evaluator answers them from the log (no
  // GPU is needed to verify). A rescored run's backbone decisions are events too.
  bool measured = manifest.world == RunWorld::kLive || manifest.world == RunWorld::kRescore;
  if (manifest.world == RunWorld::kRescore) recorded_backbone = true;
  if (measured) exp.device = "sim";
  // A queued sim run is re-derived here: the queue is where its evaluations ran, not what they were.
  exp.queue.clear();
  VINCI_ASSIGN_OR_RETURN(std::vector<std::string> expected, read_payloads(run_dir, false));
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
  CheckSink sink(std::move(expected), &store, nullptr);
  // A language model's replies are events too: they come from the log (no server is needed).
  VINCI_ASSIGN_OR_RETURN(World world, build_world(exp, ModelCalls::kRecorded, run_dir));
  if (measured) {
    VINCI_ASSIGN_OR_RETURN(auto recorded, RecordedEvaluator::open(run_dir));
    world.evaluator = std::move(recorded);
  }
  if (recorded_backbone && !world.model) {
    VINCI_ASSIGN_OR_RETURN(auto recorded, RecordedBackbone::open(run_dir));
    world.backbone = std::move(recorded);
  }
  VINCI_RETURN_IF_ERROR(run_experiment(exp, world.suite, *world.evaluator, *world.backbone, world.seed_library, sink,
                                       nullptr, world.model.get())
                            .status());
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
