# vinci's run log schema: the public interface for every tool that reads a run.
#
# A run is a folder:   runs/<name>/manifest.bin   one Manifest, packed, written atomically
#                      runs/<name>/log/NNNNNNNN.vlog  segment files of framed Records
# and its objects live in the store shared by every run under the same runs root:
#                      runs/objects/xx/yyyy...    (docs/log_format.md gives the grammar)
#
# Evolution rules: only add fields with new ordinals; never renumber, retype or remove one.
# A behaviour change is recorded as a new field whose default (zero, false, empty) describes what
# older recorders did, so every old run keeps replaying.
#
# Addresses are 16-byte Data fields: XXH3-128 of the object's kind tag and canonical bytes
# (core/hash.h). JSON output prints them as 32 hex digits.

@0xd0516f57fe8f606e;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("vinci::schema");
using Json = import "/capnp/compat/json.capnp";

const formatVersion :UInt32 = 1;

struct KeyValue {
  key @0 :Text;
  value @1 :Text;
}

# ---------------------------------------------------------------------------------------------
# Manifest

struct Environment {
  cpu @0 :Text;               # model name from /proc/cpuinfo
  gpu @1 :Text;               # device name, empty in the sim world
  driver @2 :Text;            # CUDA driver version, empty without a GPU
  cuda @3 :Text;              # CUDA toolkit / NVRTC version vinci was built with
  libtorch @4 :Text;          # libtorch version
  torchThreads @5 :UInt32;    # at::get_num_threads() pinned for the run
  atenCpuCapability @6 :Text; # ATEN_CPU_CAPABILITY in force
  openblasCoretype @7 :Text;  # OPENBLAS_CORETYPE in force
  gitRevision @8 :Text;       # vinci's revision at build time
  compiler @9 :Text;
  numeric @10 :List(KeyValue); # every other pinned numeric setting, sorted by key
  vinciVersion @11 :Text;
}

struct Manifest {
  formatVersion @0 :UInt32;
  name @1 :Text;
  configPath @2 :Text;
  configText @3 :Text;        # the effective config (after --set overrides), as TOML
  seed @4 :UInt64;
  world @5 :Text;             # "sim", "live" or "rescore" (recorder/run.h, RunWorld)
  environment @6 :Environment;
  completed @7 :Bool;         # set, with the fields below, when the run ends normally
  recordCount @8 :UInt64;
  runDigest @9 :Data $Json.hex;
  parentRun @10 :Text;        # for `replay rescore` and resumed or forked runs
  annotations @11 :List(KeyValue);  # wall-clock start/end etc.: recorded, never used
}

# ---------------------------------------------------------------------------------------------
# Records: one per frame of the run log.

enum Role {
  selection @0;
  policy @1;
  summary @2;
}

struct Record {
  # Where the record belongs. -1 (or "") means "not at this level".
  seq @0 :UInt64;      # position in the run, from 0, dense
  step @1 :Int32 = -1;
  task @2 :Text;
  scheme @3 :Int32 = -1;   # 0..k-1 skill schemes, k = the null scheme
  rollout @4 :Int32 = -1;
  turn @5 :Int32 = -1;
  phase @6 :Phase;

  enum Phase {
    train @0;
    eval @1;
    verify @2;       # skill verification runs
    coldstart @3;
    tts @4;          # sequential test-time scaling evaluation (harness/tts.h)
  }

  union {
    # Events: nondeterministic inputs, recorded once and replayed from the log.
    sample @7 :BackboneSample;
    measurement @8 :Measurement;
    llmReply @9 :LlmReply;

    # Derived values: recomputed and compared by `replay verify`.
    selection @10 :SelectionDecision;
    reward @11 :Reward;
    advantage @12 :Advantage;
    librarySnapshot @13 :LibrarySnapshot;
    parameterDigest @14 :ParameterDigest;
    metric @15 :Metric;
    verification @16 :VerificationDecision;
    stepBegin @17 :StepBegin;
    stepEnd @18 :StepEnd;
    runEnd @19 :RunEnd;
    blob @20 :BlobRef;   # a named object attached to the run (a config, a checkpoint)
    checkpoint @21 :CheckpointRef;   # the parameters training starts from (origin, digest, object)
    sftEpoch @22 :SftEpoch;          # one supervised step of the cold start
    coldStart @23 :ColdStartSummary; # what the cold start stage built
    ttsWindow @24 :TtsWindow;        # the window a test-time-scaling iteration continues from

    # An event: a trainer's answer to one update of a language model (harness/model_trainer.h),
    # recorded once and replayed from the log, like an llmReply.
    modelUpdate @25 :ModelUpdate;
  }
}

