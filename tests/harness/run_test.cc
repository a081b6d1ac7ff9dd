// `harness run` end to end through the real CLI: equal digests for equal configs and seeds, for
// one and two threads; a run killed with SIGKILL at a random point and resumed ends with the
// uninterrupted run's digest; bad configs fail with file, line and key.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
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
      execl(kHarness.c_str(), "harness", "run", kSmoke.c_str(), "--set", "loop.steps=5", "--threads", "2", "--out",
            root.c_str(), "--name", name.c_str(), (char*)nullptr);
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

// A durable operation of a run, as the system sees it: the nth call (from 1) of a system call.
struct KillPoint {
  std::string syscall;
  int nth = 0;
  std::string what;  // the file it touches, for the failure message
};

// The kill points of a run, read from an strace of it (`-e trace=openat,write,rename,fsync`):
// every rename into the run's own folder (the manifest, then the reports and the manifest marked
// complete), the first writes of two report files, and evenly spread object writes, fsyncs and log
// appends: 20 in all.
std::vector<KillPoint> kill_points(const std::string& trace) {
  std::map<std::string, int> count;
  std::map<int, std::string> fd_path;
  std::vector<KillPoint> run_renames, object_renames, fsyncs, log_writes, report_writes;
  bool complete = false;  // after the rename that marks the manifest complete: nothing to resume
  std::set<std::string> reports_seen;
  std::istringstream in(trace);
  std::string line;
  auto quoted = [](const std::string& s, size_t from) {
    size_t a = s.find('"', from);
    size_t b = a == std::string::npos ? a : s.find('"', a + 1);
    return b == std::string::npos ? std::string() : s.substr(a + 1, b - a - 1);
  };
  while (std::getline(in, line)) {
    size_t sp = line.find(' ');
    size_t paren = line.find('(', sp);
    if (sp == std::string::npos || paren == std::string::npos) continue;
    std::string call = line.substr(sp + 1, paren - sp - 1);
    while (!call.empty() && call[0] == ' ') call.erase(0, 1);
    if (call != "openat" && call != "write" && call != "rename" && call != "fsync") continue;
    int nth = ++count[call];
    if (complete) continue;
    std::string args = line.substr(paren + 1);
    if (call == "openat") {
      size_t eq = line.rfind(" = ");
      int fd = eq == std::string::npos ? -1 : std::atoi(line.c_str() + eq + 3);
      if (fd >= 0) fd_path[fd] = quoted(line, paren);
    } else if (call == "rename") {
      size_t first_end = line.find('"', line.find('"', paren) + 1);
      std::string target = quoted(line, first_end + 1);
      (target.find("/objects/") == std::string::npos ? run_renames : object_renames).push_back({call, nth, target});
      complete = target.find("manifest.bin") != std::string::npos && run_renames.size() > 1;
    } else if (call == "fsync") {
      fsyncs.push_back({call, nth, "fsync"});
    } else {
      const std::string& path = fd_path[std::atoi(args.c_str())];
      if (path.find("/log/") != std::string::npos) {
        log_writes.push_back({call, nth, path});
      } else if (path.find(".tmp.") != std::string::npos && path.find("/objects/") == std::string::npos &&
                 path.find("manifest") == std::string::npos) {
        std::string file = path.substr(0, path.find(".tmp."));
        if (reports_seen.insert(file).second) report_writes.push_back({call, nth, file});
      }
    }
  }
  // k points of from, evenly spread, none taken twice.
  std::set<std::pair<std::string, int>> taken;
  auto spread = [&taken](const std::vector<KillPoint>& from, size_t k, std::vector<KillPoint>* to) {
    for (size_t i = 0; i < k && !from.empty(); ++i) {
      const KillPoint& p = from[i * (from.size() - 1) / std::max<size_t>(k - 1, 1)];
      if (taken.insert({p.syscall, p.nth}).second) to->push_back(p);
    }
  };
  std::vector<KillPoint> points;
  spread(run_renames, run_renames.size(), &points);
  spread(report_writes, 2, &points);
  spread(fsyncs, 3, &points);
  spread(log_writes, 4, &points);  // the log is written in large buffers: few writes
  // The rest among the object writes, spread over the whole run.
  for (size_t k = 3; points.size() < 20 && k <= object_renames.size(); ++k) spread(object_renames, k, &points);
  return points;
}

// Every file under dir, by relative path. Unfinished writes in the shared object store (a killed
// writer's `.tmp.` files, which no reader opens) are left out.
std::map<std::string, std::string> files_under(const std::string& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    std::string rel = e.path().string().substr(dir.size() + 1);
    if (rel.rfind("objects/", 0) == 0 && rel.find(".tmp.") != std::string::npos) continue;
    std::string bytes = read_file(e.path().string()).value();
    if (rel.size() >= 10 && rel.compare(rel.size() - 10, 10, "summary.md") == 0) {
      size_t wall = bytes.find("- wall time: ");  // the one line that measures this process
      if (wall != std::string::npos) bytes.erase(wall, bytes.find('\n', wall) - wall);
    }
    files[rel] = bytes;
  }
  return files;
}

