// The simulated device's speed. Goal: >= 100k plan evaluations per second on one core
// (model time only: predict + predict_correctness of a prepared task). The full evaluator (plan
// address over the canonical JSON, 100 timing samples, the record) is measured beside it.
//
//   build-sim/bin/gpu_sim_bench --benchmark_filter=Sim
#include <benchmark/benchmark.h>

#include <memory>
#include <vector>

#include "core/rng.h"
#include "gpu/codegen/codegen.h"
#include "gpu/sim/sim_evaluator.h"

namespace vinci {
namespace {

// A mix of plans as the sim policy samples them: random knob settings of a few tasks of every
// family, at full size.
struct Workload {
  TaskSuite suite;
  std::unique_ptr<SimModel> model;
  std::vector<std::unique_ptr<TaskContext>> contexts;
  std::vector<std::pair<const TaskContext*, Plan>> plans;
  std::vector<const Task*> tasks;
};

const Workload& workload() {
  static Workload w = [] {
    Workload w;
    w.suite = *load_task_suite(default_task_dir());
    w.model = std::make_unique<SimModel>(*load_device_profile(profile_path("h200")));
    for (const char* id : {"L1_001", "L1_019", "L1_023", "L1_036", "L1_047", "L2_066", "L2_081", "L3_001"}) {
      const Task* t = w.suite.find(id);
      w.contexts.push_back(std::make_unique<TaskContext>(*w.model->prepare(*t, t->size_map(SizeName::kFull))));
      KnobSpace space = knob_space(*t);
      Stream s(RngKey::root(1).with("bench", id));
      for (int i = 0; i < 16; ++i) {
        w.plans.emplace_back(w.contexts.back().get(), *generate_plan(*t, random_setting(space, s)));
        w.tasks.push_back(t);
      }
    }
    return w;
  }();
  return w;
}

void BM_SimPredict(benchmark::State& state) {
  const Workload& w = workload();
  size_t i = 0;
  double sink = 0;
  for (auto _ : state) {
    const auto& [ctx, plan] = w.plans[i++ % w.plans.size()];
    sink += w.model->predict(*ctx, plan)->time_us;
  }
  benchmark::DoNotOptimize(sink);
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}
BENCHMARK(BM_SimPredict);

void BM_SimPredictAndCorrectness(benchmark::State& state) {
  const Workload& w = workload();
  Tolerance tol{1e-2, 1e-2};
  size_t i = 0;
  double sink = 0;
  for (auto _ : state) {
    const auto& [ctx, plan] = w.plans[i++ % w.plans.size()];
    sink += w.model->predict(*ctx, plan)->time_us;
    sink += w.model->predict_correctness(*ctx, plan, tol)->correct;
  }
  benchmark::DoNotOptimize(sink);
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}
BENCHMARK(BM_SimPredictAndCorrectness);

// The whole evaluator: validation, plan address (canonical JSON of the plan with its kernel
// sources), 5 trials, timing samples and the record.
void BM_SimEvaluate(benchmark::State& state) {
  const Workload& w = workload();
  SimEvaluator ev(w.model->profile());
  EvalRequest req;
  req.samples = static_cast<int>(state.range(0));
  size_t i = 0;
  double sink = 0;
  for (auto _ : state) {
    size_t k = i++ % w.plans.size();
    sink += ev.evaluate(*w.tasks[k], w.plans[k].second, req)->kernel_us;
  }
  benchmark::DoNotOptimize(sink);
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}
BENCHMARK(BM_SimEvaluate)->Arg(1)->Arg(100);

}  // namespace
}  // namespace vinci

BENCHMARK_MAIN();
