#include "harness/world.h"

#include <sys/stat.h>

#include <chrono>
#include <cstdlib>
#include <mutex>

#include "agents/sim_backbone.h"
#include "core/atomic_file.h"
#include "gpu/compile/nvrtc.h"
#include "gpu/live/cuda_evaluator.h"
#include "gpu/sim/device_profile.h"
#include "gpu/sim/sim_evaluator.h"
#include "harness/sim_world.h"
#include "queue/queue_evaluator.h"

namespace vinci {
namespace {

bool exists(const std::string& p) {
  struct stat sb;
  return ::stat(p.c_str(), &sb) == 0;
}

std::string resolve(const std::string& path) {
  if (path.empty() || path[0] == '/' || exists(path)) return path;
  std::string in_tree = std::string(VINCI_SOURCE_DIR) + "/" + path;
  return exists(in_tree) ? in_tree : path;
}

// SimEvaluator caches per-task contexts and is not thread-safe; the loop evaluates from several
// threads. Evaluation is a small share of a step, so one lock costs little.
class LockedEvaluator : public Evaluator {
 public:
  explicit LockedEvaluator(std::unique_ptr<Evaluator> inner) : inner_(std::move(inner)) {}
  Result<EvalResult> evaluate(const Task& task, const Plan& plan, const EvalRequest& request) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto start = std::chrono::steady_clock::now();
    auto r = inner_->evaluate(task, plan, request);
    seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return r;
  }
  std::string name() const override { return inner_->name(); }
  double seconds() const {
    std::lock_guard<std::mutex> lock(mu_);
    return seconds_;
  }

 private:
  mutable std::mutex mu_;
  std::unique_ptr<Evaluator> inner_;
  double seconds_ = 0;  // wall time inside the evaluator: reported, never used in a derived value
};

}  // namespace

void pin_numeric_settings() {
  // The portable kernels: results then do not depend on which vector units this CPU has, so a
  // run replays bit-exactly on another x86-64 machine. The sim network is tiny; speed is not lost.
  // libtorch reads the variable at its first dispatch, so this must run before any torch work.
  setenv("ATEN_CPU_CAPABILITY", "default", /*overwrite=*/0);
  pin_blas_threads();
}

Environment capture_environment() {
  Environment env = capture_base_environment();
  env.libtorch = libtorch_version();
  env.torch_threads = SimBackbone::kTorchThreads;
  env.numeric["torch_cpu_capability"] = libtorch_cpu_capability();
  env.cuda = "nvrtc " + nvrtc_version();
  return env;
}

std::vector<std::string> numeric_differences(const Environment& recorded, const Environment& here) {
  std::vector<std::string> out;
  auto a = recorded.pinned(), b = here.pinned();
  for (const auto& [k, v] : a) {
    auto it = b.find(k);
    std::string h = it == b.end() ? "(unset)" : it->second;
    if (h != v) out.push_back(k + ": recorded '" + v + "', here '" + h + "'");
  }
  // A setting the run's vinci did not record (an older version) is not a difference: nothing
  // says it differed, and verify re-derives every record anyway.
  return out;
}

Status check_numeric_settings(const Environment& recorded, const Environment& here, const std::string& run_dir,
                              const std::string& hint) {
  std::vector<std::string> diffs = numeric_differences(recorded, here);
  if (diffs.empty()) return Status();
  std::string msg = "run " + run_dir + " was recorded under other numeric settings" + hint + ":";
  for (const auto& d : diffs) msg += "\n  " + d;
  return failed_precondition(msg);
}

namespace {

Result<ChatSettings> chat_settings(const Experiment& exp) {
  ChatSettings cs;
  cs.base_url = exp.llm.base_url;
  cs.model = exp.llm.model;
  cs.timeout_s = exp.llm.timeout_s;
  cs.deadline_s = exp.llm.deadline_s;
  cs.retries = exp.llm.retries;
  if (!exp.llm.api_key_env.empty()) {
    const char* key = std::getenv(exp.llm.api_key_env.c_str());
    if (key == nullptr || *key == 0) {
      return failed_precondition("backbone.api_key_env names the environment variable " + exp.llm.api_key_env +
                                 ", which is not set");
    }
    cs.api_key = key;
  }
  Status ok = check_chat_settings(cs);
  if (!ok.ok()) return Status(ok.code(), "backbone: " + ok.message());
  return cs;
}

}  // namespace

