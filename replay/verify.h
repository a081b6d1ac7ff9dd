// Re-drives a recorded run from its manifest and log and checks every record.
#ifndef VINCI_REPLAY_VERIFY_H_
#define VINCI_REPLAY_VERIFY_H_

#include <string>

#include "core/status.h"
#include "core/hash.h"

namespace vinci {

struct VerifyReport {
  uint64_t records = 0;
  uint64_t checkpoints = 0;  // checkpoint objects checked against their recorded digests
  Digest digest;
  double seconds = 0;
};

// Rebuilds the run's world from its recorded config, runs the loop with every record compared
// against the log (rr-style: the first divergence stops it, with both values), and checks the
// final RunEnd record and the manifest's digest. Every checkpoint object the log names is then
// read from the run's store and checked against its recorded parameter digest
// (harness/checkpoints.h): re-derived objects go to a scratch store, so this is what checks the
// stored ones. Refuses when this process's numeric settings
// differ from the manifest's, unless force.
// With recorded_backbone, backbone calls are answered from the log (agents/recorded_backbone.h)
// instead of re-running the sim network: the way to replay a run whose backbone is external.
Result<VerifyReport> verify_run(const std::string& run_dir, bool force,
                                bool recorded_backbone = false);

}  // namespace vinci

#endif  // VINCI_REPLAY_VERIFY_H_
