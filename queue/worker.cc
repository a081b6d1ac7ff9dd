#include "queue/worker.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/scratch_dir.h"
#include "core/text.h"
#include "gpu/live/cuda_evaluator.h"
#include "gpu/sim/device_profile.h"
#include "gpu/sim/sim_evaluator.h"
#include "queue/protocol.h"
#include "queue/queue_evaluator.h"
#include "queue/redis.h"

namespace vinci {
namespace {

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
void sleep_s(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }

// The evaluators a worker keeps, by their settings, and the objects it has fetched.
class Evaluators {
 public:
  using Call = std::function<Result<RedisReply>(const std::vector<std::string>&)>;
  // call: a command on the worker's connection, reconnecting while the server is away.
  Evaluators(const WorkerOptions& o, Call call, const QueueKeys& keys)
      : options_(o), call_(std::move(call)), keys_(keys) {}
  ~Evaluators() { cudas_.clear(); }

  // The evaluation's result, or why it could not be done.
  Result<EvalResult> evaluate(const QueueRequest& q, const std::string& plan_bytes) {
    VINCI_ASSIGN_OR_RETURN(std::string file_text, object(q.task_file, "task file"));
    if (task_file_address(file_text) != q.task_file)
      return corruption("the task file object " + q.task_file.hex() + " does not match its address");
    VINCI_ASSIGN_OR_RETURN(const Task* task, find_task(q, file_text));
    if (hash_tagged("plan", plan_bytes) != q.plan)
      return corruption("the plan in the request does not match its address " + q.plan.hex() + "");
    VINCI_ASSIGN_OR_RETURN(Plan plan, parse_plan(plan_bytes));
    std::string profile_text;
    if (q.profile != Digest()) {
      VINCI_ASSIGN_OR_RETURN(profile_text, object(q.profile, "device profile"));
      if (hash_tagged("device_profile", profile_text) != q.profile)
        return corruption("the device profile object " + q.profile.hex() + " does not match its address");
    }
    if (q.spec.kind == "sim") return evaluate_sim(q, *task, plan, profile_text);
    return evaluate_cuda(q, *task, plan, profile_text, file_text);
  }

  // True when the GPU cannot be used any more (a fresh evaluator does not start).
  bool gpu_lost(std::string* why) {
    if (options_.device != "cuda") return false;
    CudaEvaluator probe(cuda_options(CudaEvaluatorOptions()));
    Status st = probe.start();
    if (st.ok()) return false;
    *why = st.message();
    return true;
  }

 private:
  // Task files and profiles: every request of a run names the same few.
  Result<std::string> object(const Digest& d, const char* what) {
    auto it = objects_.find(d);
    if (it != objects_.end()) return it->second;
    VINCI_ASSIGN_OR_RETURN(RedisReply r, call_({"GET", keys_.object(d)}));
    if (r.is_nil())
      return not_found(std::string("the ") + what + " object " + d.hex() +
                       " is not on the queue (expired, or the server lost it)");
    objects_[d] = r.str;
    return r.str;
  }

  Result<const Task*> find_task(const QueueRequest& q, const std::string& text) {
    auto it = tasks_.find(q.task_file);
    if (it == tasks_.end()) {
      VINCI_ASSIGN_OR_RETURN(std::vector<Task> parsed, parse_task_file(q.task_path, text));
      it = tasks_.emplace(q.task_file, std::move(parsed)).first;
    }
    for (const Task& t : it->second)
      if (t.id == q.task_id) return &t;
    return not_found("task '" + q.task_id + "' is not in its task file object " + q.task_file.hex() + " (" +
                     q.task_path + ")");
  }

  Result<EvalResult> evaluate_sim(const QueueRequest& q, const Task& task, const Plan& plan,
                                  const std::string& profile_text) {
    Hasher h("sim_evaluator");
    h.update_digest(q.profile);
    for (const auto& [k, v] : q.spec.settings) h.update_str(k).update_str(v);
    Digest key = h.finish();
    auto it = sims_.find(key);
    if (it == sims_.end()) {
      if (profile_text.empty()) return invalid_argument("a sim request carries no device profile");
      VINCI_ASSIGN_OR_RETURN(DeviceProfile profile,
                             parse_device_profile("device profile " + q.profile.hex(), profile_text));
      SimEvaluatorOptions so;
      VINCI_ASSIGN_OR_RETURN(so.noise, spec_noise(q.spec));
      VINCI_ASSIGN_OR_RETURN(so.limits, spec_limits(q.spec));
      so.nvrtc_cache_dir = options_.nvrtc_cache_dir;
      it = sims_.emplace(key, std::make_unique<SimEvaluator>(std::move(profile), so)).first;
    }
    return it->second->evaluate(task, plan, q.request);
  }

