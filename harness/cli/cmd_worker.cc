// `harness worker`: evaluates requests from a queue (queue/worker.h, docs/distributed.md).
// `harness workers`: one worker per GPU of this machine (or N sim workers), started and stopped
// together.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <boost/program_options.hpp>
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "core/cli.h"
#include "harness/cli/commands.h"
#include "harness/world.h"
#include "queue/redis.h"
#include "queue/worker.h"

namespace vinci {
namespace {

std::atomic<bool> g_stop{false};
void on_signal(int) { g_stop = true; }

std::string hostname() {
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  return host;
}

// The GPUs nvidia-smi lists: "0", "1", ...
std::vector<std::string> list_gpus() {
  std::vector<std::string> out;
  FILE* p = ::popen("nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null", "r");
  if (!p) return out;
  char line[64];
  while (std::fgets(line, sizeof line, p)) {
    std::string s = line;
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\r')) s.pop_back();
    if (!s.empty()) out.push_back(s);
  }
  ::pclose(p);
  return out;
}

}  // namespace

int cmd_worker(const std::vector<std::string>& args) {
  namespace po = boost::program_options;
  po::options_description opts("usage: harness worker --queue redis://HOST:PORT[/NAME] [options]");
  opts.add_options()("help,h", "show this help")("queue", po::value<std::string>(),
                                                 "the queue (the password, if any, from $VINCI_REDIS_PASSWORD)")(
      "device", po::value<std::string>()->default_value("sim"), "sim or cuda: which requests to take")(
      "gpu", po::value<std::string>(), "cuda: the GPU to use (its index; sets CUDA_VISIBLE_DEVICES)")(
      "name", po::value<std::string>(), "the worker's name on the queue (default HOST-gpuN or HOST-PID)")(
      "claim-idle-s", po::value<std::string>()->default_value("30"),
      "claim a request another worker took and has not kept alive for this long (XAUTOCLAIM min-idle)")(
      "nvrtc-cache", po::value<std::string>()->default_value(""), "NVRTC cache folder shared with other processes")(
      "timeout-s", po::value<std::string>()->default_value("600"),
      "cuda: an evaluation not answered by then is a hang")(
      "max-requests", po::value<std::string>()->default_value("0"), "exit after answering this many (0: never)")(
      "exit-when-idle-s", po::value<std::string>()->default_value("0"),
      "exit after this long with nothing to do (0: never)");
  po::variables_map vm;
  if (auto stop = parse_options("harness worker", args, opts, {}, &vm)) return *stop;
  auto fail = [](const std::string& msg) {
    std::cerr << "harness worker: " << msg << "\n";
    return 2;
  };
  if (!vm.count("queue")) return fail("--queue redis://HOST:PORT is required");
  pin_numeric_settings();
  WorkerOptions wo;
  wo.url = vm["queue"].as<std::string>();
  // Before anything prints the URL: one with a password is refused without repeating it.
  if (Result<QueueUrl> url = parse_queue_url(wo.url); !url.ok()) return fail(url.status().message());
  wo.device = vm["device"].as<std::string>();
  if (wo.device != "sim" && wo.device != "cuda") return fail("--device must be sim or cuda, found '" + wo.device + "'");
  if (vm.count("gpu")) {
    auto gpu = parse_int_option("--gpu", vm["gpu"].as<std::string>(), 0, 1023);
    if (!gpu.ok()) return fail(gpu.status().message());
    if (wo.device != "cuda") return fail("--gpu is for --device cuda");
    // The live evaluator's worker process inherits it: it sees only this GPU, as device 0.
    ::setenv("CUDA_VISIBLE_DEVICES", std::to_string(*gpu).c_str(), 1);
    wo.gpu_label = std::to_string(*gpu);
  }
  wo.name = vm.count("name")
                ? vm["name"].as<std::string>()
                : hostname() + (wo.gpu_label.empty() ? "-" + std::to_string(::getpid()) : "-gpu" + wo.gpu_label);
  auto number = [&](const char* key, double lo, double hi, double* out) -> bool {
    char* end = nullptr;
    std::string v = vm[key].as<std::string>();
    double d = std::strtod(v.c_str(), &end);
    if (end == v.c_str() || *end != 0 || !(d >= lo && d <= hi)) {
      std::cerr << "harness worker: --" << key << ": expected a number in [" << lo << ", " << hi << "], found '" << v
                << "'\n";
      return false;
    }
    *out = d;
    return true;
  };
  double max_requests = 0;
  if (!number("claim-idle-s", 0.01, 1e6, &wo.claim_idle_s) || !number("timeout-s", 1, 1e6, &wo.cuda_timeout_s) ||
      !number("max-requests", 0, 1e15, &max_requests) || !number("exit-when-idle-s", 0, 1e9, &wo.exit_when_idle_s))
    return 2;
  wo.max_requests = static_cast<long long>(max_requests);
  wo.nvrtc_cache_dir = vm["nvrtc-cache"].as<std::string>();
  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);
  std::fprintf(stderr, "harness worker: %s takes %s requests from %s\n", wo.name.c_str(), wo.device.c_str(),
               wo.url.c_str());
  Status st = run_worker(wo, g_stop);
  if (!st.ok()) return fail(st.to_string());
  return 0;
}

