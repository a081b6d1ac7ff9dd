// The evaluation queue's codec, addresses and URLs, and the queue end to end in one process: a
// QueueEvaluator and workers (run_worker on threads) against a real redis-server on loopback.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "core/atomic_file.h"
#include "gpu/live/cuda_evaluator.h"
#include "gpu/sim/sim_evaluator.h"
#include "queue/protocol.h"
#include "queue/queue_evaluator.h"
#include "queue/redis.h"
#include "queue/worker.h"
#include "tests/gpu/sim_test_util.h"
#include "tests/queue/redis_fixture.h"

namespace vinci {
namespace {

using simtest::must_generate;
using simtest::suite;
using simtest::task;

std::string file_of(const Task& t) {
  Result<std::string> text = read_file(t.source_file);
  VINCI_REQUIRE(text.ok(), text.status().to_string());
  return *text;
}

std::string profile_text() {
  Result<std::string> text = read_file(profile_path("h200_datasheet"));
  VINCI_REQUIRE(text.ok(), text.status().to_string());
  return *text;
}

EvalRequest small_request(uint64_t seed) {
  EvalRequest r;
  r.size = SizeName::kSmall;
  r.seed = seed;
  r.trials = 2;
  r.samples = 3;
  return r;
}

TEST(QueueUrl, ParsesAndRefusesWithTheUrlNamed) {
  Result<QueueUrl> u = parse_queue_url("redis://127.0.0.1:6379");
  ASSERT_TRUE(u.ok()) << u.status().to_string();
  EXPECT_EQ(u->host, "127.0.0.1");
  EXPECT_EQ(u->port, 6379);
  EXPECT_EQ(u->name, "vinci");
  u = parse_queue_url("redis://gpu-node-1:7000/exp_a");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->name, "exp_a");
  for (const char* bad : {"http://x:1", "redis://host", "redis://host:port", "redis://:6379", "redis://h:70000",
                          "redis://h:1/", "redis://h:1/a b"}) {
    Result<QueueUrl> r = parse_queue_url(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find(bad), std::string::npos) << r.status().message();
  }
  // A password never travels in the URL (it would land in configs and manifests), and the refusal
  // does not repeat it.
  for (const char* bad : {"redis://u:pw-xyz@h:1", "redis://:pw-xyz@h:1", "redis://pw-xyz@h:1/q"}) {
    std::string message = parse_queue_url(bad).status().message();
    EXPECT_NE(message.find("VINCI_REDIS_PASSWORD"), std::string::npos) << message;
    EXPECT_EQ(message.find("pw-xyz"), std::string::npos) << message;
    EXPECT_NE(message.find("***@h:1"), std::string::npos) << message;
  }
}

TEST(QueueCodec, RequestRoundTripsAndItsAddressIsStable) {
  const Task& t = task("L1_019");
  Plan plan = must_generate(t, {});
  EvaluatorSpec spec = sim_spec(profile_text(), 0.0, PlanLimits());
  EncodedRequest e = encode_queue_request(t, file_of(t), plan, small_request(7), spec, 3);
  Result<QueueRequest> q = decode_queue_request(e.body);
  ASSERT_TRUE(q.ok()) << q.status().to_string();
  EXPECT_EQ(q->address, e.address);
  EXPECT_EQ(q->task_id, "L1_019");
  EXPECT_EQ(q->task_path, t.source_file);
  EXPECT_EQ(q->task_file, task_file_address(file_of(t)));
  EXPECT_EQ(q->plan, plan_address(plan));
  EXPECT_EQ(q->profile, hash_tagged("device_profile", spec.profile_text));
  EXPECT_EQ(q->request.seed, 7u);
  EXPECT_EQ(q->request.trials, 2);
  EXPECT_EQ(q->request.samples, 3);
  EXPECT_EQ(q->request.size, SizeName::kSmall);
  EXPECT_EQ(q->spec.kind, "sim");
  EXPECT_EQ(q->spec.settings, spec.settings);
  EXPECT_EQ(q->attempts, 3);
  // The objects are what the addresses name: a worker needs nothing else.
  ASSERT_EQ(e.objects.size(), 2u);
  EXPECT_EQ(e.objects.at(q->task_file), file_of(t));
  EXPECT_EQ(e.objects.at(q->profile), spec.profile_text);
  EXPECT_EQ(e.plan, canonical_bytes(plan));
  EXPECT_EQ(queue_request_address(q->task_file, q->task_id, q->plan, q->request, spec), e.address);

  // Equal inputs, equal address; where it is sent from (attempts, the task file's path) is no part
  // of it; every input of the evaluation is.
  EXPECT_EQ(encode_queue_request(t, file_of(t), plan, small_request(7), spec, 5).address, e.address);
  Task moved = t;
  moved.source_file = "/elsewhere/level1.toml";
  EXPECT_EQ(encode_queue_request(moved, file_of(t), plan, small_request(7), spec, 3).address, e.address);
  EXPECT_NE(encode_queue_request(t, file_of(t), plan, small_request(8), spec, 3).address, e.address);
  EvalRequest strict = small_request(7);
  strict.strict = true;
  EXPECT_NE(encode_queue_request(t, file_of(t), plan, strict, spec, 3).address, e.address);
  // Adaptive timing travels with its rule (the cap is the samples) and is part of the address;
  // a fixed request's body has no "timing" key, so its address is as before.
  EXPECT_EQ(nlohmann::json::parse(e.body).count("timing"), 0u);
  EvalRequest adaptive = small_request(7);
  adaptive.adaptive = true;
  adaptive.adaptive_rule.rel_width = 0.02;
  adaptive.adaptive_rule.step = 5;
  EncodedRequest ea = encode_queue_request(t, file_of(t), plan, adaptive, spec, 3);
  EXPECT_NE(ea.address, e.address);
  Result<QueueRequest> qa = decode_queue_request(ea.body);
  ASSERT_TRUE(qa.ok()) << qa.status().to_string();
  EXPECT_TRUE(qa->request.adaptive);
  EXPECT_EQ(qa->request.adaptive_rule.rel_width, 0.02);
  EXPECT_EQ(qa->request.adaptive_rule.level, 0.99);
  EXPECT_EQ(qa->request.adaptive_rule.min_samples, 20);
  EXPECT_EQ(qa->request.adaptive_rule.step, 5);
  EXPECT_EQ(qa->request.adaptive_rule.max_samples, 3);
  EXPECT_EQ(queue_request_address(qa->task_file, qa->task_id, qa->plan, qa->request, spec), ea.address);
  adaptive.adaptive_rule.rel_width = 0.03;
  EXPECT_NE(encode_queue_request(t, file_of(t), plan, adaptive, spec, 3).address, ea.address);
  EXPECT_NE(encode_queue_request(t, file_of(t) + "\n", plan, small_request(7), spec, 3).address, e.address);
  EXPECT_NE(encode_queue_request(t, file_of(t), plan, small_request(7), sim_spec(profile_text(), 0.01, PlanLimits()), 3)
                .address,
            e.address);
  EXPECT_NE(
      encode_queue_request(t, file_of(t), plan, small_request(7), sim_spec(profile_text() + "\n", 0.0, PlanLimits()), 3)
          .address,
      e.address);
  EXPECT_NE(encode_queue_request(t, file_of(t), plan, small_request(7),
                                 cuda_spec(profile_text(), ReferencePrecision::kKernelbench, PlanLimits()), 3)
                .address,
            e.address);
  EXPECT_NE(queue_request_address(q->task_file, q->task_id, hash_tagged("plan", "other"), q->request, spec), e.address);
  EXPECT_NE(queue_request_address(q->task_file, "L1_020", q->plan, q->request, spec), e.address);
  // The address is a fixed function of its inputs (a change to it is a protocol change).
  EXPECT_EQ(queue_request_address(hash_tagged("task_file", "x"), "T", hash_tagged("plan", "p"), small_request(1),
                                  sim_spec("profile", 0.0, PlanLimits()))
                .hex(),
            "b5add4a48ab1cf50a9f83c23d266960b");
}

TEST(QueueCodec, ABadRequestIsRefusedNamingTheField) {
  const Task& t = task("L1_019");
  EncodedRequest e = encode_queue_request(t, file_of(t), must_generate(t, {}), small_request(7),
                                          sim_spec(profile_text(), 0, PlanLimits()), 3);
  nlohmann::json good = nlohmann::json::parse(e.body);
  auto refused = [&](const char* key, nlohmann::json value) {
    nlohmann::json j = good;
    j[key] = value;
    Result<QueueRequest> q = decode_queue_request(j.dump());
    EXPECT_FALSE(q.ok()) << key << " = " << value.dump();
    if (!q.ok()) {
      EXPECT_NE(q.status().message().find(key), std::string::npos) << q.status().message();
    }
  };
  refused("seed", 1.5e19);  // a float where an integer belongs is refused, not converted
  refused("seed", -1);
  refused("trials", 0);
  refused("samples", 1e12);
  refused("attempts", 0);
  refused("size", "medium");
  refused("evaluator", "tpu");
  refused("plan", "not hex");
  refused("timing", "adaptive");
  refused("timing", {{"level", 1.0}, {"width", 0.01}, {"first", 20}, {"step", 10}});
  refused("timing", {{"level", 0.99}, {"width", -0.1}, {"first", 20}, {"step", 10}});
  refused("timing", {{"level", 0.99}, {"width", 0.01}, {"first", 0}, {"step", 10}});
  refused("timing", {{"level", 0.99}, {"width", 0.01}, {"first", 20}, {"step", 2.5}});
  refused("timing", {{"level", 0.99}, {"width", 0.01}, {"first", 20}, {"step", 10}, {"every", 3}});
  refused("timing", {{"level", 0.99}, {"width", 0.01}, {"first", 20}});
  EXPECT_FALSE(decode_queue_request(e.body.substr(0, e.body.size() / 2)).ok());
}

TEST(QueueCodec, ResultRoundTripsWithItsCompileLog) {
  const Task& t = task("L1_019");
  SimEvaluator sim(simtest::h200());
  Result<EvalResult> r = sim.evaluate(t, must_generate(t, {}), small_request(3));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  r->compile_log = "warning: something\n";
  r->finalize();
  Result<EvalResult> back = decode_queue_result(encode_queue_result(*r), r->compile_log);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(*back, *r);
  // A log that is not the one the measurement names is refused.
  EXPECT_FALSE(decode_queue_result(encode_queue_result(*r), "another log").ok());
  EXPECT_FALSE(decode_queue_result("not a message", "").ok());
}

TEST(QueueEvaluatorTest, UnreachableServerNamesTheUrl) {
  int port = testing_redis::free_port();
  std::string url = "redis://127.0.0.1:" + std::to_string(port);
  QueueEvaluator q({url}, sim_spec(profile_text(), 0, PlanLimits()));
  Status st = q.start();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find(url), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("cannot reach"), std::string::npos) << st.message();
}

