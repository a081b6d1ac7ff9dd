#include "recorder/run.h"

#include <capnp/compat/json.h>
#include <capnp/message.h>
#include <capnp/serialize-packed.h>
#include <gtest/gtest.h>
#include <kj/io.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>

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
  m.world = RunWorld::kSim;
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
    EXPECT_EQ(static_cast<unsigned>(root_reader.which()), field.getProto().getDiscriminantValue()) << kinds[i];
    EXPECT_EQ(root_reader.getSeq(), i);
    // Field by field (JSON of the whole record) and byte by byte.
    capnp::MallocMessageBuilder original;
    fill_sample_record(&original, kinds[i], 1, i);
    original.getRoot<schema::Record>().setSeq(i);
    capnp::JsonCodec codec;
    EXPECT_EQ(json_of(rec->message()), std::string(codec.encode(original.getRoot<schema::Record>().asReader()).cStr()))
        << kinds[i];
    capnp::MallocMessageBuilder copy;
    copy.setRoot(root_reader);
    EXPECT_EQ(encode_message(copy), payloads[i]) << kinds[i];
  }
  EXPECT_EQ((*r)->next(), nullptr);
  EXPECT_FALSE((*r)->damage());
}

// A record whose root is sound but a nested pointer is not (here a text without its NUL, as a
// crafted or miswritten frame can hold under a right checksum) is refused by parse(), so no reader
// of the record (`replay cat`, verify) meets Cap'n Proto's exception later.
TEST(Run, ARecordWithABadNestedPointerDoesNotParse) {
  capnp::MallocMessageBuilder msg;
  auto rec = msg.initRoot<schema::Record>();
  rec.setTask("L1_019");
  rec.initBlob().setName("config-name-marker");
  auto segments = msg.getSegmentsForOutput();
  ASSERT_EQ(segments.size(), 1u);
  kj::Array<capnp::word> words = kj::heapArray<capnp::word>(segments[0].size());
  std::memcpy(words.begin(), segments[0].begin(), segments[0].size() * sizeof(capnp::word));
  auto encode = [&words] {
    kj::VectorOutputStream out;
    kj::ArrayPtr<const capnp::word> segment = words;
    capnp::writePackedMessage(out, kj::arrayPtr(&segment, 1));
    auto bytes = out.getArray();
    return std::string(reinterpret_cast<const char*>(bytes.begin()), bytes.size());
  };
  RecordView view;
  ASSERT_TRUE(view.parse(encode()).ok());
  EXPECT_NE(record_to_json(view, nullptr).find("config-name-marker"), std::string::npos);

  char* bytes = reinterpret_cast<char*>(words.begin());
  const std::string marker("config-name-marker\0", 19);
  char* end = bytes + words.size() * sizeof(capnp::word);
  char* at = std::search(bytes, end, marker.begin(), marker.end());
  ASSERT_NE(at, end);
  at[marker.size() - 1] = 'x';  // the text's NUL
  Status s = view.parse(encode());
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_NE(s.message().find("record does not parse"), std::string::npos) << s.to_string();
}

// A message of several segments cut anywhere: the segments after the first are read lazily, and a
// reader of a cut message throws when it is destroyed. parse() reads them all and fails cleanly.
TEST(Run, AMultiSegmentRecordCutShortDoesNotParse) {
  capnp::MallocMessageBuilder msg(1, capnp::AllocationStrategy::FIXED_SIZE);
  auto rec = msg.initRoot<schema::Record>();
  rec.setTask("L2_012");
  rec.initBlob().setName(std::string(200, 'n'));
  ASSERT_GT(msg.getSegmentsForOutput().size(), 1u);
  const std::string payload = encode_message(msg);
  RecordView view;
  ASSERT_TRUE(view.parse(payload).ok());
  for (size_t cut = 0; cut < payload.size(); ++cut) {
    Status s = view.parse(payload.substr(0, cut));
    EXPECT_FALSE(s.ok()) << "cut at " << cut;
  }
  ASSERT_TRUE(view.parse(payload).ok());
  EXPECT_EQ(view.message().getRoot<schema::Record>().getBlob().getName().size(), 200u);
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

// A run's world is Text on disk and RunWorld in memory: the three names round-trip, and a manifest
// naming another world is refused with its path.
TEST(Run, ManifestWorldIsOneOfThreeNames) {
  for (RunWorld w : {RunWorld::kSim, RunWorld::kLive, RunWorld::kRescore}) {
    ManifestInfo m = sample_manifest();
    m.world = w;
    auto back = decode_manifest(encode_manifest(m), "m.bin");
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    EXPECT_EQ(back->world, w);
    EXPECT_EQ(parse_run_world(run_world_name(w)).value(), w);
  }
  capnp::MallocMessageBuilder msg;
  auto b = msg.initRoot<schema::Manifest>();
  b.setFormatVersion(schema::FORMAT_VERSION);
  b.setWorld("gpu");
  auto bad = decode_manifest(encode_message(msg), "runs/x/manifest.bin");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "manifest runs/x/manifest.bin: world 'gpu': expected sim, live or rescore");
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
  EXPECT_NE(again.status().message().find("already holds a stopped run; pick another name, or continue it with "
                                          "`harness run --resume " +
                                          root + "/c`"),
            std::string::npos)
      << again.status().message();
  {
    auto w = RunWriter::resume(root + "/c");
    ASSERT_TRUE(w.ok()) << w.status().to_string();
    EXPECT_FALSE((*w)->writing());
    ASSERT_TRUE((*w)->start_writing().ok());
    EXPECT_EQ((*w)->recovery().frames, 5u);
    for (uint64_t i = 5; i < 9; ++i) ASSERT_TRUE((*w)->append_encoded(sample_payload(3, i)).ok());
    ASSERT_TRUE((*w)->finish().ok());
  }
  auto done = RunWriter::resume(root + "/c");
  ASSERT_FALSE(done.ok());
  EXPECT_EQ(done.status().code(), StatusCode::kFailedPrecondition);
}