// kill -9 at 20 durable points of a run, from its first manifest to the manifest marked complete
// and including the writes of its reports; each time, `--resume` (or, killed before its manifest
// existed, the same command again) ends with the uninterrupted run's digest and every one of its
// files, and nothing else in the run's folder. The kills are strace's signal injection: a SIGKILL
// at the entry of the chosen system call, so the call never happens.
TEST(HarnessRun, KilledAtTwentyDurablePointsResumesToTheSameFiles) {
  if (std::string why = clitest::strace_unusable(); !why.empty()) GTEST_SKIP() << why;
  std::string out;
  // Every run here is written under one root (its path is part of the recorded config); the
  // uninterrupted run is moved aside to compare with.
  const std::string base = temp_dir(), root = base + "/runs";
  const std::string command = kHarness + " run " + kSmoke + " --out " + root + " --name run";
  ASSERT_EQ(sh("strace -f -qq -s 256 -o " + base + "/trace -e trace=openat,write,rename,fsync " + command, &out), 0)
      << out;
  const std::string want = digest_of(root + "/run");
  ASSERT_EQ(sh("mv " + root + " " + base + "/whole", &out), 0) << out;
  const auto want_files = files_under(base + "/whole");
  std::vector<KillPoint> points = kill_points(read_file(base + "/trace").value());
  ASSERT_EQ(points.size(), 20u);
  int reports = 0;
  for (const auto& p : points) {
    if (p.what.find("summary.md") != std::string::npos || p.what.find(".svg") != std::string::npos) ++reports;
  }
  EXPECT_GE(reports, 4) << "the kill points include the report writes";
  for (const KillPoint& p : points) std::printf("kill point: %s #%d %s\n", p.syscall.c_str(), p.nth, p.what.c_str());
  for (const KillPoint& p : points) {
    const std::string at = p.syscall + " #" + std::to_string(p.nth) + " (" + p.what + ")";
    int rc = sh("strace -f -qq -o /dev/null -e trace=" + p.syscall + " -e inject=" + p.syscall +
                    ":signal=KILL:when=" + std::to_string(p.nth) + " " + command,
                &out);
    ASSERT_NE(rc, 0) << "not killed at " << at << "\n" << out;
    const std::string run = root + "/run";
    auto m = read_manifest(run + "/manifest.bin");
    EXPECT_FALSE(m.ok() && m->completed) << "killed at " << at << " yet complete";
    if (m.ok()) {
      ASSERT_EQ(sh(kHarness + " run --resume " + run, &out), 0) << "killed at " << at << "\n" << out;
    } else {
      ASSERT_EQ(sh(command, &out), 0) << "killed at " << at << "\n" << out;
    }
    EXPECT_EQ(digest_of(run), want) << "killed at " << at;
    auto files = files_under(root);
    for (const auto& [rel, bytes] : want_files) {
      auto it = files.find(rel);
      if (it == files.end()) {
        ADD_FAILURE() << "killed at " << at << ": " << rel << " is missing after the resume";
      } else {
        EXPECT_EQ(it->second, bytes) << "killed at " << at << ": " << rel << " differs";
      }
    }
    for (const auto& [rel, bytes] : files) {
      EXPECT_TRUE(want_files.count(rel)) << "killed at " << at << ": " << rel << " is left over";
    }
    ASSERT_EQ(sh("rm -rf " + root, &out), 0) << out;
  }
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
  EXPECT_NE(out.find("already holds a complete run; pick another name (a complete run is not resumed)"),
            std::string::npos)
      << out;
  EXPECT_EQ(digest_of(dir + "/once"), before);
}

