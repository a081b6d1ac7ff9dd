// The record codec (harness/records.h) against the committed golden runs: every record of them
// decodes, and its writer re-encodes the decoded values to the very bytes in the log. That pins
// both directions and each writer's field order (which Cap'n Proto's layout depends on) to runs
// recorded before the codec existed.
#include "harness/records.h"

#include <capnp/message.h>
#include <capnp/serialize-packed.h>
#include <gtest/gtest.h>
#include <kj/io.h>

#include <map>
#include <set>
#include <string>

#include "harness/record_sink.h"
#include "recorder/address.h"
#include "recorder/run.h"
#include "recorder/run_log.h"
#include "recorder/vinci.capnp.h"

namespace vinci {
namespace {

const std::string kGoldenSim = std::string(VINCI_SOURCE_DIR) + "/tests/golden/runs/smoke";
const std::string kGoldenLlm = std::string(VINCI_SOURCE_DIR) + "/tests/golden/llm_live/llm_main";

// The record's payload written anew from its decoded values; "" for a kind this codec does not
// write (the run's end, written by RunWriter).
Result<std::string> reencode(schema::Record::Reader r) {
  RecordBuf buf;
  const RecordPos pos = read_position(r);
  switch (r.which()) {
    case schema::Record::SAMPLE: {
      SampleRecord s = read_sample(r.getSample());
      if (s.role == schema::Role::SUMMARY)
        write_summary_sample(buf, pos, s);
      else
        write_sample(buf, pos, s);
      break;
    }
    case schema::Record::MEASUREMENT: {
      VINCI_ASSIGN_OR_RETURN(EvalResult e, read_measurement(r.getMeasurement()));
      write_measurement(buf, pos, e);
      break;
    }
    case schema::Record::LLM_REPLY: write_llm_reply(buf, pos, read_llm_reply(r.getLlmReply())); break;
    case schema::Record::SELECTION: write_selection(buf, pos, read_selection(r.getSelection())); break;
    case schema::Record::REWARD: write_reward(buf, pos, read_reward(r.getReward())); break;
    case schema::Record::ADVANTAGE: write_advantage(buf, pos, read_advantage(r.getAdvantage())); break;
    case schema::Record::LIBRARY_SNAPSHOT:
      write_library_snapshot(buf, pos, read_library_snapshot(r.getLibrarySnapshot()));
      break;
    case schema::Record::PARAMETER_DIGEST:
      write_parameter_digest(buf, pos, read_parameter_digest(r.getParameterDigest()));
      break;
    case schema::Record::METRIC: write_metric(buf, pos.step, read_metric(r.getMetric())); break;
    case schema::Record::VERIFICATION: {
      VerificationRecord v = read_verification(r.getVerification());
      if (v.staged && v.reason.rfind("staged:", 0) == 0)
        write_staged_skill(buf, pos, v.skill_name, v.speedups.at(0), v.sample_index);
      else
        write_verification(buf, pos, v);
      break;
    }
    case schema::Record::STEP_BEGIN: write_step_begin(buf, pos, read_step_begin(r.getStepBegin())); break;
    case schema::Record::STEP_END: write_step_end(buf, pos, address_of(r.getStepEnd().getDigestSoFar())); break;
    case schema::Record::BLOB: write_blob(buf, pos, read_blob(r.getBlob())); break;
    case schema::Record::CHECKPOINT: write_checkpoint(buf, pos, read_checkpoint(r.getCheckpoint())); break;
    case schema::Record::SFT_EPOCH: write_sft_epoch(buf, pos, read_sft_epoch(r.getSftEpoch())); break;
    case schema::Record::COLD_START: write_cold_start(buf, pos, read_cold_start(r.getColdStart())); break;
    case schema::Record::TTS_WINDOW: write_tts_window(buf, pos, read_tts_window(r.getTtsWindow())); break;
    case schema::Record::MODEL_UPDATE: write_model_update(buf, pos, read_model_update(r.getModelUpdate())); break;
    case schema::Record::RUN_END: return std::string();
  }
  if (buf.records.size() != 1)
    return internal_error("expected one record, the writer made " + std::to_string(buf.records.size()));
  buf.records[0]->getRoot<schema::Record>().setSeq(r.getSeq());
  return encode_message(*buf.records[0]);
}

// Re-encodes every record of a run's log; returns how many records of each kind matched.
std::map<int, int> reencode_run(const std::string& run_dir) {
  std::map<int, int> matched;
  auto log = RunLogReader::open(RunLocation::of(run_dir).log_dir);
  EXPECT_TRUE(log.ok()) << log.status().to_string();
  if (!log.ok()) return matched;
  LogFrame frame;
  RecordView view;
  while ((*log)->next(&frame)) {
    std::string payload(frame.payload);
    Status parsed = view.parse(payload);
    EXPECT_TRUE(parsed.ok()) << parsed.to_string();
    if (!parsed.ok()) break;
    auto r = view.message().getRoot<schema::Record>();
    Result<std::string> again = reencode(r);
    EXPECT_TRUE(again.ok()) << run_dir << " record " << r.getSeq() << ": " << again.status().to_string();
    if (!again.ok() || again->empty()) continue;
    EXPECT_EQ(*again, payload) << run_dir << " record " << r.getSeq() << " (kind " << static_cast<int>(r.which())
                               << ") is not what its writer writes from its decoded values";
    if (*again == payload) matched[static_cast<int>(r.which())]++;
  }
  EXPECT_FALSE((*log)->damage()) << run_dir;
  return matched;
}

TEST(Records, EveryGoldenRecordReencodesToItsLoggedBytes) {
  std::map<int, int> matched = reencode_run(kGoldenSim);
  for (const auto& [kind, n] : reencode_run(kGoldenLlm)) matched[kind] += n;
  // The two runs between them (the sim one has a cold start and test-time scaling) hold every kind
  // the loop writes; each must have been seen and matched.
  for (auto kind :
       {schema::Record::SAMPLE, schema::Record::MEASUREMENT, schema::Record::LLM_REPLY, schema::Record::SELECTION,
        schema::Record::REWARD, schema::Record::ADVANTAGE, schema::Record::LIBRARY_SNAPSHOT,
        schema::Record::PARAMETER_DIGEST, schema::Record::METRIC, schema::Record::VERIFICATION,
        schema::Record::STEP_BEGIN, schema::Record::STEP_END, schema::Record::BLOB, schema::Record::CHECKPOINT,
        schema::Record::SFT_EPOCH, schema::Record::COLD_START, schema::Record::TTS_WINDOW}) {
    EXPECT_GT(matched[static_cast<int>(kind)], 0)
        << "no record of kind " << static_cast<int>(kind) << " in the golden runs";
  }
}

TEST(Records, ValuesRoundTripThroughTheirWriterAndReader) {
  RecordBuf buf;
  const RecordPos pos =
      RecordPos::of_task(3, "L1_019", schema::Record::Phase::EVAL).at_scheme(1).at_rollout(2).at_turn(0);

  SampleRecord s;
  s.role = schema::Role::SELECTION;
  s.backbone = "openai";
  s.actions = {4, 0, 7};
  s.log_prob = -1.25;
  s.greedy = true;
  s.prompt = Digest{1, 2};
  s.sample_index = 2;
  s.key = Digest{3, 4};
  write_sample(buf, pos, s);
  auto r = buf.records.back()->getRoot<schema::Record>().asReader();
  EXPECT_EQ(read_position(r), pos);
  SampleRecord back = read_sample(r.getSample());
  EXPECT_EQ(back.backbone, "openai");
  EXPECT_EQ(back.actions, s.actions);
  EXPECT_EQ(back.log_prob, -1.25);
  EXPECT_TRUE(back.greedy);
  EXPECT_TRUE(back.output.is_zero());
  EXPECT_EQ(back.prompt, s.prompt);
  EXPECT_EQ(back.sample_index, 2);
  EXPECT_EQ(back.key, s.key);

  CheckpointRecord c;
  c.for_step = 0;
  c.digest = Digest{5, 6};
  c.address = Digest{7, 8};
  c.size = 1234;
  c.origin = "run";
  c.source_run = "runs/main";
  c.source_run_digest = Digest{9, 10};
  c.source_step = 4;
  write_checkpoint(buf, RecordPos::of_step(-1), c);
  CheckpointRecord cb = read_checkpoint(buf.records.back()->getRoot<schema::Record>().asReader().getCheckpoint());
  EXPECT_EQ(cb.digest, c.digest);
  EXPECT_EQ(cb.address, c.address);
  EXPECT_EQ(cb.size, 1234u);
  EXPECT_EQ(cb.source_run, "runs/main");
  EXPECT_EQ(cb.source_run_digest, c.source_run_digest);
  EXPECT_EQ(cb.source_step, 4);

  ColdStartRecord cs;
  cs.trajectories = 40;
  cs.added = {"a", "b"};
  cs.examples = {1, 2, 3};
  cs.examples_dropped = {0, 1, 0};
  cs.cross_entropy_before = {1.5, 2.5, 3.5};
  cs.cross_entropy_after = {0.5, 0.25, 0.125};
  cs.checkpoint = Digest{11, 12};
  write_cold_start(buf, RecordPos::of_step(-1), cs);
  ColdStartRecord csb = read_cold_start(buf.records.back()->getRoot<schema::Record>().asReader().getColdStart());
  EXPECT_EQ(csb.trajectories, 40u);
  EXPECT_EQ(csb.added, cs.added);
  EXPECT_EQ(csb.examples, cs.examples);
  EXPECT_EQ(csb.examples_dropped, cs.examples_dropped);
  EXPECT_EQ(csb.cross_entropy_before, cs.cross_entropy_before);
  EXPECT_EQ(csb.cross_entropy_after, cs.cross_entropy_after);
  EXPECT_EQ(csb.checkpoint, cs.checkpoint);

  // A metric's phase follows its split.
  write_metric(buf, 2, {"fast_p", "tts", -1, 1.2, "last", "all", 0.5, 1, 2});
  auto m = buf.records.back()->getRoot<schema::Record>().asReader();
  EXPECT_EQ(m.getPhase(), schema::Record::Phase::TTS);
  EXPECT_EQ(read_metric(m.getMetric()).threshold, 1.2);
}

}  // namespace
}  // namespace vinci