  CudaEvaluatorOptions cuda_options(CudaEvaluatorOptions co) const {
    co.worker_path = options_.cuda_worker_path;
    co.nvrtc_cache_dir = options_.nvrtc_cache_dir;
    co.timeout_s = options_.cuda_timeout_s;
    if (co.task_dir.empty()) co.task_dir = default_task_dir();
    return co;
  }

  Result<EvalResult> evaluate_cuda(const QueueRequest& q, const Task& task, const Plan& plan,
                                   const std::string& profile_text, const std::string& file_text) {
    // The live evaluator's worker reads its tasks from a folder: the task files this worker has
    // received, one file per object.
    if (dir_.empty()) {
      // Under $TMPDIR, removed with the worker; a killed worker's is removed by the next.
      VINCI_ASSIGN_OR_RETURN(ScratchDir scratch, ScratchDir::create("vinci_queue_worker"));
      scratch_.emplace(std::move(scratch));
      dir_ = scratch_->path();
      VINCI_RETURN_IF_ERROR(make_dirs(dir_ + "/tasks"));
    }
    if (!files_.count(q.task_file)) {
      for (const Task& t : tasks_.at(q.task_file)) {
        auto [at, fresh] = task_ids_.emplace(t.id, q.task_file);
        if (!fresh && at->second != q.task_file)
          return failed_precondition("task '" + t.id + "' arrives in two different task files (" + at->second.hex() +
                                     " and " + q.task_file.hex() +
                                     "): one worker serves one task suite; restart it for another");
      }
      VINCI_RETURN_IF_ERROR(write_file_atomic(dir_ + "/tasks/" + q.task_file.hex() + ".toml", file_text));
      files_.insert(q.task_file);
      cudas_.clear();  // the live evaluator's worker reloads the suite
    }
    std::string profile_path;
    if (!profile_text.empty()) {
      profile_path = dir_ + "/profile_" + q.profile.hex() + ".toml";
      VINCI_RETURN_IF_ERROR(write_file_atomic(profile_path, profile_text));
    }
    Hasher h("cuda_evaluator");
    h.update_digest(q.profile);
    for (const auto& [k, v] : q.spec.settings) h.update_str(k).update_str(v);
    Digest key = h.finish();
    auto it = cudas_.find(key);
    if (it == cudas_.end()) {
      CudaEvaluatorOptions co;
      co.task_dir = dir_ + "/tasks";
      co.profile_path = profile_path;
      auto rp = q.spec.settings.find("reference_precision");
      if (rp != q.spec.settings.end()) {
        VINCI_ASSIGN_OR_RETURN(co.reference_precision, parse_reference_precision(rp->second));
      }
      VINCI_ASSIGN_OR_RETURN(co.limits, spec_limits(q.spec));
      VINCI_ASSIGN_OR_RETURN(co.timing_budget_s, spec_timing_budget(q.spec));
      auto c = std::make_unique<CudaEvaluator>(cuda_options(co));
      VINCI_RETURN_IF_ERROR(c->start());
      it = cudas_.emplace(key, std::move(c)).first;
    }
    return it->second->evaluate(task, plan, q.request);
  }

  const WorkerOptions& options_;
  Call call_;
  QueueKeys keys_;
  std::map<Digest, std::string> objects_;
  std::map<Digest, std::vector<Task>> tasks_;
  std::map<Digest, std::unique_ptr<SimEvaluator>> sims_;
  std::map<Digest, std::unique_ptr<CudaEvaluator>> cudas_;
  std::optional<ScratchDir> scratch_;
  std::string dir_;
  std::set<Digest> files_;
  std::map<std::string, Digest> task_ids_;
};

// Connects, retrying until the server answers or stop is set. The first failure is said once.
std::unique_ptr<Redis> connect_retrying(const QueueUrl& url, const QueueKeys& keys, const std::atomic<bool>& stop,
                                        const std::string& who) {
  bool said = false;
  double wait = 0.05;
  while (!stop) {
    Result<std::unique_ptr<Redis>> c = Redis::connect(url);
    if (c.ok()) {
      Status st = ensure_queue_group(**c, keys);
      if (st.ok()) {
        if (said) std::fprintf(stderr, "%s: connected to %s\n", who.c_str(), url.text.c_str());
        return std::move(c).value();
      }
      c = st;
    }
    if (!said) {
      std::fprintf(stderr, "%s: %s; waiting for the server\n", who.c_str(), c.status().message().c_str());
      said = true;
    }
    sleep_s(wait);
    wait = std::min(1.0, wait * 2);
  }
  return nullptr;
}

// The worker's presence: its key with a TTL (device, host, pid, busy, answered), refreshed every
// `beat` seconds on a connection of its own, and the request it is evaluating kept claimed so no
// other worker takes it. Stops and deletes the key when destroyed.
class Heartbeat {
 public:
  Heartbeat(const WorkerOptions& options, const QueueUrl& url, const QueueKeys& keys, const std::string& stream,
            double beat)
      : options_(options), url_(url), keys_(keys), stream_(stream), beat_(beat) {
    ::gethostname(host_, sizeof host_ - 1);
    thread_ = std::thread([this] { loop(); });
  }
  ~Heartbeat() {
    stop_ = true;
    thread_.join();
  }

