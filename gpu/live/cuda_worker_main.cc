// vinci-cuda-worker: the process candidate kernels run in. Started by the harness's CUDA
// evaluator (gpu/live/cuda_evaluator.h), which speaks to it over one socket (--fd) and replaces it
// whenever a candidate loses its CUDA context, hangs it or kills it. Not meant to be run by hand.
//
//   vinci-cuda-worker --fd N [--tasks DIR] [--nvrtc-cache DIR] [--module-cache DIR] [--profile FILE]
//                     [--launch-timeout S] [--norm-tolerance X] [--warmups N] [--timing-budget-ms X]
//                     [--max-kernel-source-bytes N] [--max-plan-source-bytes N] [--max-kernels N]
//                     [--max-steps N] [--triton-timeout S] [--reference-precision P]
//                     [--timing-input-sets N] [--cache-budget-fraction X] [--profile-phases 0|1]
#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include <nlohmann/json.hpp>

#include "gpu/live/cuda_evaluator.h"
#include "gpu/live/live_eval.h"
#include "gpu/task.h"

namespace {

int usage() {
  std::fprintf(
      stderr,
      "usage: vinci-cuda-worker --fd N [--tasks DIR] [--nvrtc-cache DIR] [--module-cache DIR] [--profile FILE]\n"
      "                         [--launch-timeout S] [--norm-tolerance X] [--warmups N]\n"
      "The harness starts this process; it evaluates candidate kernels on the GPU.\n");
  return 2;
}

// Device printf from a candidate's kernels: the driver writes it to fd 1 at synchronisation
// points. fd 1 becomes a pipe drained by a thread that keeps the first kKernelOutputKept bytes of
// each candidate and counts the rest, so a kernel printing 100000 lines neither reaches a
// terminal nor grows memory nor blocks on a full pipe. The protocol socket (--fd) is another
// descriptor: nothing printed can reach it.
class OutputCapture {
 public:
  bool start() {
    int p[2];
    if (::pipe2(p, O_CLOEXEC | O_NONBLOCK) != 0) return false;
    std::fflush(stdout);
    // The write end as fd 1 must block when full (the drain keeps up), and dup2's copy is not
    // close-on-exec.
    if (::dup2(p[1], 1) < 0 || ::fcntl(1, F_SETFL, 0) != 0) return false;
    ::close(p[1]);
    read_end_ = p[0];
    std::thread([this] {
      for (;;) {
        pollfd pfd{read_end_, POLLIN, 0};
        if (::poll(&pfd, 1, -1) < 0 && errno != EINTR) return;
        std::lock_guard<std::mutex> lock(mu_);
        if (!drain_locked()) return;
      }
    }).detach();  // ends with the process
    return true;
  }

  // Starts a new candidate's capture.
  void reset() {
    std::fflush(stdout);
    std::lock_guard<std::mutex> lock(mu_);
    drain_locked();
    kept_.clear();
    dropped_ = 0;
  }

  // Everything the candidate printed so far: the kept text and the count of bytes past it.
  std::pair<std::string, int64_t> take() {
    std::fflush(stdout);  // the driver prints through stdio
    std::lock_guard<std::mutex> lock(mu_);
    drain_locked();  // reads happen only under the lock: after this, nothing written is unread
    return {kept_, dropped_};
  }