namespace vinci {
namespace {

// A record as an older recorder wrote it: laid out without the slots of fields the schema gained
// since (the canonical form drops trailing unset slots, as a struct without them has none).
std::string as_older_recorder_wrote(const std::string& payload) {
  RecordView v;
  EXPECT_TRUE(v.parse(payload).ok());
  kj::Array<capnp::word> words = capnp::canonicalize(v.message().getRoot<schema::Record>());
  kj::ArrayPtr<const capnp::word> segments[1] = {words};
  kj::VectorOutputStream out;
  capnp::writePackedMessage(out, kj::arrayPtr(segments, 1));
  auto bytes = out.getArray();
  return std::string(reinterpret_cast<const char*>(bytes.begin()), bytes.size());
}

ModelUpdateRecord an_update(double loss) {
  ModelUpdateRecord u;
  u.trainer = "http";
  u.endpoint = "http://127.0.0.1:8100/v1";
  u.kind = "rl";
  u.base_model = "vinci-tiny";
  u.adapter = std::string(64, 'a');
  u.model = "vinci-tiny-aaaaaaaaaaaaaaaa";
  u.loss = loss;
  u.samples = 3;
  return u;
}

// Replay compares what it derives with what the log holds. A field the schema gained (here
// ModelUpdate.failure, unset) gives today's record one more slot than a log written before it
// has; the two say the same thing and must match, the run digest staying the log's. A record
// that says something else still differs.
TEST(CheckSink, ARecordAnOlderRecorderWroteMatchesAndKeepsTheLogsDigest) {
  RecordBuf now;
  write_model_update(now, RecordPos::of_step(0), an_update(0.25));
  now.records[0]->getRoot<schema::Record>().setSeq(0);
  const std::string current = encode_message(*now.records[0]);
  const std::string older = as_older_recorder_wrote(current);
  ASSERT_NE(older, current) << "the test needs two layouts of one record";

  CheckSink sink({older}, nullptr, nullptr);
  ASSERT_TRUE(sink.put(*now.records[0]).ok());
  RunDigest want;
  want.add(older);
  EXPECT_EQ(sink.digest(), want.value());
  EXPECT_FALSE(sink.diverged());

  RecordBuf other;
  write_model_update(other, RecordPos::of_step(0), an_update(0.5));
  CheckSink strict({older}, nullptr, nullptr);
  Status st = strict.put(*other.records[0]);
  EXPECT_EQ(st.code(), StatusCode::kMismatch) << st.to_string();
  EXPECT_TRUE(strict.diverged());
}

}  // namespace
}  // namespace vinci