// A resumed writer writes nothing until it starts writing: its caller checks the log first, and a
// refused resume leaves the folder as it was (the torn tail and a killed writer's temporary file
// included). The first write truncates the tail and removes the temporary file.
TEST(Run, ResumeWritesNothingUntilItStartsWriting) {
  std::string root = make_temp_dir("runs");
  {
    auto w = RunWriter::create(root + "/c", sample_manifest());
    ASSERT_TRUE(w.ok());
    for (uint64_t i = 0; i < 3; ++i) ASSERT_TRUE((*w)->append_encoded(sample_payload(3, i)).ok());
  }
  const std::string segment = root + "/c/log/00000000.vlog";
  std::string good = read_file(segment).value();
  ASSERT_TRUE(write_file_atomic(segment, good + std::string("\x40\x00\x00", 3)).ok());  // a torn frame header
  ASSERT_TRUE(write_file_atomic(root + "/c/manifest.bin.tmp.99999.0", "unfinished").ok());
  // name -> bytes of every file of the run's folder and its log.
  auto files = [&] {
    auto out = slurp_dir(root + "/c/log");
    for (const auto& n : list_dir(root + "/c")) {
      if (n != "log") out.emplace_back(n, read_file(root + "/c/" + n).value());
    }
    return out;
  };
  auto before = files();
  {
    auto w = RunWriter::resume(root + "/c");
    ASSERT_TRUE(w.ok()) << w.status().to_string();
    EXPECT_FALSE((*w)->writing());
    ASSERT_TRUE((*w)->flush().ok());  // nothing to write out
    // The lock is held: a second writer is refused.
    EXPECT_EQ(RunWriter::resume(root + "/c").status().code(), StatusCode::kFailedPrecondition);
  }
  EXPECT_EQ(files(), before);
  auto w = RunWriter::resume(root + "/c");
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  ASSERT_TRUE((*w)->append_encoded(sample_payload(3, 3)).ok());
  EXPECT_TRUE((*w)->writing());
  EXPECT_EQ((*w)->recovery().frames, 3u);
  EXPECT_EQ((*w)->recovery().bytes_dropped, 3u);
  EXPECT_EQ((*w)->record_count(), 4u);
  ASSERT_TRUE((*w)->flush().ok());
  EXPECT_EQ(list_dir(root + "/c"), (std::vector<std::string>{"log", "manifest.bin"}));
  EXPECT_EQ(read_file(segment).value().substr(0, good.size()), good);
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

// A finished run of n sample records (n + 1 with RunEnd) under root/name; returns its log segment.
std::string finished_run(const std::string& root, const std::string& name, uint64_t n, uint64_t seed = 4) {
  auto w = RunWriter::create(root + "/" + name, sample_manifest());
  EXPECT_TRUE(w.ok()) << w.status().to_string();
  for (uint64_t i = 0; i < n; ++i) EXPECT_TRUE((*w)->append_encoded(sample_payload(seed, i)).ok());
  EXPECT_TRUE((*w)->finish().ok());
  return root + "/" + name + "/log/00000000.vlog";
}

// Reads a run to its end; returns the damage, or "" when there is none.
std::string read_to_end(const std::string& run, uint64_t* records) {
  auto r = RunReader::open(run);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  while ((*r)->next()) {
  }
  EXPECT_TRUE((*r)->status().ok()) << (*r)->status().to_string();
  *records = (*r)->records_read();
  return (*r)->damage() ? (*r)->damage()->to_string() : "";
}

// Offsets of the frames of a segment.
std::vector<size_t> frame_offsets(const std::string& bytes) {
  std::vector<size_t> out;
  for (size_t pos = kSegmentHeaderSize; pos + kFrameHeaderSize <= bytes.size();) {
    out.push_back(pos);
    uint32_t len;
    std::memcpy(&len, bytes.data() + pos, 4);
    pos += kFrameHeaderSize + len;
  }
  return out;
}

// Every frame is valid, so only the manifest's record count and digest can tell that a log was cut
// at a frame boundary, extended, or swapped for another run's.
TEST(Run, AReaderChecksACompletedLogAgainstItsManifest) {
  std::string root = make_temp_dir("runs");
  uint64_t records = 0;
  std::string seg = finished_run(root, "whole", 10);
  EXPECT_EQ(read_to_end(root + "/whole", &records), "");
  EXPECT_EQ(records, 11u);

  std::string bytes = read_file(seg).value();
  auto offsets = frame_offsets(bytes);
  ASSERT_EQ(offsets.size(), 11u);
  ASSERT_TRUE(write_file_atomic(seg, bytes.substr(0, offsets[8])).ok());
  std::string damage = read_to_end(root + "/whole", &records);
  EXPECT_EQ(records, 8u);
  EXPECT_NE(damage.find("the log holds 8 records, but the manifest records 11"), std::string::npos) << damage;

  // One record too many.
  std::string extra = bytes + bytes.substr(offsets[3], offsets[4] - offsets[3]);
  ASSERT_TRUE(write_file_atomic(seg, extra).ok());
  damage = read_to_end(root + "/whole", &records);
  EXPECT_EQ(records, 11u);
  EXPECT_NE(damage.find("more than the 11 records its manifest records"), std::string::npos) << damage;

  // As many records, other ones: another run's log beside this manifest.
  std::string other = read_file(finished_run(root, "other", 11, 5)).value();
  auto other_offsets = frame_offsets(other);
  ASSERT_TRUE(write_file_atomic(seg, other.substr(0, other_offsets[10]) + bytes.substr(offsets[10])).ok());
  damage = read_to_end(root + "/whole", &records);
  EXPECT_EQ(records, 11u);
  EXPECT_NE(damage.find("the log's digest is"), std::string::npos) << damage;
}

// A run's log whose manifest is gone is not overwritten or paired with a new manifest.
TEST(Run, CreateRefusesALogWithoutAManifestAndWritesNothing) {
  std::string root = make_temp_dir("runs");
  std::string seg = finished_run(root, "orphan", 3);
  ASSERT_EQ(::unlink((root + "/orphan/manifest.bin").c_str()), 0);
  std::string before = read_file(seg).value();
  auto again = RunWriter::create(root + "/orphan", sample_manifest());
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.status().message().find("holds a log"), std::string::npos) << again.status().message();
  EXPECT_FALSE(read_file(root + "/orphan/manifest.bin").ok());
  EXPECT_EQ(read_file(seg).value(), before);
  EXPECT_EQ(list_dir(root + "/orphan/log"), std::vector<std::string>{"00000000.vlog"});
}

