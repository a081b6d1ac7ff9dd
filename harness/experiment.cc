#include "harness/experiment.h"

#include <algorithm>
#include <sstream>

#include "gpu/eval_result.h"
#include "queue/queue_url.h"

namespace vinci {
namespace {

ConfigSchema build_schema() {
  using T = ConfigType;
  ConfigSchema s;
  auto S = [](const char* v) { return ConfigValue(std::string(v)); };
  auto I = [](int64_t v) { return ConfigValue(v); };
  auto F = [](double v) { return ConfigValue(v); };
  auto B = [](bool v) { return ConfigValue(v); };
  // A key recorded in a run's config only when it is not at its default, so that configs recorded
  // before the key existed read back unchanged.
  auto add_when_set = [&s](ConfigKey key) {
    key.omit_when_default = true;
    s.add(std::move(key));
  };
  // A table, one key per entry: kept as written.
  // clang-format off
  // [run]
  s.add({"run.name", T::kString, S("run"), "Run name: the run is written to <out>/<name>/ (one folder: not empty, \".\", \"..\" or\n"
         "\"objects\", no '/').", {}});
  s.add({"run.seed", T::kInt, I(1), "Experiment seed: every random draw is keyed by it.", {}, 0, 9.2e18});
  s.add({"run.threads", T::kInt, I(1),
         "Worker threads for a step's tasks. Results do not depend on it (keyed randomness,\n"
         "records written in task order).", {}, 1, 64});
  s.add({"run.world", T::kString, S("sim"), "Which world: sim (simulated device and backbone).", {"sim"}});
  s.add({"run.out", T::kString, S("runs"), "Runs root: runs and their shared object store live here (not empty).", {}});
  // [tasks]
  s.add({"tasks.dir", T::kString, S(""), "Task suite folder; empty: data/tasks of this source tree.", {}});
  s.add({"tasks.size", T::kString, S("small"),
         "Task sizes: small (CPU-friendly shapes) or full (KernelBench v0.1 shapes). The sim\n"
         "device models the H200 at either.", {"small", "full"}});
  s.add({"tasks.levels", T::kIntList, ConfigValue(std::vector<int64_t>{1, 2, 3}), "KernelBench levels used.", {}, 1, 3});
  s.add({"tasks.eval_share", T::kFloat, F(0.25),
         "Share of each level's tasks held out for evaluation (picked by a keyed hash of the id). A\n"
         "selection that leaves no training task (with loop.steps > 0) is refused before the run's\n"
         "folder is made.", {}, 0, 1});
  s.add({"tasks.split_seed", T::kInt, I(0), "Seed of the train/eval split (independent of run.seed).", {}, 0, 9.2e18});
  s.add({"tasks.max_per_level", T::kInt, I(0), "Use at most this many tasks per level, the first by id (0: all).", {}, 0, 1e6});
  s.add({"tasks.sample_per_level", T::kInt, I(0),
         "Use this many tasks per level, picked by a keyed hash of the id with tasks.split_seed (0: all);\n"
         "a sample that stays put as the suite grows only where it is drawn from the same tasks.", {}, 0, 1e6});
  s.add({"tasks.set", T::kString, S("all"),
         "Which tasks: all, kernelbench (KernelBench problems, flagged ones included) or unflagged\n"
         "(KernelBench problems neither flagged by KernelBench nor degenerate).",
         kTaskSets.choices()});
  s.add({"tasks.ids", T::kStringList, ConfigValue(std::vector<std::string>{}),
         "Exactly these task ids (of the levels listed); empty: every task the keys above select.", {}});
  // [loop]
  s.add({"loop.steps", T::kInt, I(20), "Training steps.", {}, 0, 1e6});
  s.add({"loop.batch_tasks", T::kInt, I(16), "Training tasks per step (paper: 16).", {}, 1, 1e4});
  s.add({"loop.schemes", T::kInt, I(3), "k: selection samples per task, each a skill scheme (paper: 3).", {}, 0, 16});
  s.add({"loop.null_scheme", T::kBool, B(true), "Add the null scheme (no skills) to every task.", {}});
  s.add({"loop.rollouts", T::kInt, I(4), "n: policy rollouts per scheme (paper: 4).", {}, 1, 64});
  s.add({"loop.turns", T::kInt, I(3), "T: turns per rollout (paper: 3).", {}, 1, 64});
  s.add({"loop.gamma", T::kFloat, F(1.0), "Discount of turn returns (TRLOO: 1).", {}, 0, 1});
  s.add({"loop.normalize_advantages", T::kBool, B(false), "Divide policy advantages by the group's mean |A|.", {}});
  // [reward]
  s.add({"reward.base", T::kFloat, F(0.5), "Reward for a compiled, correct, non-decoy turn.", {}});
  s.add({"reward.speedup_weight", T::kFloat, F(0.5), "Weight of min(speedup, cap).", {}});
  s.add({"reward.speedup_cap", T::kFloat, F(6.0), "Speedups past this earn nothing more.", {}, 0, 1e9});
  s.add({"reward.coverage_weight", T::kFloat, F(0.5), "Weight of the time coverage of the candidate's own kernels.", {}});
  s.add({"reward.rejection_sampling", T::kBool, B(true),
         "Profiling-based rejection: keep a correct turn in the policy loss with probability\n"
         "clamp((coverage - 0.3) / 0.1, 0, 1), drawn from the keyed generator.", {}});
  // [selection]
  s.add({"selection.mode", T::kString, S("rerank"),
         "rerank: BM25 top-k then the backbone picks <= max_skills; bm25: BM25's top max_skills\n"
         "(no rerank, nothing trained); none: no skills are ever injected.", {"rerank", "bm25", "none"}});
  s.add({"selection.recall_top", T::kInt, I(20), "BM25 candidates shown to the reranker (paper: 20).", {}, 1, 1000});
  s.add({"selection.max_skills", T::kInt, I(3), "Skills per scheme, at most (paper: 3).", {}, 0, 20});
  s.add({"selection.advantage_scale", T::kFloat, F(0.3), "Scale of the selection advantages (paper: 0.3).", {}});
  s.add({"selection.bm25_k1", T::kFloat, F(1.5), "BM25 k1 (rank_bm25 BM25Okapi default).", {}, 0, 100});
  s.add({"selection.bm25_b", T::kFloat, F(0.75), "BM25 b.", {}, 0, 1});
  s.add({"selection.bm25_epsilon", T::kFloat, F(0.25), "BM25 epsilon for negative idf.", {}, 0, 100});
  // [policy]
  {
    add_when_set({"policy.languages", T::kStringList, ConfigValue(std::vector<std::string>{"cuda"}),
                        "Kernel languages the policy may write (cuda, triton): the policy prompt describes these, and\n"
                        "a reply in another is rejected. triton needs Triton where kernels are compiled (device.kind =\n"
                        "\"cuda\"); the sim world prices no Triton. Recorded only when not [\"cuda\"].",
                        {"cuda", "triton"}});
    add_when_set({"policy.format", T::kString, S("plan"),
                  "openai: what the policy writes. plan: kernels (docs/plan_format.md, the model-facing format);\n"
                  "knobs: the code generator's knob settings as `knob = value` lines in a ```knobs block\n"
                  "(docs/training.md), for small models that cannot write kernels byte for byte;\n"
                  "kernelbench: a KernelBench module defining ModelNew, prompted as KernelBench prompts\n"
                  "(docs/kernelbench_format.md; policy.languages names its one backend, cuda or triton).",
                  kPolicyFormats.choices()});
  }
  // [summary]
  s.add({"summary.enabled", T::kBool, B(true), "Summarize triggering rollouts into new skills.", {}});
  s.add({"summary.samples", T::kInt, I(8), "s: summary samples per triggering task (paper: 8).", {}, 1, 64});
  s.add({"summary.trigger_ratio", T::kFloat, F(1.2), "Trigger: best-turn speedup >= ratio x turn-1 speedup.", {}, 0, 100});
  s.add({"summary.trigger_min", T::kFloat, F(1.2), "Trigger: best-turn speedup >= this.", {}, 0, 100});
  s.add({"summary.advantage_scale", T::kFloat, F(0.5), "Scale of the summary advantages (paper: 0.5).", {}});
  // [verification]
  s.add({"verification.runs", T::kInt, I(1),
         "Verification re-runs of the skill-injected turn-1 generation; the speedup must hold in\n"
         "every one (the original: 1).", {}, 1, 100});
  s.add({"verification.min_speedup", T::kFloat, F(1.2), "Accept only at this speedup or more.", {}, 0, 100});
  s.add({"verification.min_ratio", T::kFloat, F(1.2), "... and at this multiple of the winning rollout's turn-1 speedup.", {}, 0, 100});
  // [backbone]
  s.add({"backbone.kind", T::kString, S("sim"),
         "The shared backbone: sim (a small libtorch network choosing the code generator's knobs)\n"
         "or openai (a language model behind an OpenAI-compatible chat completions endpoint:\n"
         "vLLM, SGLang, a hosted API, or `harness serve`).",
         kBackboneKinds.choices()});
  s.add({"backbone.hidden", T::kInt, I(64), "Width of the shared trunk.", {}, 4, 4096});
  s.add({"backbone.lr", T::kFloat, F(1e-3), "Adam learning rate.", {}, 0, 1});
  s.add({"backbone.train_selection", T::kBool, B(true), "Train the selection head (joint training).", {}});
  s.add({"backbone.train_policy", T::kBool, B(true), "Train the policy head.", {}});
  s.add({"backbone.train_summary", T::kBool, B(true), "Train the summary head (joint training).", {}});
  s.add({"backbone.checkpoints", T::kBool, B(true),
         "Store the backbone's parameters (and optimizer state) after every update as a\n"
         "content-addressed checkpoint object named by the step's parameterDigest record, and the\n"
         "starting parameters in a checkpoint record, so another run can start from any step.\n"
         "Runs recorded before this key existed replay with false.", {}});
  s.add({"backbone.init_run", T::kString, S(""),
         "Start from a checkpoint of another run (its folder; relative paths resolve against the\n"
         "current folder, then run.out). The checkpoint's digest is checked against that run's\n"
         "records and recorded in this run's checkpoint record. A run that replay calls damaged (a\n"
         "cut log, a corrupt frame, a log that is not its manifest's) is refused. Empty: fresh\n"
         "parameters.", {}});
  s.add({"backbone.init_step", T::kInt, I(-1),
         "With init_run: the parameters that run had at the start of this step (0: after its\n"
         "initialisation or cold start; -1: its last checkpoint, for a finished run only).", {}, -1, 1e6});
  s.add({"backbone.base_url", T::kString, S("http://127.0.0.1:8000/v1"),
         "openai: the server's API root (requests go to BASE_URL/chat/completions).", {}});
  s.add({"backbone.model", T::kString, S(""), "openai: the model name the server serves (required).", {}});
  s.add({"backbone.api_key_env", T::kString, S(""),
         "openai: the name of the environment variable that holds the API key (sent as a bearer\n"
         "token). The key itself is never recorded or printed. Empty: no key.", {}});
  s.add({"backbone.temperature", T::kFloat, F(1.0),
         "openai: sampling temperature of sampled calls; greedy calls (evaluation, verification)\n"
         "send 0.", {}, 0, 10});
  s.add({"backbone.top_p", T::kFloat, F(1.0), "openai: nucleus sampling; sent only when below 1.", {}, 0, 1});
  s.add({"backbone.max_tokens", T::kInt, I(0), "openai: reply token limit; 0 sends none (the server's).", {}, 0, 1e7});
  {
    // Recorded only when set, so configs recorded before these keys read back unchanged.
    add_when_set({"backbone.context_length", T::kInt, I(0),
                  "openai: the model's context length in tokens. 0: the server's (GET /models, max_model_len,\n"
                  "as vLLM and SGLang state it), written here when the run starts; unknown leaves it 0. With\n"
                  "max_tokens 0 it sets each request's limit: min(max_tokens_cap, context_length - the\n"
                  "prompt's estimated tokens - 32), and trims the oldest policy turns of a history that\n"
                  "would leave a reply less than min(1024, context_length / 4) (docs/llm.md).",
                  {}, 0, 1e9});
    add_when_set({"backbone.max_tokens_cap", T::kInt, I(8192),
                  "openai: the most tokens a request's computed limit asks for (with max_tokens 0 and a\n"
                  "known context length).",
                  {}, 1, 1e9});
    add_when_set({"backbone.bytes_per_token", T::kFloat, F(2.0),
                  "openai: the prompt-token estimate of the computed limit: UTF-8 bytes / this, plus 8 per\n"
                  "message. 2 is safe for BPE tokenizers (about 3-4 bytes a token for English and code);\n"
                  "lower it for a tokenizer that splits finer.",
                  {}, 0.1, 64});
  }
  s.add({"backbone.seed", T::kBool, B(true),
         "openai: send a per-call seed derived from the run's seed and the call's key (vLLM and\n"
         "SGLang honour it); false for servers that reject the field.", {}});
  s.add({"backbone.tools", T::kBool, B(false),
         "openai: offer select_skills and update_skill_library as structured tools (tool_choice\n"
         "auto; vLLM needs --enable-auto-tool-choice --tool-call-parser). The prompts ask for the\n"
         "calls as text either way, and both forms are parsed.", {}});
  s.add({"backbone.timeout_s", T::kFloat, F(600), "openai: limit of one HTTP attempt, seconds.", {}, 0.001, 86400});
  s.add({"backbone.deadline_s", T::kFloat, F(1800), "openai: limit of one call with its retries, seconds.", {}, 0.001, 864000});
  s.add({"backbone.retries", T::kInt, I(4),
         "openai: retries of a failed attempt (connection errors, timeouts, 429, 5xx, a malformed\n"
         "body), with exponential backoff and keyed jitter; Retry-After is honoured. A call that\n"
         "still fails, or that the server refuses (400, 401, 403, 404), stops the run and records\n"
         "nothing of it: `harness run --resume` continues once the server or setup is fixed.", {}, 0, 100});
  s.add({"backbone.concurrency", T::kInt, I(8),
         "openai: requests in flight at most (the loop works on this many tasks at once; a vLLM\n"
         "server batches them). Records keep their order whatever it is.", {}, 1, 1024});
  s.add({"backbone.prompts", T::kString, S("prompts"),
         "openai: the folder of prompt templates (prompts/README.md). A run records their text.", {}});
  // [trainer]: recorded only when set, so configs recorded before them read back unchanged.
  {
    add_when_set({"trainer.kind", T::kString, S("none"),
                  "openai: who trains the model. none: nobody (a run evaluates the model; `replay export` writes\n"
                  "the advantages); http: after every step the step's calls and advantages are sent to\n"
                  "trainer.url, and the next step asks for the model it names (docs/training.md).",
                  kTrainerKinds.choices()});
    add_when_set({"trainer.url", T::kString, S("http://127.0.0.1:8000/v1"),
                  "trainer.kind = \"http\": the trainer's base URL (POST {url}/vinci/update).", {}});
    add_when_set({"trainer.api_key_env", T::kString, S(""),
                  "trainer.kind = \"http\": the environment variable holding the trainer's key (sent as a\n"
                  "Bearer token; never recorded); empty: none.", {}});
    add_when_set({"trainer.timeout_s", T::kFloat, F(3600), "trainer.kind = \"http\": limit of one update, seconds.",
                  {}, 0.001, 864000});
    add_when_set({"trainer.lr", T::kFloat, F(1e-3), "The trainer's learning rate for RL updates (passed as options.lr).",
                  {}, 0, 1});
    add_when_set({"trainer.clip", T::kFloat, F(1.0), "Gradient-norm clipping of an update (options.clip; 0: none).",
                  {}, 0, 1e6});
    add_when_set({"trainer.kl", T::kFloat, F(0.0), "Weight of the KL term to the base model (options.kl).", {}, 0, 1e3});
    add_when_set({"trainer.epochs", T::kInt, I(1), "Passes over a step's samples in an RL update (options.epochs).",
                  {}, 1, 1000});
    add_when_set({"trainer.sft_epochs", T::kInt, I(3),
                  "coldstart.enabled with a trainer: passes over the cold start's examples (options.epochs of the\n"
                  "sft update).", {}, 1, 10000});
    add_when_set({"trainer.sft_lr", T::kFloat, F(3e-3), "The cold start update's learning rate.", {}, 0, 1});
    add_when_set({"trainer.batch", T::kInt, I(16), "Samples per optimizer step (options.batch).", {}, 1, 1e6});
  }
  // [sim]: recorded only when set, so configs recorded before these keys read back unchanged.
  {
    add_when_set({"sim.knowledge", T::kString, S("open"),
                        "backbone.kind = \"sim\": open (the policy may choose every knob setting) or skills (the\n"
                        "techniques tensor_cores, warp_level_rows, vectorized_access, epilogue_fusion and fast_math\n"
                        "are locked in a turn unless an injected skill teaches them, an earlier turn of the\n"
                        "conversation used them, or the turn discovers them; docs/sim_model.md, \"Skills as\n"
                        "knowledge\").",
                        {"open", "skills"}});
    add_when_set({"sim.discovery", T::kFloat, F(0.05),
                        "sim.knowledge = \"skills\": probability that a turn discovers a locked technique it does\n"
                        "not know (per turn and technique, keyed).",
                        {}, 0, 1});
  }
  // [device]
  s.add({"device.kind", T::kString, S("sim"),
         "The evaluator: sim (the analytic H200 model) or cuda (this machine's GPU; candidates run in a worker "
         "process, docs/live_evaluator.md).",
         kDeviceKinds.choices()});
  s.add({"device.profile", T::kString, S(""), "Device profile file; empty: data/device_profiles/h200.toml.", {}});
  s.add({"device.noise", T::kFloat, F(0.0), "Relative spread of simulated timing noise (0: exact).", {}, 0, 1});
  s.add({"device.timing_samples", T::kInt, I(10), "Timing samples per candidate.", {}, 1, 10000});
  add_when_set({"device.timing", T::kString, S("fixed"),
                "fixed: device.timing_samples of each of candidate and reference; adaptive: in steps of 10 from 20\n"
                "until the speedup's 99% interval is within device.timing_width of it, device.timing_samples the\n"
                "cap (docs/live_evaluator.md, \"Adaptive timing\"). The rule and the samples used are recorded in\n"
                "every measurement's settings.",
                {"fixed", "adaptive"}});
  add_when_set({"device.timing_width", T::kFloat, F(0.01),
                "device.timing = \"adaptive\": the speedup's interval width relative to it at which sampling stops.",
                {}, 0, 1});
  s.add({"device.trials", T::kInt, I(5), "Correctness trials per candidate.", {}, 1, 100});
  s.add({"device.reference_precision", T::kString, S("kernelbench"),
         "cuda: the reference's precision policy: kernelbench (PyTorch's defaults, as KernelBench times its\n"
         "baseline: cuDNN convolutions may use TF32, matrix products stay FP32) or fp32 (TF32 off everywhere).\n"
         "Recorded in every measurement's settings.",
         {"kernelbench", "fp32"}});
  s.add({"device.max_kernel_source_bytes", T::kInt, I(262144),
         "Largest source of one kernel of a candidate, bytes; a plan over a limit is rejected uncompiled\n"
         "(flag \"rejected: over_limit\"). Limits not at their default are recorded in measurement settings.",
         {}, 1, 1e12});
  s.add({"device.max_plan_source_bytes", T::kInt, I(2097152), "Largest source of all of a candidate's kernels together, bytes.",
         {}, 1, 1e12});
  s.add({"device.max_kernels", T::kInt, I(1024), "Most kernels in a candidate plan.", {}, 1, 1e6});
  s.add({"device.max_steps", T::kInt, I(4096), "Most steps (launches and library ops) in a candidate plan.", {}, 1, 1e6});
  s.add({"device.queue", T::kString, S(""),
         "Evaluate through a queue of workers (`harness worker`, docs/distributed.md): redis://HOST:PORT or\n"
         "redis://HOST:PORT/NAME; empty: in this process. Where, not what: records do not depend on it.\n"
         "A password comes from the environment (VINCI_REDIS_PASSWORD), never from here.", {}});
  s.add({"device.queue_attempts", T::kInt, I(3),
         "queue: deliveries of one request before it is recorded as a failed evaluation (with every\n"
         "worker's reason); a worker killed mid-evaluation counts as one.", {}, 1, 100});
  // [eval]
  s.add({"eval.every", T::kInt, I(5), "Evaluate on the held-out tasks every this many steps (and after the last).", {}, 1, 1e6});
  s.add({"eval.greedy", T::kBool, B(true), "Greedy decoding at evaluation (false: sampled).", {}});
  s.add({"eval.inject_skills", T::kBool, B(true), "Inject selected skills at evaluation (abl1 turns this off).", {}});
  s.add({"eval.turns", T::kInt, I(3), "Turns per evaluation rollout.", {}, 1, 64});
  s.add({"eval.thresholds", T::kFloatList, ConfigValue(std::vector<double>{1.0, 1.2, 1.5, 2.0}),
         "fast_p thresholds.", {}, 0, 1e6});
  s.add({"eval.fast_p_inclusive", T::kBool, B(false),
         "Count speedup >= p in this run's own fast_p reports (summary.md, metrics.csv, the plots,\n"
         "the final tables and progress lines) instead of KernelBench's speedup > p. Reports only:\n"
         "what the run records is the same either way (the log's fast_p metric records always count\n"
         "speedup >= p), and `replay score`/`diff`/`rescore` choose their own comparison\n"
         "(--fast-p-inclusive).", {}});
  // [library]
  s.add({"library.seed", T::kString, S(""), "A daVinci-format skill library to start from (JSONL); empty: none.", {}});
  // [coldstart]
  s.add({"coldstart.enabled", T::kBool, B(false),
         "Run the cold start stage before step 0 (Step 1 in docs/method.md): collect\n"
         "trajectories with an evaluator-guided knob search, distil the high-speedup ones into\n"
         "skills, filter for diversity, and fit the backbone on selection/policy/summary\n"
         "examples. `harness coldstart CONFIG` runs only this stage (and the step-0 evaluation).", {}});
  s.add({"coldstart.trajectories", T::kInt, I(2), "Behaviour-policy trajectories per training task.", {}, 1, 64});
  s.add({"coldstart.turns", T::kInt, I(6),
         "Turns per trajectory: turn 0 is the default setting (trajectory 0) or a keyed random one;\n"
         "each later turn changes one keyed-random knob of the best setting so far.", {}, 1, 256});
  s.add({"coldstart.min_speedup", T::kFloat, F(1.5),
         "Keep trajectories whose best correct speedup reaches this (paper: 1.5).", {}, 0, 1e6});
  s.add({"coldstart.ablation_margin", T::kFloat, F(0.05),
         "The summary teacher keeps a knob of the best setting in the skill when reverting it to\n"
         "its default loses more than this share of the speedup.", {}, 0, 1});
  s.add({"coldstart.diversity", T::kBool, B(true),
         "Apply the diversity filter to distilled skills and SFT data (near-duplicate removal and\n"
         "caps per op family and knob pattern; docs/loop.md, cold start).", {}});
  s.add({"coldstart.similarity", T::kFloat, F(0.8),
         "Near-duplicate threshold: Jaccard similarity of two skills' BM25 token sets.", {}, 0, 1});
  s.add({"coldstart.max_per_family", T::kInt, I(3), "Distilled skills per op family, at most.", {}, 1, 1e6});
  s.add({"coldstart.max_per_pattern", T::kInt, I(1),
         "Distilled skills per knob pattern (the set of knob = value pairs), at most.", {}, 1, 1e6});
  s.add({"coldstart.max_examples_per_pattern", T::kInt, I(2),
         "Trajectories per (op family, best setting) that contribute SFT examples, at most.", {}, 1, 1e6});
  s.add({"coldstart.epochs", T::kInt, I(60), "Full-batch supervised steps on the SFT examples.", {}, 0, 1e6});
  s.add({"coldstart.lr", T::kFloat, F(3e-3), "Adam learning rate of the supervised steps.", {}, 0, 1});
  // [tts]
  s.add({"tts.enabled", T::kBool, B(false),
         "After the final evaluation, evaluate the held-out tasks with sequential test-time\n"
         "scaling: iterations x turns, each iteration continuing from the last turn of the best\n"
         "window of `window` consecutive turns by reward (paper: 10 x 5, window 4).", {}});
  s.add({"tts.turns", T::kInt, I(5), "T: turns per iteration.", {}, 1, 256});
  s.add({"tts.iterations", T::kInt, I(10), "I: iterations.", {}, 1, 256});
  s.add({"tts.window", T::kInt, I(4), "W: the window of consecutive turns kept by reward.", {}, 1, 256});
  s.add({"tts.greedy", T::kBool, B(false), "Greedy decoding (false: sampled with keyed draws).", {}});
  // clang-format on
  return s;
}

// [run] and [tasks].
Status read_run_and_tasks(const Config& c, Experiment* e) {
  e->name = c.get_string("run.name");
  e->seed = static_cast<uint64_t>(c.get_int("run.seed"));
  e->threads = static_cast<int32_t>(c.get_int("run.threads"));
  e->world = c.get_string("run.world");
  e->out_root = c.get_string("run.out");
  e->task_dir = c.get_string("tasks.dir");
  // The schema allows "small" and "full" only; anything else was refused when the config was read.
  VINCI_ASSIGN_OR_RETURN(e->size, parse_size_name(c.get_string("tasks.size")));
  e->levels = c.get_int_list("tasks.levels");
  e->eval_share = c.get_float("tasks.eval_share");
  e->split_seed = static_cast<uint64_t>(c.get_int("tasks.split_seed"));
  e->max_tasks_per_level = c.get_int("tasks.max_per_level");
  e->sample_per_level = c.get_int("tasks.sample_per_level");
  // The schema allows only the tables' names; anything else was refused when the config was read.
  VINCI_ASSIGN_OR_RETURN(e->task_set, kTaskSets.parse(c.get_string("tasks.set")));
  e->task_ids = c.get_string_list("tasks.ids");
  return Status();
}

// [loop], [reward], the selection's mode and sizes, [policy] and [trainer].
Status read_loop_and_policy(const Config& c, const std::string& path, Experiment* e) {
  e->steps = static_cast<int32_t>(c.get_int("loop.steps"));
  e->batch_tasks = static_cast<int32_t>(c.get_int("loop.batch_tasks"));
  e->schemes = static_cast<int32_t>(c.get_int("loop.schemes"));
  e->null_scheme = c.get_bool("loop.null_scheme");
  e->rollouts = static_cast<int32_t>(c.get_int("loop.rollouts"));
  e->turns = static_cast<int32_t>(c.get_int("loop.turns"));
  e->gamma = c.get_float("loop.gamma");
  e->normalize_advantages = c.get_bool("loop.normalize_advantages");
  e->reward.base = c.get_float("reward.base");
  e->reward.speedup_weight = c.get_float("reward.speedup_weight");
  e->reward.speedup_cap = c.get_float("reward.speedup_cap");
  e->reward.coverage_weight = c.get_float("reward.coverage_weight");
  e->rejection_sampling = c.get_bool("reward.rejection_sampling");
  VINCI_ASSIGN_OR_RETURN(e->selection.mode, parse_selection_mode(c.get_string("selection.mode")));
  e->selection.recall_top = static_cast<size_t>(c.get_int("selection.recall_top"));
  e->selection.max_skills = static_cast<int32_t>(c.get_int("selection.max_skills"));
  e->languages = c.get_string_list("policy.languages");
  VINCI_ASSIGN_OR_RETURN(e->policy_format, kPolicyFormats.parse(c.get_string("policy.format")));
  VINCI_ASSIGN_OR_RETURN(e->trainer.kind, kTrainerKinds.parse(c.get_string("trainer.kind")));
  e->trainer.url = c.get_string("trainer.url");
  e->trainer.api_key_env = c.get_string("trainer.api_key_env");
  e->trainer.timeout_s = c.get_float("trainer.timeout_s");
  e->trainer.lr = c.get_float("trainer.lr");
  e->trainer.clip = c.get_float("trainer.clip");
  e->trainer.kl = c.get_float("trainer.kl");
  e->trainer.epochs = static_cast<int32_t>(c.get_int("trainer.epochs"));
  e->trainer.sft_epochs = static_cast<int32_t>(c.get_int("trainer.sft_epochs"));
  e->trainer.sft_lr = c.get_float("trainer.sft_lr");
  e->trainer.batch = static_cast<int32_t>(c.get_int("trainer.batch"));
  if (e->languages.empty())
    return invalid_argument(path + ": key 'policy.languages': expected at least one of cuda, triton");
  for (const auto& l : e->languages)
    if (l != "cuda" && l != "triton")
      return invalid_argument(path + ": key 'policy.languages': expected cuda or triton, found '" + l + "'");
  return Status();
}

// The selection's scoring, [summary], [verification], the backbone's kind and network, and [sim].
Status read_agents_and_network(const Config& c, Experiment* e) {
  e->selection_scale = c.get_float("selection.advantage_scale");
  e->bm25_k1 = c.get_float("selection.bm25_k1");
  e->bm25_b = c.get_float("selection.bm25_b");
  e->bm25_epsilon = c.get_float("selection.bm25_epsilon");
  e->summary_enabled = c.get_bool("summary.enabled");
  e->summary_samples = static_cast<int32_t>(c.get_int("summary.samples"));
  e->trigger.ratio = c.get_float("summary.trigger_ratio");
  e->trigger.min_best = c.get_float("summary.trigger_min");
  e->summary_scale = c.get_float("summary.advantage_scale");
  e->verification.runs = static_cast<int32_t>(c.get_int("verification.runs"));
  e->verification.min_speedup = c.get_float("verification.min_speedup");
  e->verification.min_ratio = c.get_float("verification.min_ratio");
  VINCI_ASSIGN_OR_RETURN(e->backbone, kBackboneKinds.parse(c.get_string("backbone.kind")));
  e->hidden = static_cast<int32_t>(c.get_int("backbone.hidden"));
  e->lr = c.get_float("backbone.lr");
  e->train_selection = c.get_bool("backbone.train_selection");
  e->train_policy = c.get_bool("backbone.train_policy");
  e->train_summary = c.get_bool("backbone.train_summary");
  VINCI_ASSIGN_OR_RETURN(e->sim.knowledge, parse_sim_knowledge(c.get_string("sim.knowledge")));
  e->sim.discovery = c.get_float("sim.discovery");
  return Status();
}

// [device], [eval], the seed library and whether the backbone is checkpointed.
Status read_device_and_eval(const Config& c, Experiment* e) {
  VINCI_ASSIGN_OR_RETURN(e->device, kDeviceKinds.parse(c.get_string("device.kind")));
  e->device_profile = c.get_string("device.profile");
  VINCI_ASSIGN_OR_RETURN(e->reference_precision,
                         kReferencePrecisions.parse(c.get_string("device.reference_precision")));
  e->noise = c.get_float("device.noise");
  e->queue = c.get_string("device.queue");
  e->queue_attempts = static_cast<int32_t>(c.get_int("device.queue_attempts"));
  e->limits.max_kernel_source_bytes = c.get_int("device.max_kernel_source_bytes");
  e->limits.max_plan_source_bytes = c.get_int("device.max_plan_source_bytes");
  e->limits.max_kernels = c.get_int("device.max_kernels");
  e->limits.max_steps = c.get_int("device.max_steps");
  e->timing_samples = static_cast<int32_t>(c.get_int("device.timing_samples"));
  e->timing_adaptive = c.get_string("device.timing") == "adaptive";
  e->timing_width = c.get_float("device.timing_width");
  e->trials = static_cast<int32_t>(c.get_int("device.trials"));
  e->eval_every = static_cast<int32_t>(c.get_int("eval.every"));
  e->eval_greedy = c.get_bool("eval.greedy");
  e->eval_inject_skills = c.get_bool("eval.inject_skills");
  e->eval_turns = static_cast<int32_t>(c.get_int("eval.turns"));
  e->thresholds = c.get_float_list("eval.thresholds");
  e->fast_p_compare = c.get_bool("eval.fast_p_inclusive") ? FastPCompare::kInclusive : FastPCompare::kStrict;
  e->seed_library = c.get_string("library.seed");
  e->checkpoints = c.get_bool("backbone.checkpoints");
  return Status();
}

// The model server of backbone.kind = "openai", and the run a backbone starts from.
void read_model_server(const Config& c, Experiment* e) {
  auto& llm = e->llm;
  llm.base_url = c.get_string("backbone.base_url");
  llm.model = c.get_string("backbone.model");
  llm.api_key_env = c.get_string("backbone.api_key_env");
  llm.temperature = c.get_float("backbone.temperature");
  llm.top_p = c.get_float("backbone.top_p");
  llm.max_tokens = c.get_int("backbone.max_tokens");
  llm.context_length = c.get_int("backbone.context_length");
  llm.max_tokens_cap = c.get_int("backbone.max_tokens_cap");
  llm.bytes_per_token = c.get_float("backbone.bytes_per_token");
  llm.seed = c.get_bool("backbone.seed");
  llm.tools = c.get_bool("backbone.tools");
  llm.timeout_s = c.get_float("backbone.timeout_s");
  llm.deadline_s = c.get_float("backbone.deadline_s");
  llm.retries = static_cast<int32_t>(c.get_int("backbone.retries"));
  llm.concurrency = static_cast<int32_t>(c.get_int("backbone.concurrency"));
  llm.prompts = c.get_string("backbone.prompts");
  e->init_run = c.get_string("backbone.init_run");
  e->init_step = static_cast<int32_t>(c.get_int("backbone.init_step"));
}

// [coldstart] and [tts].
void read_coldstart_and_tts(const Config& c, Experiment* e) {
  auto& cs = e->coldstart;
  cs.enabled = c.get_bool("coldstart.enabled");
  cs.trajectories = static_cast<int32_t>(c.get_int("coldstart.trajectories"));
  cs.turns = static_cast<int32_t>(c.get_int("coldstart.turns"));
  cs.min_speedup = c.get_float("coldstart.min_speedup");
  cs.ablation_margin = c.get_float("coldstart.ablation_margin");
  cs.diversity = c.get_bool("coldstart.diversity");
  cs.similarity = c.get_float("coldstart.similarity");
  cs.max_per_family = static_cast<int32_t>(c.get_int("coldstart.max_per_family"));
  cs.max_per_pattern = static_cast<int32_t>(c.get_int("coldstart.max_per_pattern"));
  cs.max_examples_per_pattern = static_cast<int32_t>(c.get_int("coldstart.max_examples_per_pattern"));
  cs.epochs = static_cast<int32_t>(c.get_int("coldstart.epochs"));
  cs.lr = c.get_float("coldstart.lr");
  e->tts.enabled = c.get_bool("tts.enabled");
  e->tts.turns = static_cast<int32_t>(c.get_int("tts.turns"));
  e->tts.iterations = static_cast<int32_t>(c.get_int("tts.iterations"));
  e->tts.window = static_cast<int32_t>(c.get_int("tts.window"));
  e->tts.greedy = c.get_bool("tts.greedy");
}

// Settings that contradict each other.
Status check_combinations(const Experiment& e, const std::string& path) {
  const auto& cs = e.coldstart;
  if (cs.enabled && cs.lr <= 0) {
    return invalid_argument(path + ": key 'coldstart.lr': expected a value > 0, found " + std::to_string(cs.lr));
  }
  if (e.tts.enabled && e.tts.window > e.tts.turns * e.tts.iterations) {
    return invalid_argument(path + ": key 'tts.window': expected at most tts.turns x tts.iterations = " +
                            std::to_string(e.tts.turns * e.tts.iterations) + ", found " + std::to_string(e.tts.window));
  }
  if (e.sim.knowledge != SimKnowledge::kOpen && e.backbone != BackboneKind::kSim) {
    return invalid_argument(path + ": key 'sim.knowledge' = \"" + sim_knowledge_name(e.sim.knowledge) +
                            "\": expected \"open\" with backbone.kind = \"" + kBackboneKinds.name(e.backbone) +
                            "\" (locked techniques model what the sim backbone does not know; a language model knows "
                            "what it knows)");
  }
  if (e.backbone != BackboneKind::kOpenai &&
      (e.trainer.kind != TrainerKind::kNone || e.policy_format != PolicyFormat::kPlan)) {
    return invalid_argument(path + ": key '" +
                            (e.trainer.kind != TrainerKind::kNone ? "trainer.kind" : "policy.format") +
                            "': expected the default with backbone.kind = \"" + kBackboneKinds.name(e.backbone) +
                            "\" (it is about a language model; the sim network trains in this process)");
  }
  return Status();
}

// backbone.kind = "openai": what a language model behind a server needs, and what it changes.
Status check_openai_backbone(const std::string& path, Experiment* e) {
  const auto& llm = e->llm;
  const auto& cs = e->coldstart;
  if (llm.model.empty()) {
    return invalid_argument(path +
                            ": key 'backbone.model': expected the model name the server serves "
                            "(backbone.kind = \"openai\"), found none");
  }
  // A language model's parameters live in its trainer, not in this process: the cold start's
  // supervised examples need one to go to.
  if (e->policy_format == PolicyFormat::kKernelbench) {
    if (e->languages.size() != 1) {
      return invalid_argument(path +
                              ": key 'policy.languages': with policy.format = \"kernelbench\" a module is written "
                              "for one backend: expected [\"cuda\"] or [\"triton\"], found " +
                              std::to_string(e->languages.size()) + " languages");
    }
    if (cs.enabled) {
      return invalid_argument(path +
                              ": key 'coldstart.enabled': the cold start's examples are generator plans, which "
                              "have no KernelBench module form yet: expected false with policy.format = "
                              "\"kernelbench\"");
    }
  }
  if (cs.enabled && e->trainer.kind == TrainerKind::kNone) {
    return invalid_argument(path +
                            ": key 'coldstart.enabled': with backbone.kind = \"openai\" the cold start's "
                            "examples train the model through its trainer; expected false, or trainer.kind = "
                            "\"http\"");
  }
  if (!e->init_run.empty()) {
    return invalid_argument(path +
                            ": key 'backbone.init_run': expected empty with backbone.kind = "
                            "\"openai\" (the model's weights are the server's)");
  }
  e->checkpoints = false;
  // Requests in flight come from tasks worked on at once (a task's turns are sequential).
  e->threads = std::max(e->threads, llm.concurrency);
  return Status();
}

Result<Experiment> from_config(const Config& c, const std::string& path) {
  Experiment e;
  e.config_path = path;
  e.effective_toml = c.effective_toml();
  VINCI_RETURN_IF_ERROR(read_run_and_tasks(c, &e));
  VINCI_RETURN_IF_ERROR(read_loop_and_policy(c, path, &e));
  VINCI_RETURN_IF_ERROR(read_agents_and_network(c, &e));
  VINCI_RETURN_IF_ERROR(read_device_and_eval(c, &e));
  read_model_server(c, &e);
  read_coldstart_and_tts(c, &e);
  VINCI_RETURN_IF_ERROR(check_combinations(e, path));
  if (e.backbone == BackboneKind::kOpenai) VINCI_RETURN_IF_ERROR(check_openai_backbone(path, &e));
  if (!e.queue.empty()) {
    // Checked here, before a run folder exists; the message shows the URL without its password.
    Result<QueueUrl> url = parse_queue_url(e.queue);
    if (!url.ok()) return invalid_argument(path + ": key 'device.queue': " + url.status().message());
  }
  VINCI_RETURN_IF_ERROR(check_runs_root(e.out_root, path + ": key 'run.out'"));
  VINCI_RETURN_IF_ERROR(check_run_name(e.name, path + ": key 'run.name'"));
  if (e.levels.empty()) return invalid_argument(path + ": key 'tasks.levels' must name at least one level");
  if (e.thresholds.empty()) return invalid_argument(path + ": key 'eval.thresholds' must not be empty");
  return e;
}

}  // namespace

void set_timing(const Experiment& e, EvalRequest* request) {
  request->adaptive = e.timing_adaptive;
  request->adaptive_rule.rel_width = e.timing_width;
  request->adaptive_rule.max_samples = request->samples;
}

Status check_runs_root(const std::string& out, const std::string& what) {
  if (out.empty()) {
    return invalid_argument(what + ": expected a folder (the runs root), found an empty string");
  }
  return Status();
}

Status check_run_name(const std::string& name, const std::string& what) {
  // A run is written to <out>/<name>/ and the runs' objects to <out>/objects/: the name must be one
  // new folder inside the runs root.
  if (name.empty() || name == "." || name == ".." || name == "objects" || name.find('/') != std::string::npos ||
      name.find('\0') != std::string::npos) {
    return invalid_argument(what +
                            ": expected a folder name inside the runs root (not empty, \".\", "
                            "\"..\" or \"objects\", no '/'), found \"" +
                            name + "\"");
  }
  return Status();
}

const std::vector<std::string>& non_factor_keys() {
  static const std::vector<std::string> keys = {"run.name",
                                                "run.seed",
                                                "run.out",
                                                "run.threads",
                                                "eval.fast_p_inclusive",
                                                "device.queue",
                                                "device.queue_attempts"};
  return keys;
}

bool is_non_factor_key(std::string_view path) {
  const auto& keys = non_factor_keys();
  return std::find(keys.begin(), keys.end(), path) != keys.end();
}

std::map<std::string, std::string> effective_settings(const std::string& effective_toml) {
  std::map<std::string, std::string> out;
  std::string section, line;
  std::istringstream in(effective_toml);
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    if (line[0] == '[') {
      section = line.substr(1, line.find(']') - 1);
      continue;
    }
    auto eq = line.find(" = ");
    if (eq != std::string::npos) out[section + "." + line.substr(0, eq)] = line.substr(eq + 3);
  }
  return out;
}

const ConfigSchema& experiment_schema() {
  static const ConfigSchema schema = build_schema();
  return schema;
}

Result<Experiment> load_experiment(const std::string& path, const std::vector<std::string>& overrides) {
  VINCI_ASSIGN_OR_RETURN(Config c, Config::load(experiment_schema(), path, overrides));
  return from_config(c, path);
}

Result<Experiment> experiment_from_text(const std::string& text, const std::string& source,
                                        const std::vector<std::string>& overrides) {
  VINCI_ASSIGN_OR_RETURN(Config c, Config::parse(experiment_schema(), text, source, overrides));
  VINCI_ASSIGN_OR_RETURN(Experiment e, from_config(c, source));
  // Recorded configs hold every key of the schema they were recorded with. Runs recorded before
  // per-step checkpoints existed did not store them: they replay without.
  if (text.find("\ncheckpoints = ") == std::string::npos && text.rfind("checkpoints = ", 0) != 0) {
    e.checkpoints = false;
  }
  return e;
}

}  // namespace vinci
