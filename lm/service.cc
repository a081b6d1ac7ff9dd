#include "lm/service.h"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <thread>
#include <vector>

#include "core/atomic_file.h"
#include "core/hash.h"
#include "core/rng.h"
#include "lm/tokenizer.h"

namespace vinci {
namespace lm {

using nlohmann::json;

namespace {

constexpr const char* kProtocol = "vinci.trainer/1";

bool is_hex(std::string_view s, size_t n) {
  if (s.size() != n) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

std::string found(const json& j) { return std::string(j.type_name()); }

// Typed reads of optional fields: absent -> the default; wrong type or range -> InvalidArgument
// naming the field ("options.lr: expected a finite number > 0, found -1").
Result<double> number_field(const json& obj, const std::string& key, const std::string& where, double def, double lo,
                            double hi, bool lo_open) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return def;
  const std::string what =
      "expected a number in " + std::string(lo_open ? "(" : "[") + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  if (!it->is_number()) return invalid_argument(where + key + ": " + what + ", found " + found(*it));
  const double v = it->get<double>();
  if (!std::isfinite(v) || v < lo || (lo_open && v == lo) || v > hi) {
    return invalid_argument(where + key + ": " + what + ", found " + it->dump());
  }
  return v;
}

Result<int64_t> int_field(const json& obj, const std::string& key, const std::string& where, int64_t def, int64_t lo,
                          int64_t hi) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return def;
  const std::string what = "expected an integer in " + std::to_string(lo) + ".." + std::to_string(hi);
  if (!it->is_number_integer()) return invalid_argument(where + key + ": " + what + ", found " + it->dump());
  const int64_t v = it->is_number_unsigned() && it->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)
                        ? INT64_MAX
                        : it->get<int64_t>();
  if (v < lo || v > hi) return invalid_argument(where + key + ": " + what + ", found " + it->dump());
  return v;
}

Result<std::string> string_field(const json& obj, const std::string& key, bool required) {
  auto it = obj.find(key);
  if (it == obj.end()) {
    if (required) return invalid_argument(key + ": expected a string, found nothing");
    return std::string();
  }
  if (!it->is_string()) return invalid_argument(key + ": expected a string, found " + found(*it));
  return it->get<std::string>();
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

std::string state_digest(std::string_view bytes) {
  return hash_tagged("lm_state", bytes).hex() + hash_tagged("lm_state.2", bytes).hex();
}

Result<std::unique_ptr<Service>> Service::open(const ServiceOptions& options) {
  if (options.store.empty()) return invalid_argument("--store: expected a folder, found nothing");
  if (options.base_name.empty() || options.base_name.find('/') != std::string::npos) {
    return invalid_argument("--model: expected a name without '/', found '" + options.base_name + "'");
  }
  if (options.train_batch < 1) {
    return invalid_argument("--train-batch: expected an integer >= 1, found " + std::to_string(options.train_batch));
  }
  VINCI_ASSIGN_OR_RETURN(std::string device, prepare_device(options.device));
  std::unique_ptr<Service> s(new Service(options));
  s->options_.device = device;
  VINCI_RETURN_IF_ERROR(make_dirs(options.store));
  VINCI_ASSIGN_OR_RETURN(std::unique_ptr<Model> base, Model::init(options.shape, options.seed, device));
  std::string bytes = base->to_bytes();
  s->base_digest_ = state_digest(bytes);
  s->base_ = std::shared_ptr<const Model>(std::move(base));
  VINCI_RETURN_IF_ERROR(s->put(s->base_digest_, bytes, nullptr));
  return s;
}

std::string Service::model_name(const std::string& digest) const {
  return options_.base_name + "-" + digest.substr(0, 16);
}

Status Service::put(const std::string& digest, const std::string& bytes, std::shared_ptr<const Model> model) {
  const std::string path = path_of(digest);
  // Content-addressed: a file under this name already holds these bytes.
  if (::access(path.c_str(), F_OK) != 0) VINCI_RETURN_IF_ERROR(write_file_atomic(path, bytes));
  if (model != nullptr && digest != base_digest_) {
    cache_[digest] = std::move(model);
    recent_.remove(digest);
    recent_.push_front(digest);
    while (recent_.size() > options_.cache) {
      cache_.erase(recent_.back());
      recent_.pop_back();
    }
  }
  return Status();
}

Result<std::string> Service::resolve(const std::string& name) const {
  if (name == options_.base_name) return base_digest_;
  const std::string prefix = options_.base_name + "-";
  auto unknown = [&] {
    return not_found("unknown model '" + name + "': this trainer serves '" + options_.base_name + "' and its states '" +
                     prefix + "<16 hex>' (GET /v1/models lists them)");
  };
  if (name.size() != prefix.size() + 16 || name.compare(0, prefix.size(), prefix) != 0) return unknown();
  const std::string hex = name.substr(prefix.size());
  if (!is_hex(hex, 16)) return unknown();
  if (base_digest_.compare(0, 16, hex) == 0) return base_digest_;
  for (const auto& [digest, model] : cache_) {
    if (digest.compare(0, 16, hex) == 0) return digest;
  }
  DIR* dir = ::opendir(options_.store.c_str());
  if (dir == nullptr) return io_error("cannot read the store " + options_.store);
  std::string match;
  while (dirent* e = ::readdir(dir)) {
    std::string file = e->d_name;
    if (is_hex(file, 64) && file.compare(0, 16, hex) == 0) {
      match = file;
      break;
    }
  }
  ::closedir(dir);
  if (match.empty()) return unknown();
  return match;
}

Result<std::shared_ptr<const Model>> Service::get(const std::string& digest) {
  if (digest == base_digest_) return base_;
  if (auto it = cache_.find(digest); it != cache_.end()) {
    recent_.remove(digest);
    recent_.push_front(digest);
    return it->second;
  }
  const std::string path = path_of(digest);
  if (::access(path.c_str(), F_OK) != 0) {
    return not_found("unknown adapter " + digest + ": the store " + options_.store + " does not hold it");
  }
  VINCI_ASSIGN_OR_RETURN(std::string bytes, read_file(path));
  if (state_digest(bytes) != digest) {
    return corruption("the store's state " + path + " does not match its name: its digest is " + state_digest(bytes));
  }
  VINCI_ASSIGN_OR_RETURN(std::unique_ptr<Model> m, Model::from_bytes(bytes, options_.device));
  if (!(m->shape() == base_->shape())) {
    return failed_precondition("the store's state " + digest + " has " + m->shape().text() + "; this trainer serves " +
                               base_->shape().text());
  }
  std::shared_ptr<const Model> model(std::move(m));
  VINCI_RETURN_IF_ERROR(put(digest, bytes, model));
  return model;
}

json Service::models() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> names;
  if (DIR* dir = ::opendir(options_.store.c_str())) {
    while (dirent* e = ::readdir(dir)) {
      std::string file = e->d_name;
      if (is_hex(file, 64)) names.push_back(model_name(file));
    }
    ::closedir(dir);
  }
  std::sort(names.begin(), names.end());
  names.insert(names.begin(), options_.base_name);
  json out = json::array();
  for (const auto& n : names) out.push_back({{"id", n}, {"max_model_len", base_->shape().context}});
  return out;
}

Result<ChatReply> Service::chat(const json& request) {
  VINCI_ASSIGN_OR_RETURN(std::string name, string_field(request, "model", false));
  if (name.empty()) name = options_.base_name;
  SampleOptions so;
  VINCI_ASSIGN_OR_RETURN(so.temperature, number_field(request, "temperature", "", 1.0, 0, 100, false));
  VINCI_ASSIGN_OR_RETURN(so.top_p, number_field(request, "top_p", "", 1.0, 0, 1, true));
  VINCI_ASSIGN_OR_RETURN(int64_t max_tokens, int_field(request, "max_tokens", "", 0, 1, INT32_MAX));
  if (request.contains("max_completion_tokens") && !request.contains("max_tokens")) {
    VINCI_ASSIGN_OR_RETURN(max_tokens, int_field(request, "max_completion_tokens", "", 0, 1, INT32_MAX));
  }
  so.max_tokens = static_cast<int32_t>(max_tokens);
  VINCI_ASSIGN_OR_RETURN(int64_t seed, int_field(request, "seed", "", 0, INT64_MIN, INT64_MAX));
  VINCI_ASSIGN_OR_RETURN(int64_t n, int_field(request, "n", "", 1, 1, 1));
  (void)n;
  if (request.contains("stream") && request["stream"] != json(false)) {
    return invalid_argument("stream: expected false (this server answers whole replies), found " +
                            request["stream"].dump());
  }
  VINCI_ASSIGN_OR_RETURN(std::vector<int32_t> prompt, encode_prompt(request));
  const std::string canonical = request.dump(-1, ' ', false, json::error_handler_t::replace);
  const RngKey key =
      RngKey::root(static_cast<uint64_t>(seed)).with("lm_sample", hash_tagged("llm_request", canonical).hex());
  std::lock_guard<std::mutex> lock(mu_);
  VINCI_ASSIGN_OR_RETURN(std::string digest, resolve(name));
  VINCI_ASSIGN_OR_RETURN(std::shared_ptr<const Model> model, get(digest));
  const auto began = std::chrono::steady_clock::now();
  VINCI_ASSIGN_OR_RETURN(Generation g, model->generate(std::move(prompt), so, key));
  throughput_.generated_tokens += static_cast<int64_t>(g.tokens.size());
  throughput_.generation_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
  ChatReply r;
  r.content = to_valid_utf8(decode(g.tokens));
  r.finish_reason = g.finish_reason;
  r.prompt_tokens = g.prompt_tokens;
  r.completion_tokens = static_cast<int64_t>(g.tokens.size()) + (g.finish_reason == "stop" ? 1 : 0);
  return r;
}

Result<json> Service::logprob(const json& body) {
  if (!body.is_object()) return invalid_argument("body: expected a JSON object, found " + found(body));
  VINCI_ASSIGN_OR_RETURN(std::string name, string_field(body, "model", true));
  VINCI_ASSIGN_OR_RETURN(std::string completion, string_field(body, "completion", true));
  auto request = body.find("request");
  if (request == body.end() || !request->is_object()) {
    return invalid_argument("request: expected a chat completions request object, found " +
                            (request == body.end() ? std::string("nothing") : found(*request)));
  }
  auto prompt = encode_prompt(*request);
  if (!prompt.ok()) return invalid_argument("request." + prompt.status().message());
  std::lock_guard<std::mutex> lock(mu_);
  VINCI_ASSIGN_OR_RETURN(std::string digest, resolve(name));
  VINCI_ASSIGN_OR_RETURN(std::shared_ptr<const Model> model, get(digest));
  int32_t kept = 0;
  VINCI_ASSIGN_OR_RETURN(double lp, model->logprob(std::move(prompt).value(), encode_reply(completion), &kept));
  return json{{"model", name}, {"logprob", lp}, {"tokens", kept}};
}

Result<json> Service::load(const json& body) {
  if (!body.is_object()) return invalid_argument("body: expected a JSON object, found " + found(body));
  VINCI_ASSIGN_OR_RETURN(std::string protocol, string_field(body, "protocol", true));
  if (protocol != kProtocol) {
    return invalid_argument("protocol: expected \"" + std::string(kProtocol) + "\", found \"" + protocol + "\"");
  }
  VINCI_ASSIGN_OR_RETURN(std::string adapter, string_field(body, "adapter", true));
  if (!adapter.empty() && !is_hex(adapter, 64)) {
    return invalid_argument("adapter: expected \"\" or 64 lower-case hex digits, found \"" + adapter + "\"");
  }
  std::lock_guard<std::mutex> lock(mu_);
  const std::string digest = adapter.empty() ? base_digest_ : adapter;
  VINCI_ASSIGN_OR_RETURN(std::shared_ptr<const Model> model, get(digest));
  return json{{"model", digest == base_digest_ && adapter.empty() ? options_.base_name : model_name(digest)},
              {"adapter", digest}};
}

Result<json> Service::update(const json& body) {
  const auto start = std::chrono::steady_clock::now();
  if (!body.is_object()) return invalid_argument("body: expected a JSON object, found " + found(body));
  VINCI_ASSIGN_OR_RETURN(std::string protocol, string_field(body, "protocol", true));
  if (protocol != kProtocol) {
    return invalid_argument("protocol: expected \"" + std::string(kProtocol) + "\", found \"" + protocol + "\"");
  }
  VINCI_ASSIGN_OR_RETURN(std::string kind, string_field(body, "kind", true));
  if (kind != "rl" && kind != "sft")
    return invalid_argument("kind: expected \"rl\" or \"sft\", found \"" + kind + "\"");
  const bool rl = kind == "rl";
  VINCI_ASSIGN_OR_RETURN(std::string base_model, string_field(body, "base_model", false));
  if (!base_model.empty() && base_model != options_.base_name) {
    return invalid_argument("base_model: expected \"" + options_.base_name +
                            "\" (the model this trainer serves), found \"" + base_model + "\"");
  }
  VINCI_ASSIGN_OR_RETURN(std::string parent, string_field(body, "parent", true));
  if (!parent.empty() && !is_hex(parent, 64)) {
    return invalid_argument("parent: expected \"\" or 64 lower-case hex digits, found \"" + parent + "\"");
  }
  VINCI_ASSIGN_OR_RETURN(std::string seed_hex, string_field(body, "seed", true));
  if (!is_hex(seed_hex, 16)) {
    return invalid_argument("seed: expected 16 lower-case hex digits, found \"" + seed_hex + "\"");
  }
  const uint64_t seed = std::stoull(seed_hex, nullptr, 16);
  VINCI_ASSIGN_OR_RETURN(int64_t step, int_field(body, "step", "", 0, INT64_MIN, INT64_MAX));
  UpdateOptions uo;
  json options = json::object();
  if (auto it = body.find("options"); it != body.end() && !it->is_null()) {
    if (!it->is_object()) return invalid_argument("options: expected an object, found " + found(*it));
    options = *it;
  }
  VINCI_ASSIGN_OR_RETURN(uo.lr, number_field(options, "lr", "options.", uo.lr, 0, 10, true));
  VINCI_ASSIGN_OR_RETURN(uo.clip, number_field(options, "clip", "options.", uo.clip, 0, 1e9, false));
  VINCI_ASSIGN_OR_RETURN(uo.kl, number_field(options, "kl", "options.", uo.kl, 0, 1e6, false));
  VINCI_ASSIGN_OR_RETURN(int64_t epochs, int_field(options, "epochs", "options.", 1, 1, 1000));
  VINCI_ASSIGN_OR_RETURN(int64_t batch, int_field(options, "batch", "options.", 0, 0, 1 << 20));
  uo.epochs = static_cast<int32_t>(epochs);
  uo.batch = static_cast<int32_t>(batch);
  auto samples = body.find("samples");
  if (samples == body.end() || !samples->is_array()) {
    return invalid_argument("samples: expected a list, found " +
                            (samples == body.end() ? std::string("nothing") : found(*samples)));
  }
  std::vector<Sequence> seqs;
  for (size_t i = 0; i < samples->size(); ++i) {
    const json& s = (*samples)[i];
    const std::string at = "samples[" + std::to_string(i) + "]";
    if (!s.is_object()) return invalid_argument(at + ": expected an object, found " + found(s));
    auto request = s.find("request");
    if (request == s.end() || !request->is_object()) {
      return invalid_argument(at + ".request: expected a chat completions request object, found " +
                              (request == s.end() ? std::string("nothing") : found(*request)));
    }
    auto prompt = encode_prompt(*request);
    if (!prompt.ok()) return invalid_argument(at + ".request." + prompt.status().message());
    auto completion = s.find("completion");
    if (completion == s.end() || !completion->is_string()) {
      return invalid_argument(at + ".completion: expected a string, found " +
                              (completion == s.end() ? std::string("nothing") : found(*completion)));
    }
    Sequence seq;
    seq.prompt = std::move(prompt).value();
    seq.reply = encode_reply(completion->get_ref<const std::string&>());
    if (rl) {
      auto adv = s.find("advantage");
      if (adv == s.end() || !adv->is_number() || !std::isfinite(adv->get<double>())) {
        return invalid_argument(at + ".advantage: expected a finite number, found " +
                                (adv == s.end() ? std::string("nothing") : adv->dump()));
      }
      seq.advantage = adv->get<double>();
    }
    seqs.push_back(std::move(seq));
  }
  std::lock_guard<std::mutex> lock(mu_);
  const std::string parent_digest = parent.empty() ? base_digest_ : parent;
  VINCI_ASSIGN_OR_RETURN(std::shared_ptr<const Model> parent_model, get(parent_digest));
  json reply = {{"samples", seqs.size()}};
  if (seqs.empty()) {
    // Nothing to learn from: the parent is the result, unchanged (no optimizer step).
    reply.update({{"model", model_name(parent_digest)},
                  {"adapter", parent_digest},
                  {"loss", 0.0},
                  {"tokens", {{"prompt", 0}, {"completion", 0}}},
                  {"seconds", seconds_since(start)}});
    return reply;
  }
  uo.pass = options_.train_batch;
  std::unique_ptr<Model> child = parent_model->clone();
  const RngKey order_key = RngKey::root(seed).with("lm_update", kind).with("step", step);
  const auto began = std::chrono::steady_clock::now();
  VINCI_ASSIGN_OR_RETURN(UpdateStats stats, child->update(rl, std::move(seqs), uo, order_key, base_.get()));
  throughput_.trained_tokens += (stats.prompt_tokens + stats.reply_tokens) * uo.epochs;
  throughput_.training_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
  const std::string fault = next_fault_ < options_.update_faults.size() ? options_.update_faults[next_fault_++] : "";
  if (fault == "nonfinite") stats.loss = std::numeric_limits<double>::quiet_NaN();
  if (fault == "stall") {
    // A trainer that dies in the middle of an update: computed, not stored, never answered.
    std::fprintf(stderr, "harness lm: update %s step %lld stalled before storing its state (--faults stall)\n",
                 kind.c_str(), static_cast<long long>(step));
    std::fflush(stderr);
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  if (!std::isfinite(stats.loss)) {
    // A failed update (docs/training.md): the parent stays the model, nothing is stored.
    reply.update({{"model", model_name(parent_digest)},
                  {"adapter", parent_digest},
                  {"parent", parent_digest},
                  {"loss", nullptr},
                  {"failure", "the update's loss is not finite; the parent state is unchanged and nothing was stored"},
                  {"tokens", {{"prompt", stats.prompt_tokens}, {"completion", stats.reply_tokens}}},
                  {"seconds", seconds_since(start)}});
    return reply;
  }
  std::string bytes = child->to_bytes();
  const std::string digest = state_digest(bytes);
  VINCI_RETURN_IF_ERROR(put(digest, bytes, std::shared_ptr<const Model>(std::move(child))));
  reply.update({{"model", model_name(digest)},
                {"adapter", digest},
                {"parent", parent_digest},
                {"loss", stats.loss},
                {"steps", stats.steps},
                {"grad_norm", stats.grad_norm},
                {"tokens", {{"prompt", stats.prompt_tokens}, {"completion", stats.reply_tokens}}}});
  if (!rl) reply.update({{"loss_before", stats.loss_before}, {"loss_after", stats.loss_after}});
  reply["seconds"] = seconds_since(start);
  return reply;
}

Service::Throughput Service::throughput() const {
  std::lock_guard<std::mutex> lock(mu_);
  return throughput_;
}

}  // namespace lm
}  // namespace vinci