// A config with a base runs as the merged config: the manifest records every merged key (with
// --set over an inherited key) and no `base`, and the run is the one its merged config makes.
TEST(HarnessRun, ABaseConfigRunsAndRecordsTheMergedConfig) {
  std::string root = temp_dir(), out;
  std::string cfg = root + "/inherit.toml";
  ASSERT_EQ(
      sh("printf 'base = \"" + kSmoke + "\"\\n[run]\\nname = \"inherit\"\\n[loop]\\nturns = 1\\n' > " + cfg, &out), 0);
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
  EXPECT_NE(out.find("bad.toml:1:8: key 'base': base config " + root + "/nope.toml does not exist"), std::string::npos)
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

// Files and folders under dir (recursively), for "nothing was written" checks.
std::string tree(const std::string& dir) {
  std::string out;
  sh("cd " + dir + " && find . -mindepth 1 | sort", &out);
  return out;
}

// A run goes to <out>/<name>/ and nowhere else: an empty runs root, a name that leaves it or names
// the object store are refused before anything is written.
TEST(HarnessRun, ARunIsWrittenInsideItsRunsRootOrNotAtAll) {
  std::string dir = temp_dir(), out;
  const std::string in = "cd " + dir + " && " + kHarness + " run " + kSmoke;
  EXPECT_EQ(sh(in + " --out ''", &out), 2) << out;
  EXPECT_NE(out.find("--out: expected a folder (the runs root), found an empty string"), std::string::npos) << out;
  EXPECT_EQ(sh(in + " --set run.out=", &out), 2) << out;
  EXPECT_NE(out.find("key 'run.out': expected a folder"), std::string::npos) << out;
  for (const char* name : {"../escape", "objects", "..", "a/b", ""}) {
    EXPECT_EQ(sh(in + " --out runs --name '" + name + "'", &out), 2) << name << "\n" << out;
    EXPECT_NE(out.find("--name: expected a folder name inside the runs root"), std::string::npos) << out;
    EXPECT_EQ(sh(in + " --out runs --set 'run.name=" + name + "'", &out), 2) << name << "\n" << out;
    EXPECT_NE(out.find("key 'run.name': expected a folder name inside the runs root"), std::string::npos) << out;
  }
  EXPECT_EQ(tree(dir), "");
}

// What a config names is checked before the run's folder exists, so the fixed config runs under
// the same name.
TEST(HarnessRun, AConfigNamingAMissingRunCreatesNothing) {
  std::string dir = temp_dir(), out;
  const std::string run = kHarness + " run " + kSmoke + " --out " + dir + " --set loop.steps=0";
  EXPECT_EQ(sh(run + " --set backbone.init_run=" + dir + "/no_such_run", &out), 2) << out;
  EXPECT_NE(out.find("key 'backbone.init_run'"), std::string::npos) << out;
  EXPECT_NE(out.find(dir + "/no_such_run/manifest.bin"), std::string::npos) << out;
  for (const char* key : {"library.seed", "device.profile", "tasks.dir"}) {
    EXPECT_EQ(sh(run + " --set " + key + "=" + dir + "/missing", &out), 2) << key << "\n" << out;
    EXPECT_NE(out.find(key), std::string::npos) << out;
  }
  EXPECT_EQ(tree(dir), "");
  EXPECT_EQ(sh(run, &out), 0) << out;
}

// A folder holding a log but no manifest is refused, and nothing is written beside the log.
// A config whose task selection leaves no training task is refused before the run's folder is
// made (it left a folder, a manifest and an empty log; the rerun was refused as "already holds a
// run" and the suggested --resume repeated the error forever). A rerun with other settings works.
TEST(HarnessRun, ATaskSelectionWithNoTrainingTaskCreatesNothing) {
  std::string root = temp_dir(), out;
  for (const char* set :
       {"'tasks.ids=[\"L1_019\"]'", "tasks.eval_share=1.0", "'tasks.levels=[3]' --set tasks.max_per_level=1"}) {
    EXPECT_EQ(sh(kHarness + " run " + kSmoke + " --out " + root + " --name r --set " + std::string(set), &out), 2)
        << set << ": " << out;
    EXPECT_NE(out.find(kSmoke + ": no training tasks: keys 'tasks.levels', 'tasks.set', 'tasks.ids'"),
              std::string::npos)
        << set << ": " << out;
    EXPECT_NE(out.find("expected at least one training task for loop.steps = "), std::string::npos) << out;
    EXPECT_EQ(out.find("--resume"), std::string::npos) << out;
    EXPECT_NE(access((root + "/r").c_str(), F_OK), 0) << set << ": a refused run leaves no folder";
  }
  EXPECT_EQ(sh(kHarness + " run " + kSmoke + " --out " + root + " --name r --set loop.steps=1", &out), 0) << out;
}

TEST(HarnessRun, ALogWithoutItsManifestIsRefusedAndLeftAlone) {
  std::string dir = temp_dir(), out;
  const std::string run = kHarness + " run " + kSmoke + " --out " + dir + " --set loop.steps=0";
  ASSERT_EQ(sh(run, &out), 0) << out;
  ASSERT_EQ(::unlink((dir + "/smoke/manifest.bin").c_str()), 0);
  std::string before = tree(dir);
  EXPECT_EQ(sh(run, &out), 2) << out;
  EXPECT_NE(out.find("holds a log (" + dir + "/smoke/log) but no manifest"), std::string::npos) << out;
  EXPECT_EQ(tree(dir), before);
}

// The manifest is marked complete only after the reports are written: a run that could not write
// them (here summary.md is a folder, as a full disk would fail it) resumes and writes them.
TEST(HarnessRun, AStopBeforeTheReportsResumesAndWritesThem) {
  std::string dir = temp_dir(), out;
  const std::string run = kHarness + " run " + kSmoke + " --out " + dir + " --set loop.steps=1";
  ASSERT_EQ(sh(run + " --name whole", &out), 0) << out;
  ASSERT_EQ(sh("mkdir -p " + dir + "/stopped/summary.md", &out), 0) << out;
  EXPECT_EQ(sh(run + " --name stopped", &out), 2) << out;
  EXPECT_NE(out.find("harness run --resume " + dir + "/stopped"), std::string::npos) << out;
  auto m = read_manifest(dir + "/stopped/manifest.bin");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_FALSE(m->completed);
  ASSERT_EQ(sh("rmdir " + dir + "/stopped/summary.md", &out), 0) << out;
  ASSERT_EQ(sh(kHarness + " run --resume " + dir + "/stopped", &out), 0) << out;
  EXPECT_EQ(digest_of(dir + "/stopped"), digest_of(dir + "/whole"));
  for (const char* f : {"summary.md", "metrics.csv", "reward.svg", "fast_p_final.svg"}) {
    EXPECT_EQ(access((dir + "/stopped/" + f).c_str(), R_OK), 0) << f;
  }
  EXPECT_EQ(read_file(dir + "/stopped/metrics.csv").value(), read_file(dir + "/whole/metrics.csv").value());
}

// path -> the sha256 of every file under dir ("folder" for a folder): a "nothing changed" check.
std::map<std::string, std::string> checksums(const std::string& dir) {
  std::string out;
  sh("cd " + dir + " && find . -type d -printf 'folder  %p\\n' && find . -type f -print0 | xargs -0 sha256sum", &out);
  std::map<std::string, std::string> sums;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    size_t gap = line.find("  ");
    if (gap != std::string::npos) sums[line.substr(gap + 2)] = line.substr(0, gap);
  }
  return sums;
}

