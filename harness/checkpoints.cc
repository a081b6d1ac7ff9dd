#include "harness/checkpoints.h"

#include <sys/stat.h>

#include <map>

#include <capnp/message.h>

#include "agents/sim_backbone.h"
#include "harness/records.h"
#include "recorder/run.h"
#include "recorder/vinci.capnp.h"

namespace vinci {
namespace {

Result<std::string> checked_bytes(ObjectStore& store, const Digest& address, const Digest& digest,
                                  const std::string& what) {
  auto obj = store.get(address);
  if (!obj.ok()) {
    return Status(obj.status().code(), what + ": checkpoint object " + address.hex() + ": " + obj.status().message());
  }
  if (obj->kind != "checkpoint") {
    return mismatch(what + ": object " + address.hex() + " is a '" + obj->kind + "', expected a 'checkpoint'");
  }
  auto d = SimBackbone::checkpoint_digest(obj->bytes);
  if (!d.ok()) return Status(d.status().code(), what + ": " + d.status().message());
  if (*d != digest) {
    return mismatch(what + ": checkpoint object " + address.hex() + " holds parameters with digest " + d->hex() +
                    ", the record says " + digest.hex());
  }
  return std::move(obj->bytes);
}

bool has_manifest(const std::string& run_dir) {
  struct stat sb;
  return ::stat(RunLocation::of(run_dir).manifest_path.c_str(), &sb) == 0;
}

}  // namespace

std::string resolve_init_run(const std::string& init_run, const std::string& out_root) {
  if (has_manifest(init_run)) return init_run;
  size_t slash = init_run.find_last_of('/');
  std::string beside = out_root + "/" + (slash == std::string::npos ? init_run : init_run.substr(slash + 1));
  return has_manifest(beside) ? beside : init_run;
}

Result<RunCheckpoint> find_run_checkpoint(const std::string& run_dir, int32_t step) {
  VINCI_ASSIGN_OR_RETURN(auto reader, RunReader::open(run_dir));
  struct Found {
    Digest digest, address, history;
  };
  std::map<int32_t, Found> found;
  while (RecordView* view = reader->next()) {
    auto r = view->message().getRoot<schema::Record>();
    if (r.isCheckpoint()) {
      CheckpointRecord c = read_checkpoint(r.getCheckpoint());
      found[c.for_step] = {c.digest, c.address, reader->digest()};
    } else if (r.isParameterDigest()) {
      ParameterDigestRecord p = read_parameter_digest(r.getParameterDigest());
      if (!p.checkpoint.is_zero()) found[r.getStep() + 1] = {p.digest, p.checkpoint, reader->digest()};
    }
  }
  VINCI_RETURN_IF_ERROR(reader->status());
  // A damaged run (a cut log, a corrupt frame, a log that is not its manifest's) is no starting
  // point: its last checkpoint is not the run's last, and what it recorded is in doubt.
  if (reader->damage()) {
    return corruption("run " + run_dir + " is damaged after record " + std::to_string(reader->records_read()) + ": " +
                      reader->damage()->to_string() + "; a damaged run is no starting point");
  }
  if (step < 0 && !reader->manifest().completed) {
    return failed_precondition("run " + run_dir +
                               " is unfinished (its manifest is not complete): its last checkpoint is not its "
                               "final one; name the step with backbone.init_step");
  }
  if (found.empty()) {
    return not_found("run " + run_dir +
                     " names no checkpoint object (recorded with "
                     "backbone.checkpoints = false?)");
  }
  auto it = step < 0 ? std::prev(found.end()) : found.find(step);
  if (it == found.end()) {
    std::string steps;
    for (const auto& [s, _] : found) steps += " " + std::to_string(s);
    return not_found("run " + run_dir + " has no checkpoint for the start of step " + std::to_string(step) +
                     " (it has:" + steps + ")");
  }
  RunCheckpoint out;
  out.run_dir = run_dir;
  out.step = it->first;
  out.digest = it->second.digest;
  out.address = it->second.address;
  out.history = it->second.history;
  VINCI_ASSIGN_OR_RETURN(out.bytes, checked_bytes(reader->store(), out.address, out.digest,
                                                  "run " + run_dir + " step " + std::to_string(out.step)));
  return out;
}

Result<uint64_t> check_run_checkpoints(const std::string& run_dir) {
  VINCI_ASSIGN_OR_RETURN(auto reader, RunReader::open(run_dir));
  uint64_t n = 0;
  while (RecordView* view = reader->next()) {
    auto r = view->message().getRoot<schema::Record>();
    Digest address, digest;
    if (r.isCheckpoint()) {
      CheckpointRecord c = read_checkpoint(r.getCheckpoint());
      address = c.address;
      digest = c.digest;
    } else if (r.isParameterDigest()) {
      ParameterDigestRecord p = read_parameter_digest(r.getParameterDigest());
      address = p.checkpoint;
      digest = p.digest;
    } else if (r.isColdStart()) {
      ColdStartRecord c = read_cold_start(r.getColdStart());
      address = c.checkpoint;
      digest = c.digest;
    }
    if (address.is_zero()) continue;  // no record naming a checkpoint object
    VINCI_RETURN_IF_ERROR(
        checked_bytes(reader->store(), address, digest, "run " + run_dir + " record " + std::to_string(r.getSeq()))
            .status());
    ++n;
  }
  VINCI_RETURN_IF_ERROR(reader->status());
  return n;
}

}  // namespace vinci
