// The live CUDA evaluator: its wire protocol and worker handling (everywhere), and on a machine
// with a GPU the hostile plans of tests/gpu/hostile/hostile_plans.json, every one rejected with
// its reason by one evaluator that survives them all, then honest plans accepted.
#include "gpu/live/cuda_evaluator.h"
#include "gpu/live/memory_budget.h"

#include <dlfcn.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "gpu/codegen/codegen.h"
#include "gpu/compile/triton.h"
#include "gpu/model_plan.h"
#include "gpu/sim/device_profile.h"
#include "gpu/sim/sim_evaluator.h"
#include "gpu/task.h"
#include "tests/gpu/sim_test_util.h"

namespace vinci {
namespace {

using simtest::h200;
using simtest::task;

struct Hostile {
  std::string name, expect, what;
  SizeName size = SizeName::kSmall;
  double max_speedup = 0;  // "contained": correct, and no faster than this
  Plan plan;
};

std::vector<Hostile> hostile_plans() {
  std::ifstream in(std::string(VINCI_SOURCE_DIR) + "/tests/gpu/hostile/hostile_plans.json");
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(text.str());
  std::vector<Hostile> out;
  for (const auto& e : j) {
    Hostile h;
    h.name = e.at("name").get<std::string>();
    h.expect = e.at("expect").get<std::string>();
    h.what = e.at("what").get<std::string>();
    h.size = e.at("size").get<std::string>() == "full" ? SizeName::kFull : SizeName::kSmall;
    h.max_speedup = e.value("max_speedup", 0.0);
    Result<Plan> p = plan_from_json(e.at("plan"));
    EXPECT_TRUE(p.ok()) << h.name << ": " << p.status().to_string();
    if (p.ok()) h.plan = *p;
    out.push_back(std::move(h));
  }
  return out;
}

bool have_gpu() {
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) return false;
  dlclose(h);
  return true;
}

CudaEvaluatorOptions options() {
  CudaEvaluatorOptions o;
  o.worker_path = std::string(VINCI_BINARY_DIR) + "/bin/vinci-cuda-worker";
  o.task_dir = default_task_dir();
  o.timeout_s = 120;
  o.launch_timeout_s = 5;
  return o;
}

EvalRequest small_request() {
  EvalRequest r;
  r.size = SizeName::kSmall;
  r.seed = 11;
  r.trials = 5;
  r.samples = 10;
  return r;
}

TEST(CudaProtocol, RequestRoundTrips) {
  Result<Plan> p = default_plan(task("L1_023"));
  ASSERT_TRUE(p.ok());
  EvalRequest r;
  r.size = SizeName::kSmall;
  r.seed = 0xfeedfacecafebeefULL;
  r.trials = 3;
  r.samples = 17;
  r.strict = true;
  Result<DecodedRequest> d = decode_eval_request(encode_eval_request("L1_023", *p, r));
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d->task_id, "L1_023");
  EXPECT_EQ(plan_address(d->plan), plan_address(*p));
  EXPECT_EQ(d->request.seed, r.seed);
  EXPECT_EQ(d->request.trials, 3);
  EXPECT_EQ(d->request.samples, 17);
  EXPECT_TRUE(d->request.strict);
  EXPECT_EQ(d->request.size, SizeName::kSmall);
  EXPECT_FALSE(d->request.adaptive);
  // Adaptive timing reaches the worker with its rule; the cap is the request's samples.
  r.adaptive = true;
  r.adaptive_rule.rel_width = 0.005;
  r.adaptive_rule.min_samples = 30;
  d = decode_eval_request(encode_eval_request("L1_023", *p, r));
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_TRUE(d->request.adaptive);
  EXPECT_EQ(d->request.adaptive_rule.rel_width, 0.005);
  EXPECT_EQ(d->request.adaptive_rule.min_samples, 30);
  EXPECT_EQ(d->request.adaptive_rule.step, 10);
  EXPECT_EQ(d->request.adaptive_rule.max_samples, 17);
  nlohmann::json bad = nlohmann::json::parse(encode_eval_request("L1_023", *p, r));
  bad["timing"]["level"] = 0;
  Result<DecodedRequest> refused = decode_eval_request(bad.dump());
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("request: timing: 'level' out of range, found 0"), std::string::npos)
      << refused.status().message();
  EXPECT_FALSE(decode_eval_request("{\"task\": 3}").ok());
  EXPECT_FALSE(decode_eval_request("not json").ok());
}