int cmd_workers(const std::vector<std::string>& args) {
  namespace po = boost::program_options;
  po::options_description opts(
      "usage: harness workers --queue redis://HOST:PORT[/NAME] (--gpus all|0,1,.. | --sim N) [options]");
  opts.add_options()("help,h", "show this help")("queue", po::value<std::string>(), "the queue")(
      "gpus", po::value<std::string>(), "cuda workers: all (every GPU nvidia-smi lists) or a comma-separated list")(
      "sim", po::value<std::string>(), "this many sim workers")(
      "claim-idle-s", po::value<std::string>()->default_value("30"), "passed to each worker")(
      "nvrtc-cache", po::value<std::string>()->default_value(""), "passed to each worker");
  po::variables_map vm;
  if (auto stop = parse_options("harness workers", args, opts, {}, &vm)) return *stop;
  auto fail = [](const std::string& msg) {
    std::cerr << "harness workers: " << msg << "\n";
    return 2;
  };
  if (!vm.count("queue")) return fail("--queue redis://HOST:PORT is required");
  if (vm.count("gpus") == vm.count("sim")) return fail("give one of --gpus and --sim");
  auto url = parse_queue_url(vm["queue"].as<std::string>());
  if (!url.ok()) return fail(url.status().message());
  std::vector<std::vector<std::string>> commands;
  std::vector<std::string> common = {"--queue", vm["queue"].as<std::string>(), "--claim-idle-s",
                                     vm["claim-idle-s"].as<std::string>()};
  if (!vm["nvrtc-cache"].as<std::string>().empty()) {
    common.push_back("--nvrtc-cache");
    common.push_back(vm["nvrtc-cache"].as<std::string>());
  }
  if (vm.count("gpus")) {
    std::string g = vm["gpus"].as<std::string>();
    std::vector<std::string> gpus;
    if (g == "all") {
      gpus = list_gpus();
      if (gpus.empty()) return fail("--gpus all: nvidia-smi lists no GPU on this machine");
    } else {
      size_t at = 0;
      while (at <= g.size()) {
        size_t comma = g.find(',', at);
        std::string one = g.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
        auto n = parse_int_option("--gpus", one, 0, 1023);
        if (!n.ok()) return fail(n.status().message());
        gpus.push_back(std::to_string(*n));
        if (comma == std::string::npos) break;
        at = comma + 1;
      }
    }
    for (const auto& gpu : gpus) {
      std::vector<std::string> c = {"worker", "--device", "cuda", "--gpu", gpu};
      c.insert(c.end(), common.begin(), common.end());
      commands.push_back(c);
    }
  } else {
    auto n = parse_int_option("--sim", vm["sim"].as<std::string>(), 1, 1024);
    if (!n.ok()) return fail(n.status().message());
    for (int64_t i = 0; i < *n; ++i) {
      std::vector<std::string> c = {"worker", "--device", "sim", "--name", hostname() + "-sim" + std::to_string(i)};
      c.insert(c.end(), common.begin(), common.end());
      commands.push_back(c);
    }
  }
  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);
  std::vector<pid_t> pids;
  for (const auto& c : commands) {
    pid_t pid = ::fork();
    if (pid < 0) return fail("cannot start a worker: fork failed");
    if (pid == 0) {
      std::vector<char*> argv = {const_cast<char*>("harness")};
      for (const auto& a : c) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      ::execv("/proc/self/exe", argv.data());
      std::perror("harness workers: exec");
      ::_exit(127);
    }
    pids.push_back(pid);
  }
  std::fprintf(stderr, "harness workers: %zu workers on %s\n", pids.size(), url->text.c_str());
  int failed = 0;
  size_t left = pids.size();
  bool forwarded = false;
  while (left > 0) {
    if (g_stop && !forwarded) {
      for (pid_t p : pids) ::kill(p, SIGTERM);
      forwarded = true;
    }
    int status = 0;
    pid_t p = ::waitpid(-1, &status, WNOHANG);
    if (p > 0) {
      --left;
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failed;
      continue;
    }
    ::usleep(100 * 1000);
  }
  return failed ? 1 : 0;
}

}  // namespace vinci