// The paths whose checksum differs between two checksums() calls, or that only one has.
std::vector<std::string> changed(const std::map<std::string, std::string>& before,
                                 const std::map<std::string, std::string>& after) {
  std::vector<std::string> out;
  for (const auto& [path, sum] : before) {
    auto it = after.find(path);
    if (it == after.end())
      out.push_back(path + " (removed)");
    else if (it->second != sum)
      out.push_back(path + " (changed)");
  }
  for (const auto& [path, sum] : after) {
    if (!before.count(path)) out.push_back(path + " (added)");
  }
  return out;
}

// A run folder `to` holding the run `from`'s manifest, marked unfinished, and the log `log_from`'s
// log cut at the start of its middle frame, with a torn frame header after it and a killed
// writer's temporary file beside the manifest: a run killed in the middle of an append.
void make_stopped_run(const std::string& from, const std::string& log_from, const std::string& to) {
  std::string out;
  ASSERT_EQ(sh("mkdir -p " + to + "/log && cp " + log_from + "/log/* " + to + "/log/", &out), 0) << out;
  auto m = read_manifest(from + "/manifest.bin");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  m->completed = false;
  m->record_count = 0;
  m->run_digest = Digest();
  ASSERT_TRUE(write_file_atomic(to + "/manifest.bin", encode_manifest(*m)).ok());
  ASSERT_TRUE(write_file_atomic(to + "/manifest.bin.tmp.99999.0", "a killed writer's").ok());
  auto reader = RunLogReader::open(to + "/log");
  ASSERT_TRUE(reader.ok()) << reader.status().to_string();
  std::vector<LogFrame> frames;
  LogFrame f;
  while ((*reader)->next(&f)) frames.push_back(f);
  ASSERT_GE(frames.size(), 4u);
  const LogFrame& cut = frames[frames.size() / 2];
  ASSERT_EQ(cut.segment + 1, (*reader)->segment_files().size()) << "a log of one segment";
  const std::string segment = (*reader)->segment_files().back();
  std::string bytes = read_file(segment).value();
  ASSERT_TRUE(write_file_atomic(segment, bytes.substr(0, cut.offset) + std::string("\x40\x00\x00", 3)).ok());
}

// A stopped run whose log is another run's (another seed's, here) is refused by --resume, and the
// refused resume changes nothing: the torn tail, the unfinished write, every file under the runs
// root keep every byte (it truncated the tail before re-deriving the first record). The same
// folder with the run's own log resumes to the uninterrupted run's digest, dropping the tail.
TEST(HarnessRun, AResumeOfAnotherRunsLogIsRefusedAndChangesNothing) {
  std::string root = temp_dir(), out;
  const std::string run = kHarness + " run " + kSmoke + " --out " + root + " --set loop.steps=1";
  ASSERT_EQ(sh(run + " --name a", &out), 0) << out;
  ASSERT_EQ(sh(run + " --name b --seed 8", &out), 0) << out;
  ASSERT_NE(digest_of(root + "/a"), digest_of(root + "/b"));
  make_stopped_run(root + "/a", root + "/b", root + "/foreign");
  const auto before = checksums(root);
  ASSERT_GT(before.size(), 10u);
  ASSERT_EQ(before.count("./foreign/log/00000000.vlog"), 1u);
  EXPECT_EQ(sh(kHarness + " run --resume " + root + "/foreign", &out), 2) << out;
  EXPECT_NE(out.find("differs"), std::string::npos) << out;
  EXPECT_NE(out.find("the log of " + root +
                     "/foreign is not this run's: the resume is refused and nothing in the "
                     "folder was changed"),
            std::string::npos)
      << out;
  EXPECT_EQ(out.find("dropped a damaged tail"), std::string::npos) << out;
  EXPECT_EQ(changed(before, checksums(root)), std::vector<std::string>{});

  make_stopped_run(root + "/a", root + "/a", root + "/own");
  ASSERT_EQ(sh(kHarness + " run --resume " + root + "/own", &out), 0) << out;
  EXPECT_NE(out.find("dropped a damaged tail of 3 bytes"), std::string::npos) << out;
  EXPECT_EQ(digest_of(root + "/own"), digest_of(root + "/a"));
  EXPECT_NE(access((root + "/own/manifest.bin.tmp.99999.0").c_str(), F_OK), 0) << "the unfinished write is removed";
}

// --resume continues with the settings the run recorded; others beside it are refused by name.
TEST(HarnessRun, ResumeRefusesOtherSettings) {
  std::string dir = temp_dir(), out;
  for (const char* opt : {"--seed 3", "--set loop.steps=9", "--out /tmp", "--name other", "--threads 2"}) {
    EXPECT_EQ(sh(kHarness + " run --resume " + dir + "/any " + opt, &out), 2) << opt << "\n" << out;
    EXPECT_NE(out.find("--resume takes the run's recorded settings"), std::string::npos) << out;
    std::string flag = std::string(opt).substr(0, std::string(opt).find(' '));
    EXPECT_NE(out.find("found " + flag + " beside it"), std::string::npos) << out;
  }
}