// An object cut short is corrupt, not missing; one that is not there is missing.
TEST(RecordJson, ACutShortObjectIsCorruptNotMissing) {
  std::string root = make_temp_dir("runs");
  auto w = RunWriter::create(root + "/k", sample_manifest());
  ASSERT_TRUE(w.ok());
  std::string text(4000, 'x');
  for (size_t i = 0; i < text.size(); ++i) text[i] = static_cast<char>('a' + (i * 7919) % 26);
  auto addr = (*w)->store().put("kernel-source", text);
  ASSERT_TRUE(addr.ok());
  Digest absent = hash_tagged("kernel-source", "never stored");
  capnp::MallocMessageBuilder msg;
  auto m = msg.initRoot<schema::Record>().initMeasurement();
  uint8_t bytes[16];
  addr->to_bytes(bytes);
  m.setPlan(capnp::Data::Reader(bytes, 16));
  uint8_t other[16];
  absent.to_bytes(other);
  m.setCompileLog(capnp::Data::Reader(other, 16));  // 16 bytes: read as an address
  ASSERT_TRUE((*w)->append(msg).ok());
  ASSERT_TRUE((*w)->flush().ok());
  std::string path = (*w)->store().path_of(*addr);
  std::string file = read_file(path).value();
  ASSERT_TRUE(write_file_atomic(path, file.substr(0, file.size() - 5)).ok());
  auto listed = (*w)->store().list();
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(*listed, std::vector<Digest>{*addr});

  auto r = RunReader::open(root + "/k");
  ASSERT_TRUE(r.ok());
  auto view = (*r)->next();
  ASSERT_NE(view, nullptr);
  std::map<Digest, std::string> corrupt;
  std::string json = record_to_json(*view, &(*r)->store(), &corrupt);
  EXPECT_NE(json.find("\"" + addr->hex() + "\":{\"corrupt\":"), std::string::npos) << json;
  EXPECT_NE(json.find("\"" + absent.hex() + "\":{\"missing\":true}"), std::string::npos) << json;
  ASSERT_EQ(corrupt.size(), 1u);
  EXPECT_EQ(corrupt.begin()->first, *addr);
}

}  // namespace
}  // namespace vinci