# A backbone's output for one role: the action taken and its log-probability under the policy
# that sampled it.
struct BackboneSample {
  role @0 :Role;
  backbone @1 :Text;           # "sim", "openai", "recorded"
  actions @2 :List(UInt32);    # factored categorical choices (sim), in head order
  logProb @3 :Float64;
  greedy @4 :Bool;
  output @5 :Data $Json.hex;   # address of what the role produced: a plan, a skill list, ...
  prompt @6 :Data $Json.hex;   # address of the prompt text, when there is one
  paramDigest @7 :Data $Json.hex;  # the parameters that sampled it
  sampleIndex @8 :Int32 = -1;  # selection sample 0..k-1, summary sample 0..s-1
  key @9 :Data $Json.hex;      # digest of the RngKey of the call: the recorded backbone answers by it
}

struct Trial {
  correct @0 :Bool;
  maxAbsErr @1 :Float64;
  meanAbsErr @2 :Float64;
  distribution @3 :Text;       # "uniform", "signed", "heavy_tailed"
  seed @4 :UInt64;
}

# An evaluator's result for one plan on one task: the same record from every evaluator.
struct Measurement {
  evaluator @0 :Text;          # "sim", "cuda", "recorded"
  device @1 :Text;             # device profile or GPU name
  plan @2 :Data $Json.hex;     # address of the evaluated plan
  compiled @3 :Bool;
  compileLog @4 :Data $Json.hex;
  correct @5 :Bool;
  trials @6 :List(Trial);
  kernelTimesUs @7 :List(Float64);     # every sample
  referenceTimesUs @8 :List(Float64);
  statistic @9 :Text;                  # "median"
  kernelUs @10 :Float64;               # the statistic of kernelTimesUs
  referenceUs @11 :Float64;
  speedup @12 :Float64;                # referenceUs / kernelUs; 0 unless correct
  timeCoverage @13 :Float64;           # share of GPU time in the candidate's own kernels
  decoy @14 :Bool;
  flags @15 :List(Text);               # anti-hacking findings, sorted
  error @16 :Text;                     # the reason a candidate failed, for the user
  settings @17 :List(KeyValue);        # the evaluator's own settings, sorted by key
  size @18 :Text;                      # task size: "full" or "small"
}

# One call of a language model (backbone "openai"): an event. Replay answers the call from the
# reply object; the request is rebuilt and must hash to the recorded address. Wall-clock latency
# and retry counts differ between two runs of one config, so they are not here (the run folder's
# llm_calls.jsonl has them, for people).
struct LlmReply {
  role @0 :Role;
  endpoint @1 :Text;           # the server's base URL
  model @2 :Text;
  prompt @3 :Data $Json.hex;   # address of the request body (kind "llm_request"): canonical JSON
  reply @4 :Data $Json.hex;    # address of the reply body as received (kind "llm_reply"); empty on failure
  finishReason @5 :Text;       # "stop", "length", "tool_calls"; empty on failure
  promptTokens @6 :UInt32;
  completionTokens @7 :UInt32;
  temperature @8 :Float64;
  failure @9 :Text;            # why the call failed after its retries; empty when it succeeded
  key @10 :Data $Json.hex;     # digest of the call's RngKey: replay finds the reply by it
  sampleIndex @11 :Int32 = -1; # selection sample 0..k-1, summary sample 0..s-1
}

struct Bm25Candidate {
  name @0 :Text;
  score @1 :Float64;
  skill @2 :Data $Json.hex;
}

struct SelectionDecision {
  query @0 :Data $Json.hex;        # address of the query text
  candidates @1 :List(Bm25Candidate);  # BM25 top-k in rank order
  selected @2 :List(Text);         # chosen skill names, in order, <= 3
  randomFallback @3 :Bool;         # nothing scored > 0: a keyed random sample
  reranked @4 :Bool;               # false for BM25-only selection
  sampleIndex @5 :Int32;
  librarySnapshot @6 :Data $Json.hex;
}

struct Reward {
  value @0 :Float64;
  kind @1 :Kind;
  enum Kind {
    turn @0;        # per-turn policy reward
    scheme @1;      # mean best-turn reward of a scheme's rollouts
    summary @2;     # verified speedup of a summary sample
  }
  speedup @2 :Float64;
  timeCoverage @3 :Float64;
  correct @4 :Bool;
  decoy @5 :Bool;
  sampleIndex @6 :Int32 = -1;
}

struct Advantage {
  role @0 :Role;
  value @1 :Float64;       # after scaling
  returnValue @2 :Float64; # G
  baseline @3 :Float64;    # leave-one-out mean
  scale @4 :Float64;
  groupSize @5 :UInt32;
  sampleIndex @6 :Int32 = -1;
}

struct LibrarySnapshot {
  forStep @0 :Int32;           # the step that sees this library
  snapshot @1 :Data $Json.hex; # address of the library's JSONL bytes
  size @2 :UInt32;
  added @3 :List(Text);
}

struct ParameterDigest {
  digest @0 :Data $Json.hex;
  checkpoint @1 :Data $Json.hex;  # address of the serialized parameters, when saved
  loss @2 :Float64;
  gradNorm @3 :Float64;
}