// Numbers and files that make no sense are refused before a run starts, naming the option or key.
TEST(HarnessRun, NonsenseIsRefusedNamingTheOptionOrKey) {
  std::string dir = temp_dir(), out;
  const std::string run = kHarness + " run " + kSmoke + " --out " + dir;
  EXPECT_EQ(sh(run + " --seed -1", &out), 2) << out;
  EXPECT_NE(out.find("--seed: expected an integer from 0 to 9200000000000000000, found '-1'"), std::string::npos)
      << out;
  EXPECT_EQ(sh(run + " --seed 1x", &out), 2) << out;
  EXPECT_NE(out.find("--seed: expected an integer"), std::string::npos) << out;
  EXPECT_EQ(sh(run + " --set reward.base=nan", &out), 2) << out;
  EXPECT_NE(out.find("key 'reward.base' expects a number, found nan"), std::string::npos) << out;
  EXPECT_EQ(sh(run + " --set eval.thresholds=[1,nan]", &out), 2) << out;
  EXPECT_NE(out.find("key 'eval.thresholds' expects a number, found nan"), std::string::npos) << out;
  ASSERT_EQ(sh(": > " + dir + "/empty.toml && printf '# nothing\\n\\n' > " + dir + "/comments.toml", &out), 0);
  EXPECT_EQ(sh(kHarness + " run " + dir + "/empty.toml --out " + dir, &out), 2) << out;
  EXPECT_NE(out.find("experiment config " + dir + "/empty.toml sets nothing"), std::string::npos) << out;
  EXPECT_EQ(sh(kHarness + " run " + dir + "/comments.toml --out " + dir, &out), 2) << out;
  EXPECT_NE(out.find("experiment config " + dir + "/comments.toml sets nothing"), std::string::npos) << out;
  EXPECT_EQ(sh(kHarness + " config " + dir + "/empty.toml", &out), 2) << out;
  EXPECT_EQ(tree(dir), "./comments.toml\n./empty.toml\n");
}

