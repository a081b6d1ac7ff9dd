// The tiny language model's trainer and server logic (docs/lm.md; the trainer protocol
// "vinci.trainer/1"): a base model made from a seed, and the states updates derive from it, each
// stored in a folder under its content digest and served by name.
//
// A state is the model's parameters and Adam state (lm/model.h's to_bytes). Its digest is 64 hex
// digits: vinci's hash (XXH3-128) of the bytes under the kinds "lm_state" and "lm_state.2", one
// after the other. It is stored as STORE/<digest>, written atomically (a reader, or a restarted
// trainer, sees a whole state or none), and served as "<base>-<first 16 hex of the digest>"; the
// base model is stored too, and is also served under the base name itself.
//
// An update applies to the parent state its request names, read from the store, never to
// whatever was served last: the trainer keeps no state between requests but the store, so the
// same parent and request give the same digest, also after a restart.
//
// Every method is thread-safe: model work runs one request at a time (libtorch on one thread).
// Errors: InvalidArgument naming the field for a request it cannot read (HTTP 400), NotFound for
// an unknown model or adapter (404), anything else for a failure (500).
#ifndef VINCI_LM_SERVICE_H_
#define VINCI_LM_SERVICE_H_

#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "lm/model.h"

namespace vinci {
namespace lm {

struct ServiceOptions {
  std::string base_name = "vinci-tiny";
  std::string store;  // folder of states; made when missing
  Shape shape;
  uint64_t seed = 0;  // of the base model's parameters
  size_t cache = 4;   // states kept in memory besides the base
  // Where the models live and compute: "cpu", "cuda" or "cuda:N" (lm/model.h's prepare_device).
  // States and digests do not depend on it.
  std::string device = "cpu";
  int32_t train_batch = 1;  // sequences per forward/backward pass of an update (UpdateOptions::pass)
  // Faults for the next updates, in order, for testing a run's handling of them: "nonfinite"
  // (the update is computed, then its loss is taken as NaN: answered as a failed update), "stall"
  // (computed, then never stored or answered: a trainer to kill in the middle of an update) or "ok".
  std::vector<std::string> update_faults;
};

struct ChatReply {
  std::string content;  // valid UTF-8 (a byte sampled out of place becomes U+FFFD)
  std::string finish_reason;
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;  // <|end|> included when it stopped the reply
};

// The 64-hex digest of a state's bytes.
std::string state_digest(std::string_view bytes);

class Service {
 public:
  // Makes the base model and stores it when the store does not hold it yet.
  static Result<std::unique_ptr<Service>> open(const ServiceOptions& options);

  const std::string& base_name() const { return options_.base_name; }
  const std::string& base_digest() const { return base_digest_; }
  const Shape& shape() const { return base_->shape(); }
  const std::string& device() const { return base_->device(); }
  int64_t parameters() const { return base_->parameters(); }
  // "<base>-<first 16 hex of digest>".
  std::string model_name(const std::string& digest) const;

  // POST /v1/chat/completions: the reply of the model the request names ("model"; absent: the
  // base). Honours temperature (0: greedy), top_p, max_tokens and seed; draws come from a stream
  // keyed by the digest of the request's canonical JSON, so one request gets one reply.
  Result<ChatReply> chat(const nlohmann::json& request);
  // POST /v1/vinci/update, /v1/vinci/load, /v1/vinci/logprob: the reply bodies of the protocol.
  Result<nlohmann::json> update(const nlohmann::json& body);
  Result<nlohmann::json> load(const nlohmann::json& body);
  Result<nlohmann::json> logprob(const nlohmann::json& body);
  // GET /v1/models's entries: the base name, then every stored state's name, each with its
  // max_model_len (the context).
  nlohmann::json models() const;

  // What the model did so far: tokens generated and trained on (a training pass over a sample
  // counts its prompt and reply tokens once per epoch), with the seconds spent.
  struct Throughput {
    int64_t generated_tokens = 0;
    double generation_seconds = 0;
    int64_t trained_tokens = 0;
    double training_seconds = 0;
  };
  Throughput throughput() const;

 private:
  explicit Service(ServiceOptions options) : options_(std::move(options)) {}
  // The digest a model name stands for; NotFound for a name this trainer does not serve.
  Result<std::string> resolve(const std::string& name) const;
  // The state of a digest, from memory or the store; NotFound when the store does not hold it.
  Result<std::shared_ptr<const Model>> get(const std::string& digest);
  Status put(const std::string& digest, const std::string& bytes, std::shared_ptr<const Model> model);
  std::string path_of(const std::string& digest) const { return options_.store + "/" + digest; }

  ServiceOptions options_;
  std::shared_ptr<const Model> base_;
  std::string base_digest_;
  mutable std::mutex mu_;  // guards the cache, and serializes model work
  std::map<std::string, std::shared_ptr<const Model>> cache_;
  std::list<std::string> recent_;  // most recent first
  Throughput throughput_;          // guarded by mu_
  size_t next_fault_ = 0;          // of options_.update_faults; guarded by mu_
};

}  // namespace lm
}  // namespace vinci

#endif  // VINCI_LM_SERVICE_H_