 private:
  // Reads what the pipe holds; false when it is closed or broken.
  bool drain_locked() {
    char buf[65536];
    for (;;) {
      ssize_t n = ::read(read_end_, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK;
      if (n == 0) return false;
      size_t room = vinci::kKernelOutputKept - std::min(kept_.size(), vinci::kKernelOutputKept);
      size_t take = std::min(room, static_cast<size_t>(n));
      kept_.append(buf, take);
      dropped_ += static_cast<int64_t>(n) - static_cast<int64_t>(take);
    }
  }

  int read_end_ = -1;
  std::mutex mu_;
  std::string kept_;
  int64_t dropped_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  using namespace vinci;
  int fd = -1;
  std::string task_dir;
  LiveOptions options;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (i + 1 >= argc) return usage();
    std::string v = argv[++i];
    if (a == "--fd")
      fd = std::atoi(v.c_str());
    else if (a == "--tasks")
      task_dir = v;
    else if (a == "--nvrtc-cache")
      options.nvrtc_cache_dir = v;
    else if (a == "--module-cache")
      options.module_cache_dir = v;
    else if (a == "--profile")
      options.profile_path = v;
    else if (a == "--launch-timeout")
      options.launch_timeout_s = std::atof(v.c_str());
    else if (a == "--norm-tolerance")
      options.norm_tolerance = std::atof(v.c_str());
    else if (a == "--reference-precision") {
      Result<ReferencePrecision> rp = parse_reference_precision(v);
      if (!rp.ok()) {
        std::fprintf(stderr, "vinci-cuda-worker: --reference-precision: %s\n", rp.status().message().c_str());
        return 2;
      }
      options.reference_precision = *rp;
    } else if (a == "--warmups")
      options.warmups = std::atoi(v.c_str());
    else if (a == "--timing-budget-ms")
      options.timing_budget_ms = std::atof(v.c_str());
    else if (a == "--max-kernel-source-bytes")
      options.limits.max_kernel_source_bytes = std::atoll(v.c_str());
    else if (a == "--max-plan-source-bytes")
      options.limits.max_plan_source_bytes = std::atoll(v.c_str());
    else if (a == "--max-kernels")
      options.limits.max_kernels = std::atoll(v.c_str());
    else if (a == "--triton-timeout")
      options.triton_timeout_s = std::atof(v.c_str());
    else if (a == "--max-steps")
      options.limits.max_steps = std::atoll(v.c_str());
    else if (a == "--cache-budget-fraction")
      options.cache_budget_fraction = std::atof(v.c_str());
    else if (a == "--timing-input-sets")
      options.timing_input_sets = std::atoi(v.c_str());
    else if (a == "--profile-phases")
      options.profile_phases = v == "1";
    else
      return usage();
  }
  if (fd < 0) return usage();

  auto say = [fd](const nlohmann::json& j) { return write_frame(fd, j.dump()).ok(); };
  OutputCapture capture;
  if (!capture.start()) {
    say({{"error", std::string("cannot capture kernel output: ") + std::strerror(errno)}});
    return 1;
  }
  Result<TaskSuite> suite = load_task_suite(task_dir.empty() ? default_task_dir() : task_dir);
  if (!suite.ok()) {
    say({{"error", suite.status().to_string()}});
    return 1;
  }
  Result<std::unique_ptr<LiveDevice>> device = LiveDevice::open(options);
  if (!device.ok()) {
    say({{"error", device.status().message()}});
    return 1;
  }
  if (!say({{"device", (*device)->device_name()}, {"arch", (*device)->arch()}, {"l2_bytes", (*device)->l2_bytes()}}))
    return 1;
  for (;;) {
    Result<std::string> frame = read_frame(fd, -1);
    if (!frame.ok()) return 0;  // the harness closed its end: done
    Result<DecodedRequest> req = decode_eval_request(*frame);
    if (!req.ok()) {
      if (!say({{"ok", false}, {"error", req.status().message()}})) return 1;
      continue;
    }
    const Task* task = suite->find(req->task_id);
    if (!task) {
      if (!say({{"ok", false}, {"error", "no task '" + req->task_id + "' in the worker's suite"}})) return 1;
      continue;
    }
    LiveStats stats;
    capture.reset();
    Result<EvalResult> r = (*device)->evaluate(*task, req->plan, req->request, &stats);
    if (r.ok()) {
      auto [text, dropped] = capture.take();
      r->kernel_output = std::move(text);
      r->kernel_output_dropped = dropped;
    }
    if (!r.ok()) {
      if (!say({{"ok", false}, {"error", r.status().to_string()}, {"context_lost", stats.context_lost}})) return 1;
    } else {
      nlohmann::json h = {{"ok", true},
                          {"context_lost", stats.context_lost},
                          {"compile_ms", stats.compile_ms},
                          {"eval_ms", stats.eval_ms},
                          {"kernels_compiled", stats.kernels_compiled}};
      if (!stats.phase_ms.empty()) h["phases"] = stats.phase_ms;
      if (!say(h) || !write_frame(fd, encode_eval_result(*r)).ok() || !write_frame(fd, r->compile_log).ok()) return 1;
    }
    if (stats.context_lost) {
      // The CUDA context is unusable (or a kernel still runs): end now, without the driver's
      // teardown of a context that may hang; the harness starts a fresh worker.
      std::fflush(stderr);
      ::_exit(3);
    }
  }
}