// Workers on threads for the in-process tests.
struct Workers {
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  std::vector<Status> status;
  Workers(const std::string& url, int n, double claim_idle_s, const std::string& device = "sim") : status(n) {
    for (int i = 0; i < n; ++i) {
      threads.emplace_back([this, url, i, claim_idle_s, device] {
        WorkerOptions o;
        o.url = url;
        o.name = "t" + std::to_string(i);
        o.claim_idle_s = claim_idle_s;
        o.device = device;
        o.cuda_worker_path = std::string(VINCI_BINARY_DIR) + "/bin/vinci-cuda-worker";
        o.cuda_timeout_s = 120;
        status[i] = run_worker(o, stop);
      });
    }
  }
  ~Workers() {
    stop = true;
    for (auto& t : threads) t.join();
  }
};

TEST(QueueEvaluatorTest, APasswordComesFromTheEnvironmentOnly) {
  VINCI_NEED_REDIS();
  testing_redis::RedisServer server({"--requirepass", "s3cret-for-the-test"});
  ASSERT_TRUE(server.start());
  ::unsetenv(kRedisPasswordEnv);
  ::unsetenv(kRedisUserEnv);
  QueueEvaluator without({server.url()}, sim_spec(profile_text(), 0, PlanLimits()));
  Status st = without.start();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("NOAUTH"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find(kRedisPasswordEnv), std::string::npos) << st.message();
  ::setenv(kRedisPasswordEnv, "wrong", 1);
  QueueEvaluator wrong({server.url()}, sim_spec(profile_text(), 0, PlanLimits()));
  st = wrong.start();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("authentication with VINCI_REDIS_PASSWORD failed"), std::string::npos) << st.message();
  EXPECT_EQ(st.message().find("wrong"), std::string::npos) << "the password is never printed: " << st.message();
  ::setenv(kRedisPasswordEnv, "s3cret-for-the-test", 1);
  {
    Workers workers(server.url(), 1, 5);
    QueueEvaluator with({server.url()}, sim_spec(profile_text(), 0, PlanLimits()));
    ASSERT_TRUE(with.start().ok());
    const Task& t = task("L1_019");
    Result<EvalResult> r = with.evaluate(t, must_generate(t, {}), small_request(2));
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_TRUE(r->compiled);
  }
  ::unsetenv(kRedisPasswordEnv);
}

