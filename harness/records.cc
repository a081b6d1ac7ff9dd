#include "harness/records.h"

#include "recorder/address.h"

namespace vinci {
namespace {

template <class T, class L>
void set_list(L list, const std::vector<T>& values) {
  for (size_t i = 0; i < values.size(); ++i) list.set(static_cast<unsigned>(i), values[i]);
}

template <class T, size_t N, class L>
void set_list(L list, const std::array<T, N>& values) {
  for (size_t i = 0; i < N; ++i) list.set(static_cast<unsigned>(i), values[i]);
}

template <class T, class R>
std::vector<T> vector_of(R list) {
  std::vector<T> out;
  out.reserve(list.size());
  for (auto v : list) out.push_back(static_cast<T>(v));
  return out;
}

std::vector<std::string> strings_of(capnp::List<capnp::Text>::Reader list) {
  std::vector<std::string> out;
  for (auto v : list) out.emplace_back(v.cStr());
  return out;
}

template <class T, size_t N, class R>
std::array<T, N> array_of(R list) {
  std::array<T, N> out{};
  for (unsigned i = 0; i < N && i < list.size(); ++i) out[i] = list[i];
  return out;
}

}  // namespace

RecordPos read_position(schema::Record::Reader r) {
  return {r.getStep(), r.getTask(), r.getScheme(), r.getRollout(), r.getTurn(), r.getPhase()};
}

schema::Record::Builder RecordBuf::add(const RecordPos& pos) {
  records.push_back(std::make_unique<capnp::MallocMessageBuilder>(512));
  auto r = records.back()->initRoot<schema::Record>();
  r.setStep(pos.step);
  r.setTask(pos.task);
  r.setScheme(pos.scheme);
  r.setRollout(pos.rollout);
  r.setTurn(pos.turn);
  r.setPhase(pos.phase);
  return r;
}

// ---- samples ----

void write_sample(RecordBuf& buf, const RecordPos& pos, const SampleRecord& s) {
  auto b = buf.add(pos).initSample();
  b.setRole(s.role);
  b.setBackbone(s.backbone);
  set_list(b.initActions(static_cast<unsigned>(s.actions.size())), s.actions);
  b.setLogProb(s.log_prob);
  b.setGreedy(s.greedy);
  b.setSampleIndex(s.sample_index);
  if (!s.output.is_zero()) b.setOutput(AddressBytes(s.output).data());
  if (!s.prompt.is_zero()) b.setPrompt(AddressBytes(s.prompt).data());
  b.setKey(AddressBytes(s.key).data());
}

void write_summary_sample(RecordBuf& buf, const RecordPos& pos, const SampleRecord& s) {
  auto b = buf.add(pos).initSample();
  b.setRole(s.role);
  b.setBackbone(s.backbone);
  if (!s.actions.empty()) set_list(b.initActions(static_cast<unsigned>(s.actions.size())), s.actions);
  b.setLogProb(s.log_prob);
  b.setGreedy(s.greedy);
  b.setSampleIndex(s.sample_index);
  b.setKey(AddressBytes(s.key).data());
  if (!s.prompt.is_zero()) b.setPrompt(AddressBytes(s.prompt).data());
  if (!s.output.is_zero()) b.setOutput(AddressBytes(s.output).data());
}

SampleRecord read_sample(schema::BackboneSample::Reader r) {
  SampleRecord s;
  s.role = r.getRole();
  s.backbone = r.getBackbone();
  s.actions = vector_of<uint32_t>(r.getActions());
  s.log_prob = r.getLogProb();
  s.greedy = r.getGreedy();
  s.output = address_of(r.getOutput());
  s.prompt = address_of(r.getPrompt());
  s.sample_index = r.getSampleIndex();
  s.key = address_of(r.getKey());
  return s;
}

// ---- measurements ----

void write_measurement(RecordBuf& buf, const RecordPos& pos, const EvalResult& eval) {
  to_measurement(eval, buf.add(pos).initMeasurement());
}

TurnOutcome read_turn_outcome(schema::Measurement::Reader r) {
  return {r.getCompiled(), r.getCorrect(), r.getDecoy(), r.getSpeedup(), r.getTimeCoverage()};
}

Result<EvalResult> read_measurement(schema::Measurement::Reader r,
                                    const std::function<Result<std::string>(const Digest&)>& log_text) {
  return from_measurement(r, log_text);
}

// ---- model calls ----

void write_llm_reply(RecordBuf& buf, const RecordPos& pos, const LlmReplyRecord& c) {
  auto l = buf.add(pos).initLlmReply();
  l.setRole(c.role);
  l.setEndpoint(c.endpoint);
  l.setModel(c.model);
  l.setPrompt(AddressBytes(c.request).data());
  if (!c.reply.is_zero()) l.setReply(AddressBytes(c.reply).data());
  l.setFinishReason(c.finish_reason);
  l.setPromptTokens(c.prompt_tokens);
  l.setCompletionTokens(c.completion_tokens);
  l.setTemperature(c.temperature);
  l.setFailure(c.failure);
  l.setKey(AddressBytes(c.key).data());
  l.setSampleIndex(c.sample_index);
}

LlmReplyRecord read_llm_reply(schema::LlmReply::Reader r) {
  LlmReplyRecord c;
  c.role = r.getRole();
  c.endpoint = r.getEndpoint();
  c.model = r.getModel();
  c.request = address_of(r.getPrompt());
  c.reply = address_of(r.getReply());
  c.finish_reason = r.getFinishReason();
  c.prompt_tokens = r.getPromptTokens();
  c.completion_tokens = r.getCompletionTokens();
  c.temperature = r.getTemperature();
  c.failure = r.getFailure();
  c.key = address_of(r.getKey());
  c.sample_index = r.getSampleIndex();
  return c;
}

// ---- selection ----

void write_selection(RecordBuf& buf, const RecordPos& pos, const SelectionRecord& d) {
  auto s = buf.add(pos).initSelection();
  s.setQuery(AddressBytes(d.query).data());
  auto cands = s.initCandidates(static_cast<unsigned>(d.candidates.size()));
  for (size_t i = 0; i < d.candidates.size(); ++i) {
    cands[static_cast<unsigned>(i)].setName(d.candidates[i].name);
    cands[static_cast<unsigned>(i)].setScore(d.candidates[i].score);
  }
  set_list(s.initSelected(static_cast<unsigned>(d.selected.size())), d.selected);
  s.setRandomFallback(d.random_fallback);
  s.setReranked(d.reranked);
  s.setSampleIndex(d.sample_index);
  s.setLibrarySnapshot(AddressBytes(d.library_snapshot).data());
}

SelectionRecord read_selection(schema::SelectionDecision::Reader r) {
  SelectionRecord d;
  d.query = address_of(r.getQuery());
  for (auto c : r.getCandidates()) d.candidates.push_back({c.getName(), c.getScore()});
  d.selected = strings_of(r.getSelected());
  d.random_fallback = r.getRandomFallback();
  d.reranked = r.getReranked();
  d.sample_index = r.getSampleIndex();
  d.library_snapshot = address_of(r.getLibrarySnapshot());
  return d;
}

// ---- rewards and advantages (numbers only: field order does not matter) ----

void write_reward(RecordBuf& buf, const RecordPos& pos, const RewardRecord& w) {
  auto b = buf.add(pos).initReward();
  b.setValue(w.value);
  b.setKind(w.kind);
  b.setSpeedup(w.speedup);
  b.setTimeCoverage(w.time_coverage);
  b.setCorrect(w.correct);
  b.setDecoy(w.decoy);
  b.setSampleIndex(w.sample_index);
}

RewardRecord read_reward(schema::Reward::Reader r) {
  return {r.getKind(),    r.getValue(), r.getSpeedup(),    r.getTimeCoverage(),
          r.getCorrect(), r.getDecoy(), r.getSampleIndex()};
}

void write_advantage(RecordBuf& buf, const RecordPos& pos, const AdvantageRecord& adv) {
  auto a = buf.add(pos.in_phase(schema::Record::Phase::TRAIN)).initAdvantage();
  a.setRole(adv.role);
  a.setValue(adv.value);
  a.setReturnValue(adv.return_value);
  a.setBaseline(adv.baseline);
  a.setScale(adv.scale);
  a.setGroupSize(adv.group_size);
  a.setSampleIndex(adv.sample_index);
}

AdvantageRecord read_advantage(schema::Advantage::Reader r) {
  return {r.getRole(),  r.getValue(),     r.getReturnValue(), r.getBaseline(),
          r.getScale(), r.getGroupSize(), r.getSampleIndex()};
}

// ---- verification ----

void write_verification(RecordBuf& buf, const RecordPos& pos, const VerificationRecord& v) {
  auto b = buf.add(pos).initVerification();
  b.setSkillName(v.skill_name);
  if (!v.skill.is_zero()) b.setSkill(AddressBytes(v.skill).data());
  set_list(b.initSpeedups(static_cast<unsigned>(v.speedups.size())), v.speedups);
  if (!v.correct.empty()) set_list(b.initCorrect(static_cast<unsigned>(v.correct.size())), v.correct);
  b.setBaselineTurn1Speedup(v.baseline_turn1_speedup);
  b.setAccepted(v.accepted);
  b.setStaged(v.staged);
  b.setReason(v.reason);
  b.setSampleIndex(v.sample_index);
}

void write_staged_skill(RecordBuf& buf, const RecordPos& pos, const std::string& skill_name, double worst_speedup,
                        int32_t sample_index) {
  auto b = buf.add(pos).initVerification();
  b.setSkillName(skill_name);
  b.setAccepted(true);
  b.setStaged(true);
  b.setReason("staged: fastest accepted skill of the task");
  b.setSampleIndex(sample_index);
  b.initSpeedups(1).set(0, worst_speedup);
}

VerificationRecord read_verification(schema::VerificationDecision::Reader r) {
  VerificationRecord v;
  v.skill_name = r.getSkillName();
  v.skill = address_of(r.getSkill());
  v.speedups = vector_of<double>(r.getSpeedups());
  v.correct = vector_of<bool>(r.getCorrect());
  v.baseline_turn1_speedup = r.getBaselineTurn1Speedup();
  v.accepted = r.getAccepted();
  v.staged = r.getStaged();
  v.reason = r.getReason();
  v.sample_index = r.getSampleIndex();
  return v;
}

// ---- the library, the parameters, metrics, step boundaries ----

void write_library_snapshot(RecordBuf& buf, const RecordPos& pos, const LibrarySnapshotRecord& s) {
  auto b = buf.add(pos).initLibrarySnapshot();
  b.setForStep(s.for_step);
  b.setSnapshot(AddressBytes(s.snapshot).data());
  b.setSize(s.size);
  set_list(b.initAdded(static_cast<unsigned>(s.added.size())), s.added);
}

LibrarySnapshotRecord read_library_snapshot(schema::LibrarySnapshot::Reader r) {
  LibrarySnapshotRecord s;
  s.for_step = r.getForStep();
  s.snapshot = address_of(r.getSnapshot());
  s.size = r.getSize();
  s.added = strings_of(r.getAdded());
  return s;
}

void write_parameter_digest(RecordBuf& buf, const RecordPos& pos, const ParameterDigestRecord& p) {
  auto b = buf.add(pos).initParameterDigest();
  b.setDigest(AddressBytes(p.digest).data());
  b.setLoss(p.loss);
  b.setGradNorm(p.grad_norm);
  if (!p.checkpoint.is_zero()) b.setCheckpoint(AddressBytes(p.checkpoint).data());
}

ParameterDigestRecord read_parameter_digest(schema::ParameterDigest::Reader r) {
  return {address_of(r.getDigest()), address_of(r.getCheckpoint()), r.getLoss(), r.getGradNorm()};
}

void write_metric(RecordBuf& buf, int32_t step, const MetricRecord& m) {
  auto phase = m.split == "eval"  ? schema::Record::Phase::EVAL
               : m.split == "tts" ? schema::Record::Phase::TTS
                                  : schema::Record::Phase::TRAIN;
  auto b = buf.add(RecordPos::of_step(step, phase)).initMetric();
  b.setName(m.name);
  b.setSplit(m.split);
  b.setLevel(m.level);
  b.setThreshold(m.threshold);
  b.setTurnMode(m.turn_mode);
  b.setDenominator(m.denominator);
  b.setValue(m.value);
  b.setNumerator(m.numerator);
  b.setCount(m.count);
}

MetricRecord read_metric(schema::Metric::Reader r) {
  return {r.getName(),        r.getSplit(), r.getLevel(),     r.getThreshold(), r.getTurnMode(),
          r.getDenominator(), r.getValue(), r.getNumerator(), r.getCount()};
}

void write_step_begin(RecordBuf& buf, const RecordPos& pos, const StepBeginRecord& s) {
  auto b = buf.add(pos).initStepBegin();
  set_list(b.initTasks(static_cast<unsigned>(s.tasks.size())), s.tasks);
  b.setLibrarySnapshot(AddressBytes(s.library_snapshot).data());
  b.setParamDigest(AddressBytes(s.param_digest).data());
}

StepBeginRecord read_step_begin(schema::StepBegin::Reader r) {
  StepBeginRecord s;
  s.tasks = strings_of(r.getTasks());
  s.library_snapshot = address_of(r.getLibrarySnapshot());
  s.param_digest = address_of(r.getParamDigest());
  return s;
}

void write_step_end(RecordBuf& buf, const RecordPos& pos, const Digest& digest_so_far) {
  auto b = buf.add(pos).initStepEnd();
  b.setDigestSoFar(AddressBytes(digest_so_far).data());
}

void write_blob(RecordBuf& buf, const RecordPos& pos, const BlobRecord& blob) {
  auto b = buf.add(pos).initBlob();
  b.setName(blob.name);
  b.setKind(blob.kind);
  b.setAddress(AddressBytes(blob.address).data());
  b.setSize(blob.size);
}

BlobRecord read_blob(schema::BlobRef::Reader r) {
  return {r.getName(), r.getKind(), address_of(r.getAddress()), r.getSize()};
}

// ---- starting parameters, the cold start, test-time scaling ----

void write_checkpoint(RecordBuf& buf, const RecordPos& pos, const CheckpointRecord& c) {
  auto b = buf.add(pos).initCheckpoint();
  b.setForStep(c.for_step);
  b.setDigest(AddressBytes(c.digest).data());
  b.setAddress(AddressBytes(c.address).data());
  b.setSize(c.size);
  b.setOrigin(c.origin);
  if (!c.source_run.empty()) {
    b.setSourceRun(c.source_run);
    b.setSourceRunDigest(AddressBytes(c.source_run_digest).data());
    b.setSourceStep(c.source_step);
  }
}

CheckpointRecord read_checkpoint(schema::CheckpointRef::Reader r) {
  CheckpointRecord c;
  c.for_step = r.getForStep();
  c.digest = address_of(r.getDigest());
  c.address = address_of(r.getAddress());
  c.size = r.getSize();
  c.origin = r.getOrigin();
  c.source_run = r.getSourceRun();
  c.source_run_digest = address_of(r.getSourceRunDigest());
  c.source_step = r.getSourceStep();
  return c;
}

void write_sft_epoch(RecordBuf& buf, const RecordPos& pos, const SftEpochRecord& s) {
  auto b = buf.add(pos).initSftEpoch();
  b.setEpoch(s.epoch);
  b.setLoss(s.loss);
  set_list(b.initCrossEntropy(3), s.cross_entropy);
  set_list(b.initExamples(3), s.examples);
  b.setDigest(AddressBytes(s.digest).data());
}

SftEpochRecord read_sft_epoch(schema::SftEpoch::Reader r) {
  SftEpochRecord s;
  s.epoch = r.getEpoch();
  s.loss = r.getLoss();
  s.cross_entropy = array_of<double, 3>(r.getCrossEntropy());
  s.examples = array_of<uint32_t, 3>(r.getExamples());
  s.digest = address_of(r.getDigest());
  return s;
}

void write_cold_start(RecordBuf& buf, const RecordPos& pos, const ColdStartRecord& c) {
  auto b = buf.add(pos).initColdStart();
  b.setTrajectories(c.trajectories);
  b.setKept(c.kept);
  b.setProposed(c.proposed);
  b.setVerified(c.verified);
  set_list(b.initAdded(static_cast<unsigned>(c.added.size())), c.added);
  b.setDiversity(c.diversity);
  set_list(b.initExamples(3), c.examples);
  set_list(b.initExamplesDropped(3), c.examples_dropped);
  set_list(b.initCrossEntropyBefore(3), c.cross_entropy_before);
  set_list(b.initCrossEntropyAfter(3), c.cross_entropy_after);
  b.setLibrary(AddressBytes(c.library).data());
  b.setCheckpoint(AddressBytes(c.checkpoint).data());
  b.setDigest(AddressBytes(c.digest).data());
}

ColdStartRecord read_cold_start(schema::ColdStartSummary::Reader r) {
  return {r.getTrajectories(),
          r.getKept(),
          r.getProposed(),
          r.getVerified(),
          strings_of(r.getAdded()),
          r.getDiversity(),
          array_of<uint32_t, 3>(r.getExamples()),
          array_of<uint32_t, 3>(r.getExamplesDropped()),
          array_of<double, 3>(r.getCrossEntropyBefore()),
          array_of<double, 3>(r.getCrossEntropyAfter()),
          address_of(r.getLibrary()),
          address_of(r.getCheckpoint()),
          address_of(r.getDigest())};
}

void write_tts_window(RecordBuf& buf, const RecordPos& pos, const TtsWindowRecord& w) {
  auto b = buf.add(pos).initTtsWindow();
  b.setIteration(w.iteration);
  b.setStart(w.start);
  b.setLength(w.length);
  b.setRewardSum(w.reward_sum);
}

TtsWindowRecord read_tts_window(schema::TtsWindow::Reader r) {
  return {r.getIteration(), r.getStart(), r.getLength(), r.getRewardSum()};
}

void write_model_update(RecordBuf& buf, const RecordPos& pos, const ModelUpdateRecord& u) {
  auto b = buf.add(pos).initModelUpdate();
  b.setTrainer(u.trainer);
  b.setEndpoint(u.endpoint);
  b.setKind(u.kind);
  b.setBaseModel(u.base_model);
  b.setParent(u.parent);
  b.setAdapter(u.adapter);
  b.setModel(u.model);
  b.setLoss(u.loss);
  if (!u.failure.empty()) b.setFailure(u.failure);  // unset when empty: older logs' bytes
  b.setPromptTokens(u.prompt_tokens);
  b.setCompletionTokens(u.completion_tokens);
  b.setSamples(u.samples);
  auto roles = b.initRoles(static_cast<unsigned>(u.roles.size()));
  for (size_t i = 0; i < u.roles.size(); ++i) roles.set(static_cast<unsigned>(i), u.roles[i]);
  b.setRequest(AddressBytes(u.request).data());
  b.setReply(AddressBytes(u.reply).data());
}

ModelUpdateRecord read_model_update(schema::ModelUpdate::Reader r) {
  ModelUpdateRecord u;
  u.trainer = r.getTrainer();
  u.endpoint = r.getEndpoint();
  u.kind = r.getKind();
  u.base_model = r.getBaseModel();
  u.parent = r.getParent();
  u.adapter = r.getAdapter();
  u.model = r.getModel();
  u.loss = r.getLoss();
  u.failure = r.getFailure();
  u.prompt_tokens = r.getPromptTokens();
  u.completion_tokens = r.getCompletionTokens();
  u.samples = r.getSamples();
  for (schema::Role role : r.getRoles()) u.roles.push_back(role);
  u.request = address_of(r.getRequest());
  u.reply = address_of(r.getReply());
  return u;
}

}  // namespace vinci
