#include "gpu/live/cuda_evaluator.h"

#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include <capnp/message.h>
#include <capnp/serialize.h>

#include "core/bytes.h"
#include "core/text.h"
#include "gpu/executor.h"

namespace vinci {

namespace {

using Clock = std::chrono::steady_clock;

std::string errno_text(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

std::string exit_text(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    const char* name = strsignal(sig);
    return "was killed by signal " + std::to_string(sig) + (name ? std::string(" (") + name + ")" : "");
  }
  return "ended (status " + std::to_string(status) + ")";
}

}  // namespace

Status write_frame(int fd, const std::string& bytes) {
  std::string frame;
  frame.reserve(8 + bytes.size());
  put_le(&frame, bytes.size(), 8);
  frame += bytes;
  size_t off = 0;
  while (off < frame.size()) {
    ssize_t w = ::send(fd, frame.data() + off, frame.size() - off, MSG_NOSIGNAL);
    if (w < 0 && errno == ENOTSOCK) w = ::write(fd, frame.data() + off, frame.size() - off);
    if (w < 0) {
      if (errno == EINTR) continue;
      return io_error(errno_text("write to the worker"));
    }
    off += static_cast<size_t>(w);
  }
  return Status();
}

namespace {

// Reads exactly n bytes before the deadline (none: wait forever).
Status read_exact(int fd, char* out, size_t n, bool has_deadline, Clock::time_point deadline) {
  size_t off = 0;
  while (off < n) {
    if (has_deadline) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) return failed_precondition("timeout waiting for the worker");
      struct pollfd p = {fd, POLLIN, 0};
      int pr = ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 1000)));
      if (pr < 0 && errno != EINTR) return io_error(errno_text("poll"));
      if (pr <= 0) continue;
    }
    ssize_t r = ::read(fd, out + off, n - off);
    if (r < 0) {
      if (errno == EINTR) continue;
      return io_error(errno_text("read from the worker"));
    }
    if (r == 0) return io_error("the worker closed its end (it ended)");
    off += static_cast<size_t>(r);
  }
  return Status();
}

}  // namespace

Result<std::string> read_frame(int fd, double timeout_s) {
  bool has_deadline = timeout_s >= 0;
  Clock::time_point deadline =
      Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(std::max(0.0, timeout_s) * 1000));
  char len[8];
  VINCI_RETURN_IF_ERROR(read_exact(fd, len, 8, has_deadline, deadline));
  uint64_t n = load_u64(len);
  if (n > (uint64_t{1} << 32))
    return corruption("worker frame of " + std::to_string(n) + " bytes: the stream is damaged");
  std::string out(n, '\0');
  VINCI_RETURN_IF_ERROR(read_exact(fd, out.data(), n, has_deadline, deadline));
  return out;
}

std::string encode_eval_request(const std::string& task_id, const Plan& plan, const EvalRequest& request) {
  nlohmann::json j = {{"task", task_id},         {"plan", plan_to_json(plan)}, {"size", size_name(request.size)},
                      {"seed", request.seed},    {"trials", request.trials},   {"samples", request.samples},
                      {"strict", request.strict}};
  if (request.adaptive) j["timing"] = adaptive_timing_to_json(request.adaptive_rule);
  return j.dump();
}

Result<DecodedRequest> decode_eval_request(const std::string& bytes) {
  DecodedRequest d;
  try {
    nlohmann::json j = nlohmann::json::parse(bytes);
    d.task_id = j.at("task").get<std::string>();
    VINCI_ASSIGN_OR_RETURN(d.plan, plan_from_json(j.at("plan")));
    Result<SizeName> size = parse_size_name(j.at("size").get<std::string>());
    if (!size.ok()) return invalid_argument("request: size: " + size.status().message());
    d.request.size = *size;
    d.request.seed = j.at("seed").get<uint64_t>();
    d.request.trials = j.at("trials").get<int>();
    d.request.samples = j.at("samples").get<int>();
    d.request.strict = j.at("strict").get<bool>();
    if (j.contains("timing")) {
      VINCI_ASSIGN_OR_RETURN(d.request.adaptive_rule, adaptive_timing_from_json(j.at("timing"), "request: timing"));
      d.request.adaptive = true;
      d.request.adaptive_rule.max_samples = d.request.samples;
    }
  } catch (const nlohmann::json::exception& e) {
    return invalid_argument(std::string("request: ") + e.what());
  }
  return d;
}

std::string encode_eval_result(const EvalResult& r) {
  capnp::MallocMessageBuilder message;
  to_measurement(r, message.initRoot<schema::Measurement>());
  kj::Array<capnp::word> words = capnp::messageToFlatArray(message);
  kj::ArrayPtr<const char> bytes = words.asChars();
  return std::string(bytes.begin(), bytes.end());
}

