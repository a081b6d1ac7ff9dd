// Evaluations per second through the evaluation queue, beside the same evaluations in process
// (scripts/queue_bench.sh starts the server and the workers and prints the table).
//
//   queue_throughput --in-process [--requests N]
//   queue_throughput --queue redis://127.0.0.1:PORT [--requests N] [--callers C]
//
// The requests: the small sizes of the smoke experiment's tasks, random knob settings of each
// (keyed), distinct seeds, so no two are equal. The sim evaluator in process is called from one
// thread (a run's LockedEvaluator serialises it); the queue from C callers (default 16).
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "core/atomic_file.h"
#include "core/rng.h"
#include "gpu/codegen/codegen.h"
#include "gpu/sim/device_profile.h"
#include "gpu/sim/sim_evaluator.h"
#include "queue/protocol.h"
#include "queue/queue_evaluator.h"

using namespace vinci;

int main(int argc, char** argv) {
  std::string url;
  bool in_process = false;
  int requests = 2000, callers = 16;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--in-process")
      in_process = true;
    else if (a == "--queue" && i + 1 < argc)
      url = argv[++i];
    else if (a == "--requests" && i + 1 < argc)
      requests = std::atoi(argv[++i]);
    else if (a == "--callers" && i + 1 < argc)
      callers = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr, "usage: queue_throughput (--in-process | --queue URL) [--requests N] [--callers C]\n");
      return 2;
    }
  }
  if (in_process == !url.empty() || requests < 1 || callers < 1) {
    std::fprintf(stderr, "queue_throughput: give one of --in-process and --queue URL\n");
    return 2;
  }
  Result<TaskSuite> suite = load_task_suite(default_task_dir());
  if (!suite.ok()) {
    std::fprintf(stderr, "%s\n", suite.status().to_string().c_str());
    return 1;
  }
  std::vector<std::pair<const Task*, Plan>> work;
  const char* ids[] = {"L1_001", "L1_002", "L1_003", "L1_004", "L1_017", "L1_019",
                       "L2_001", "L2_004", "L2_006", "L2_009", "L2_012", "L2_029"};
  for (int i = 0; i < requests; ++i) {
    const Task* t = suite->find(ids[i % 12]);
    Stream s(RngKey::root(5).with("queue_bench", i));
    KnobSpace space = knob_space(*t);
    Result<Plan> p = generate_plan(*t, random_setting(space, s));
    if (!p.ok()) p = generate_plan(*t, default_setting(space));
    work.emplace_back(t, *p);
  }
  auto req = [](int i) {
    EvalRequest r;
    r.size = SizeName::kSmall;
    r.seed = static_cast<uint64_t>(i);
    r.samples = 10;
    return r;
  };
  auto start = std::chrono::steady_clock::now();
  std::atomic<int> failed{0};
  if (in_process) {
    Result<DeviceProfile> profile = load_device_profile(profile_path("h200"));
    SimEvaluator sim(*profile);
    for (int i = 0; i < requests; ++i)
      if (!sim.evaluate(*work[i].first, work[i].second, req(i)).ok()) ++failed;
  } else {
    Result<std::string> text = read_file(profile_path("h200"));
    QueueEvaluator q({url}, sim_spec(*text, 0, PlanLimits()));
    Status st = q.start();
    if (!st.ok()) {
      std::fprintf(stderr, "%s\n", st.to_string().c_str());
      return 1;
    }
    std::atomic<int> next{0};
    std::vector<std::thread> pool;
    for (int c = 0; c < callers; ++c)
      pool.emplace_back([&] {
        for (int i; (i = next.fetch_add(1)) < requests;)
          if (!q.evaluate(*work[i].first, work[i].second, req(i)).ok()) ++failed;
      });
    for (auto& t : pool) t.join();
  }
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%d evaluations in %.2f s: %.0f evaluations/s%s\n", requests, s, requests / s,
              failed ? (" (" + std::to_string(failed.load()) + " failed)").c_str() : "");
  return failed ? 1 : 0;
}