// `harness eval` checks its numbers before it evaluates: nan noise, a sample count that would fill
// memory, and negative counts or seeds are refused, naming the option.
TEST(HarnessEval, NonsenseNumbersAreRefused) {
  std::string out;
  const std::string eval = kHarness + " eval L1_019 --size small";
  struct Case {
    const char* args;
    const char* says;
  } cases[] = {
      {"--noise nan", "--noise: expected a number from 0 to 1, found 'nan'"},
      {"--noise -0.5", "--noise: expected a number from 0 to 1, found '-0.5'"},
      {"--samples 2000000000", "--samples: expected an integer from 1 to 10000, found '2000000000'"},
      {"--samples -5", "--samples: expected an integer from 1 to 10000, found '-5'"},
      {"--trials 0", "--trials: expected an integer from 1 to 100, found '0'"},
      {"--seed -1", "--seed: expected an integer from 0 to"},
      {"--timeout nan", "--timeout: expected a number"},
      {"--profile-phases", "--profile-phases: times the GPU worker's phases, so it needs --device cuda"},
      {"--timing sometimes", "--timing: expected fixed or adaptive, found 'sometimes'"},
      {"--timing adaptive --timing-width 2", "--timing-width: expected a number from 0 to 1"},
      {"--timing adaptive --timing-width nan", "--timing-width: expected a number from 0 to 1, found 'nan'"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(sh(eval + " " + c.args, &out), 2) << c.args << "\n" << out;
    EXPECT_NE(out.find(c.says), std::string::npos) << c.args << "\n" << out;
  }
  EXPECT_EQ(sh(eval + " --samples 10000 --trials 100 --noise 0.1", &out), 0) << out;
}

// `harness eval --plan` reads a reply in the model-facing format as well as plan JSON: a Triton
// reply parses and the sim world reports it not priceable (exit 1); a broken one is a usage error
// naming the file and the line.
TEST(HarnessEval, AModelFacingReplyIsAPlanFile) {
  std::string out;
  const std::string plan = std::string(VINCI_SOURCE_DIR) + "/tests/gpu/triton_plans/L1_019_relu.md";
  EXPECT_EQ(sh(kHarness + " eval L1_019 --size small --samples 3 --trials 1 --plan " + plan, &out), 1) << out;
  EXPECT_NE(out.find("\"not_priceable\""), std::string::npos) << out;
  EXPECT_NE(out.find("it emits no Triton"), std::string::npos) << out;
  std::string dir = temp_dir();
  FILE* f = fopen((dir + "/bad.md").c_str(), "w");
  ASSERT_NE(f, nullptr);
  fputs("```triton\nimport triton\n```\n\n```launch\nk<<<1>>>(x, y)\n```\n", f);
  fclose(f);
  EXPECT_EQ(sh(kHarness + " eval L1_019 --plan " + dir + "/bad.md", &out), 2) << out;
  EXPECT_NE(out.find(dir + "/bad.md: triton block, line 2: the block defines no @triton.jit function"),
            std::string::npos)
      << out;
}

// A KernelBench module is a plan file: the sim world says it cannot price it and records its
// static flags; --check-import builds ModelNew in the sandbox (Debian's python3 with python3-torch,
// CPU-only); what the machine lacks (CUDA for a load_inline module) is exit 2 naming the fix.
TEST(HarnessEval, AKernelBenchModuleIsAPlanFile) {
  std::string out;
  const std::string dir = std::string(VINCI_SOURCE_DIR) + "/tests/gpu/kernelbench_modules/";
  const std::string eval = kHarness + " eval L1_019 --size small --samples 3 --trials 1 --plan ";
  EXPECT_EQ(sh(eval + dir + "relu_torch.py", &out), 1) << out;
  EXPECT_NE(out.find("\"not_priceable\""), std::string::npos) << out;
  EXPECT_NE(out.find("static: torch_computation: torch.relu"), std::string::npos) << out;
  EXPECT_NE(out.find("static: missing_backend: cuda"), std::string::npos) << out;
  EXPECT_NE(out.find("KernelBench module"), std::string::npos) << out;
  EXPECT_EQ(sh(eval + dir + "relu_cuda.py", &out), 1) << out;
  EXPECT_EQ(out.find("missing_backend"), std::string::npos) << out;

  const std::string python = "VINCI_MODULE_PYTHON=/usr/bin/python3 ";
  if (sh("/usr/bin/python3 -c 'import torch; assert torch.version.cuda is None'", &out) == 0) {
    EXPECT_EQ(sh(python + eval + dir + "relu_torch.py --check-import", &out), 0) << out;
    EXPECT_NE(out.find("\"import\":\"ok\""), std::string::npos) << out;
    EXPECT_NE(out.find("\"sandbox\":\"bwrap"), std::string::npos) << out;
    EXPECT_EQ(sh(python + eval + dir + "relu_cuda.py --check-import", &out), 2) << out;
    EXPECT_NE(out.find("built without CUDA"), std::string::npos) << out;
  } else {
    std::printf("skipped --check-import: /usr/bin/python3 has no CPU-only torch (scripts/setup.sh installs it)\n");
  }
  // The CUDA evaluator runs modules; a machine without a GPU says so, as for any plan.
  if (sh("ls /dev/nvidia0 >/dev/null 2>&1", &out) != 0) {
    EXPECT_EQ(sh(eval + dir + "relu_torch.py --device cuda", &out), 2) << out;
    EXPECT_NE(out.find("CUDA worker"), std::string::npos) << out;
  }
  EXPECT_EQ(sh(eval + dir + "relu_torch.py --module-cache " + temp_dir(), &out), 2) << out;
  EXPECT_NE(out.find("--module-cache: keeps the builds of --check-import or --device cuda"), std::string::npos) << out;
  EXPECT_EQ(sh(kHarness + " eval L1_019 --check-import", &out), 2) << out;
  EXPECT_NE(out.find("--check-import: checks a KernelBench module"), std::string::npos) << out;

  // A reply holding no module is named as such.
  std::string tmp = temp_dir();
  FILE* f = fopen((tmp + "/bad.py").c_str(), "w");
  ASSERT_NE(f, nullptr);
  fputs("import torch\n\nclass Model(torch.nn.Module):\n    pass\n", f);
  fclose(f);
  EXPECT_EQ(sh(eval + tmp + "/bad.py", &out), 2) << out;
  EXPECT_NE(out.find(tmp + "/bad.py: "), std::string::npos) << out;
  EXPECT_NE(out.find("ModelNew"), std::string::npos) << out;
}

// Plan limits are evaluator settings: a plan over one is rejected uncompiled, naming the limit
// and the value; a limit not at its default is recorded in the settings, a default one is not.
TEST(HarnessEval, PlanOverALimitIsRejectedNamingTheLimit) {
  std::string out;
  const std::string eval = kHarness + " eval L1_019 --size small --samples 3 --trials 1";
  EXPECT_EQ(sh(eval + " --max-steps 0", &out), 2) << out;
  EXPECT_NE(out.find("--max-steps: expected an integer from 1 to 1000000, found '0'"), std::string::npos) << out;
  EXPECT_EQ(sh(eval + " --max-kernels x", &out), 2) << out;
  EXPECT_NE(out.find("--max-kernels: expected an integer"), std::string::npos) << out;

  ASSERT_EQ(sh(eval + " 2>/dev/null", &out), 0) << out;
  EXPECT_EQ(out.find("max_kernel"), std::string::npos) << out;
  EXPECT_EQ(out.find("max_steps"), std::string::npos) << out;

  ASSERT_EQ(sh(eval + " --max-kernel-source-bytes 100 2>/dev/null", &out), 1) << out;
  nlohmann::json j = nlohmann::json::parse(out);
  EXPECT_FALSE(j.at("compiled").get<bool>());
  EXPECT_FALSE(j.at("correct").get<bool>());
  EXPECT_EQ(j.at("flags"), nlohmann::json::array({"rejected: over_limit"}));
  std::string log = j.at("compileLog").get<std::string>();
  EXPECT_NE(log.find("plan over a limit: kernel '"), std::string::npos) << log;
  EXPECT_NE(log.find("is over the limit max_kernel_source_bytes = 100"), std::string::npos) << log;
  EXPECT_NE(out.find("{\"key\":\"max_kernel_source_bytes\",\"value\":\"100\"}"), std::string::npos) << out;

  ASSERT_EQ(sh(eval + " --max-plan-source-bytes 100 2>/dev/null", &out), 1) << out;
  EXPECT_NE(out.find("is over the limit max_plan_source_bytes = 100"), std::string::npos) << out;
  // The generated plan of L1_019 has one kernel and one step.
  ASSERT_EQ(sh(eval + " --max-kernels 1 --max-steps 1 2>/dev/null", &out), 0) << out;
}

// Messages that named nothing useful: an empty run folder read as "/manifest.bin", an empty --out
// as Python's "[Errno 2] ... ''", a damaged complete run called "complete; nothing to resume",
// serve's library error without its option, coldstart's errors as "harness run:".
TEST(HarnessInput, UnclearMessagesNowNameWhatIsWrong) {
  const std::string replay = std::string(VINCI_BINARY_DIR) + "/bin/replay";
  std::string root = temp_dir(), out;
  EXPECT_EQ(sh(kHarness + " run --resume ''", &out), 2) << out;
  EXPECT_NE(out.find("harness run: --resume: expected a run folder, found an empty string"), std::string::npos) << out;
  for (const char* cmd : {"verify", "score", "cat", "export"}) {
    EXPECT_EQ(sh(replay + " " + cmd + " ''", &out), 2) << cmd << ": " << out;
    EXPECT_NE(out.find(std::string("replay ") + cmd + ": RUN: expected a run folder, found an empty string"),
              std::string::npos)
        << out;
  }
  ASSERT_EQ(sh(kHarness + " run " + kSmoke + " --out " + root + " --name c --set loop.steps=1", &out), 0) << out;
  EXPECT_EQ(sh(replay + " export " + root + "/c --out ''", &out), 2) << out;
  EXPECT_NE(out.find("replay export: --out: expected a file, found an empty string"), std::string::npos) << out;
  EXPECT_EQ(sh(replay + " export " + root + "/c --format jsonl --out ''", &out), 2) << out;
  EXPECT_NE(out.find("replay export: --out: expected a folder, found an empty string"), std::string::npos) << out;
  // A complete run whose log was damaged afterwards: resuming it says what is wrong.
  EXPECT_EQ(sh(kHarness + " run --resume " + root + "/c", &out), 2) << out;
  EXPECT_NE(out.find("run " + root + "/c is complete; nothing to resume"), std::string::npos) << out;
  std::string seg = root + "/c/log/00000000.vlog";
  std::string bytes = read_file(seg).value();
  bytes[bytes.size() / 2] ^= 0x40;
  ASSERT_TRUE(write_file_atomic(seg, bytes).ok());
  EXPECT_EQ(sh(kHarness + " run --resume " + root + "/c", &out), 2) << out;
  EXPECT_NE(out.find("run " + root + "/c is complete but damaged after record "), std::string::npos) << out;
  EXPECT_NE(out.find("a complete run is not resumed: make it again from its config under another name"),
            std::string::npos)
      << out;
  EXPECT_EQ(sh(kHarness + " run " + kSmoke + " --out " + root + " --name c --set loop.steps=1", &out), 2) << out;
  EXPECT_NE(out.find("already holds a complete run; pick another name"), std::string::npos) << out;
  EXPECT_EQ(sh(kHarness + " serve --port 0 --library " + root + "/nonexistent.jsonl", &out), 2) << out;
  EXPECT_NE(out.find("harness serve: --library: no such file: " + root + "/nonexistent.jsonl"), std::string::npos)
      << out;
  EXPECT_EQ(sh(kHarness + " coldstart " + kSmoke + " --out ''", &out), 2) << out;
  EXPECT_EQ(out.rfind("harness coldstart: --out: expected a folder", 0), 0u) << out;
  EXPECT_EQ(sh(kHarness + " coldstart " + kSmoke + " --out " + root + " --name c", &out), 2) << out;
  EXPECT_EQ(out.rfind("harness coldstart: run folder " + root + "/c already holds", 0), 0u) << out;
  EXPECT_EQ(sh(kHarness + " eval L1_019 --plan " + root, &out), 2) << out;
  EXPECT_NE(out.find(root + ": expected a regular file (plan), found a folder"), std::string::npos) << out;
}

// Every path a user names, pointed at a device that never ends, a FIFO without a writer or a
// folder, is refused naming the file and what it is (it was read whole: std::bad_alloc, exit 134;
// the FIFO waited forever). `timeout` only keeps an old binary's hang from stalling the suite.
TEST(HarnessInput, EveryUserNamedPathRefusesDevicesFifosAndFolders) {
  std::string root = temp_dir(), out;
  const std::string fifo = root + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::vector<std::string> commands = {
      " config @",
      " run @ --out " + root,
      " eval L1_019 --size small --samples 3 --trials 1 --plan @",
      " eval L1_019 --size small --samples 3 --trials 1 --profile @",
      " skills search @ tiling",
      " run " + kSmoke + " --out " + root + " --name lib --set library.seed=@",
      " run " + kSmoke + " --out " + root + " --name prof --set device.profile=@",
  };
  const std::vector<std::pair<std::string, std::string>> paths = {{"/dev/zero", "a character device"},
                                                                  {"/dev/urandom", "a character device"},
                                                                  {fifo, "a FIFO"},
                                                                  {root, "a folder"}};
  for (const std::string& command : commands) {
    for (const auto& [path, what] : paths) {
      std::string cmd = command;
      cmd.replace(cmd.find('@'), 1, path);
      int rc = sh("timeout 120 " + kHarness + cmd, &out);
      EXPECT_TRUE(rc == 1 || rc == 2) << cmd << " exited " << rc << ": " << out;
      EXPECT_NE(out.find(path + ": expected a regular file"), std::string::npos) << cmd << ": " << out;
      EXPECT_NE(out.find("found " + what), std::string::npos) << cmd << ": " << out;
    }
  }
}

TEST(HarnessServe, NonsenseNumbersAreRefused) {
  std::string out;
  EXPECT_EQ(sh(kHarness + " serve --seed -1", &out), 2) << out;
  EXPECT_NE(out.find("harness serve: --seed: expected an integer from 0 to"), std::string::npos) << out;
  EXPECT_EQ(sh(kHarness + " serve --port 70000", &out), 2) << out;
  EXPECT_NE(out.find("harness serve: --port: expected an integer from 0 to 65535, found '70000'"), std::string::npos)
      << out;
}

// `harness oracle`: the best plan of each held-out task's knob space. It is deterministic; no
// setting evaluated on its own by `harness eval` beats it; a budget as large as the space searches
// it whole; and it refuses what it cannot search.
TEST(HarnessOracle, FindsTheBestOfTheKnobSpaceDeterministically) {
  std::string dir = temp_dir(), out;
  const std::string oracle = kHarness + " oracle " + kSmoke + " --format json";
  ASSERT_EQ(sh("(" + oracle + " --budget 200 2>/dev/null) >" + dir + "/a.json", &out), 0) << out;
  ASSERT_EQ(sh("(" + oracle + " --budget 200 2>/dev/null) >" + dir + "/b.json", &out), 0) << out;
  std::string a = read_file(dir + "/a.json").value();
  EXPECT_EQ(a, read_file(dir + "/b.json").value());
  nlohmann::json j = nlohmann::json::parse(a);
  ASSERT_FALSE(j.at("tasks").empty());
  EXPECT_EQ(j.at("fast_p_definition"), "speedup > p");
  // The smoke config's noise is 0, so `harness eval` of a setting gives the speedup the oracle saw.
  std::set<std::string> levels;
  std::set<int> levels_checked;
  int searched = 0;
  for (const auto& t : j.at("tasks")) {
    std::string id = t.at("task").get<std::string>();
    double best = t.at("speedup").get<double>();
    levels.insert("L" + std::to_string(t.at("level").get<int>()));
    EXPECT_LE(t.at("evaluated").get<int64_t>(), 200) << id;
    // The oracle's own plan, re-evaluated.
    std::string knobs;
    for (const auto& [k, v] : t.at("knobs").items()) knobs += " --knob " + k + "=" + v.get<std::string>();
    ASSERT_LE(sh("(" + kHarness + " eval " + id + " --size small" + knobs + " 2>/dev/null) >" + dir + "/e.json", &out),
              1)
        << out;
    nlohmann::json e = nlohmann::json::parse(read_file(dir + "/e.json").value());
    EXPECT_EQ(e.at("speedup").get<double>(), best) << id;
    EXPECT_EQ(e.at("plan").get<std::string>(), t.at("plan").get<std::string>()) << id;
    // The default plan and two keyed random settings of its knob space do no better (one task per
    // level: each `harness` process loads the whole suite).
    if (!levels_checked.insert(t.at("level").get<int>()).second) continue;
    ASSERT_EQ(sh("(" + kHarness + " tasks --knobs " + id + " 2>/dev/null) >" + dir + "/k.txt", &out), 0) << out;
    std::vector<std::pair<std::string, std::vector<std::string>>> space;
    std::istringstream lines(read_file(dir + "/k.txt").value());
    for (std::string line; std::getline(lines, line);) {
      std::istringstream w(line.substr(0, line.find('#')));
      std::string name, c;
      if (!(w >> name) || line.find(" settings (") != std::string::npos) continue;  // the summary line
      std::vector<std::string> choices;
      while (w >> c) choices.push_back(c.back() == '*' ? c.substr(0, c.size() - 1) : c);
      if (!choices.empty()) space.emplace_back(name, choices);
    }
    ASSERT_FALSE(space.empty()) << id;
    Stream rng(RngKey::root(5).with("task", id));
    for (int i = 0; i < 3; ++i) {
      std::string args;
      for (const auto& [name, choices] : space)
        if (i > 0) args += " --knob " + name + "=" + choices[rng.below(choices.size())];
      int rc = sh("(" + kHarness + " eval " + id + " --size small" + args + " 2>/dev/null) >" + dir + "/r.json", &out);
      if (rc == 2) continue;  // a setting the generator refuses
      nlohmann::json r = nlohmann::json::parse(read_file(dir + "/r.json").value());
      if (r.at("correct").get<bool>()) {
        EXPECT_LE(r.at("speedup").get<double>(), best) << id << args;
      }
      ++searched;
    }
  }
  EXPECT_GT(searched, 0);
  EXPECT_EQ(levels.size(), 2u);
  // A budget as large as a task's space: searched whole, never worse than the sampled search.
  ASSERT_EQ(sh("(" + oracle + " --budget 1500 2>/dev/null) >" + dir + "/whole.json", &out), 0) << out;
  nlohmann::json w = nlohmann::json::parse(read_file(dir + "/whole.json").value());
  ASSERT_EQ(w.at("tasks").size(), j.at("tasks").size());
  int whole = 0;
  for (size_t i = 0; i < w.at("tasks").size(); ++i) {
    const auto& t = w.at("tasks")[i];
    if (!t.at("exhaustive").get<bool>()) continue;
    ++whole;
    EXPECT_EQ(t.at("evaluated").get<double>(), t.at("settings").get<double>()) << t.at("task");
    EXPECT_GE(t.at("speedup").get<double>(), j.at("tasks")[i].at("speedup").get<double>()) << t.at("task");
  }
  EXPECT_GT(whole, 0);

  EXPECT_EQ(sh(kHarness + " oracle " + kSmoke + " --budget 0", &out), 2) << out;
  EXPECT_NE(out.find("--budget: expected 1 to 100000000, found 0"), std::string::npos) << out;
  EXPECT_EQ(sh(kHarness + " oracle " + kSmoke + " --set device.kind=cuda", &out), 2) << out;
  EXPECT_NE(out.find("device.kind: the oracle searches the sim world, found 'cuda'"), std::string::npos) << out;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace vinci
