// Seeded damage to a log: every truncation or byte flip must leave every frame before the damage
// readable, be reported at the damaged frame's file and offset, and never crash the reader.
// VINCI_TEST_SEED picks another sequence of cases; VINCI_CORRUPTION_CASES changes their number.
#include <gtest/gtest.h>

#include <cstdlib>

#include "core/rng.h"
#include "recorder/run_log.h"
#include "tests/recorder/record_samples.h"
#include "tests/recorder/test_util.h"

namespace vinci {
namespace {

constexpr uint64_t kRecordSeed = 3;

struct FrameSpan {
  uint64_t begin, end;  // [begin, end) in its segment, header included
};

struct Layout {
  std::vector<std::pair<std::string, std::string>> segments;
  std::vector<std::vector<FrameSpan>> frames;  // per segment
  std::vector<std::string> payloads;           // every frame, log order
};

Layout build_log(const std::string& dir, uint64_t n, uint64_t segment_bytes) {
  RunLogOptions opts;
  opts.segment_bytes = segment_bytes;
  auto w = RunLogWriter::create(dir, opts);
  VINCI_ASSERT(w.ok());
  Layout lay;
  for (uint64_t i = 0; i < n; ++i) {
    lay.payloads.push_back(sample_payload(kRecordSeed, i));
    VINCI_ASSERT((*w)->append(lay.payloads.back()).ok());
  }
  VINCI_ASSERT((*w)->sync().ok());
  lay.segments = slurp_dir(dir);
  auto r = RunLogReader::open(dir);
  LogFrame f;
  lay.frames.resize(lay.segments.size());
  while ((*r)->next(&f)) {
    lay.frames[f.segment].push_back({f.offset, f.offset + kFrameHeaderSize + f.payload.size()});
  }
  VINCI_ASSERT(!(*r)->damage());
  return lay;
}

uint64_t frames_before(const Layout& lay, size_t seg) {
  uint64_t n = 0;
  for (size_t s = 0; s < seg; ++s) n += lay.frames[s].size();
  return n;
}

struct Expectation {
  uint64_t good;  // frames the reader must return
  bool damaged;
  size_t damage_segment;
  uint64_t damage_offset;
};

// What a reader must report after segment `seg` was cut to `pos` bytes (truncate) or had the
// byte at `pos` changed (flip).
Expectation expect(const Layout& lay, size_t seg, uint64_t pos, bool truncate) {
  Expectation e{frames_before(lay, seg), true, seg, 0};
  const auto& fr = lay.frames[seg];
  for (const auto& f : fr) {
    if (f.end <= pos) e.good++;
  }
  if (pos < kSegmentHeaderSize) {
    // Header fields: magic [0,8), version [8,12), index [12,16), first frame [16,24).
    e.damage_offset = truncate ? 0 : pos < 8 ? 0 : pos < 12 ? 8 : pos < 16 ? 12 : 16;
    return e;
  }
  bool boundary = pos == kSegmentHeaderSize;
  for (const auto& f : fr) {
    if (f.begin <= pos && pos < f.end) e.damage_offset = f.begin;
    if (f.end == pos) boundary = true;
  }
  if (truncate && boundary) {
    if (seg + 1 == lay.segments.size()) {
      e.damaged = false;  // a clean prefix
    } else {
      e.damage_segment = seg + 1;  // the next segment's first-frame number no longer matches
      e.damage_offset = 16;
    }
  }
  return e;
}

TEST(LogCorruption, EveryTruncationAndFlipKeepsThePrefix) {
  const uint64_t seed = test_seed(20261202);
  const char* env_cases = std::getenv("VINCI_CORRUPTION_CASES");
  const uint64_t cases = env_cases ? std::strtoull(env_cases, nullptr, 10) : 100000;
  SCOPED_TRACE("VINCI_TEST_SEED=" + std::to_string(seed));
  Layout lay = build_log(make_temp_dir("corrupt"), 60, 2500);
  ASSERT_GE(lay.segments.size(), 4u);
  uint64_t damaged = 0;
  for (uint64_t c = 0; c < cases; ++c) {
    Stream s(RngKey::root(seed).with("case", static_cast<int64_t>(c)));
    size_t seg = s.below(lay.segments.size());
    bool truncate = s.below(2) == 0;
    auto segments = lay.segments;
    std::string& bytes = segments[seg].second;
    uint64_t pos = s.below(bytes.size());
    if (truncate) {
      bytes.resize(pos);
    } else {
      bytes[pos] = static_cast<char>(bytes[pos] ^ (1 + s.below(255)));
    }
    Expectation e = expect(lay, seg, pos, truncate);
    auto r = RunLogReader::over(segments);
    LogFrame f;
    uint64_t got = 0;
    while (r->next(&f)) {
      ASSERT_LT(got, lay.payloads.size());
      ASSERT_EQ(f.payload, lay.payloads[got]) << "case " << c;
      ++got;
    }
    ASSERT_EQ(got, e.good) << "case " << c << (truncate ? " truncate " : " flip ") << "segment " << seg << " at "
                           << pos;
    ASSERT_EQ(static_cast<bool>(r->damage()), e.damaged) << "case " << c;
    if (e.damaged) {
      ++damaged;
      ASSERT_EQ(r->damage()->file, lay.segments[e.damage_segment].first) << "case " << c;
      ASSERT_EQ(r->damage()->offset, e.damage_offset) << "case " << c << ": " << r->damage()->to_string();
    }
  }
  EXPECT_GT(damaged, cases * 9 / 10);
  std::printf("corruption cases: %llu, damage reported in %llu\n", static_cast<unsigned long long>(cases),
              static_cast<unsigned long long>(damaged));
}

TEST(LogCorruption, WriterContinuesAfterDamagedTail) {
  const uint64_t seed = test_seed(77);
  SCOPED_TRACE("VINCI_TEST_SEED=" + std::to_string(seed));
  const uint64_t n = 60;
  Layout lay = build_log(make_temp_dir("corrupt"), n, 2500);
  size_t last = lay.segments.size() - 1;
  for (int c = 0; c < 300; ++c) {
    Stream s(RngKey::root(seed).with("reopen-case", c));
    std::string dir = make_temp_dir("reopen");
    size_t seg = s.below(lay.segments.size());
    auto segments = lay.segments;
    std::string& bytes = segments[seg].second;
    uint64_t pos = s.below(bytes.size());
    bool truncate = s.below(2) == 0;
    if (truncate) {
      bytes.resize(pos);
    } else {
      bytes[pos] = static_cast<char>(bytes[pos] ^ (1 + s.below(255)));
    }
    for (const auto& [name, b] : segments) ASSERT_TRUE(write_file_atomic(dir + "/" + name, b, false).ok());
    Expectation e = expect(lay, seg, pos, truncate);
    LogRecovery rec;
    auto w = RunLogWriter::reopen(dir, RunLogOptions{2500, 1 << 16}, &rec);
    if (e.damaged && e.damage_segment != last) {
      ASSERT_FALSE(w.ok()) << "case " << c;
      EXPECT_EQ(w.status().code(), StatusCode::kCorruption);
      EXPECT_NE(w.status().message().find(lay.segments[e.damage_segment].first), std::string::npos);
      continue;
    }
    ASSERT_TRUE(w.ok()) << "case " << c << ": " << w.status().to_string();
    ASSERT_EQ(rec.frames, e.good) << "case " << c;
    for (uint64_t i = rec.frames; i < n; ++i) ASSERT_TRUE((*w)->append(lay.payloads[i]).ok());
    ASSERT_TRUE((*w)->sync().ok());
    w->reset();
    // The continued log holds exactly the uninterrupted log's frames; with the damage in the
    // last segment its bytes are identical too.
    auto r = RunLogReader::open(dir);
    LogFrame f;
    uint64_t i = 0;
    while ((*r)->next(&f)) ASSERT_EQ(f.payload, lay.payloads[i++]) << "case " << c;
    EXPECT_FALSE((*r)->damage()) << "case " << c;
    EXPECT_EQ(i, n);
    if (seg == last) {
      EXPECT_EQ(slurp_dir(dir), lay.segments) << "case " << c;
    }
  }
}

}  // namespace
}  // namespace vinci
