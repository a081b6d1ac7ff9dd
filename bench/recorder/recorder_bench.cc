// Recorder throughput and size, on one core:
//   build/bin/recorder_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
// Goals: >= 1M small records/s appended, >= 2M/s scanned, and a run's log + objects at
// most 1/3 the size of the same records as JSON lines (the BM_RunSize counters).
#include <benchmark/benchmark.h>
#include <capnp/message.h>
#include <sys/stat.h>

#include <cstdio>
#include <string>
#include <vector>

#include "core/rng.h"
#include "recorder/record_json.h"
#include "recorder/run.h"
#include "recorder/run_log.h"
#include "recorder/vinci.capnp.h"

namespace vinci {
namespace {

std::string temp_dir(const char* tag) {
  std::string tmpl = std::string("/tmp/vinci_bench_") + tag + "_XXXXXX";
  return mkdtemp(tmpl.data());
}

// A per-turn reward record: the most common small record of a training run.
void build_reward(capnp::MessageBuilder& msg, uint64_t i) {
  auto r = msg.initRoot<schema::Record>();
  r.setSeq(i);
  r.setStep(static_cast<int32_t>(i / 4096));
  r.setTask("L2_037_gemm_swish_bias_groupnorm");
  r.setScheme(static_cast<int32_t>(i % 4));
  r.setRollout(static_cast<int32_t>((i / 4) % 4));
  r.setTurn(static_cast<int32_t>((i / 16) % 3));
  auto w = r.initReward();
  w.setValue(0.5 + static_cast<double>(i % 97) / 97.0);
  w.setSpeedup(1.0 + static_cast<double>(i % 13) / 7.0);
  w.setTimeCoverage(0.9);
  w.setCorrect(true);
}

void BM_AppendSmallRecord(benchmark::State& state) {
  std::string dir = temp_dir("append");
  auto w = RunLogWriter::create(dir);
  uint64_t i = 0;
  size_t bytes = 0;
  for (auto _ : state) {
    capnp::MallocMessageBuilder msg(64);
    build_reward(msg, i++);
    std::string payload = encode_message(msg);
    bytes += payload.size();
    if (!(*w)->append(payload).ok()) state.SkipWithError("append failed");
  }
  (void)(*w)->flush();
  state.SetItemsProcessed(static_cast<int64_t>(i));
  state.counters["bytes_per_record"] = static_cast<double>(bytes) / static_cast<double>(i);
  std::system(("rm -rf " + dir).c_str());
}
BENCHMARK(BM_AppendSmallRecord);

// A measurement record naming a kernel source of ~3 KB stored in the object store. Sources
// repeat as they do in RL runs (the policy converges on a few plans per task): `distinct` of
// every 48 are new.
std::string kernel_source(uint64_t variant) {
  std::string s = "// vinci generated kernel, variant " + std::to_string(variant) + "\n";
  s += "extern \"C\" __global__ void __launch_bounds__(" + std::to_string(128 << (variant % 3)) +
       ")\nfused_kernel(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y, int rows, int "
       "cols) {\n";
  for (int line = 0; line < 60; ++line) {
    s += "  float acc" + std::to_string(line) + " = x[(blockIdx.x * blockDim.x + threadIdx.x) * " +
         std::to_string(4 + (variant + line) % 8) + " + " + std::to_string(line) + "] * w[" +
         std::to_string((line * 7 + variant) % 64) + "];\n";
  }
  s += "  y[blockIdx.x * blockDim.x + threadIdx.x] = acc0;\n}\n";
  return s;
}

void build_measurement(capnp::MessageBuilder& msg, uint64_t i, const Digest& plan) {
  auto r = msg.initRoot<schema::Record>();
  r.setSeq(i);
  r.setStep(static_cast<int32_t>(i / 192));
  r.setTask("L1_023_softmax");
  r.setScheme(static_cast<int32_t>(i % 4));
  r.setRollout(static_cast<int32_t>((i / 4) % 4));
  r.setTurn(static_cast<int32_t>((i / 16) % 3));
  auto m = r.initMeasurement();
  m.setEvaluator("sim");
  m.setDevice("h200");
  uint8_t bytes[16];
  plan.to_bytes(bytes);
  m.setPlan(capnp::Data::Reader(bytes, 16));
  m.setCompiled(true);
  m.setCorrect(true);
  auto trials = m.initTrials(5);
  for (unsigned t = 0; t < 5; ++t) {
    trials[t].setCorrect(true);
    trials[t].setMaxAbsErr(1e-6 * (t + 1));
    trials[t].setMeanAbsErr(1e-7 * (t + 1));
    trials[t].setDistribution(t % 2 ? "signed" : "uniform");
    trials[t].setSeed(i * 5 + t);
  }
  m.setStatistic("median");
  m.setKernelUs(812.5 + static_cast<double>(i % 100));
  m.setReferenceUs(1500.25);
  m.setSpeedup(1500.25 / m.getKernelUs());
  m.setTimeCoverage(1.0);
  m.setSize("full");
}

void BM_AppendKernelSourceBlob(benchmark::State& state) {
  std::string root = temp_dir("blob");
  ManifestInfo info;
  info.name = "bench";
  auto w = RunWriter::create(root + "/run", info);
  const uint64_t distinct = static_cast<uint64_t>(state.range(0));
  uint64_t i = 0;
  for (auto _ : state) {
    uint64_t variant = (i / 48) * distinct + (i % 48) % distinct;
    auto addr = (*w)->store().put("kernel-source", kernel_source(variant));
    capnp::MallocMessageBuilder msg(256);
    build_measurement(msg, i++, *addr);
    if (!(*w)->append(msg).ok()) state.SkipWithError("append failed");
  }
  (void)(*w)->flush();
  state.SetItemsProcessed(static_cast<int64_t>(i));
  state.SetBytesProcessed(static_cast<int64_t>(i * kernel_source(0).size()));
  std::system(("rm -rf " + root).c_str());
}
BENCHMARK(BM_AppendKernelSourceBlob)->Arg(1)->Arg(12)->Arg(48);

std::string g_scan_dir;
const uint64_t kScanRecords = 1000000;

void prepare_scan_log() {
  if (!g_scan_dir.empty()) return;
  g_scan_dir = temp_dir("scan");
  auto w = RunLogWriter::create(g_scan_dir);
  for (uint64_t i = 0; i < kScanRecords; ++i) {
    capnp::MallocMessageBuilder msg(64);
    build_reward(msg, i);
    VINCI_ASSERT((*w)->append(encode_message(msg)).ok());
  }
  VINCI_ASSERT((*w)->flush().ok());
}

// Frames checked (length, checksum) and handed out.
void BM_ScanFrames(benchmark::State& state) {
  prepare_scan_log();
  uint64_t n = 0;
  for (auto _ : state) {
    auto r = RunLogReader::open(g_scan_dir);
    LogFrame f;
    while ((*r)->next(&f)) ++n;
  }
  state.SetItemsProcessed(static_cast<int64_t>(n));
}
BENCHMARK(BM_ScanFrames)->Unit(benchmark::kMillisecond);

// Frames checked and decoded into records, reading one field of each.
void BM_ScanAndDecodeRecords(benchmark::State& state) {
  prepare_scan_log();
  uint64_t n = 0;
  double sum = 0;
  for (auto _ : state) {
    auto r = RunLogReader::open(g_scan_dir);
    LogFrame f;
    RecordView view;
    while ((*r)->next(&f)) {
      if (!view.parse(f.payload).ok()) state.SkipWithError("bad record");
      sum += view.message().getRoot<schema::Record>().getReward().getValue();
      ++n;
    }
  }
  benchmark::DoNotOptimize(sum);
  state.SetItemsProcessed(static_cast<int64_t>(n));
}
BENCHMARK(BM_ScanAndDecodeRecords)->Unit(benchmark::kMillisecond);

uint64_t dir_bytes(const std::string& dir) {
  std::string cmd = "du -sb --apparent-size " + dir;
  FILE* p = popen(cmd.c_str(), "r");
  unsigned long long n = 0;
  if (p) {
    if (std::fscanf(p, "%llu", &n) != 1) n = 0;
    pclose(p);
  }
  return n;
}

// A synthetic training run's records (per turn: a policy sample naming its plan's source, a
// measurement, a reward) written by the recorder, against the same records as JSON lines with
// the sources inlined.
void BM_RunSize(benchmark::State& state) {
  const uint64_t distinct = static_cast<uint64_t>(state.range(0));
  for (auto _ : state) {
    std::string root = temp_dir("size");
    ManifestInfo info;
    info.name = "size";
    auto w = RunWriter::create(root + "/run", info);
    uint64_t json_bytes = 0;
    const uint64_t turns = 48 * 200;  // 200 task-steps of 16 rollouts x 3 turns
    for (uint64_t i = 0; i < turns; ++i) {
      uint64_t variant = (i / 48) * distinct + (i % 48) % distinct;
      auto addr = (*w)->store().put("kernel-source", kernel_source(variant));
      for (int kind = 0; kind < 3; ++kind) {
        capnp::MallocMessageBuilder msg(256);
        if (kind == 0) {
          auto r = msg.initRoot<schema::Record>();
          r.setStep(static_cast<int32_t>(i / 48));
          r.setTask("L1_023_softmax");
          auto s = r.initSample();
          s.setRole(schema::Role::POLICY);
          s.setBackbone("sim");
          auto acts = s.initActions(6);
          for (unsigned a = 0; a < 6; ++a) acts.set(a, static_cast<uint32_t>((variant + a) % 4));
          s.setLogProb(-3.25);
          uint8_t b[16];
          addr->to_bytes(b);
          s.setOutput(capnp::Data::Reader(b, 16));
        } else if (kind == 1) {
          build_measurement(msg, i, *addr);
        } else {
          build_reward(msg, i);
        }
        auto seq = (*w)->append(msg);
        std::string payload = encode_message(msg);
        auto view = RecordView::decode(payload);
        json_bytes += record_to_json(**view, &(*w)->store()).size() + 1;
      }
    }
    VINCI_ASSERT((*w)->finish().ok());
    uint64_t log = dir_bytes(root + "/run/log");
    uint64_t objects = dir_bytes(root + "/objects");
    state.counters["log_bytes"] = static_cast<double>(log);
    state.counters["object_bytes"] = static_cast<double>(objects);
    state.counters["json_bytes"] = static_cast<double>(json_bytes);
    state.counters["vinci_over_json"] = static_cast<double>(log + objects) / json_bytes;
    std::system(("rm -rf " + root).c_str());
  }
}
BENCHMARK(BM_RunSize)->Arg(1)->Arg(12)->Arg(48)->Iterations(1)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace vinci

BENCHMARK_MAIN();
