// `harness run` end to end through the real CLI: equal digests for equal configs and seeds, for
// one and two threads; a run killed with SIGKILL at a random point and resumed ends with the
// uninterrupted run's digest; bad configs fail with file, line and key.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "core/rng.h"
#include "recorder/run.h"
#include "tests/cli_test_util.h"

namespace vinci {
namespace {

const std::string kHarness = std::string(VINCI_BINARY_DIR) + "/bin/harness";
const std::string kSmoke = std::string(VINCI_SOURCE_DIR) + "/experiments/smoke.toml";

std::string temp_dir() { return clitest::temp_dir("vinci_run_"); }
using clitest::sh;

std::string digest_of(const std::string& run) {
  auto m = read_manifest(run + "/manifest.bin");
  if (!m.ok() || !m->completed) return "(incomplete: " + m.status().to_string() + ")";
  return m->run_digest.hex();
}

TEST(HarnessRun, SameSeedSameDigestAcrossThreadCounts) {
  std::string root = temp_dir(), out;
  ASSERT_EQ(sh(kHarness + " run " + kSmoke + " --out " + root + " --name a", &out), 0) << out;
  ASSERT_EQ(sh(kHarness + " run " + kSmoke + " --out " + root + " --name b", &out), 0) << out;
  ASSERT_EQ(sh(kHarness + " run " + kSmoke + " --out " + root + " --name c --threads 2", &out), 0) << out;
  EXPECT_EQ(digest_of(root + "/a"), digest_of(root + "/b"));
  EXPECT_EQ(digest_of(root + "/a"), digest_of(root + "/c"));
  ASSERT_EQ(sh(kHarness + " run " + kSmoke + " --out " + root + " --name d --seed 8", &out), 0) << out;
  EXPECT_NE(digest_of(root + "/a"), digest_of(root + "/d"));
  // The outputs people read are there.
  for (const char* f : {"summary.md", "metrics.csv", "reward.svg", "fast_p.svg", "library.svg", "fast_p_final.svg"}) {
    EXPECT_EQ(access((root + "/a/" + f).c_str(), R_OK), 0) << f;
  }
}

TEST(HarnessRun, KilledAndResumedRunEndsWithTheUninterruptedDigest) {
  const uint64_t seed = 99;
  std::string root = temp_dir(), out;
  const std::string args = " --set loop.steps=5 --threads 2";
  ASSERT_EQ(sh(kHarness + " run " + kSmoke + args + " --out " + root + " --name whole", &out), 0) << out;
  std::string want = digest_of(root + "/whole");
  int killed_midway = 0;
  for (int round = 0; round < 4; ++round) {
    Stream s(RngKey::root(seed).with("kill", round));
    std::string name = "killed" + std::to_string(round);
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      freopen("/dev/null", "w", stderr);
      freopen("/dev/null", "w", stdout);
      execl(kHarness.c_str(), "harness", "run", kSmoke.c_str(), "--set", "loop.steps=5",
            "--threads", "2", "--out", root.c_str(), "--name", name.c_str(), (char*)nullptr);
      _exit(127);
    }
    usleep(static_cast<useconds_t>(50000 + s.below(1500000)));
    kill(pid, SIGKILL);
    int st;
    waitpid(pid, &st, 0);
    std::string run = root + "/" + name;
    if (WIFSIGNALED(st)) ++killed_midway;
    auto m = read_manifest(run + "/manifest.bin");
    if (!m.ok()) continue;  // killed before the run folder existed
    if (!m->completed) {
      ASSERT_EQ(sh(kHarness + " run --resume " + run, &out), 0) << out;
      EXPECT_NE(out.find("re-derived and matched"), std::string::npos) << out;
    }
    EXPECT_EQ(digest_of(run), want) << "round " << round << "\n" << out;
  }
  std::printf("killed mid-run in %d of 4 rounds (VINCI seed %llu)\n", killed_midway,
              static_cast<unsigned long long>(seed));
  EXPECT_GT(killed_midway, 0);
}

TEST(HarnessRun, BadConfigsFailClearly) {
  std::string dir = temp_dir(), out;
  FILE* f = fopen((dir + "/bad.toml").c_str(), "w");
  fputs("[run]\nname = \"x\"\n\n[loop]\nstepz = 3\n", f);
  fclose(f);
  EXPECT_EQ(sh(kHarness + " run " + dir + "/bad.toml --out " + dir, &out), 2);
  EXPECT_NE(out.find(dir + "/bad.toml:5:1: unknown key 'loop.stepz'"), std::string::npos) << out;
  EXPECT_EQ(sh(kHarness + " run " + kSmoke + " --set loop.steps=many --out " + dir, &out), 2);
  EXPECT_NE(out.find("loop.steps"), std::string::npos) << out;
  EXPECT_EQ(sh(kHarness + " run " + dir + "/missing.toml", &out), 2);
  EXPECT_NE(out.find("missing.toml does not exist"), std::string::npos) << out;
  // A run name that is taken is refused, and the existing run is untouched.
  ASSERT_EQ(sh(kHarness + " run " + kSmoke + " --out " + dir + " --name once", &out), 0) << out;
  std::string before = digest_of(dir + "/once");
  EXPECT_EQ(sh(kHarness + " run " + kSmoke + " --out " + dir + " --name once", &out), 2);
  EXPECT_NE(out.find("already holds a run"), std::string::npos) << out;
  EXPECT_EQ(digest_of(dir + "/once"), before);
}

// A config with a base runs as the merged config: the manifest records every merged key (with
// --set over an inherited key) and no `base`, and the run is the one its merged config makes.
TEST(HarnessRun, ABaseConfigRunsAndRecordsTheMergedConfig) {
  std::string root = temp_dir(), out;
  std::string cfg = root + "/inherit.toml";
  ASSERT_EQ(sh("printf 'base = \"" + kSmoke + "\"\\n[run]\\nname = \"inherit\"\\n[loop]\\nturns = 1\\n' > " + cfg, &out), 0);
  ASSERT_EQ(sh(kHarness + " run " + cfg + " --out " + root + " --set loop.steps=1", &out), 0) << out;
  auto m = read_manifest(root + "/inherit/manifest.bin");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(m->config_text.find("base = \""), std::string::npos) << m->config_text;  // reward.base is a number
  EXPECT_NE(m->config_text.find("[loop]\nsteps = 1\nbatch_tasks = 4\n"), std::string::npos) << m->config_text;
  EXPECT_NE(m->config_text.find("\nturns = 1\n"), std::string::npos) << m->config_text;
  // The same settings written out in full give the same run.
  ASSERT_EQ(sh(kHarness + " config " + cfg + " --set loop.steps=1 > " + root + "/flat.toml", &out), 0) << out;
  ASSERT_EQ(sh(kHarness + " run " + root + "/flat.toml --out " + root + " --name flat", &out), 0) << out;
  EXPECT_EQ(digest_of(root + "/inherit"), digest_of(root + "/flat"));
  // A missing base fails before anything is written.
  ASSERT_EQ(sh("printf 'base = \"nope.toml\"\\n' > " + root + "/bad.toml", &out), 0);
  EXPECT_EQ(sh(kHarness + " run " + root + "/bad.toml --out " + root, &out), 2) << out;
  EXPECT_NE(out.find("bad.toml:1:8: key 'base': base config " + root + "/nope.toml does not exist"),
            std::string::npos)
      << out;
}

TEST(HarnessRun, ReferenceConfigDocIsCurrent) {
  std::string out;
  ASSERT_EQ(sh(kHarness + " config --reference", &out), 0);
  FILE* f = fopen((std::string(VINCI_SOURCE_DIR) + "/docs/config_reference.toml").c_str(), "r");
  ASSERT_NE(f, nullptr) << "docs/config_reference.toml is missing: write it with "
                           "`build/bin/harness config --reference > docs/config_reference.toml`";
  std::string doc;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, f)) doc.append(buf, n);
  fclose(f);
  EXPECT_EQ(doc, out) << "docs/config_reference.toml is stale: regenerate it with "
                         "`build/bin/harness config --reference > docs/config_reference.toml`";
}

}  // namespace
}  // namespace vinci