Result<EvalResult> decode_eval_result(const std::string& bytes, const std::string& compile_log) {
  if (bytes.size() % sizeof(capnp::word) != 0) return corruption("worker result: not a whole number of words");
  kj::Array<capnp::word> words = kj::heapArray<capnp::word>(bytes.size() / sizeof(capnp::word));
  std::memcpy(words.begin(), bytes.data(), bytes.size());
  try {
    capnp::FlatArrayMessageReader reader(words);
    return from_measurement(reader.getRoot<schema::Measurement>(),
                            [&](const Digest&) -> Result<std::string> { return compile_log; });
  } catch (const kj::Exception& e) {
    return corruption(std::string("worker result: ") + e.getDescription().cStr());
  }
}

std::string default_cuda_worker_path() {
  if (const char* env = std::getenv("VINCI_CUDA_WORKER")) return env;
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "vinci-cuda-worker";
  std::string self(buf, static_cast<size_t>(n));
  size_t slash = self.rfind('/');
  return (slash == std::string::npos ? std::string() : self.substr(0, slash + 1)) + "vinci-cuda-worker";
}

CudaEvaluator::CudaEvaluator(CudaEvaluatorOptions options) : options_(std::move(options)) {
  if (options_.worker_path.empty()) options_.worker_path = default_cuda_worker_path();
}

CudaEvaluator::~CudaEvaluator() {
  std::lock_guard<std::mutex> lock(mu_);
  stop_locked(false);
}

std::string CudaEvaluator::device_name() const {
  std::lock_guard<std::mutex> lock(mu_);
  return device_;
}

std::string CudaEvaluator::arch() const {
  std::lock_guard<std::mutex> lock(mu_);
  return arch_;
}

CudaEvaluatorStats CudaEvaluator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

Status CudaEvaluator::start() {
  std::lock_guard<std::mutex> lock(mu_);
  return start_locked();
}

Status CudaEvaluator::start_locked() {
  if (pid_ > 0) return Status();
  if (::access(options_.worker_path.c_str(), X_OK) != 0)
    return not_found("the CUDA worker '" + options_.worker_path + "' is not there or not executable (build it: " +
                     "it is built with vinci; VINCI_CUDA_WORKER names another)");
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return io_error(errno_text("socketpair"));
  std::vector<std::string> args = {options_.worker_path,
                                   "--fd",
                                   "3",
                                   "--launch-timeout",
                                   format_number("%.6g", options_.launch_timeout_s),
                                   "--triton-timeout",
                                   format_number("%.6g", options_.triton_timeout_s),
                                   "--norm-tolerance",
                                   format_number("%.6g", options_.norm_tolerance),
                                   "--reference-precision",
                                   kReferencePrecisions.name(options_.reference_precision),
                                   "--warmups",
                                   std::to_string(options_.warmups),
                                   "--timing-budget-ms",
                                   format_number("%.6g", options_.timing_budget_s * 1000),
                                   "--timing-input-sets",
                                   std::to_string(options_.timing_input_sets)};
  args.insert(args.end(),
              {"--max-kernel-source-bytes", std::to_string(options_.limits.max_kernel_source_bytes),
               "--max-plan-source-bytes", std::to_string(options_.limits.max_plan_source_bytes), "--max-kernels",
               std::to_string(options_.limits.max_kernels), "--max-steps", std::to_string(options_.limits.max_steps)});
  if (!options_.task_dir.empty()) args.insert(args.end(), {"--tasks", options_.task_dir});
  if (!options_.nvrtc_cache_dir.empty()) args.insert(args.end(), {"--nvrtc-cache", options_.nvrtc_cache_dir});
  if (!options_.module_cache_dir.empty()) args.insert(args.end(), {"--module-cache", options_.module_cache_dir});
  if (!options_.profile_path.empty()) args.insert(args.end(), {"--profile", options_.profile_path});
  if (options_.profile_phases) args.insert(args.end(), {"--profile-phases", "1"});
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = ::fork();
  if (pid < 0) {
    ::close(sv[0]);
    ::close(sv[1]);
    return io_error(errno_text("fork"));
  }
  if (pid == 0) {
    // The child: the socket becomes fd 3, stdout goes to stderr so nothing the worker's libraries
    // print can mix with the harness's output.
    ::dup2(sv[1], 3);
    ::dup2(2, 1);
    ::setpgid(0, 0);
    ::execv(argv[0], argv.data());
    static const char kMsg[] = "vinci-cuda-worker: exec failed\n";
    ssize_t ignored = ::write(2, kMsg, sizeof kMsg - 1);
    (void)ignored;
    ::_exit(127);
  }
  ::close(sv[1]);
  pid_ = pid;
  to_worker_ = from_worker_ = sv[0];
  ++stats_.workers_started;
  Result<std::string> hello = read_frame(from_worker_, 300);
  if (!hello.ok()) {
    std::string how = hello.status().message();
    int status = 0;
    if (how.find("timeout") == std::string::npos && ::waitpid(pid_, &status, 0) == pid_) {
      pid_ = -1;
      how = "it " + exit_text(status);
      if (WIFEXITED(status) && WEXITSTATUS(status) == 127)
        how += " (it could not be loaded: is there an NVIDIA driver, libcuda.so.1, on this machine?)";
    }
    stop_locked(true);
    return failed_precondition("the CUDA worker " + options_.worker_path + " did not start: " + how);
  }
  nlohmann::json j = nlohmann::json::parse(*hello, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    stop_locked(true);
    return internal_error("the CUDA worker's hello is not JSON: " + hello->substr(0, 200));
  }
  if (j.contains("error")) {
    stop_locked(false);
    return failed_precondition("the CUDA worker cannot evaluate here: " + j["error"].get<std::string>());
  }
  device_ = j.value("device", std::string("?"));
  arch_ = j.value("arch", std::string("sm_90"));
  return Status();
}