Result<ModelServerInfo> preflight_model_server(const Experiment& exp) {
  VINCI_ASSIGN_OR_RETURN(ChatSettings cs, chat_settings(exp));
  // The preflight answers at once or not at all: a setup mistake must not wait out the retries.
  cs.retries = std::min(cs.retries, 1);
  cs.timeout_s = std::min(cs.timeout_s, 120.0);
  cs.deadline_s = std::min(cs.deadline_s, 300.0);
  const std::string where = "the model server at " + cs.base_url;
  const std::string fix = "; nothing was recorded (see docs/llm.md, \"Pointing a run at a server\")";
  int status = 0;
  Result<std::vector<ModelCard>> cards = list_model_cards(cs, &status);
  ModelServerInfo info;
  info.model = exp.llm.model;
  if (!cards.ok()) {
    std::string why = status == 0                      ? " cannot be reached"
                      : status == 401 || status == 403 ? " refused the API key (backbone.api_key_env)"
                      : status == 404 ? " has no GET /models here: is backbone.base_url its API root (.../v1)?"
                                      : " did not list its models";
    return failed_precondition(where + why + ": " + cards.status().message() + fix);
  }
  std::string served;
  const ModelCard* card = nullptr;
  for (const ModelCard& c : *cards) {
    served += (served.empty() ? "" : ", ") + c.id;
    if (c.id == exp.llm.model) card = &c;
  }
  if (card == nullptr) {
    return failed_precondition(where + " does not serve the model '" + exp.llm.model +
                               "' (backbone.model); it serves: " + (served.empty() ? "(none)" : served) + fix);
  }
  info.context_length = card->max_model_len;
  // One tiny request with the run's sampling fields: a parameter the server refuses shows here.
  ChatSampling sampling;
  sampling.temperature = 0.0;
  if (exp.llm.top_p < 1.0) sampling.top_p = exp.llm.top_p;
  sampling.max_tokens = 1;
  if (exp.llm.seed) sampling.seed = 0;
  std::string body = chat_request_body(exp.llm.model, {{"user", "Reply with OK."}}, {}, sampling).dump();
  ChatClient client(cs);
  VINCI_ASSIGN_OR_RETURN(ChatOutcome out, client.complete(body, RngKey::root(0).with("purpose", "preflight")));
  if (!out.ok) {
    Status st = failed_call_status(out, cs.base_url);
    std::string msg = st.message();
    size_t cut = msg.find("; the run stops here");
    return failed_precondition("preflight request: " + msg.substr(0, cut) + fix);
  }
  if (out.reply) info.probe_tokens = out.reply->prompt_tokens;
  return info;
}

namespace {

// The language-model side of a world: transports, templates, the model, and the parameters'
// stand-in.
Status build_llm(const Experiment& exp, ModelCalls calls, const std::string& run_dir, const std::string& call_log_path,
                 World* w) {
  PromptTemplates templates;
  if (calls == ModelCalls::kLive) {
    VINCI_ASSIGN_OR_RETURN(templates,
                           PromptTemplates::load(resolve(exp.llm.prompts), exp.languages, exp.policy_format));
  } else {
    VINCI_ASSIGN_OR_RETURN(templates, PromptTemplates::recorded(run_dir));
  }
  std::string journal_path;
  if (!call_log_path.empty()) {
    size_t slash = call_log_path.rfind('/');
    journal_path =
        (slash == std::string::npos ? std::string(".") : call_log_path.substr(0, slash)) + "/llm_journal.jsonl";
  }
  if (calls == ModelCalls::kLive || calls == ModelCalls::kRecordedThenLive) {
    VINCI_ASSIGN_OR_RETURN(ChatSettings cs, chat_settings(exp));
    w->http_transport = std::make_unique<HttpChatTransport>(cs, exp.llm.concurrency);
    if (journal_path.empty()) {
      w->fallback_transport = std::move(w->http_transport);
    } else {
      w->journal = std::make_unique<CallJournal>(journal_path);
      w->fallback_transport = std::make_unique<JournalingTransport>(*w->http_transport, *w->journal);
    }
  }
  if (calls == ModelCalls::kLive) {
    w->transport = std::move(w->fallback_transport);
  } else {
    VINCI_ASSIGN_OR_RETURN(
        w->transport,
        RecordedChatTransport::open(run_dir, w->fallback_transport.get(), calls != ModelCalls::kRecordedDecisions,
                                    calls == ModelCalls::kRecordedThenLive ? journal_path : "",
                                    calls == ModelCalls::kRecordedPrefix));
  }
  LlmSettings ls;
  ls.endpoint = exp.llm.base_url;
  ls.model = exp.llm.model;
  ls.temperature = exp.llm.temperature;
  if (exp.llm.top_p < 1.0) ls.top_p = exp.llm.top_p;
  if (exp.llm.max_tokens > 0) ls.max_tokens = exp.llm.max_tokens;
  ls.context_length = exp.llm.context_length;
  ls.max_tokens_cap = exp.llm.max_tokens_cap;
  ls.bytes_per_token = exp.llm.bytes_per_token;
  ls.send_seed = exp.llm.seed;
  ls.send_tools = exp.llm.tools;
  ls.max_skills = exp.selection.max_skills;
  ls.languages = exp.languages;
  ls.policy_format = exp.policy_format;
  w->call_log = std::make_unique<LlmCallLog>(call_log_path);
  w->model = std::make_unique<LlmAgentModel>(ls, std::move(templates), *w->transport, w->call_log.get());
  w->backbone = std::make_unique<ExternalModelParameters>(exp.llm.base_url, exp.llm.model);
  TrainerCalls tc = calls == ModelCalls::kLive                ? TrainerCalls::kLive
                    : calls == ModelCalls::kRecordedThenLive  ? TrainerCalls::kRecordedThenLive
                    : calls == ModelCalls::kRecordedPrefix    ? TrainerCalls::kRecordedPrefix
                    : calls == ModelCalls::kRecordedDecisions ? TrainerCalls::kRecordedDecisions
                                                              : TrainerCalls::kRecorded;
  VINCI_ASSIGN_OR_RETURN(w->trainer, build_trainer(exp, tc, run_dir));
  return Status();
}

}  // namespace

