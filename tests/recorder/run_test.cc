#include "recorder/run.h"

#include <capnp/compat/json.h>
#include <capnp/message.h>
#include <gtest/gtest.h>

#include "recorder/record_json.h"
#include "recorder/vinci.capnp.h"
#include "tests/recorder/record_samples.h"
#include "tests/recorder/test_util.h"

namespace vinci {
namespace {

ManifestInfo sample_manifest() {
  ManifestInfo m;
  m.name = "unit";
  m.config_path = "experiments/smoke.toml";
  m.config_text = "[run]\nname = \"unit\"\n";
  m.seed = 1234567890123ull;
  m.world = "sim";
  m.environment = capture_base_environment();
  m.environment.libtorch = "1.13.1";
  m.environment.torch_threads = 1;
  m.environment.numeric["float_denormals"] = "flush";
  m.annotations["started_at"] = "2026-12-02T10:00:00Z";
  return m;
}

std::string json_of(capnp::MessageReader& msg) {
  capnp::JsonCodec codec;
  return codec.encode(msg.getRoot<schema::Record>()).cStr();
}

TEST(Run, EveryRecordKindRoundTrips) {
  std::string root = make_temp_dir("runs");
  auto kinds = record_kinds();
  ASSERT_GE(kinds.size(), 14u);
  std::vector<std::string> payloads;
  {
    auto w = RunWriter::create(root + "/a", sample_manifest());
    ASSERT_TRUE(w.ok()) << w.status().to_string();
    for (size_t i = 0; i < kinds.size(); ++i) {
      capnp::MallocMessageBuilder msg;
      fill_sample_record(&msg, kinds[i], 1, i);
      auto seq = (*w)->append(msg);
      ASSERT_TRUE(seq.ok());
      EXPECT_EQ(*seq, i);
      payloads.push_back(encode_message(msg));
    }
    ASSERT_TRUE((*w)->flush().ok());
  }
  auto r = RunReader::open(root + "/a");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  for (size_t i = 0; i < kinds.size(); ++i) {
    auto rec = (*r)->next();
    ASSERT_NE(rec, nullptr) << kinds[i];
    auto root_reader = rec->message().getRoot<schema::Record>();
    auto field = capnp::Schema::from<schema::Record>().getFieldByName(kinds[i]);
    EXPECT_EQ(static_cast<unsigned>(root_reader.which()), field.getProto().getDiscriminantValue())
        << kinds[i];
    EXPECT_EQ(root_reader.getSeq(), i);
    // Field by field (JSON of the whole record) and byte by byte.
    capnp::MallocMessageBuilder original;
    fill_sample_record(&original, kinds[i], 1, i);
    original.getRoot<schema::Record>().setSeq(i);
    capnp::JsonCodec codec;
    EXPECT_EQ(json_of(rec->message()),
              std::string(codec.encode(original.getRoot<schema::Record>().asReader()).cStr()))
        << kinds[i];
    capnp::MallocMessageBuilder copy;
    copy.setRoot(root_reader);
    EXPECT_EQ(encode_message(copy), payloads[i]) << kinds[i];
  }
  EXPECT_EQ((*r)->next(), nullptr);
  EXPECT_FALSE((*r)->damage());
}

TEST(Run, ManifestRoundTripsAndFinishCompletesIt) {
  std::string root = make_temp_dir("runs");
  ManifestInfo m = sample_manifest();
  Digest digest;
  {
    auto w = RunWriter::create(root + "/b", m);
    ASSERT_TRUE(w.ok());
    auto before = read_manifest(root + "/b/manifest.bin");
    ASSERT_TRUE(before.ok());
    EXPECT_FALSE(before->completed);
    for (uint64_t i = 0; i < 20; ++i) ASSERT_TRUE((*w)->append_encoded(sample_payload(2, i)).ok());
    ASSERT_TRUE((*w)->finish().ok());
    digest = (*w)->digest();
    EXPECT_EQ((*w)->record_count(), 21u);
  }
  auto after = read_manifest(root + "/b/manifest.bin");
  ASSERT_TRUE(after.ok()) << after.status().to_string();
  EXPECT_TRUE(after->completed);
  EXPECT_EQ(after->record_count, 21u);
  EXPECT_EQ(after->run_digest, digest);
  EXPECT_EQ(after->name, m.name);
  EXPECT_EQ(after->config_text, m.config_text);
  EXPECT_EQ(after->seed, m.seed);
  EXPECT_EQ(after->environment.cpu, m.environment.cpu);
  EXPECT_EQ(after->environment.pinned(), m.environment.pinned());
  EXPECT_EQ(after->annotations, m.annotations);
  // The reader recomputes the digest, and the last record carries the digest before it.
  auto r = RunReader::open(root + "/b");
  ASSERT_TRUE(r.ok());
  // (Sample records may include RunEnd bodies of their own; the writer's is the last record.)
  RecordView* last = nullptr;
  RecordView* rec;
  Digest before_last;
  while ((rec = (*r)->next())) {
    if ((*r)->records_read() == 21) {
      last = rec;
      break;
    }
    before_last = (*r)->digest();
  }
  ASSERT_NE(last, nullptr);
  auto end = last->message().getRoot<schema::Record>().getRunEnd();
  EXPECT_EQ(end.getRecordCount(), 20u);
  EXPECT_EQ(Digest::from_bytes(end.getRunDigest().begin()), before_last);
  EXPECT_EQ((*r)->digest(), digest);
}

TEST(Run, CreateRefusesExistingRunAndResumeContinues) {
  std::string root = make_temp_dir("runs");
  {
    auto w = RunWriter::create(root + "/c", sample_manifest());
    ASSERT_TRUE(w.ok());
    for (uint64_t i = 0; i < 5; ++i) ASSERT_TRUE((*w)->append_encoded(sample_payload(3, i)).ok());
  }
  auto again = RunWriter::create(root + "/c", sample_manifest());
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.status().message().find("already holds a run"), std::string::npos);
  {
    LogRecovery rec;
    auto w = RunWriter::resume(root + "/c", &rec);
    ASSERT_TRUE(w.ok()) << w.status().to_string();
    EXPECT_EQ(rec.frames, 5u);
    for (uint64_t i = 5; i < 9; ++i) ASSERT_TRUE((*w)->append_encoded(sample_payload(3, i)).ok());
    ASSERT_TRUE((*w)->finish().ok());
  }
  auto done = RunWriter::resume(root + "/c");
  ASSERT_FALSE(done.ok());
  EXPECT_EQ(done.status().code(), StatusCode::kFailedPrecondition);
}

TEST(Run, MissingRunIsAClearError) {
  auto r = RunReader::open("/tmp/vinci_no_such_run");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("/tmp/vinci_no_such_run/manifest.bin"), std::string::npos);
}

