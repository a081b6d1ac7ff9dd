// The tiny language model: a decoder-only transformer and its Adam state (docs/lm.md).
//
// Learned positional embeddings, pre-LayerNorm blocks (causal multi-head attention, a GELU MLP of
// 4 x d_model), a final LayerNorm, and the output projection tied to the token embedding.
// Parameters are drawn from vinci's keyed RNG (core/rng.h), one stream per parameter name, so the
// base model's bytes and digest are the same on every machine. Every torch call runs on one
// intra-op thread and nothing draws from torch's generators: on the CPU a model's outputs and
// updates are pure functions of its state and the request.
//
// A model lives on one device ("cpu" or "cuda:N"): its parameters, Adam state and all compute.
// Parameters are always drawn on the CPU and then moved, sampling always runs on the host, and
// to_bytes/from_bytes always go through the CPU, so states and digests do not depend on the
// device (docs/lm.md says what is and is not bit-exact on a GPU).
//
// This header is torch-free; the torch side lives in model.cc.
#ifndef VINCI_LM_MODEL_H_
#define VINCI_LM_MODEL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/rng.h"
#include "core/status.h"

namespace vinci {
namespace lm {

struct Shape {
  int32_t layers = 2;
  int32_t d_model = 128;
  int32_t heads = 4;
  int32_t context = 512;  // positions; prompt and reply together
  int32_t vocab = 0;      // set by the model (the tokenizer's)

  bool operator==(const Shape& o) const {
    return layers == o.layers && d_model == o.d_model && heads == o.heads && context == o.context && vocab == o.vocab;
  }
  std::string text() const;  // "layers 2, d_model 128, heads 4, context 512"
};
// The device a spec names, ready for use: "cpu", or "cuda:N" for "cuda" (N = 0) and "cuda:N".
// InvalidArgument for another spec; FailedPrecondition when this libtorch has no CUDA ("this
// vinci's libtorch has no CUDA ...") or no such GPU. For CUDA it also makes the GPU's training as
// deterministic as libtorch allows (docs/lm.md, "Devices"); call it before the first model.
Result<std::string> prepare_device(const std::string& spec);

// InvalidArgument naming the flag for a shape out of range (layers 1..64, d_model 8..4096 and a
// multiple of heads, heads 1..64, context 8..65536).
Status check_shape(const Shape& shape);

// One training sequence: prompt tokens, reply tokens (the reply ends with <|end|>) and the weight
// of its reply's log-probability (the advantage; 1 for SFT).
struct Sequence {
  std::vector<int32_t> prompt;
  std::vector<int32_t> reply;
  double advantage = 1;
};

// Cuts a (prompt, reply) pair to the context: the prompt is promised min(prompt, context / 2)
// positions, the reply gets the rest up to its own length (`reply_budget` tokens), and the prompt
// fills what remains, cut on the left (its end, with the task and the question, is kept).
// Returns the reply's kept length and cuts `prompt` in place.
int32_t fit_to_context(int32_t context, std::vector<int32_t>* prompt, int32_t reply_budget);

struct SampleOptions {
  double temperature = 1;  // 0: greedy
  double top_p = 1;
  int32_t max_tokens = 0;  // 0: up to the context's end
};

struct Generation {
  std::vector<int32_t> tokens;  // without the final <|end|>
  std::string finish_reason;    // "stop" (<|end|>) or "length"
  int32_t prompt_tokens = 0;    // after truncation
};

struct UpdateOptions {
  double lr = 1e-3;
  double clip = 1.0;  // global gradient-norm clip; 0: none
  double kl = 0;      // weight of the k3 KL estimate to the base model (rl)
  int32_t epochs = 1;
  int32_t batch = 0;  // sequences per optimizer step; 0: all of them (rl), 8 (sft)
  // Sequences per forward/backward pass (padded, masked); 1: one at a time. Changes only the
  // floating-point summation order, never the loss's definition.
  int32_t pass = 1;
};

struct UpdateStats {
  double loss = 0;                              // mean over the optimizer steps of the last epoch
  double loss_before = 0;                       // sft: mean reply cross-entropy before the update
  double loss_after = 0;                        // sft: the same after
  int64_t prompt_tokens = 0, reply_tokens = 0;  // read, per epoch
  int32_t steps = 0;
  double grad_norm = 0;  // of the last step, before clipping
};

class Model {
 public:
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  // The base model: parameters from the keyed RNG under `seed` (drawn on the CPU), Adam state
  // zero, on `device` (as prepare_device returned it).
  static Result<std::unique_ptr<Model>> init(const Shape& shape, uint64_t seed, const std::string& device = "cpu");
  // A state written by to_bytes (on any device), on `device`; Corruption naming what is wrong for
  // anything else.
  static Result<std::unique_ptr<Model>> from_bytes(std::string_view bytes, const std::string& device = "cpu");
  // Parameters and Adam state in a fixed layout (docs/lm.md): what a digest covers. Copied to the
  // CPU first, so the bytes do not depend on the device.
  std::string to_bytes() const;
  // The same state on the same device.
  std::unique_ptr<Model> clone() const;

  const Shape& shape() const { return shape_; }
  const std::string& device() const { return device_; }
  int64_t parameters() const;

  // Samples a reply to the prompt with a KV cache; draws come from the keyed stream `key` (one
  // uniform per sampled token). The prompt is cut as fit_to_context says.
  Result<Generation> generate(std::vector<int32_t> prompt, const SampleOptions& options, const RngKey& key) const;
  // Sum of log pi(reply token) after the prompt (cut as fit_to_context says), in double; *kept
  // gets the number of reply tokens scored.
  Result<double> logprob(std::vector<int32_t> prompt, const std::vector<int32_t>& reply, int32_t* kept) const;

  // kind "rl": loss = -(1/N) sum_i A_i sum_t log pi(y_it) + kl * (1/N) sum_i sum_t k3_it over each
  // minibatch (N its reply tokens, after fit_to_context), k3 = exp(r - l) - (r - l) - 1 with r the base's log-prob.
  // kind "sft": loss = (1/N) sum_i sum_t -log pi(y_it). options.pass sequences go through each
  // forward/backward pass (the same loss; only the summation order differs). Minibatches follow one
  // permutation of the sequences per epoch, drawn from `order_key`. `base` may be null when
  // options.kl is 0.
  Result<UpdateStats> update(bool rl, std::vector<Sequence> seqs, const UpdateOptions& options, const RngKey& order_key,
                             const Model* base);

 private:
  struct Net;
  Model();
  Shape shape_;
  std::string device_ = "cpu";
  std::unique_ptr<Net> net_;
};

}  // namespace lm
}  // namespace vinci

#endif  // VINCI_LM_MODEL_H_