void CudaEvaluator::stop_locked(bool kill_now) {
  if (pid_ <= 0) return;
  if (to_worker_ >= 0) ::close(to_worker_);
  to_worker_ = from_worker_ = -1;
  int status = 0;
  if (!kill_now) {
    // A worker told its socket is closed exits by itself; give it a moment.
    for (int i = 0; i < 200; ++i) {
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  ::kill(-pid_, SIGKILL);
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, &status, 0);
  pid_ = -1;
}

EvalResult CudaEvaluator::lost_result(const Task& task, const Plan& plan, const EvalRequest& request,
                                      const std::string& why, const std::string& tag) {
  EvalResult r;
  r.evaluator = "cuda";
  r.device = device_;
  r.plan = plan_address(plan);
  r.size = size_name(request.size);
  r.compiled = true;
  r.correct = false;
  r.error = why;
  r.flags.push_back("rejected: " + tag);
  r.settings = {{"timeout_s", format_number("%.6g", options_.timeout_s)}};
  add_unreached_trials(&r, task.id, request);
  r.finalize();
  return r;
}

Result<EvalResult> CudaEvaluator::evaluate(const Task& task, const Plan& plan, const EvalRequest& request) {
  std::lock_guard<std::mutex> lock(mu_);
  VINCI_RETURN_IF_ERROR(start_locked());
  Clock::time_point t0 = Clock::now();
  Status sent = write_frame(to_worker_, encode_eval_request(task.id, plan, request));
  Result<std::string> header = sent.ok() ? read_frame(from_worker_, options_.timeout_s) : Result<std::string>(sent);
  stats_.round_trip_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  if (!header.ok()) {
    bool timeout = header.status().message().find("timeout") != std::string::npos;
    // Kill first, then read how it ended.
    pid_t pid = pid_;
    int status = 0;
    bool ended = !timeout && ::waitpid(pid, &status, 0) == pid;
    if (ended) pid_ = -1;
    stop_locked(true);
    ++stats_.workers_lost;
    if (timeout)
      return lost_result(task, plan, request,
                         "no answer within " + format_number("%.6g", options_.timeout_s) +
                             " s: the candidate hung the worker, which was killed and will be replaced",
                         "hang");
    return lost_result(task, plan, request,
                       "the worker " + (ended ? exit_text(status) : std::string("was lost")) +
                           " while evaluating this candidate; it will be replaced",
                       "worker_died");
  }
  nlohmann::json h = nlohmann::json::parse(*header, nullptr, false);
  if (h.is_discarded() || !h.is_object()) {
    stop_locked(true);
    return internal_error("the CUDA worker's answer is not JSON");
  }
  if (!h.value("ok", false)) {
    std::string err = h.value("error", std::string("unknown"));
    if (h.value("context_lost", false)) stop_locked(false);
    return internal_error("the CUDA worker could not evaluate " + task.id + ": " + err);
  }
  Result<std::string> body = read_frame(from_worker_, 60);
  Result<std::string> log = body.ok() ? read_frame(from_worker_, 60) : Result<std::string>(body.status());
  if (!log.ok()) {
    stop_locked(true);
    ++stats_.workers_lost;
    return internal_error("the CUDA worker's answer broke off: " + log.status().message());
  }
  VINCI_ASSIGN_OR_RETURN(EvalResult r, decode_eval_result(*body, *log));
  stats_.compile_ms = h.value("compile_ms", 0.0);
  stats_.eval_ms = h.value("eval_ms", 0.0);
  stats_.kernels_compiled = h.value("kernels_compiled", 0);
  stats_.phase_ms.clear();
  if (h.contains("phases") && h["phases"].is_object())
    for (const auto& [k, v] : h["phases"].items())
      if (v.is_number()) stats_.phase_ms[k] = v.get<double>();
  if (h.value("context_lost", false)) {
    // The worker exits after answering; a fresh one serves the next evaluation.
    stop_locked(false);
    ++stats_.workers_lost;
  }
  return r;
}

}  // namespace vinci