TEST(CudaProtocol, ResultRoundTripsBitExactly) {
  SimEvaluatorOptions so;
  so.noise = 0.03;
  SimEvaluator sim(h200(), so);
  for (const char* id : {"L1_023", "L2_012"}) {
    Result<Plan> p = default_plan(task(id));
    ASSERT_TRUE(p.ok());
    EvalRequest req = small_request();
    Result<EvalResult> r = sim.evaluate(task(id), *p, req);
    ASSERT_TRUE(r.ok());
    r->compile_log = "warning: something";
    r->flags.push_back("weak tolerance: zeros pass allclose");
    r->finalize();
    Result<EvalResult> back = decode_eval_result(encode_eval_result(*r), r->compile_log);
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    EXPECT_EQ(*back, *r) << id;
  }
  EXPECT_FALSE(decode_eval_result("short", "").ok());
}

// Kernel output travels with the record (in its settings list, under reserved keys) and only
// when there was some: a silent candidate's Measurement is what it always was.
TEST(CudaProtocol, KernelOutputTravelsWithTheRecordOnlyWhenThereIsSome) {
  SimEvaluator sim(h200());
  Result<Plan> p = default_plan(task("L1_019"));
  ASSERT_TRUE(p.ok());
  Result<EvalResult> r = sim.evaluate(task("L1_019"), *p, small_request());
  ASSERT_TRUE(r.ok());
  std::string silent = encode_eval_result(*r);
  r->kernel_output = "line 0\nline 1\n";
  r->kernel_output_dropped = 1234567;
  std::string loud = encode_eval_result(*r);
  EXPECT_NE(loud, silent);
  Result<EvalResult> back = decode_eval_result(loud, r->compile_log);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(*back, *r);
  EXPECT_EQ(back->kernel_output, "line 0\nline 1\n");
  EXPECT_EQ(back->kernel_output_dropped, 1234567);
  EXPECT_EQ(back->settings.count(kKernelOutputKey), 0u);
  r->kernel_output.clear();
  r->kernel_output_dropped = 0;
  EXPECT_EQ(encode_eval_result(*r), silent);
  nlohmann::json j = eval_result_to_json(*back);
  EXPECT_EQ(j.at("kernelOutputDroppedBytes"), 1234567);
}

TEST(CudaProtocol, FramesCrossASocketAndTimeOut) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  std::string big(3 << 20, 'x');
  big[12345] = '\0';
  std::thread writer([&] {
    EXPECT_TRUE(write_frame(sv[0], "hello").ok());
    EXPECT_TRUE(write_frame(sv[0], big).ok());
    EXPECT_TRUE(write_frame(sv[0], "").ok());
  });
  Result<std::string> a = read_frame(sv[1], 10);
  Result<std::string> b = read_frame(sv[1], 10);
  Result<std::string> c = read_frame(sv[1], 10);
  writer.join();
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(*a, "hello");
  EXPECT_EQ(*b, big);
  EXPECT_EQ(*c, "");
  Result<std::string> none = read_frame(sv[1], 0.2);  // nothing comes: a timeout, not a hang
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("timeout"), std::string::npos);
  close(sv[0]);
  Result<std::string> eof = read_frame(sv[1], 1);
  ASSERT_FALSE(eof.ok());
  EXPECT_NE(eof.status().message().find("ended"), std::string::npos) << eof.status().message();
  close(sv[1]);
}

TEST(CudaProtocol, HostilePlansAreWellFormedPlansForTheirTask) {
  std::vector<Hostile> plans = hostile_plans();
  ASSERT_GE(plans.size(), 8u);
  for (const Hostile& h : plans) {
    // A plan refused as invalid fails validate_plan; every other is a well-formed plan.
    EXPECT_EQ(validate_plan(h.plan, task(h.plan.task_id)).ok(), h.expect != "invalid_plan") << h.name;
    EXPECT_FALSE(h.expect.empty()) << h.name;
  }
}