TEST(QueueEvaluatorTest, AnswersWhatTheSimAnswersInProcess) {
  VINCI_NEED_REDIS();
  testing_redis::RedisServer server;
  ASSERT_TRUE(server.start());
  Workers workers(server.url("inproc"), 2, 5);
  QueueEvaluator q({server.url("inproc")}, sim_spec(profile_text(), 0.02, PlanLimits()));
  ASSERT_TRUE(q.start().ok());
  SimEvaluatorOptions so;
  so.noise = 0.02;
  SimEvaluator sim(simtest::h200(), so);
  std::vector<std::pair<const Task*, Plan>> work;
  for (const char* id : {"L1_001", "L1_019", "L2_004"}) {
    const Task& t = task(id);
    work.emplace_back(&t, must_generate(t, {}));
  }
  // Many callers at once, some asking the same evaluation: each gets the in-process record.
  std::vector<std::thread> callers;
  std::vector<std::string> failures(12);
  for (int c = 0; c < 12; ++c) {
    callers.emplace_back([&, c] {
      const auto& [t, plan] = work[c % work.size()];
      Result<EvalResult> got = q.evaluate(*t, plan, small_request(c % 4));
      if (!got.ok()) failures[c] = got.status().to_string();
    });
  }
  for (auto& c : callers) c.join();
  for (const auto& f : failures) EXPECT_EQ(f, "");
  for (int c = 0; c < 8; ++c) {
    const auto& [t, plan] = work[c % work.size()];
    Result<EvalResult> got = q.evaluate(*t, plan, small_request(c % 4));
    Result<EvalResult> want = sim.evaluate(*t, plan, small_request(c % 4));
    ASSERT_TRUE(got.ok() && want.ok());
    EXPECT_EQ(*got, *want);
  }
}

