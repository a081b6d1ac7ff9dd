#include "recorder/run_log.h"

#include <gtest/gtest.h>

#include <thread>

#include "core/rng.h"
#include "tests/recorder/record_samples.h"
#include "tests/recorder/test_util.h"

namespace vinci {
namespace {

constexpr uint64_t kSeed = 11;

// Writes records 0..n-1 of the sample sequence into dir.
void write_log(const std::string& dir, uint64_t n, RunLogOptions opts) {
  auto w = RunLogWriter::create(dir, opts);
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  for (uint64_t i = 0; i < n; ++i) ASSERT_TRUE((*w)->append(sample_payload(kSeed, i)).ok());
  ASSERT_TRUE((*w)->sync().ok());
}

std::vector<std::string> read_all(RunLogReader& r) {
  std::vector<std::string> out;
  LogFrame f;
  while (r.next(&f)) {
    EXPECT_EQ(f.index, out.size());
    out.emplace_back(f.payload);
  }
  return out;
}

TEST(RunLog, WritesAndReadsBackAcrossSegments) {
  std::string dir = make_temp_dir("log");
  RunLogOptions opts;
  opts.segment_bytes = 2048;
  opts.buffer_bytes = 100;
  write_log(dir, 300, opts);
  EXPECT_GT(list_dir(dir).size(), 3u);
  auto r = RunLogReader::open(dir);
  ASSERT_TRUE(r.ok());
  auto frames = read_all(**r);
  ASSERT_EQ(frames.size(), 300u);
  for (uint64_t i = 0; i < 300; ++i) EXPECT_EQ(frames[i], sample_payload(kSeed, i));
  EXPECT_FALSE((*r)->damage());
}

TEST(RunLog, EmptyOrMissingFolderIsAnEmptyLog) {
  auto r = RunLogReader::open("/tmp/vinci_no_such_log_folder");
  ASSERT_TRUE(r.ok());
  LogFrame f;
  EXPECT_FALSE((*r)->next(&f));
  EXPECT_FALSE((*r)->damage());
}

TEST(RunLog, CreateRefusesAnExistingLog) {
  std::string dir = make_temp_dir("log");
  write_log(dir, 3, {});
  auto w = RunLogWriter::create(dir);
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), StatusCode::kFailedPrecondition);
}

TEST(RunLog, SameRecordsGiveIdenticalBytesAndDigest) {
  RunLogOptions opts;
  opts.segment_bytes = 4096;
  std::string a = make_temp_dir("log"), b = make_temp_dir("log");
  write_log(a, 500, opts);
  opts.buffer_bytes = 1;  // a different buffering must not change the bytes
  write_log(b, 500, opts);
  EXPECT_EQ(slurp_dir(a), slurp_dir(b));
}

TEST(RunLog, TwoThreadsThroughOrderedAppenderMatchOneThread) {
  const uint64_t seed = test_seed(5);
  SCOPED_TRACE("VINCI_TEST_SEED=" + std::to_string(seed));
  RunLogOptions opts;
  opts.segment_bytes = 4096;
  const uint64_t n = 2000;
  std::string one = make_temp_dir("log"), two = make_temp_dir("log");
  Digest d1, d2;
  {
    auto w = RunLogWriter::create(one, opts);
    OrderedAppender app(w->get());
    for (uint64_t i = 0; i < n; ++i) ASSERT_TRUE(app.submit(i, sample_payload(kSeed, i)).ok());
    ASSERT_TRUE((*w)->sync().ok());
    d1 = (*w)->digest();
  }
  {
    auto w = RunLogWriter::create(two, opts);
    OrderedAppender app(w->get());
    auto worker = [&](uint64_t parity) {
      Stream s(RngKey::root(seed).with("thread", static_cast<int64_t>(parity)));
      for (uint64_t i = parity; i < n; i += 2) {
        if (s.below(4) == 0) std::this_thread::yield();
        ASSERT_TRUE(app.submit(i, sample_payload(kSeed, i)).ok());
      }
    };
    std::thread t0(worker, 0), t1(worker, 1);
    t0.join();
    t1.join();
    EXPECT_EQ(app.pending(), 0u);
    ASSERT_TRUE((*w)->sync().ok());
    d2 = (*w)->digest();
  }
  EXPECT_EQ(d1, d2);
  EXPECT_EQ(slurp_dir(one), slurp_dir(two));
}

TEST(RunLog, ReopenContinuesAndDigestMatches) {
  std::string dir = make_temp_dir("log");
  RunLogOptions opts;
  opts.segment_bytes = 3000;
  write_log(dir, 100, opts);
  {
    LogRecovery rec;
    auto w = RunLogWriter::reopen(dir, opts, &rec);
    ASSERT_TRUE(w.ok()) << w.status().to_string();
    EXPECT_EQ(rec.frames, 100u);
    EXPECT_FALSE(rec.damage);
    for (uint64_t i = 100; i < 250; ++i) ASSERT_TRUE((*w)->append(sample_payload(kSeed, i)).ok());
    ASSERT_TRUE((*w)->sync().ok());
  }
  std::string ref = make_temp_dir("log");
  write_log(ref, 250, opts);
  EXPECT_EQ(slurp_dir(dir), slurp_dir(ref));
}

TEST(RunLog, DamageReportNamesFileAndOffset) {
  std::string dir = make_temp_dir("log");
  write_log(dir, 10, {});
  auto segs = slurp_dir(dir);
  ASSERT_EQ(segs.size(), 1u);
  std::string& bytes = segs[0].second;
  // Offset of frame 3: header, then frames 0..2.
  uint64_t off = kSegmentHeaderSize;
  for (int i = 0; i < 3; ++i) off += kFrameHeaderSize + sample_payload(kSeed, i).size();
  bytes[off + kFrameHeaderSize + 2] ^= 1;
  auto r = RunLogReader::over(segs);
  EXPECT_EQ(read_all(*r).size(), 3u);
  ASSERT_TRUE(r->damage());
  EXPECT_EQ(r->damage()->file, "00000000.vlog");
  EXPECT_EQ(r->damage()->offset, off);
  EXPECT_NE(r->damage()->what.find("checksum"), std::string::npos);
}

}  // namespace
}  // namespace vinci
