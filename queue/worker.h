// A queue worker: takes evaluation requests from a Redis stream as a member of the consumer group
// "workers", evaluates them on the sim device or this machine's GPU, and answers on the
// requester's reply stream (docs/distributed.md).
//
// Failure semantics. A request a worker takes is pending until the worker answers and
// acknowledges it. While it evaluates, the worker's heartbeat keeps the request's idle time near
// zero (XCLAIM JUSTID), so a long evaluation is not taken from a live worker; a worker that dies
// (kill -9, a lost machine) stops the heartbeat, and after claim_idle_s another worker claims the
// request (XAUTOCLAIM). An evaluation that fails (the evaluator's error, not the candidate's) adds
// its reason to the request and leaves it pending for another delivery. A request delivered more
// times than its `attempts` is answered as failed with every reason, and acknowledged. A worker
// whose GPU is lost stops taking work. A lost server is waited for, and reconnected to.
#ifndef VINCI_QUEUE_WORKER_H_
#define VINCI_QUEUE_WORKER_H_

#include <atomic>
#include <functional>
#include <string>

#include "core/status.h"

namespace vinci {

struct WorkerOptions {
  std::string url;               // redis://HOST:PORT[/NAME]
  std::string name;              // unique among the queue's workers
  std::string device = "sim";    // sim or cuda: which requests it takes
  double claim_idle_s = 30;      // a request pending this long without a heartbeat is claimed
  double heartbeat_s = 0;        // 0: claim_idle_s / 4, at most 5 s
  std::string nvrtc_cache_dir;   // shared NVRTC cache (empty: memory only)
  std::string cuda_worker_path;  // cuda: vinci-cuda-worker (empty: beside this program)
  double cuda_timeout_s = 600;   // cuda: an evaluation not answered by then is a hang
  long long max_requests = 0;    // > 0: exit after answering this many (benchmarks)
  double exit_when_idle_s = 0;   // > 0: exit after this long with nothing to do
  std::string gpu_label;         // what the heartbeat says of the GPU ("0"); informational
};

// Runs until *stop is set (SIGTERM), max_requests or exit_when_idle_s. Errors: the URL is bad,
// the GPU is lost (after recording the reason on the request it was evaluating).
Status run_worker(const WorkerOptions& options, const std::atomic<bool>& stop);

}  // namespace vinci

#endif  // VINCI_QUEUE_WORKER_H_