Result<World> build_world(const Experiment& exp, ModelCalls calls, const std::string& run_dir,
                          const std::string& call_log_path) {
  World w;
  std::string task_dir = exp.task_dir.empty() ? default_task_dir() : resolve(exp.task_dir);
  // Errors name the key that named the file (config_path: key 'K': ...).
  auto keyed = [&](const char* key, const std::string& value, const Status& st) {
    if (value.empty()) return st;
    return Status(st.code(), exp.config_path + ": key '" + key + "': " + st.message());
  };
  auto suite = load_task_suite(task_dir);
  if (!suite.ok()) return keyed("tasks.dir", exp.task_dir, suite.status());
  w.suite = std::move(suite).value();
  for (const std::string& id : exp.task_ids) {
    if (!w.suite.find(id))
      return invalid_argument(exp.config_path + ": key 'tasks.ids': no task '" + id + "' in " + task_dir);
  }
  std::string profile_path =
      exp.device_profile.empty() ? default_profile_dir() + "/h200.toml" : resolve(exp.device_profile);
  auto loaded_profile = load_device_profile(profile_path);
  if (!loaded_profile.ok()) return keyed("device.profile", exp.device_profile, loaded_profile.status());
  DeviceProfile profile = std::move(loaded_profile).value();
  if (!exp.queue.empty()) {
    // Evaluations go to the queue's workers; nothing is evaluated here. The request carries the
    // profile's text (the sim prices with the run's profile wherever the worker runs).
    auto profile_text = read_file(profile_path, kDeviceProfileFile);
    if (!profile_text.ok()) return keyed("device.profile", exp.device_profile, profile_text.status());
    QueueOptions qo;
    qo.url = exp.queue;
    qo.attempts = exp.queue_attempts;
    EvaluatorSpec spec = exp.device == DeviceKind::kCuda ? cuda_spec(*profile_text, exp.reference_precision, exp.limits)
                                                         : sim_spec(*profile_text, exp.noise, exp.limits);
    auto queue = std::make_unique<QueueEvaluator>(qo, std::move(spec));
    Status started = queue->start();
    if (!started.ok()) return Status(started.code(), exp.config_path + ": key 'device.queue': " + started.message());
    QueueEvaluator* raw = queue.get();
    w.evaluator_progress = [raw] { return raw->progress_line(); };
    w.evaluator = std::move(queue);
  }
  std::unique_ptr<Evaluator> inner;
  if (!exp.queue.empty()) {
    // built above
  } else if (exp.device == DeviceKind::kCuda) {
    CudaEvaluatorOptions co;
    co.task_dir = task_dir;
    co.profile_path = profile_path;
    co.reference_precision = exp.reference_precision;
    co.limits = exp.limits;
    auto cuda = std::make_unique<CudaEvaluator>(co);
    VINCI_RETURN_IF_ERROR(cuda->start());
    inner = std::move(cuda);
  } else {
    SimEvaluatorOptions opts;
    opts.noise = exp.noise;
    opts.limits = exp.limits;
    inner = std::make_unique<SimEvaluator>(std::move(profile), opts);
  }
  if (inner) {
    auto locked = std::make_unique<LockedEvaluator>(std::move(inner));
    LockedEvaluator* raw = locked.get();
    w.evaluator_seconds = [raw] { return raw->seconds(); };
    w.evaluator = std::move(locked);
  }
  if (!exp.seed_library.empty()) {
    auto library = SkillLibrary::load(resolve(exp.seed_library));
    if (!library.ok()) return keyed("library.seed", exp.seed_library, library.status());
    w.seed_library = std::move(library).value();
  }
  if (exp.backbone == BackboneKind::kOpenai) {
    VINCI_RETURN_IF_ERROR(build_llm(exp, calls, run_dir, call_log_path, &w));
    return w;
  }
  SimBackboneConfig bc;
  bc.shape = sim_backbone_shape();
  bc.hidden = exp.hidden;
  bc.lr = exp.lr;
  bc.init_seed = Stream(RngKey::root(exp.seed).with("purpose", "backbone-init")).next_u64();
  bc.train_selection = exp.train_selection;
  bc.train_policy = exp.train_policy;
  bc.train_summary = exp.train_summary;
  VINCI_ASSIGN_OR_RETURN(auto backbone, SimBackbone::create(bc));
  w.backbone = std::move(backbone);
  return w;
}

}  // namespace vinci