TEST(CudaEvaluator, WithoutAGpuTheEvaluationFailsNamingTheCause) {
  if (have_gpu()) GTEST_SKIP() << "this machine has a CUDA driver";
  CudaEvaluator ev(options());
  Result<Plan> p = default_plan(task("L1_019"));
  ASSERT_TRUE(p.ok());
  Result<EvalResult> r = ev.evaluate(task("L1_019"), *p, small_request());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("did not start"), std::string::npos) << r.status().message();
  // The evaluator stays usable: asking again gives the same answer, not a crash.
  EXPECT_FALSE(ev.evaluate(task("L1_019"), *p, small_request()).ok());
  CudaEvaluatorOptions missing = options();
  missing.worker_path = "/nonexistent/vinci-cuda-worker";
  CudaEvaluator ev2(missing);
  Status s = ev2.start();
  EXPECT_EQ(s.code(), StatusCode::kNotFound) << s.to_string();
}

bool has_flag(const EvalResult& r, const std::string& prefix) {
  for (const auto& f : r.flags)
    if (f.rfind(prefix, 0) == 0) return true;
  return false;
}

// The issue's list, one by one, in one evaluator (one harness process); then honest plans.
TEST(CudaEvaluator, RejectsEveryHostilePlanAndSurvives) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA driver here";
  CudaEvaluator ev(options());
  Status st = ev.start();
  ASSERT_TRUE(st.ok()) << st.to_string();
  std::printf("%-28s %-18s %-8s %s\n", "plan", "expected", "ok", "reason");
  for (const Hostile& h : hostile_plans()) {
    EvalRequest req = small_request();
    req.size = h.size;
    Result<EvalResult> r = ev.evaluate(task(h.plan.task_id), h.plan, req);
    ASSERT_TRUE(r.ok()) << h.name << ": " << r.status().to_string();
    if (h.expect == "contained") {
      // State carried between runs: every timed sample starts fresh, so the plan is timed as the
      // work it does, its memory always empty.
      bool ok = r->correct && r->speedup < h.max_speedup && !has_flag(*r, "rejected:");
      std::printf("%-28s %-18s %-8s speedup %.3f (%s)\n", h.name.c_str(), h.expect.c_str(), ok ? "yes" : "NO",
                  r->speedup, r->error.c_str());
      EXPECT_TRUE(r->correct) << h.name << ": " << r->error;
      EXPECT_LT(r->speedup, h.max_speedup) << h.name << " (" << h.what << "): its state paid";
      EXPECT_EQ(r->settings["timing_input_sets"], "3") << h.name;
      EXPECT_GE(std::atoi(r->settings["timing_checked_samples"].c_str()), 3) << h.name;
      continue;
    }
    bool ok = !r->correct && has_flag(*r, "rejected: " + h.expect);
    std::printf("%-28s %-18s %-8s %s\n", h.name.c_str(), h.expect.c_str(), ok ? "yes" : "NO", r->error.c_str());
    EXPECT_FALSE(r->correct) << h.name;
    EXPECT_TRUE(has_flag(*r, "rejected: " + h.expect))
        << h.name << " (" << h.what << "): flags " << nlohmann::json(r->flags).dump() << ", error: " << r->error;
    EXPECT_TRUE(r->kernel_times_us.empty()) << h.name << ": a rejected candidate is not timed";
  }
  // The library-only plan is correct but a decoy.
  Result<Plan> eager = eager_plan(task("L1_019"));
  ASSERT_TRUE(eager.ok());
  Result<EvalResult> d = ev.evaluate(task("L1_019"), *eager, small_request());
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_TRUE(d->decoy);
  // Survived: honest plans after all of that are accepted and timed. L1_012, L2_089 and L3_031
  // have library steps whose output is a view of an input or a weight (a reshape): the timed
  // loop's poison of the candidate's own buffers must not reach through them.
  for (const char* id : {"L1_019", "L1_023", "L1_047", "L2_012", "L1_012", "L2_089", "L3_031"}) {
    Result<Plan> p = default_plan(task(id));
    ASSERT_TRUE(p.ok());
    Result<EvalResult> r = ev.evaluate(task(id), *p, small_request());
    ASSERT_TRUE(r.ok()) << id << ": " << r.status().to_string();
    EXPECT_TRUE(r->correct) << id << ": " << r->error;
    EXPECT_EQ(r->kernel_times_us.size(), 10u) << id;
    EXPECT_EQ(r->reference_times_us.size(), 10u) << id;
    EXPECT_GT(r->speedup, 0) << id;
    EXPECT_EQ(r->trials.size(), 5u);
  }
  CudaEvaluatorStats s = ev.stats();
  std::printf("workers started %d, lost %d\n", s.workers_started, s.workers_lost);
  EXPECT_GE(s.workers_lost, 3);  // the hang, the trap and the illegal access each cost one
}

