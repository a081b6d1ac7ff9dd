// `replay rescore RUN (--live | --device sim [--profile FILE]) --out NEW`: every distinct kernel
// of a run re-measured once on this GPU (or under another sim profile), the run re-derived from
// those measurements into NEW, and the drift report printed (and written to NEW/drift.md).
// Exit 0 on success, 2 on error.
#include <boost/program_options.hpp>
#include <cstdio>
#include <iostream>

#include "core/cli.h"
#include "gpu/eval_result.h"
#include "queue/queue_url.h"
#include "replay/commands.h"
#include "replay/rescore.h"

namespace vinci {

int cmd_rescore(const std::vector<std::string>& args) {
  namespace po = boost::program_options;
  RescoreOptions o;
  std::string device;  // the user must say where: --live or --device
  std::string reference_precision;
  po::options_description opts(
      "usage: replay rescore RUN (--live | --device sim [--profile FILE]) --out NEW [--queue URL] [--trials N] "
      "[--samples N] [--reuse FILE [--offline]]");
  opts.add_options()("help,h", "show this help")("live",
                                                 "re-measure on this machine's GPU (the same as --device cuda)")(
      "device", po::value<std::string>(&device), "cuda (this GPU) or sim (the sim device under --profile)")(
      "profile", po::value<std::string>(&o.profile), "sim: the device profile TOML (default: the run's own)")(
      "out", po::value<std::string>(&o.out_dir),
      "the new run's folder (must not exist); everything the rescore writes goes inside it: its log, "
      "manifest, objects (NEW/objects), measurements.jsonl and drift.md")(
      "trials", po::value<std::string>()->default_value("0"),
      "correctness trials per plan (0: the run's; at most 100)")(
      "samples", po::value<std::string>()->default_value("0"), "timing samples per plan (0: the run's; at most 10000)")(
      "seed", po::value<std::string>()->default_value("0"), "seed of the re-measurement's trial inputs")(
      "timeout", po::value<std::string>()->default_value("600"), "cuda: seconds before a candidate counts as hung")(
      "timing-budget", po::value<std::string>()->default_value("0"),
      "cuda: at most this many seconds of timed runs per plan (>= 5 samples; 0: no cap)")(
      "nvrtc-cache", po::value<std::string>(&o.cuda.nvrtc_cache_dir),
      "cuda: NVRTC cache folder (kernels compiled in parallel first)")(
      "reference-precision", po::value<std::string>(&reference_precision)->default_value("kernelbench"),
      "cuda: the reference's precision policy: kernelbench (default; PyTorch's defaults, cuDNN may use TF32) or fp32 "
      "(TF32 off)")("reuse", po::value<std::string>(&o.reuse),
                    "an earlier rescore's measurements.jsonl: plans it measured are not measured again")(
      "offline",
      "measure nothing: every plan's measurement comes from --reuse FILE, on the device it names (re-derives a GPU "
      "rescore from its measurements on any machine)")(
      "queue", po::value<std::string>(&o.queue),
      "measure through this queue's workers (redis://HOST:PORT[/NAME]; `harness worker --device cuda|sim`)")(
      "force", "rescore even under numeric settings that differ from the run's")(
      "fast-p-inclusive",
      "the drift report's fast_p and verdicts count speedup >= p instead of KernelBench's speedup > p");
  po::variables_map vm;
  if (auto stop = parse_options("replay rescore", args, opts, {{"run", 1}}, &vm)) return *stop;
  if (!vm.count("run") || o.out_dir.empty()) {
    std::cerr << "replay rescore: expected a run folder and --out NEW\n" << opts;
    return 2;
  }
  {
    // Numbers are read as text and checked (an unsigned option would read "-1" as 2^64 - 1).
    auto trials = parse_int_option("--trials", vm["trials"].as<std::string>(), 0, 100);
    auto samples = parse_int_option("--samples", vm["samples"].as<std::string>(), 0, 10000);
    auto seed = parse_int_option("--seed", vm["seed"].as<std::string>(), 0, INT64_MAX);
    auto timeout = parse_number_option("--timeout", vm["timeout"].as<std::string>(), 0.001, 86400);
    auto budget = parse_number_option("--timing-budget", vm["timing-budget"].as<std::string>(), 0, 86400);
    for (const Status& st : {trials.status(), samples.status(), seed.status(), timeout.status(), budget.status()}) {
      if (!st.ok()) {
        std::cerr << "replay rescore: " << st.message() << "\n";
        return 2;
      }
    }
    o.trials = static_cast<int>(*trials);
    o.samples = static_cast<int>(*samples);
    o.seed = static_cast<uint64_t>(*seed);
    o.cuda.timeout_s = *timeout;
    o.cuda.timing_budget_s = *budget;
  }
  if (vm.count("live")) {
    if (!device.empty() && device != "cuda") {
      std::cerr << "replay rescore: --live and --device " << device << " exclude each other\n";
      return 2;
    }
    device = "cuda";
  }
  if (device.empty()) {
    std::cerr << "replay rescore: say where to measure: --live (this GPU) or --device sim --profile FILE\n";
    return 2;
  }
  if (Result<DeviceKind> d = kDeviceKinds.parse(device); d.ok()) {
    o.device = *d;
  } else {
    std::cerr << "replay rescore: --" << d.status().message() << "\n";
    return 2;
  }
  if (!o.queue.empty()) {
    // Checked before the run is read; the message shows the URL without its password.
    if (Result<QueueUrl> url = parse_queue_url(o.queue); !url.ok()) {
      std::cerr << "replay rescore: --queue: " << url.status().message() << "\n";
      return 2;
    }
  }
  if (!o.queue.empty() && (!o.cuda.nvrtc_cache_dir.empty() || !vm["timeout"].defaulted())) {
    // The workers compile and time: these are theirs (harness worker --nvrtc-cache, --timeout-s).
    std::cerr << "replay rescore: " << (o.cuda.nvrtc_cache_dir.empty() ? "--timeout" : "--nvrtc-cache")
              << " with --queue: the queue's workers compile and wait for candidates; give it to them "
                 "(harness worker --nvrtc-cache DIR --timeout-s N)\n";
    return 2;
  }
  if (Result<ReferencePrecision> rp = parse_reference_precision(reference_precision); rp.ok()) {
    o.cuda.reference_precision = *rp;
  } else {
    std::cerr << "replay rescore: --reference-precision: " << rp.status().message() << "\n";
    return 2;
  }
  o.force = vm.count("force") > 0;
  o.offline = vm.count("offline") > 0;
  o.fast_p_inclusive = vm.count("fast-p-inclusive") > 0;
  bool tty = isatty(2);
  auto rep = rescore_run(vm["run"].as<std::string>(), o, [&](uint64_t d, uint64_t t, const std::string& line) {
    if (tty)
      std::fprintf(stderr, "\r[%llu/%llu] %-60s", (unsigned long long)d, (unsigned long long)t, line.c_str());
    else if (d == t || d % 100 == 0)
      std::fprintf(stderr, "[%llu/%llu] %s\n", (unsigned long long)d, (unsigned long long)t, line.c_str());
  });
  if (tty) std::fprintf(stderr, "\n");
  if (!rep.ok()) {
    std::cerr << "replay rescore: " << rep.status().to_string() << "\n";
    return 2;
  }
  std::cout << rep->drift_markdown << "\n"
            << "rescored " << rep->distinct_plans << " distinct plans (" << rep->measured << " measured, "
            << rep->reused << " taken from --reuse) on " << rep->device << " in " << rep->measure_seconds
            << " s; the re-drive measured " << rep->measured_redrive << " plans the run never measured; the new run "
            << o.out_dir << " has " << rep->records << " records, digest " << rep->digest.hex() << " (" << rep->seconds
            << " s in all)\n";
  return 0;
}

}  // namespace vinci
