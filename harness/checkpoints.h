// Checkpoint objects of recorded runs: finding the parameters a run had at the start of a step,
// and checking every checkpoint object a run's log names.
//
// A run with backbone.checkpoints on names a checkpoint object (kind "checkpoint", the sim
// backbone's checkpoint bytes, agents/sim_backbone.h) for
//   step 0        its checkpoint record (the parameters training starts from: fresh, cold-started
//                 or taken from another run);
//   step s + 1    the parameterDigest record of step s (after that step's update);
// and its coldStart record names the cold start's fitted parameters (= step 0 when it ran).
// Each names the parameter digest beside the object's address; the digest of an object's bytes
// (SimBackbone::checkpoint_digest) must equal it.
#ifndef VINCI_HARNESS_CHECKPOINTS_H_
#define VINCI_HARNESS_CHECKPOINTS_H_

#include <cstdint>
#include <string>

#include "core/hash.h"
#include "core/status.h"

namespace vinci {

struct RunCheckpoint {
  std::string run_dir;  // the folder it was read from
  int32_t step = 0;     // the step that starts from these parameters
  Digest digest;        // parameter digest, as recorded and as re-computed from the bytes
  Digest address;       // the checkpoint object
  std::string bytes;
  // Digest of the source run's records up to and including the one naming the checkpoint: it
  // pins the history that produced these parameters, also for a run that is still going.
  Digest history;
};

// The folder backbone.init_run names: init_run itself when it holds a run, else the run of that
// name beside the new one (in out_root), else init_run (whose errors then name it as given).
std::string resolve_init_run(const std::string& init_run, const std::string& out_root);

// The parameters run_dir had at the start of `step` (-1: its last checkpoint). Fails with
// kCorruption when the run is damaged as every replay reader sees it (a cut log, a corrupt frame,
// a log that disagrees with its manifest's count or digest), with kFailedPrecondition for step -1
// of an unfinished run, with kNotFound (naming the steps it has) when the run names no checkpoint
// for that step, and with kMismatch when the object's bytes do not hash to the recorded parameter
// digest.
Result<RunCheckpoint> find_run_checkpoint(const std::string& run_dir, int32_t step);

// Checks every checkpoint object run_dir's log names: present in its store, unaltered (the
// store re-hashes it), of kind "checkpoint", and hashing to its recorded parameter digest.
// Returns how many were checked.
Result<uint64_t> check_run_checkpoints(const std::string& run_dir);

}  // namespace vinci

#endif  // VINCI_HARNESS_CHECKPOINTS_H_