// Triton candidates through the same evaluator: the hostile plans of tests/gpu/triton_plans/hostile
// (each names its expected rejection in a first line "<!-- expect: rejected: TAG -->" or "<!--
// expect: compile: TEXT -->"), then every honest plan of tests/gpu/triton_plans at the small size.
TEST(CudaEvaluator, TritonPlansMeetEveryCheckOfACudaPlan) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA driver here";
  {
    TritonCompiler probe;
    Result<std::string> v = probe.version();
    if (!v.ok()) GTEST_SKIP() << "Triton is not installed for this python: " << v.status().message();
  }
  CudaEvaluatorOptions o = options();
  o.triton_timeout_s = 20;  // the compile_forever plan
  CudaEvaluator ev(o);
  ASSERT_TRUE(ev.start().ok());
  std::string dir = std::string(VINCI_SOURCE_DIR) + "/tests/gpu/triton_plans";
  auto files = [](const std::string& d) {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(d))
      if (e.path().extension() == ".md") out.push_back(e.path().string());
    std::sort(out.begin(), out.end());
    return out;
  };
  auto read_text = [](const std::string& path) {
    std::ifstream in(path);
    std::stringstream t;
    t << in.rdbuf();
    return t.str();
  };
  std::printf("%-36s %-40s %-4s %s\n", "triton plan", "expected", "ok", "reason");
  for (const std::string& path : files(dir + "/hostile")) {
    std::string name = std::filesystem::path(path).filename().string();
    std::string text = read_text(path);
    size_t at = text.find("<!-- expect: ");
    ASSERT_NE(at, std::string::npos) << name;
    std::string expect = text.substr(at + 13, text.find(" -->", at) - at - 13);
    Result<Plan> plan = parse_model_plan(text, task(name.substr(0, 6)));
    ASSERT_TRUE(plan.ok()) << name << ": " << plan.status().to_string();
    Result<EvalResult> r = ev.evaluate(task(plan->task_id), *plan, small_request());
    ASSERT_TRUE(r.ok()) << name << ": " << r.status().to_string();
    bool ok;
    if (expect.rfind("compile: ", 0) == 0) {
      ok = !r->compiled && r->error.find(expect.substr(9)) != std::string::npos;
    } else {
      ok = !r->correct && has_flag(*r, expect);
    }
    std::printf("%-36s %-40s %-4s %s\n", name.c_str(), expect.c_str(), ok ? "yes" : "NO",
                r->error.substr(0, 160).c_str());
    EXPECT_TRUE(ok) << name << ": expected " << expect << "; flags " << nlohmann::json(r->flags).dump()
                    << ", error: " << r->error;
    EXPECT_FALSE(r->correct) << name;
    EXPECT_TRUE(r->kernel_times_us.empty()) << name;
  }
  // Survived: every honest Triton plan is correct and timed, and says which Triton made it.
  for (const std::string& path : files(dir)) {
    std::string name = std::filesystem::path(path).filename().string();
    Result<Plan> plan = parse_model_plan(read_text(path), task(name.substr(0, 6)));
    ASSERT_TRUE(plan.ok()) << name << ": " << plan.status().to_string();
    Result<EvalResult> r = ev.evaluate(task(plan->task_id), *plan, small_request());
    ASSERT_TRUE(r.ok()) << name << ": " << r.status().to_string();
    std::printf("%-36s %-40s %-4s %s\n", name.c_str(), "correct", r->correct ? "yes" : "NO", r->error.c_str());
    EXPECT_TRUE(r->correct) << name << ": " << r->error << " " << r->compile_log;
    EXPECT_EQ(r->kernel_times_us.size(), 10u) << name;
    EXPECT_TRUE(r->settings.count("triton_version")) << name;
    EXPECT_NE(r->settings["triton_sandbox"].find("env allowlist"), std::string::npos) << name;
    EXPECT_NE(r->settings["triton_options"].find("arch=sm_90"), std::string::npos) << name;
  }
}

