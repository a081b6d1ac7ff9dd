// A writer killed with SIGKILL at a random moment leaves a readable prefix, and the run continues
// from there to the same bytes an uninterrupted writer produces.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/rng.h"
#include "recorder/run_log.h"
#include "tests/recorder/record_samples.h"
#include "tests/recorder/test_util.h"

namespace vinci {
namespace {

constexpr uint64_t kRecordSeed = 9;
constexpr uint64_t kRecords = 40000;

RunLogOptions options() {
  RunLogOptions o;
  o.segment_bytes = 64 << 10;
  o.buffer_bytes = 700;  // frequent write()s, so kills land mid-frame too
  return o;
}

void write_records(const std::string& dir, uint64_t from, uint64_t to) {
  auto w = RunLogWriter::reopen(dir, options());
  VINCI_ASSERT_MSG(w.ok(), w.status().to_string());
  for (uint64_t i = from; i < to; ++i) VINCI_ASSERT((*w)->append(sample_payload(kRecordSeed, i)).ok());
  VINCI_ASSERT((*w)->flush().ok());
}

TEST(LogKill, SigkillLeavesPrefixAndRunContinues) {
  const uint64_t seed = test_seed(4242);
  SCOPED_TRACE("VINCI_TEST_SEED=" + std::to_string(seed));
  std::string ref = make_temp_dir("killref");
  write_records(ref, 0, kRecords);
  auto ref_bytes = slurp_dir(ref);
  int torn = 0, partial = 0;
  for (int round = 0; round < 12; ++round) {
    Stream s(RngKey::root(seed).with("kill-round", round));
    std::string dir = make_temp_dir("kill");
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      write_records(dir, 0, kRecords);
      _exit(0);
    }
    usleep(static_cast<useconds_t>(2000 + s.below(60000)));
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    // The prefix: every readable frame is the record the writer meant to write there.
    auto r = RunLogReader::open(dir);
    ASSERT_TRUE(r.ok());
    LogFrame f;
    uint64_t n = 0;
    while ((*r)->next(&f)) ASSERT_EQ(f.payload, sample_payload(kRecordSeed, n++)) << "round " << round;
    if ((*r)->damage()) ++torn;
    if (n < kRecords) ++partial;
    // Continue from the last good frame to the end.
    LogRecovery rec;
    {
      auto w = RunLogWriter::reopen(dir, options(), &rec);
      ASSERT_TRUE(w.ok()) << w.status().to_string();
      ASSERT_EQ(rec.frames, n);
    }
    write_records(dir, n, kRecords);
    EXPECT_EQ(slurp_dir(dir), ref_bytes) << "round " << round << " killed after " << n << " frames";
  }
  std::printf("kill rounds: 12, stopped before the end: %d, with a torn tail: %d\n", partial, torn);
  EXPECT_GT(partial, 0);
}

}  // namespace
}  // namespace vinci