  void set_current(const std::string& id) {
    std::lock_guard<std::mutex> lock(mu_);
    current_ = id;
  }
  void set_answered(long long n) {
    std::lock_guard<std::mutex> lock(mu_);
    answered_ = n;
  }

 private:
  void loop() {
    const long long ttl_ms = std::max<long long>(1000, static_cast<long long>(beat_ * 3000));
    std::unique_ptr<Redis> conn;
    while (!stop_) {
      if (!conn) {
        Result<std::unique_ptr<Redis>> c = Redis::connect(url_, 2, 5);
        if (c.ok()) conn = std::move(c).value();
      }
      if (conn) {
        std::string id;
        long long n;
        {
          std::lock_guard<std::mutex> lock(mu_);
          id = current_;
          n = answered_;
        }
        nlohmann::json j = {
            {"device", options_.device}, {"host", host_}, {"pid", ::getpid()}, {"busy", !id.empty()}, {"answered", n}};
        if (!options_.gpu_label.empty()) j["gpu"] = options_.gpu_label;
        Status st =
            conn->command({"SET", keys_.worker(options_.name), j.dump(), "PX", std::to_string(ttl_ms)}).status();
        if (st.ok() && !id.empty())
          st = conn->command({"XCLAIM", stream_, kQueueGroup, options_.name, "0", id, "JUSTID"}).status();
        if (!st.ok()) conn.reset();
      }
      for (double t = 0; t < beat_ && !stop_; t += 0.05) sleep_s(0.05);
    }
    if (conn) (void)conn->command({"DEL", keys_.worker(options_.name)});
  }

  const WorkerOptions& options_;
  const QueueUrl url_;
  const QueueKeys& keys_;
  const std::string stream_;
  const double beat_;
  char host_[256] = {0};
  std::mutex mu_;
  std::string current_;  // the stream id being evaluated
  long long answered_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// One request as delivered: its stream id, fields, and how many times it has been delivered.
struct Delivery {
  std::string id;
  std::map<std::string, std::string> f;
  long long deliveries = 1;
};

// The worker's loop: take a request (a stale one first, else a new one), evaluate it, answer.
class WorkerLoop {
 public:
  WorkerLoop(const WorkerOptions& options, const QueueUrl& url, const QueueKeys& keys, std::unique_ptr<Redis> redis,
             const std::atomic<bool>& stop)
      : options_(options),
        url_(url),
        keys_(keys),
        stream_(keys.requests(options.device)),
        who_("worker " + options.name),
        redis_(std::move(redis)),
        stop_(stop),
        claim_ms_(std::max(1.0, options.claim_idle_s * 1000)),
        // New requests are waited for at most this long before stale ones are looked at again.
        block_ms_(std::to_string(static_cast<long long>(std::min(1000.0, std::max(50.0, claim_ms_ / 2))))),
        heartbeat_(
            options, url, keys, stream_,
            options.heartbeat_s > 0 ? options.heartbeat_s : std::min(5.0, std::max(0.1, options.claim_idle_s / 4))),
        evaluators_(
            options, [this](const std::vector<std::string>& argv) { return call(argv); }, keys) {}

  Status run() {
    double idle_since = now_s();
    long long done = 0;
    while (!stop_) {
      if (options_.max_requests > 0 && done >= options_.max_requests) break;
      if (options_.exit_when_idle_s > 0 && now_s() - idle_since > options_.exit_when_idle_s) break;
      Delivery d;
      Result<bool> got = next_delivery(&d);
      if (!got.ok()) return stop_ ? Status() : got.status();
      if (!*got) continue;
      idle_since = now_s();
      Result<bool> answered = handle(d);
      if (!answered.ok()) return stop_ ? Status() : answered.status();
      if (*answered) heartbeat_.set_answered(++done);
    }
    return Status();
  }