// A candidate whose kernel prints 100000 lines (device printf): the evaluation succeeds, the
// record keeps the first 4 KiB and counts the rest, and nothing reaches this process's stdout or
// stderr (the worker's fd 1 is a pipe it drains; the protocol is another descriptor).
// Adaptive timing in the worker: the same rounds as the fixed protocol, cut where the rule stops,
// then every timing set's checked last round; the rule, the samples and the reason recorded. A
// width of 1 stops at the first look (20 samples, then one checked round per set); a width of 0
// never does (the cap).
TEST(CudaEvaluator, AdaptiveTimingStopsAtTheRulesPointsAndSaysWhy) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA driver here";
  Result<Plan> plan = default_plan(task("L1_019"));
  ASSERT_TRUE(plan.ok());
  CudaEvaluator ev(options());
  for (double width : {1.0, 0.0}) {
    EvalRequest req = small_request();
    req.samples = 60;
    req.adaptive = true;
    req.adaptive_rule.rel_width = width;
    req.adaptive_rule.max_samples = req.samples;
    Result<EvalResult> r = ev.evaluate(task("L1_019"), *plan, req);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    ASSERT_TRUE(r->correct) << r->error;
    const size_t sets = static_cast<size_t>(std::atoi(r->settings["timing_input_sets"].c_str()));
    ASSERT_GE(sets, 1u);
    const size_t want = width > 0 ? 20 + sets : 60;
    EXPECT_EQ(r->kernel_times_us.size(), want) << width;
    EXPECT_EQ(r->reference_times_us.size(), want) << width;
    EXPECT_EQ(r->settings["samples_used"], std::to_string(want));
    EXPECT_EQ(r->settings["timing_stopped_by"], width > 0 ? "width" : "cap");
    EXPECT_EQ(r->settings["timing_rule"].rfind("adaptive: level 0.99, width ", 0), 0u) << r->settings["timing_rule"];
    EXPECT_GE(std::atoi(r->settings["timing_checked_samples"].c_str()),
              std::atoi(r->settings["timing_input_sets"].c_str()));
  }
}