TEST(QueueEvaluatorTest, APoisonedRequestBecomesAFailedRecordWithItsReasons) {
  VINCI_NEED_REDIS();
  testing_redis::RedisServer server;
  ASSERT_TRUE(server.start());
  Workers workers(server.url(), 2, 0.2);
  QueueOptions qo{server.url()};
  qo.attempts = 3;
  QueueEvaluator q(qo, sim_spec(profile_text(), 0, PlanLimits()));
  ASSERT_TRUE(q.start().ok());
  // A task its own file does not hold: no worker can evaluate it.
  Task poisoned = task("L1_019");
  poisoned.id = "L1_999_missing";
  Plan plan = must_generate(task("L1_019"), {});
  plan.task_id = poisoned.id;
  Result<EvalResult> r = q.evaluate(poisoned, plan, small_request(1));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_FALSE(r->compiled);
  EXPECT_FALSE(r->correct);
  EXPECT_EQ(r->flags, std::vector<std::string>{"rejected: queue_failed"});
  EXPECT_EQ(r->trials.size(), 2u);
  EXPECT_NE(r->error.find("failed on 3 deliveries"), std::string::npos) << r->error;
  EXPECT_NE(r->error.find("task 'L1_999_missing' is not in its task file"), std::string::npos) << r->error;
  EXPECT_NE(r->error.find("(delivery 3)"), std::string::npos) << r->error;
  // The queue goes on serving.
  const Task& t = task("L1_019");
  Result<EvalResult> ok = q.evaluate(t, must_generate(t, {}), small_request(1));
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_TRUE(ok->compiled);
  for (const auto& st : workers.status) EXPECT_TRUE(st.ok()) << st.to_string();
}

bool have_gpu() {
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) return false;
  dlclose(h);
  return true;
}

// On a GPU machine: a live evaluation through a cuda worker is the live evaluator's record, and
// says which GPU made it.
TEST(QueueEvaluatorTest, ALiveEvaluationThroughTheQueueIsTheLiveEvaluatorsRecord) {
  VINCI_NEED_REDIS();
  if (!have_gpu()) GTEST_SKIP() << "no CUDA driver here: the live worker runs on a GPU machine";
  testing_redis::RedisServer server;
  ASSERT_TRUE(server.start());
  Workers workers(server.url(), 1, 30, "cuda");
  QueueEvaluator q({server.url()}, cuda_spec(profile_text(), ReferencePrecision::kKernelbench, PlanLimits()));
  ASSERT_TRUE(q.start().ok());
  const Task& t = task("L1_019");
  Plan plan = must_generate(t, {});
  Result<EvalResult> got = q.evaluate(t, plan, small_request(5));
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(got->evaluator, "cuda");
  EXPECT_TRUE(got->compiled) << got->compile_log;
  EXPECT_TRUE(got->correct) << got->error;
  EXPECT_EQ(got->settings["gpu_uuid"].rfind("GPU-", 0), 0u);
  EXPECT_EQ(got->settings["reference_precision"], "kernelbench");
  CudaEvaluatorOptions co;
  co.worker_path = std::string(VINCI_BINARY_DIR) + "/bin/vinci-cuda-worker";
  co.task_dir = default_task_dir();
  CudaEvaluator here(co);
  Result<EvalResult> want = here.evaluate(t, plan, small_request(5));
  ASSERT_TRUE(want.ok()) << want.status().to_string();
  // Timings are measurements; everything else is the same record.
  EXPECT_EQ(got->device, want->device);
  EXPECT_EQ(got->trials, want->trials);
  EXPECT_EQ(got->flags, want->flags);
  EXPECT_EQ(got->settings, want->settings);
  for (const auto& st : workers.status) EXPECT_TRUE(st.ok()) << st.to_string();
}

}  // namespace
}  // namespace vinci