 private:
  // A command on the worker's connection; a lost server is waited for.
  Result<RedisReply> call(const std::vector<std::string>& argv) {
    for (;;) {
      if (stop_) return failed_precondition("stopping");
      if (!connected()) return failed_precondition("stopping");
      Result<RedisReply> r = redis_->command(argv);
      if (!r.ok() && r.status().message().find("NOGROUP") != std::string::npos) {
        // The stream went away (a server that came back empty, a flushed database): make it again.
        Status made = ensure_queue_group(*redis_, keys_);
        if (made.ok()) continue;
        r = made;
      }
      if (r.ok() || r.status().code() != StatusCode::kIoError) return r;
      redis_.reset();
    }
  }

  // Reconnects while the server is away; false when stopping.
  bool connected() {
    if (!redis_) redis_ = connect_retrying(url_, keys_, stop_, who_);
    return redis_ != nullptr;
  }

  // 1. A request another worker took and stopped answering, else 2. a new one. Stale requests are
  // looked for every claim_idle_s / 2; between, new ones are read. false: none this time.
  Result<bool> next_delivery(Delivery* d) {
    Result<RedisReply> claimed = RedisReply();
    if (now_s() >= next_claim_) {
      claimed = call({"XAUTOCLAIM", stream_, kQueueGroup, options_.name,
                      std::to_string(static_cast<long long>(claim_ms_)), "0-0", "COUNT", "1"});
      if (!claimed.ok()) return claimed.status();
      bool found = claimed->is_array() && claimed->elements.size() >= 2 && !claimed->elements[1].elements.empty();
      if (!found) next_claim_ = now_s() + claim_ms_ / 2000;
    }
    if (claimed->is_array() && claimed->elements.size() >= 2 && !claimed->elements[1].elements.empty() &&
        stream_entry_fields(claimed->elements[1].elements[0], &d->id, &d->f)) {
      Result<RedisReply> p = call({"XPENDING", stream_, kQueueGroup, d->id, d->id, "1"});
      if (p.ok() && p->is_array() && !p->elements.empty() && p->elements[0].elements.size() == 4)
        d->deliveries = p->elements[0].elements[3].integer;
      std::fprintf(stderr, "%s: claimed request %s (delivery %lld): its worker kept it %.3g s without a heartbeat\n",
                   who_.c_str(), d->f["addr"].c_str(), d->deliveries, options_.claim_idle_s);
      return true;
    }
    Result<RedisReply> r = call(
        {"XREADGROUP", "GROUP", kQueueGroup, options_.name, "COUNT", "1", "BLOCK", block_ms_, "STREAMS", stream_, ">"});
    if (!r.ok()) return r.status();
    if (r->is_nil() || !r->is_array() || r->elements.empty()) return false;
    const RedisReply& s = r->elements[0];
    return s.is_array() && s.elements.size() == 2 && !s.elements[1].elements.empty() &&
           stream_entry_fields(s.elements[1].elements[0], &d->id, &d->f);
  }

  // The answer first, then the acknowledgement, in one round trip: a worker lost in between
  // leaves the request pending, and its second answer is taken once.
  Status answer(Delivery& d, const std::vector<std::string>& fields) {
    const std::string& reply = d.f["reply"];
    std::vector<std::string> argv = {"XADD", reply, "*", "addr", d.f["addr"]};
    argv.insert(argv.end(), fields.begin(), fields.end());
    // The reply stream expires a day after its last answer (a requester that is gone, or a late
    // duplicate answer, leaves nothing behind for good).
    std::vector<std::vector<std::string>> cmds = {argv,
                                                  {"EXPIRE", reply, "86400"},
                                                  {"INCR", keys_.done()},
                                                  {"XACK", stream_, kQueueGroup, d.id},
                                                  {"XDEL", stream_, d.id}};
    Digest address;
    if (Digest::parse_hex(d.f["addr"], &address)) cmds.push_back({"DEL", keys_.why(address)});
    for (;;) {
      if (stop_) return failed_precondition("stopping");
      if (!connected()) return failed_precondition("stopping");
      Result<std::vector<RedisReply>> r = redis_->pipeline(cmds);
      if (r.ok() || r.status().code() != StatusCode::kIoError) return r.status();
      redis_.reset();
    }
  }