TEST(CudaEvaluator, KernelPrintfIsCapturedCappedAndKeptOffTheTerminal) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA driver here";
  Plan plan;
  plan.task_id = "L1_019";
  plan.origin = "hand";
  plan.buffers = {{"x", "input", "f32", {"B", "D"}}, {"y", "output", "f32", {"B", "D"}}};
  plan.output = "y";
  PlanKernel k;
  k.name = "chatty_relu";
  k.family = KernelFamily::kCustom;
  k.source = R"(extern "C" __global__ void chatty_relu(const float* x, float* y, long long n) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = fmaxf(x[i], 0.f);
  // 100000 lines in all, spread over the first threads.
  const long long per = 100000 / n + 1;
  for (long long l = i * per; l < (i + 1) * per && l < 100000 && i < n; ++l)
    printf("chatty_relu line %lld of 100000\n", l);
}
)";
  plan.kernels = {k};
  PlanStep step;
  step.kind = StepKind::kKernel;
  step.kernel = "chatty_relu";
  step.grid = {"ceil_div(B*D, 256)", "1", "1"};
  step.block = {"256", "1", "1"};
  step.args = {{"x", ""}, {"y", ""}, {"", "B*D"}};
  plan.steps = {step};
  ASSERT_TRUE(validate_plan(plan, task("L1_019")).ok());

  // Everything this process and its worker write to fd 1 and 2 goes to a file meanwhile.
  char path[] = "/tmp/vinci_printf_XXXXXX";
  int file = mkstemp(path);
  ASSERT_GE(file, 0);
  std::fflush(stdout);
  std::fflush(stderr);
  int saved_out = dup(1), saved_err = dup(2);
  dup2(file, 1);
  dup2(file, 2);
  Result<EvalResult> r = [&] {
    CudaEvaluator ev(options());
    return ev.evaluate(task("L1_019"), plan, small_request());
  }();
  std::fflush(stdout);
  std::fflush(stderr);
  dup2(saved_out, 1);
  dup2(saved_err, 2);
  close(saved_out);
  close(saved_err);
  off_t leaked = lseek(file, 0, SEEK_END);
  close(file);
  unlink(path);

  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(r->compiled) << r->compile_log;
  EXPECT_TRUE(r->correct) << r->error;
  EXPECT_FALSE(r->kernel_times_us.empty());
  EXPECT_GT(r->kernel_output.size(), 0u);
  EXPECT_LE(r->kernel_output.size(), kKernelOutputKept);
  EXPECT_EQ(r->kernel_output.rfind("chatty_relu line ", 0), 0u) << r->kernel_output.substr(0, 200);
  EXPECT_GT(r->kernel_output_dropped, 100000) << "every run prints; the device's printf buffer holds ~1 MiB";
  EXPECT_LT(leaked, 16384) << "kernel output reached the terminal";
  // The record says which GPU made it (a queue's workers span many).
  EXPECT_EQ(r->settings["gpu_uuid"].rfind("GPU-", 0), 0u) << r->settings["gpu_uuid"];
  EXPECT_EQ(r->settings["gpu_uuid"].size(), 40u) << r->settings["gpu_uuid"];
  EXPECT_FALSE(r->settings["cuda_driver"].empty());
  EXPECT_FALSE(r->settings["driver"].empty()) << "no /proc/driver/nvidia/version here?";
  EXPECT_GT(std::atoll(r->settings["sm_clock_khz"].c_str()), 0);
  EXPECT_GT(std::atoll(r->settings["memory_clock_khz"].c_str()), 0);
  std::printf("kernel output: %zu bytes kept, %lld more counted; %lld bytes reached fd 1/2\n", r->kernel_output.size(),
              static_cast<long long>(r->kernel_output_dropped), static_cast<long long>(leaked));
}

}  // namespace
}  // namespace vinci

namespace vinci {
namespace {

// The worker's caches (docs/live_evaluator.md, "Memory"): least recently used out first, the entry
// in use never, and nothing evicted while the total fits.
TEST(CacheLedger, EvictsLeastRecentlyUsedFirstAndNeverTheEntryInUse) {
  CacheLedger ledger(100);
  ledger.add("instance:L1_001/0", 40);
  ledger.add("inputs:a", 30);
  ledger.add("inputs:b", 30);
  EXPECT_EQ(ledger.total(), 100);
  EXPECT_TRUE(ledger.over_budget("").empty()) << "at the budget, nothing goes";
  ledger.touch("instance:L1_001/0");  // now the most recent
  ledger.add("inputs:c", 25);
  EXPECT_EQ(ledger.over_budget(""), std::vector<std::string>({"inputs:a"}));
  // The oldest is in use: the next oldest goes instead.
  EXPECT_EQ(ledger.over_budget("inputs:a"), std::vector<std::string>({"inputs:b"}));
  // An entry in use larger than the whole budget stays; everything else goes.
  CacheLedger small(10);
  small.add("instance:L1_038/0", 500);
  small.add("inputs:x", 5);
  EXPECT_EQ(small.over_budget("instance:L1_038/0"), std::vector<std::string>({"inputs:x"}));
  small.remove("inputs:x");
  EXPECT_TRUE(small.over_budget("instance:L1_038/0").empty());
  small.clear();
  EXPECT_EQ(small.total(), 0);
}

// Out of memory: one retry after the caches are released, only with the context intact.
TEST(CacheLedger, OutOfMemoryIsRetriedOnceWithTheContextIntact) {
  EXPECT_TRUE(retry_after(0, MemoryOutcome::kCandidateOom));
  EXPECT_TRUE(retry_after(0, MemoryOutcome::kTaskOom));
  EXPECT_FALSE(retry_after(1, MemoryOutcome::kCandidateOom));
  EXPECT_FALSE(retry_after(1, MemoryOutcome::kTaskOom));
  EXPECT_FALSE(retry_after(0, MemoryOutcome::kContextLost));
  EXPECT_FALSE(retry_after(0, MemoryOutcome::kFine));
}

}  // namespace
}  // namespace vinci