# One update of a language model by its trainer: the step's calls and advantages went in (the
# request object), a new model came out, named in every later chat request.
struct ModelUpdate {
  trainer @0 :Text;            # trainer.kind ("http")
  endpoint @1 :Text;           # the trainer's base URL
  kind @2 :Text;               # "rl" (a step's policy gradient) or "sft" (the cold start)
  baseModel @3 :Text;          # backbone.model
  parent @4 :Text;             # the adapter the update started from; empty: the base model
  adapter @5 :Text;            # the trainer's digest of what it trained (weights, optimizer state)
  model @6 :Text;              # the name later chat requests use
  loss @7 :Float64;
  promptTokens @8 :UInt64;     # tokens the update read, as the trainer counts them
  completionTokens @9 :UInt64;
  samples @10 :UInt32;
  roles @11 :List(Role);       # the roles the experiment trains
  request @12 :Data $Json.hex; # address of the update request (object kind "trainer_update")
  reply @13 :Data $Json.hex;   # address of the trainer's reply, its wall time removed ("trainer_reply")
  failure @14 :Text;           # non-empty: the trainer's reason the update failed (a non-finite loss);
                               # the model stays the parent (adapter = parent, loss NaN)
}

struct Metric {
  name @0 :Text;            # "fast_p", "reward_mean", ...
  split @1 :Text;           # "train", "eval"
  level @2 :Int32 = -1;     # -1 = all levels
  threshold @3 :Float64;
  turnMode @4 :Text;        # "last", "best", or a turn index
  denominator @5 :Text;     # "all", "correct"
  value @6 :Float64;
  numerator @7 :UInt32;
  count @8 :UInt32;
}

struct VerificationDecision {
  skillName @0 :Text;
  skill @1 :Data $Json.hex;
  speedups @2 :List(Float64);    # one per verification re-run
  correct @3 :List(Bool);
  baselineTurn1Speedup @4 :Float64;
  accepted @5 :Bool;
  staged @6 :Bool;
  reason @7 :Text;
  sampleIndex @8 :Int32 = -1;
}

struct StepBegin {
  tasks @0 :List(Text);
  librarySnapshot @1 :Data $Json.hex;
  paramDigest @2 :Data $Json.hex;
}

struct StepEnd {
  digestSoFar @0 :Data $Json.hex;  # run digest over every record before this one
}

struct RunEnd {
  recordCount @0 :UInt64;          # records before this one
  runDigest @1 :Data $Json.hex;    # digest over every record before this one
}

struct BlobRef {
  name @0 :Text;
  kind @1 :Text;
  address @2 :Data $Json.hex;
  size @3 :UInt64;
}

# The parameters a run's training starts from (step 0), as a checkpoint object: freshly
# initialised, fitted by the cold start stage, or taken from a step of another run.
struct CheckpointRef {
  forStep @0 :Int32;              # the step that starts from these parameters
  digest @1 :Data $Json.hex;      # their parameter digest
  address @2 :Data $Json.hex;     # the checkpoint object (kind "checkpoint")
  size @3 :UInt64;                # its bytes
  origin @4 :Text;                # "init", "coldstart", "run"
  sourceRun @5 :Text;             # origin "run": the run folder as configured
  sourceRunDigest @6 :Data $Json.hex;  # ... that run's digest
  sourceStep @7 :Int32 = -1;      # ... and the step of it whose parameters these are
}

# One full-batch supervised step of the cold start (cross-entropy on the three heads).
# crossEntropy and examples are per role: selection, policy, summary.
struct SftEpoch {
  epoch @0 :Int32;
  loss @1 :Float64;                 # the objective this step minimised (before the step)
  crossEntropy @2 :List(Float64);   # mean cross-entropy per example before the step
  examples @3 :List(UInt32);
  digest @4 :Data $Json.hex;        # parameter digest after the step
}

struct ColdStartSummary {
  trajectories @0 :UInt32;        # behaviour-policy trajectories collected
  kept @1 :UInt32;                # ... whose best speedup reached the threshold
  proposed @2 :UInt32;            # skills the summary role wrote from them
  verified @3 :UInt32;            # ... that passed verification
  added @4 :List(Text);           # ... that passed the diversity filter: the library's new skills
  diversity @5 :Bool;             # the diversity filter was on
  examples @6 :List(UInt32);      # SFT examples kept per role (selection, policy, summary)
  examplesDropped @7 :List(UInt32);  # ... dropped by the diversity filter
  crossEntropyBefore @8 :List(Float64);
  crossEntropyAfter @9 :List(Float64);
  library @10 :Data $Json.hex;    # the library after the cold start (seed + added)
  checkpoint @11 :Data $Json.hex; # the fitted parameters' checkpoint object
  digest @12 :Data $Json.hex;     # their parameter digest
}

# Test-time scaling: after iteration `iteration`, the next one continues from the last turn of the
# best window of `length` consecutive turns by summed reward (ties: the earliest).
struct TtsWindow {
  iteration @0 :Int32;
  start @1 :Int32;       # first turn of the window (turns numbered over all iterations)
  length @2 :Int32;
  rewardSum @3 :Float64;
}