  // Evaluates and answers one delivery. true: a result was answered; false: the request failed
  // or was left for another delivery. An error stops the worker.
  Result<bool> handle(Delivery& d) {
    Digest address;
    Result<QueueRequest> q = decode_queue_request(d.f["body"]);
    if (!q.ok() || !Digest::parse_hex(d.f["addr"], &address) || d.f["reply"].empty()) {
      // A request no worker can read fails at once.
      std::string why = q.ok() ? "the request has no address or reply stream" : q.status().message();
      if (!d.f["reply"].empty())
        (void)answer(d, {"failed", "worker " + options_.name + ": " + why});
      else
        (void)call({"XACK", stream_, kQueueGroup, d.id});
      return false;
    }
    if (d.deliveries > q->attempts) {
      Status st = answer(d, {"failed", given_up(d, address)});
      if (!st.ok() && !stop_) return st;
      return false;
    }
    heartbeat_.set_current(d.id);
    Result<EvalResult> r = evaluators_.evaluate(*q, d.f["plan"]);
    heartbeat_.set_current("");
    if (r.ok()) {
      VINCI_RETURN_IF_ERROR(
          answer(d, {"result", encode_queue_result(*r), "log", r->compile_log, "worker", options_.name}));
      return true;
    }
    // The evaluation could not be done here: the reason goes with the request, which stays pending
    // for another delivery (claimed after claim_idle_s).
    std::string why =
        "worker " + options_.name + " (delivery " + std::to_string(d.deliveries) + "): " + r.status().message();
    std::fprintf(stderr, "%s\n", why.c_str());
    (void)call({"RPUSH", keys_.why(address), why});
    (void)call({"EXPIRE", keys_.why(address), "604800"});
    std::string lost;
    if (evaluators_.gpu_lost(&lost)) {
      return failed_precondition(who_ + ": the GPU is lost (" + lost + "); this worker stops taking work");
    }
    return false;
  }

  // Why a request delivered more often than its attempts allow fails: the reasons recorded by the
  // deliveries that failed, and how many ended without one.
  std::string given_up(Delivery& d, const Digest& address) {
    Result<RedisReply> reasons = call({"LRANGE", keys_.why(address), "0", "-1"});
    std::string text = "the evaluation failed on " + std::to_string(d.deliveries - 1) + " deliveries:";
    long long said = 0;
    if (reasons.ok())
      for (const auto& r : reasons->elements) {
        text += " " + r.str + ";";
        ++said;
      }
    if (d.deliveries - 1 > said)
      text += " " + std::to_string(d.deliveries - 1 - said) +
              " ended without an answer (the worker was lost or stopped: killed, out of memory, a crashed "
              "machine);";
    text.pop_back();
    std::fprintf(stderr, "%s: request %s: %s\n", who_.c_str(), d.f["addr"].c_str(), text.c_str());
    return text;
  }

  const WorkerOptions& options_;
  const QueueUrl url_;
  const QueueKeys& keys_;
  const std::string stream_;
  const std::string who_;
  std::unique_ptr<Redis> redis_;
  const std::atomic<bool>& stop_;
  const double claim_ms_;
  const std::string block_ms_;
  double next_claim_ = 0;
  Heartbeat heartbeat_;
  Evaluators evaluators_;
};

}  // namespace

Status run_worker(const WorkerOptions& options, const std::atomic<bool>& stop) {
  VINCI_ASSIGN_OR_RETURN(QueueUrl url, parse_queue_url(options.url));
  if (options.device != "sim" && options.device != "cuda")
    return invalid_argument("worker: --device must be sim or cuda, found '" + options.device + "'");
  if (options.name.empty()) return invalid_argument("worker: a worker needs a name");
  QueueKeys keys(url.name);
  // The first connection must succeed: a bad URL or a server that is not there is the user's to
  // fix, said at once.
  VINCI_ASSIGN_OR_RETURN(std::unique_ptr<Redis> redis, Redis::connect(url));
  VINCI_RETURN_IF_ERROR(ensure_queue_group(*redis, keys));
  if (options.device == "cuda") {
    // A worker without a usable GPU takes no request (it would only fail them).
    Evaluators probe_only(options, nullptr, keys);
    std::string why;
    if (probe_only.gpu_lost(&why)) {
      return failed_precondition("worker " + options.name + ": the live evaluator does not start: " + why);
    }
  }
  WorkerLoop loop(options, url, keys, std::move(redis), stop);
  return loop.run();
}

}  // namespace vinci