TEST(Run, RunsUnderOneRootShareObjects) {
  std::string root = make_temp_dir("runs");
  auto a = RunWriter::create(root + "/a", sample_manifest());
  auto b = RunWriter::create(root + "/b", sample_manifest());
  ASSERT_TRUE(a.ok() && b.ok());
  std::string src = "extern \"C\" __global__ void relu(float* y, const float* x, int n) {}";
  auto x = (*a)->store().put("kernel-source", src);
  auto y = (*b)->store().put("kernel-source", src);
  ASSERT_TRUE(x.ok() && y.ok());
  EXPECT_EQ(*x, *y);
  EXPECT_EQ((*a)->store().stats().written + (*b)->store().stats().written, 1u);
  EXPECT_EQ((*a)->location().store_dir, root + "/objects");
}

TEST(RecordJson, AddressesPrintAsHexAndObjectsInline) {
  std::string root = make_temp_dir("runs");
  auto w = RunWriter::create(root + "/j", sample_manifest());
  ASSERT_TRUE(w.ok());
  auto addr = (*w)->store().put("plan", "{\"kernels\":[]}");
  ASSERT_TRUE(addr.ok());
  capnp::MallocMessageBuilder msg;
  auto rec = msg.initRoot<schema::Record>();
  rec.setStep(2);
  rec.setTask("L1_019_relu");
  auto m = rec.initMeasurement();
  m.setEvaluator("sim");
  uint8_t bytes[16];
  addr->to_bytes(bytes);
  m.setPlan(capnp::Data::Reader(bytes, 16));
  m.setSpeedup(1.5);
  ASSERT_TRUE((*w)->append(msg).ok());
  ASSERT_TRUE((*w)->flush().ok());
  auto r = RunReader::open(root + "/j");
  auto view = (*r)->next();
  ASSERT_NE(view, nullptr);
  std::string plain = record_to_json(*view, nullptr);
  EXPECT_NE(plain.find("\"plan\":\"" + addr->hex() + "\""), std::string::npos) << plain;
  EXPECT_NE(plain.find("\"task\":\"L1_019_relu\""), std::string::npos) << plain;
  EXPECT_EQ(plain.find("objects"), std::string::npos);
  std::string inlined = record_to_json(*view, &(*r)->store());
  EXPECT_NE(inlined.find("\"kind\":\"plan\""), std::string::npos) << inlined;
  EXPECT_NE(inlined.find("{\\\"kernels\\\":[]}"), std::string::npos) << inlined;
  std::string mj = manifest_to_json((*r)->manifest());
  EXPECT_EQ(mj.rfind("{\"manifest\":{", 0), 0u) << mj;
  EXPECT_NE(mj.find("\"seed\":\"1234567890123\""), std::string::npos) << mj;
}

}  // namespace
}  // namespace vinci
