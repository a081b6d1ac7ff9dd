// The replay CLI end to end, and the regression gate CI relies on: the golden run verifies, a
// re-run of its config diffs equal to it, and a changed constant or a tampered record is caught
// at its first divergence.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <capnp/message.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "core/atomic_file.h"
#include "recorder/run.h"
#include "recorder/vinci.capnp.h"
#include "replay/paired_bootstrap.h"
#include "tests/cli_test_util.h"

namespace vinci {
namespace {

const std::string kBin = std::string(VINCI_BINARY_DIR) + "/bin/";
const std::string kSrc = std::string(VINCI_SOURCE_DIR) + "/";
const std::string kGolden = kSrc + "tests/golden/runs/smoke";

std::string temp_dir() { return clitest::temp_dir("vinci_replay_"); }
using clitest::sh;

// A copy of a run (and the objects it names) under a new root.
std::string copy_run(const std::string& run, const std::string& root) {
  std::string out;
  EXPECT_EQ(sh("mkdir -p " + root + " && cp -r " + run + " " + root + "/ && cp -r " + run + "/../objects " + root + "/",
               &out),
            0)
      << out;
  return root + "/smoke";
}

// Rewrites the first record of `run` for which edit() returns true (edit changes the record in
// place), keeping every frame valid: a tamper, not damage. Returns the record's index, or -1.
int64_t tamper_first(const std::string& run, const std::function<bool(schema::Record::Builder)>& edit) {
  std::string seg = run + "/log/00000000.vlog";
  std::string bytes = read_file(seg).value();
  std::string rebuilt = bytes.substr(0, kSegmentHeaderSize);
  size_t pos = kSegmentHeaderSize;
  int64_t index = 0, tampered = -1;
  while (pos < bytes.size()) {
    uint32_t len;
    std::memcpy(&len, bytes.data() + pos + 0, 4);
    std::string payload = bytes.substr(pos + 8, len);
    pos += 8 + len;
    auto view = RecordView::decode(payload);
    EXPECT_TRUE(view.ok());
    if (tampered < 0) {
      capnp::MallocMessageBuilder msg;
      msg.setRoot((*view)->message().getRoot<schema::Record>());
      if (edit(msg.getRoot<schema::Record>())) {
        payload = encode_message(msg);
        tampered = index;
      }
    }
    uint32_t n = static_cast<uint32_t>(payload.size()), c = frame_checksum(payload);
    rebuilt.append(reinterpret_cast<const char*>(&n), 4);
    rebuilt.append(reinterpret_cast<const char*>(&c), 4);
    rebuilt += payload;
    ++index;
  }
  EXPECT_TRUE(write_file_atomic(seg, rebuilt).ok());
  return tampered;
}

// The 32 hex digits after `"field":"` in the first line of `text` that contains `anchor`.
std::string hex_after(const std::string& text, const std::string& anchor, const std::string& field) {
  size_t at = text.find(anchor);
  if (at == std::string::npos) return "";
  size_t line_end = text.find('\n', at);
  size_t line_start = text.rfind('\n', at);
  line_start = line_start == std::string::npos ? 0 : line_start + 1;
  std::string line = text.substr(line_start, line_end - line_start);
  size_t f = line.find("\"" + field + "\":\"");
  if (f == std::string::npos) return "";
  return line.substr(f + field.size() + 4, 32);
}

TEST(Checkpoints, VerifyChecksEveryStoredCheckpointObject) {
  std::string root = temp_dir(), out;
  std::string run = copy_run(kGolden, root);
  ASSERT_EQ(sh(kBin + "replay verify " + run, &out), 0) << out;
  // smoke.toml: the cold start's checkpoint, step 0's (the same object) and one per step.
  EXPECT_NE(out.find("checked 4 checkpoint objects"), std::string::npos) << out;
  ASSERT_EQ(sh(kBin + "replay cat " + run + " --no-manifest", &out), 0);
  std::string addr = hex_after(out, "\"parameterDigest\"", "checkpoint");
  ASSERT_EQ(addr.size(), 32u) << out.substr(0, 2000);
  // Damage the stored object of step 0's update: verify re-derives the records (they name the
  // object by address) but the stored bytes no longer hash to it.
  std::string path = root + "/objects/" + addr.substr(0, 2) + "/" + addr.substr(2);
  std::string bytes = read_file(path).value();
  bytes[bytes.size() - 7] ^= 0x01;
  ASSERT_TRUE(write_file_atomic(path, bytes).ok());
  EXPECT_NE(sh(kBin + "replay verify " + run, &out), 0) << out;
  EXPECT_NE(out.find("checkpoint object " + addr), std::string::npos) << out;
}

TEST(Checkpoints, ATamperedCheckpointRecordFailsVerify) {
  std::string run = copy_run(kGolden, temp_dir()), out;
  int64_t at = tamper_first(run, [](schema::Record::Builder r) {
    if (!r.isParameterDigest()) return false;
    auto c = r.getParameterDigest().getCheckpoint();
    c[0] ^= 0xff;  // names another object
    return true;
  });
  ASSERT_GE(at, 0);
  EXPECT_EQ(sh(kBin + "replay verify " + run, &out), 1) << out;
  EXPECT_NE(out.find("record " + std::to_string(at) + " ("), std::string::npos) << out;
}

// The offset of every frame of a log segment's bytes, in order.
std::vector<size_t> frame_offsets(const std::string& bytes) {
  std::vector<size_t> frames;
  for (size_t pos = kSegmentHeaderSize; pos < bytes.size();) {
    frames.push_back(pos);
    uint32_t len;
    std::memcpy(&len, bytes.data() + pos, 4);
    pos += kFrameHeaderSize + len;
  }
  return frames;
}

// A run every replay reader calls damaged is no backbone.init_run: a log cut at a frame boundary
// (its last checkpoint is then an early one: a run started from step 1 with exit 0), a corrupt
// frame. Nothing is created for the refused run.
TEST(Checkpoints, ADamagedRunIsNoStartingPoint) {
  std::string root = temp_dir(), out;
  const std::string smoke = kBin + "harness run " + kSrc + "experiments/smoke.toml --out " + root;
  ASSERT_EQ(sh(smoke + " --name src", &out), 0) << out;
  const std::string from = smoke + " --name from --set coldstart.enabled=false --set backbone.init_step=-1";
  std::string seg = root + "/src/log/00000000.vlog";
  std::string bytes = read_file(seg).value();
  std::vector<size_t> frames = frame_offsets(bytes);
  ASSERT_GT(frames.size(), 40u);
  // Cut at a frame boundary halfway: every frame left is valid; only the manifest tells.
  ASSERT_TRUE(write_file_atomic(seg, bytes.substr(0, frames[frames.size() / 2])).ok());
  EXPECT_EQ(sh(from + " --set backbone.init_run=" + root + "/src", &out), 2) << out;
  EXPECT_NE(out.find("key 'backbone.init_run': Corruption: run " + root + "/src is damaged after record " +
                     std::to_string(frames.size() / 2)),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("a damaged run is no starting point"), std::string::npos) << out;
  EXPECT_NE(access((root + "/from").c_str(), F_OK), 0) << "a refused run leaves no folder";
  // A flipped byte inside a frame.
  std::string flipped = bytes;
  flipped[frames[frames.size() / 2] + kFrameHeaderSize + 1] ^= 0x40;
  ASSERT_TRUE(write_file_atomic(seg, flipped).ok());
  EXPECT_EQ(sh(from + " --set backbone.init_run=" + root + "/src", &out), 2) << out;
  EXPECT_NE(out.find("a damaged run is no starting point"), std::string::npos) << out;
  // Whole again, it is one.
  ASSERT_TRUE(write_file_atomic(seg, bytes).ok());
  EXPECT_EQ(sh(from + " --set backbone.init_run=" + root + "/src", &out), 0) << out;
  // An unfinished run (stopped before its reports: summary.md is a folder) has no "last" step.
  ASSERT_EQ(sh("mkdir -p " + root + "/stopped/summary.md", &out), 0) << out;
  ASSERT_EQ(sh(smoke + " --name stopped", &out), 2) << out;
  const std::string from2 = smoke + " --name from2 --set coldstart.enabled=false";
  EXPECT_EQ(sh(from2 + " --set backbone.init_step=-1 --set backbone.init_run=" + root + "/stopped", &out), 2) << out;
  EXPECT_NE(out.find("run " + root + "/stopped is unfinished (its manifest is not complete)"), std::string::npos)
      << out;
  EXPECT_EQ(sh(from2 + " --set backbone.init_step=1 --set backbone.init_run=" + root + "/stopped", &out), 0) << out;
}

TEST(Checkpoints, ARunStartsFromAStepOfAnotherRun) {
  std::string root = temp_dir(), out;
  ASSERT_EQ(sh(kBin + "harness run " + kSrc + "experiments/smoke.toml --out " + root, &out), 0) << out;
  std::string src = root + "/smoke";
  ASSERT_EQ(sh(kBin + "harness run " + kSrc + "experiments/smoke.toml --out " + root +
                   " --name from --set coldstart.enabled=false --set backbone.init_run=" + src +
                   " --set backbone.init_step=1",
               &out),
            0)
      << out;
  ASSERT_EQ(sh(kBin + "replay verify " + root + "/from", &out), 0) << out;
  ASSERT_EQ(sh(kBin + "replay verify " + root + "/from --backbone recorded", &out), 0) << out;
  // Its checkpoint record names the source's parameters after step 0's update.
  std::string src_records, records;
  ASSERT_EQ(sh(kBin + "replay cat " + src + " --no-manifest", &src_records), 0);
  ASSERT_EQ(sh(kBin + "replay cat " + root + "/from --no-manifest", &records), 0);
  std::string want = hex_after(src_records, "\"parameterDigest\"", "digest");
  ASSERT_EQ(want.size(), 32u);
  EXPECT_EQ(hex_after(records, "\"checkpoint\":{", "digest"), want) << records.substr(0, 600);
  EXPECT_NE(records.find("\"origin\":\"run\""), std::string::npos);
  EXPECT_NE(records.find("\"sourceStep\":1"), std::string::npos);
  // Its first training step starts from those parameters.
  EXPECT_EQ(hex_after(records, "\"stepBegin\"", "paramDigest"), want);
  // A step the source does not have is an error that lists the ones it has.
  EXPECT_EQ(sh(kBin + "harness run " + kSrc + "experiments/smoke.toml --out " + root +
                   " --name bad --set backbone.init_run=" + src + " --set backbone.init_step=9",
               &out),
            2);
  EXPECT_NE(out.find("no checkpoint for the start of step 9 (it has: 0 1 2)"), std::string::npos) << out;
  // Altering the source's history after the fact is caught when the derived run is verified.
  int64_t at = tamper_first(src, [](schema::Record::Builder r) {
    if (!r.isReward()) return false;
    r.getReward().setValue(r.getReward().getValue() + 1);
    return true;
  });
  ASSERT_GE(at, 0);
  // The tampered source's log no longer has its manifest's digest: it is damaged, no starting point.
  EXPECT_EQ(sh(kBin + "replay verify " + root + "/from", &out), 2) << out;
  EXPECT_NE(out.find("run " + src + " is damaged"), std::string::npos) << out;
  EXPECT_NE(out.find("a damaged run is no starting point"), std::string::npos) << out;
}

TEST(TestTimeScaling, RecordedAndReplayed) {
  std::string run = copy_run(kGolden, temp_dir()), out;
  ASSERT_EQ(sh(kBin + "replay cat " + run + " --no-manifest", &out), 0);
  // smoke.toml: 3 iterations x 2 turns, window 2: per held-out task 6 turns and 2 windows.
  EXPECT_NE(out.find("\"phase\":\"tts\""), std::string::npos);
  EXPECT_NE(out.find("\"ttsWindow\""), std::string::npos);
  EXPECT_NE(out.find("\"split\":\"tts\",\"level\":1,\"threshold\":1,\"turnMode\":\"best\""), std::string::npos);
  EXPECT_NE(out.find("\"turnMode\":\"last\""), std::string::npos);
  // A window the loop would not have chosen is caught at its record.
  int64_t at = tamper_first(run, [](schema::Record::Builder r) {
    if (!r.isTtsWindow()) return false;
    auto w = r.getTtsWindow();
    w.setStart(w.getStart() == 0 ? 1 : 0);
    return true;
  });
  ASSERT_GE(at, 0);
  EXPECT_EQ(sh(kBin + "replay verify " + run, &out), 1) << out;
  EXPECT_NE(out.find("record " + std::to_string(at) + " ("), std::string::npos) << out;
  EXPECT_NE(out.find("ttsWindow"), std::string::npos) << out;
}

TEST(Golden, VerifiesAndARerunDiffsEqual) {
  std::string out;
  ASSERT_EQ(sh(kBin + "replay verify " + kGolden, &out), 0)
      << out
      << "\nIf this change of behaviour is deliberate, re-record the golden run with "
         "scripts/update_golden.sh in the same commit and say why.";
  std::string root = temp_dir();
  ASSERT_EQ(sh(kBin + "harness run " + kSrc + "experiments/smoke.toml --out " + root, &out), 0) << out;
  EXPECT_EQ(sh(kBin + "replay diff " + kGolden + " " + root + "/smoke", &out), 0) << out;
  EXPECT_NE(out.find("runs are equal"), std::string::npos) << out;
}

// A language-model run recorded on an H100 (experiments/llm_main.toml, shortened, against
// `harness serve`, every candidate compiled and timed on the GPU) replays here with neither a GPU
// nor a server: model replies and measurements come from its log.
TEST(Golden, LiveLanguageModelRunVerifiesWithoutGpuOrServer) {
  std::string out;
  ASSERT_EQ(sh(kBin + "replay verify " + kSrc + "tests/golden/llm_live/llm_main", &out), 0) << out;
  EXPECT_NE(out.find("digest: 3a73ad0d0170fa7e5546ab62f1714e01"), std::string::npos) << out;
  ASSERT_EQ(sh(kBin + "replay cat " + kSrc + "tests/golden/llm_live/llm_main | grep -c '\"llmReply\"'", &out), 0);
  EXPECT_EQ(std::stoi(out), 54) << out;
  ASSERT_EQ(sh(kBin + "replay cat " + kSrc + "tests/golden/llm_live/llm_main | grep -c '\"evaluator\":\"cuda\"'", &out),
            0);
  EXPECT_EQ(std::stoi(out), 44) << out;
}

TEST(Golden, GateFailsOnAChangedConstant) {
  std::string root = temp_dir(), out;
  // A reward constant and a BM25 parameter, each changed a little.
  for (const std::string set : {"reward.base=0.55", "selection.bm25_k1=1.2"}) {
    std::string name = set.substr(0, set.find('.'));
    ASSERT_EQ(
        sh(kBin + "harness run " + kSrc + "experiments/smoke.toml --out " + root + " --name " + name + " --set " + set,
           &out),
        0)
        << out;
    EXPECT_EQ(sh(kBin + "replay diff " + kGolden + " " + root + "/" + name, &out), 1) << out;
    EXPECT_NE(out.find("first divergence at record"), std::string::npos) << out;
  }
}

TEST(Replay, VerifyStopsAtATamperedRecord) {
  std::string run = copy_run(kGolden, temp_dir());
  // Rewrite one reward record with another value, keeping the frame valid (a tamper, not damage).
  int64_t tampered = tamper_first(run, [](schema::Record::Builder r) {
    if (!r.isReward() || r.getReward().getValue() <= 0) return false;
    r.getReward().setValue(r.getReward().getValue() + 0.25);
    return true;
  });
  ASSERT_GE(tampered, 0);
  std::string count;
  ASSERT_EQ(sh(kBin + "replay cat " + kGolden + " --no-manifest | wc -l", &count), 0);
  uint64_t index = std::stoull(count);
  std::string out;
  EXPECT_EQ(sh(kBin + "replay verify " + run, &out), 1) << out;
  EXPECT_NE(out.find("record " + std::to_string(tampered) + " ("), std::string::npos) << out;
  EXPECT_NE(out.find("reward"), std::string::npos) << out;
  // cat still reads every record of the tampered run.
  EXPECT_EQ(sh(kBin + "replay cat " + run + " --no-manifest | wc -l", &out), 0);
  EXPECT_EQ(std::stoull(out), index);
}

// Another CPU kernel set moves the sim backbone's numbers: verify re-derives, stops at the first
// divergence and names the setting as the likely cause; rescore, which writes new records nothing
// could check, refuses and names it.
TEST(Replay, OtherNumericSettingsAreNamed) {
  std::string out;
  EXPECT_EQ(sh("ATEN_CPU_CAPABILITY=avx2 " + kBin + "replay verify " + kGolden, &out), 1) << out;
  EXPECT_NE(out.find("the run was recorded under other numeric settings, which may be why:\n  "
                     "torch_cpu_capability: recorded 'NO AVX', here 'AVX2'"),
            std::string::npos)
      << out;
  std::string root = temp_dir();
  std::string run = copy_run(kGolden, root);
  EXPECT_EQ(
      sh("ATEN_CPU_CAPABILITY=avx2 " + kBin + "replay rescore " + run + " --device sim --out " + root + "/r", &out), 2)
      << out;
  EXPECT_NE(out.find("(use --force to rescore anyway):\n  torch_cpu_capability: recorded 'NO AVX', here 'AVX2'"),
            std::string::npos)
      << out;
}

// A variable that steers nothing in effect is not a numeric setting: a run whose manifest says
// OPENBLAS_CORETYPE was set verifies where it is not (and the other way round), with no note.
TEST(Replay, EnvironmentStringsAreNotSettings) {
  std::string out;
  ASSERT_EQ(sh("OPENBLAS_CORETYPE=Haswell " + kBin + "replay verify " + kGolden, &out), 0) << out;
  EXPECT_EQ(out.find("note:"), std::string::npos) << out;
  ASSERT_EQ(sh("env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE " + kBin + "replay verify " + kGolden, &out), 0) << out;
  EXPECT_EQ(out.find("note:"), std::string::npos) << out;
  ASSERT_EQ(sh(kBin + "replay cat " + kGolden + " | head -n 1", &out), 0) << out;
  EXPECT_NE(out.find("{\"key\":\"blas\",\"value\":\"reference blas/"), std::string::npos)
      << "the manifest records the BLAS in effect: " << out;
  // vinci's programs load the reference BLAS whatever libblas.so.3 points to.
  ASSERT_EQ(sh(kBin + "harness env", &out), 0) << out;
  EXPECT_NE(out.find("pinned blas=reference blas/"), std::string::npos) << out;
}

TEST(Replay, VerifyWithTheRecordedBackbone) {
  std::string root = temp_dir(), out;
  ASSERT_EQ(sh(kBin + "harness run " + kSrc + "experiments/smoke.toml --out " + root, &out), 0) << out;
  EXPECT_EQ(sh(kBin + "replay verify " + root + "/smoke --backbone recorded", &out), 0) << out;
  EXPECT_NE(out.find("verified"), std::string::npos) << out;
}

// Rescoring under the run's own sim profile re-derives the same rewards: no fast_p moves and no
// verdict flips, and the new run verifies from its own log.
TEST(Rescore, UnderTheRunsOwnProfileNothingMoves) {
  std::string root = temp_dir(), out;
  std::string run = copy_run(kGolden, root);
  ASSERT_EQ(sh(kBin + "replay rescore " + run + " --device sim --out " + root + "/same", &out), 0) << out;
  EXPECT_NE(out.find("## Verdicts that flip (last turn of the final evaluation)\n\nNone."), std::string::npos) << out;
  EXPECT_NE(out.find("| +0.0 |"), std::string::npos) << out;
  EXPECT_FALSE(std::regex_search(out, std::regex("\\| [+-][0-9.]*[1-9][0-9.]* \\|"))) << "a fast_p moved:\n" << out;
  EXPECT_NE(out.find("| **all** |"), std::string::npos) << out;
  EXPECT_EQ(sh(kBin + "replay verify " + root + "/same", &out), 0) << out;
  std::string digest = out.substr(out.find("digest: "));
  EXPECT_EQ(read_file(root + "/same/drift.md").ok(), true);
  // Its saved measurements are taken up again: nothing is measured twice, the run is the same.
  ASSERT_EQ(sh(kBin + "replay rescore " + run + " --device sim --out " + root + "/again --reuse " + root +
                   "/same/measurements.jsonl",
               &out),
            0)
      << out;
  EXPECT_NE(out.find("(0 measured, "), std::string::npos) << out;
  EXPECT_EQ(sh(kBin + "replay verify " + root + "/again", &out), 0) << out;
  EXPECT_EQ(out.substr(out.find("digest: ")), digest);
  // A rescore stopped while writing leaves its last line cut short: that plan is measured again
  // and the run is the same. A damaged line elsewhere is an error naming it.
  std::string saved = read_file(root + "/same/measurements.jsonl").value();
  ASSERT_GT(saved.size(), 200u);
  ASSERT_TRUE(write_file_atomic(root + "/cut.jsonl", saved.substr(0, saved.size() - 100)).ok());
  ASSERT_EQ(
      sh(kBin + "replay rescore " + run + " --device sim --out " + root + "/cut --reuse " + root + "/cut.jsonl", &out),
      0)
      << out;
  EXPECT_NE(out.find("cut.jsonl:"), std::string::npos) << out;
  EXPECT_NE(out.find("the last line is cut short"), std::string::npos) << out;
  EXPECT_NE(out.find("(1 measured, "), std::string::npos) << out;
  EXPECT_EQ(sh(kBin + "replay verify " + root + "/cut", &out), 0) << out;
  EXPECT_EQ(out.substr(out.find("digest: ")), digest);
  ASSERT_TRUE(write_file_atomic(root + "/bad.jsonl", "{\"measurement\"\n" + saved).ok());
  EXPECT_EQ(
      sh(kBin + "replay rescore " + run + " --device sim --out " + root + "/bad --reuse " + root + "/bad.jsonl", &out),
      2)
      << out;
  EXPECT_NE(out.find("bad.jsonl:1: not a rescore measurement line"), std::string::npos) << out;
  std::string first = saved.substr(0, saved.find('\n'));
  size_t hex_at = first.find("\"measurement\":\"") + 15;
  first[hex_at] = 'g';
  ASSERT_TRUE(write_file_atomic(root + "/nothex.jsonl", first + "\n").ok());
  EXPECT_EQ(
      sh(kBin + "replay rescore " + run + " --device sim --out " + root + "/nothex --reuse " + root + "/nothex.jsonl",
         &out),
      2)
      << out;
  EXPECT_NE(out.find("nothex.jsonl:1: the measurement is not hex"), std::string::npos) << out;
  // An existing folder is refused, not overwritten.
  EXPECT_EQ(sh(kBin + "replay rescore " + run + " --device sim --out " + root + "/same", &out), 2) << out;
  EXPECT_NE(out.find("already exists"), std::string::npos) << out;
  EXPECT_EQ(sh(kBin + "replay rescore " + run + " --out " + root + "/x", &out), 2) << out;
  EXPECT_NE(out.find("--live"), std::string::npos) << out;
}

// A rescore stopped before its end (here killed at the rename that puts drift.md in place, the
// last write before its manifest is marked complete) leaves an unfinished run, never a complete
// one without its report. The kill is strace's: a SIGKILL at the entry of that system call.
TEST(Rescore, KilledBeforeItsReportLeavesNoCompleteRun) {
  if (std::string why = clitest::strace_unusable(); !why.empty()) GTEST_SKIP() << why;
  std::string out;
  const std::string whole = temp_dir(), killed = temp_dir();
  const std::string rescore = kBin + "replay rescore ";
  ASSERT_EQ(sh("strace -f -qq -s 256 -o " + whole + "/trace -e trace=rename " + rescore + copy_run(kGolden, whole) +
                   " --device sim --out " + whole + "/new",
               &out),
            0)
      << out;
  // strace counts a system call per thread: the renames of the thread that renames drift.md.
  std::string trace = read_file(whole + "/trace").value(), line, pid;
  std::istringstream lines(trace);
  std::vector<std::pair<std::string, std::string>> renames;  // (pid, line)
  while (std::getline(lines, line)) {
    if (line.find(" rename(") == std::string::npos) continue;
    renames.emplace_back(line.substr(0, line.find(' ')), line);
    if (line.find("/drift.md\"") != std::string::npos) pid = renames.back().first;
  }
  ASSERT_FALSE(pid.empty()) << trace;
  int nth = 0;
  for (const auto& [p, l] : renames) {
    if (p != pid) continue;
    ++nth;
    if (l.find("/drift.md\"") != std::string::npos) break;
  }
  EXPECT_TRUE(read_manifest(whole + "/new/manifest.bin").value().completed);
  int rc = sh("strace -f -qq -o /dev/null -e trace=rename -e inject=rename:signal=KILL:when=" + std::to_string(nth) +
                  " " + rescore + copy_run(kGolden, killed) + " --device sim --out " + killed + "/new",
              &out);
  ASSERT_NE(rc, 0) << out;
  auto m = read_manifest(killed + "/new/manifest.bin");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_FALSE(m->completed) << "a rescore killed before drift.md was written is marked complete";
  EXPECT_NE(access((killed + "/new/drift.md").c_str(), F_OK), 0);
  // Run again, it says how to take up what the stopped one measured.
  EXPECT_EQ(sh(rescore + killed + "/smoke --device sim --out " + killed + "/new", &out), 2) << out;
  EXPECT_NE(out.find("already exists (choose a new --out; --reuse " + killed + "/new/measurements.jsonl"),
            std::string::npos)
      << out;
}

// The default device profile with one key's line set to `key = value`, written to path; false when
// the profile has no such key.
bool write_profile_with(const std::string& path, const std::string& key, const std::string& value) {
  std::string profile = read_file(kSrc + "data/device_profiles/h200.toml").value();
  size_t at = profile.find("\n" + key + " = ");
  if (at == std::string::npos) return false;
  profile = profile.substr(0, at) + "\n" + key + " = " + value + profile.substr(profile.find('\n', at + 1));
  return write_file_atomic(path, profile).ok();
}

// Under another profile (elementwise kernels at a third of their efficiency) speedups move, the
// new run differs from the old at its first measurement, verifies, and a tampered measurement
// of it is caught.
// --out DIR/new writes inside DIR/new only (its objects were in DIR/objects, beside it), and the
// new run reads back whole from there: it verifies, its objects inline, Python opens it.
TEST(Rescore, EverythingItWritesIsInsideItsOutFolder) {
  std::string root = temp_dir(), out;
  std::string run = copy_run(kGolden, root + "/runs");
  const std::string dir = root + "/elsewhere";
  ASSERT_EQ(sh("mkdir -p " + dir, &out), 0) << out;
  ASSERT_EQ(sh(kBin + "replay rescore " + run + " --device sim --out " + dir + "/new", &out), 0) << out;
  EXPECT_EQ(sh("ls -A " + dir, &out), 0);
  EXPECT_EQ(out, "new\n") << "written beside the --out folder";
  EXPECT_EQ(access((dir + "/new/objects").c_str(), F_OK), 0);
  EXPECT_EQ(sh(kBin + "replay verify " + dir + "/new", &out), 0) << out;
  EXPECT_EQ(sh(kBin + "replay cat " + dir + "/new --objects >/dev/null", &out), 0) << out;
  EXPECT_EQ(sh(kBin + "replay score " + dir + "/new >/dev/null", &out), 0) << out;
  // Moved elsewhere whole, it still reads: nothing of it is left outside.
  ASSERT_EQ(sh("mv " + dir + "/new " + root + "/moved", &out), 0) << out;
  EXPECT_EQ(sh(kBin + "replay verify " + root + "/moved", &out), 0) << out;
  EXPECT_EQ(sh(kBin + "replay rescore " + run + " --help", &out), 0) << out;
  EXPECT_NE(out.find("(NEW/objects)"), std::string::npos) << out;
}

TEST(Rescore, AnotherProfileMovesSpeedupsAndTheNewRunVerifies) {
  std::string root = temp_dir(), out;
  std::string run = copy_run(kGolden, root);
  ASSERT_TRUE(write_profile_with(root + "/slow_ew.toml", "elementwise", "0.33"));
  ASSERT_EQ(
      sh(kBin + "replay rescore " + run + " --device sim --profile " + root + "/slow_ew.toml --out " + root + "/slow",
         &out),
      0)
      << out;
  EXPECT_NE(out.find("rescored "), std::string::npos) << out;
  EXPECT_EQ(sh(kBin + "replay diff " + run + " " + root + "/slow", &out), 1) << out;
  EXPECT_NE(out.find("measurement"), std::string::npos) << out;
  // Tamper: change one measurement's speedup in the new run; the plan's measurements disagree.
  ASSERT_GE(tamper_first(root + "/slow",
                         [](schema::Record::Builder r) {
                           if (!r.isMeasurement() || !r.getMeasurement().getCorrect()) return false;
                           r.getMeasurement().setSpeedup(r.getMeasurement().getSpeedup() * 1.5);
                           return true;
                         }),
            0);
  EXPECT_NE(sh(kBin + "replay verify " + root + "/slow", &out), 0) << out;
}

// Under a profile whose generated GEMMs run near peak, other rollouts win, and what follows from a
// win measures plans the recorded run never measured: the re-drive measures them, and its
// measurements.jsonl keeps them, so that file given back to --reuse measures nothing at all and
// re-derives the same run.
TEST(Rescore, ReuseOfItsOwnMeasurementsCoversTheRedrivesBranches) {
  std::string root = temp_dir(), out;
  std::string run = copy_run(kGolden, root);
  ASSERT_TRUE(write_profile_with(root + "/fast_gemm.toml", "gemm_cuda_core", "0.9"));
  const std::string rescore = kBin + "replay rescore " + run + " --device sim --profile " + root + "/fast_gemm.toml";
  ASSERT_EQ(sh(rescore + " --out " + root + "/fast", &out), 0) << out;
  std::smatch redrive;
  ASSERT_TRUE(std::regex_search(out, redrive, std::regex("the re-drive measured ([0-9]+) plans"))) << out;
  EXPECT_GT(std::stoi(redrive[1]), 0) << out;
  EXPECT_EQ(sh(kBin + "replay verify " + root + "/fast", &out), 0) << out;
  std::string digest = out.substr(out.find("digest: "));
  ASSERT_EQ(sh(rescore + " --out " + root + "/again --reuse " + root + "/fast/measurements.jsonl", &out), 0) << out;
  EXPECT_NE(out.find("(0 measured, "), std::string::npos) << out;
  EXPECT_NE(out.find("the re-drive measured 0 plans"), std::string::npos) << out;
  EXPECT_EQ(sh(kBin + "replay verify " + root + "/again", &out), 0) << out;
  EXPECT_EQ(out.substr(out.find("digest: ")), digest);
}

// --offline measures nothing: the run re-derived from a measurement file alone is the run that
// measured it; a plan the file lacks is an error naming it, as is a file of two devices.
TEST(Rescore, OfflineRederivesARescoreFromItsMeasurements) {
  std::string root = temp_dir(), out;
  std::string run = copy_run(kGolden, root);
  const std::string rescore = kBin + "replay rescore " + run + " --device sim";
  ASSERT_EQ(sh(rescore + " --out " + root + "/measured", &out), 0) << out;
  ASSERT_EQ(sh(kBin + "replay verify " + root + "/measured", &out), 0) << out;
  std::string digest = out.substr(out.find("digest: "));
  const std::string saved = root + "/measured/measurements.jsonl";
  ASSERT_EQ(sh(rescore + " --offline --reuse " + saved + " --out " + root + "/offline", &out), 0) << out;
  EXPECT_NE(out.find("(0 measured, "), std::string::npos) << out;
  ASSERT_EQ(sh(kBin + "replay verify " + root + "/offline", &out), 0) << out;
  EXPECT_EQ(out.substr(out.find("digest: ")), digest);

  std::string lines = read_file(saved).value();
  std::string first_three;
  for (size_t at = 0, n = 0; n < 3; ++n) {
    size_t end = lines.find('\n', at);
    first_three += lines.substr(at, end + 1 - at);
    at = end + 1;
  }
  ASSERT_TRUE(write_file_atomic(root + "/three.jsonl", first_three).ok());
  EXPECT_EQ(sh(rescore + " --offline --reuse " + root + "/three.jsonl --out " + root + "/short", &out), 2) << out;
  EXPECT_TRUE(std::regex_search(
      out, std::regex("--offline: plan [0-9a-f]{32} of task L[123]_[0-9]{3} is not in .*three.jsonl")))
      << out;
  std::string other = first_three;
  other.replace(other.find("\"device\":\"sim profile "), 21, "\"device\":\"another gpu ");
  ASSERT_TRUE(write_file_atomic(root + "/two.jsonl", first_three + other).ok());
  EXPECT_EQ(sh(rescore + " --offline --reuse " + root + "/two.jsonl --out " + root + "/two", &out), 2) << out;
  EXPECT_NE(out.find("must hold the measurements of one device, found another gpu"), std::string::npos) << out;
  EXPECT_EQ(sh(rescore + " --offline --out " + root + "/none", &out), 2) << out;
  EXPECT_NE(out.find("--offline takes every measurement from --reuse FILE"), std::string::npos) << out;
}

TEST(Replay, ScoreMatchesWhatTheRunPrinted) {
  std::string out;
  ASSERT_EQ(sh(kBin + "replay score " + kGolden, &out), 0) << out;
  std::string summary = read_file(kGolden + "/summary.md").value();
  EXPECT_NE(summary.find(out), std::string::npos) << "score:\n" << out << "\nsummary.md:\n" << summary;
  EXPECT_EQ(sh(kBin + "replay score " + kGolden + " --format csv --turn best --thresholds 1,3", &out), 0);
  EXPECT_NE(out.find("best,all,all,3,"), std::string::npos) << out;
  EXPECT_EQ(sh(kBin + "replay score " + kGolden + " --format xml", &out), 2);
  EXPECT_NE(out.find("expected md, csv or json, found 'xml'"), std::string::npos) << out;
}

// Two runs whose configs differ in more than one factor: diff says an effect is not attributable
// to one of them. Run name, seed and the report-only fast_p comparison are not factors.
TEST(Replay, DiffSaysWhenRunsDifferInMoreThanOneSetting) {
  std::string root = temp_dir(), out;
  const std::string run = kBin + "harness run " + kSrc + "experiments/smoke.toml --out " + root;
  ASSERT_EQ(sh(run + " --name two --set eval.inject_skills=false --set selection.mode=bm25", &out), 0) << out;
  ASSERT_EQ(sh(run + " --name one --set eval.inject_skills=false --set eval.fast_p_inclusive=true", &out), 0) << out;
  EXPECT_EQ(sh(kBin + "replay diff " + kGolden + " " + root + "/two", &out), 1) << out;
  EXPECT_NE(out.find("these runs differ in 2 settings: eval.inject_skills, selection.mode; an effect "
                     "below is not attributable to one of them"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("fast_p counts speedup > p (KernelBench's definition)"), std::string::npos) << out;
  EXPECT_EQ(sh(kBin + "replay diff " + kGolden + " " + root + "/one --fast-p-inclusive", &out), 1) << out;
  EXPECT_EQ(out.find("not attributable"), std::string::npos) << out;
  EXPECT_NE(out.find("these runs differ in one setting: eval.inject_skills\n"), std::string::npos) << out;
  EXPECT_EQ(out.find("fast_p_inclusive"), std::string::npos) << out;
  EXPECT_NE(out.find("fast_p counts speedup >= p (inclusive"), std::string::npos) << out;
  // A run of the same config under another name and seed: no factor differs.
  ASSERT_EQ(sh(run + " --name reseed --seed 8", &out), 0) << out;
  EXPECT_EQ(sh(kBin + "replay diff " + kGolden + " " + root + "/reseed", &out), 1) << out;
  EXPECT_EQ(out.find("not attributable"), std::string::npos) << out;
  EXPECT_EQ(out.find("differ in one setting"), std::string::npos) << out;
}

// Test-time scaling scores from the log like an evaluation; with the inclusive comparison it
// agrees with the run's recorded tts metrics (which count speedup >= p).
TEST(Replay, ScoreOfTestTimeScaling) {
  std::string out, records;
  ASSERT_EQ(sh(kBin + "replay score " + kGolden + " --phase tts --turn best --format csv --fast-p-inclusive", &out), 0)
      << out;
  ASSERT_EQ(sh(kBin + "replay cat " + kGolden + " --no-manifest", &records), 0);
  std::istringstream in(out);
  std::string line;
  int checked = 0;
  while (std::getline(in, line)) {
    if (line.rfind("best,all,", 0) != 0) continue;
    // best,all,LEVEL,P,VALUE,NUM,COUNT
    std::vector<std::string> f;
    std::stringstream ls(line);
    for (std::string x; std::getline(ls, x, ',');) f.push_back(x);
    ASSERT_EQ(f.size(), 7u) << line;
    std::string level = "\"level\":" + (f[2] == "all" ? std::string("0") : f[2].substr(1)) + ",";
    std::string want =
        "\"split\":\"tts\"," + level + "\"threshold\":" + f[3] + ",\"turnMode\":\"best\",\"denominator\":\"all\"";
    size_t at = records.find(want);
    ASSERT_NE(at, std::string::npos) << want;
    std::string rec = records.substr(at, records.find('\n', at) - at);
    EXPECT_NE(rec.find("\"numerator\":" + f[5] + ",\"count\":" + f[6] + "}"), std::string::npos) << rec << "\n" << line;
    ++checked;
  }
  EXPECT_GT(checked, 3) << out;
  EXPECT_EQ(sh(kBin + "replay score " + kGolden + " --phase tts", &out), 0) << out;
  EXPECT_NE(out.find("fast_p counts speedup > p (KernelBench's definition)."), std::string::npos) << out;
  EXPECT_EQ(sh(kBin + "replay score " + kGolden + " --phase tts --step 1", &out), 2) << out;
  EXPECT_EQ(sh(kBin + "replay score " + kGolden + " --phase train", &out), 2) << out;
}

// The paired bootstrap on cases whose interval is known without sampling.
TEST(PairedBootstrap, KnownCases) {
  const RngKey key = RngKey::root(0).with("test", "paired_bootstrap");
  // The same indicators in both runs: every difference is 0.
  std::vector<double> a = {1, 0, 1, 1, 0, 0, 1, 0};
  PairedInterval same = paired_bootstrap(a, a, 2000, 0.95, key);
  EXPECT_EQ(same.estimate, 0);
  EXPECT_EQ(same.lo, 0);
  EXPECT_EQ(same.hi, 0);
  EXPECT_TRUE(same.covers_zero());
  // Every task flips from 0 to 1: every resample's mean is 1 (100 points).
  PairedInterval flip = paired_bootstrap(std::vector<double>(8, 0), std::vector<double>(8, 1), 2000, 0.95, key);
  EXPECT_EQ(flip.estimate, 1);
  EXPECT_EQ(flip.lo, 1);
  EXPECT_EQ(flip.hi, 1);
  EXPECT_FALSE(flip.covers_zero());
  // One task of four flips: a resample's mean is K/4 with K ~ Binomial(4, 1/4), P(K = 0) = 0.32,
  // P(K >= 3) = 0.051, P(K = 4) = 0.004: the 2.5% and 97.5% points are 0 and 3/4.
  PairedInterval one = paired_bootstrap({0, 0, 0, 0}, {1, 0, 0, 0}, 2000, 0.95, key);
  EXPECT_EQ(one.estimate, 0.25);
  EXPECT_EQ(one.lo, 0);
  EXPECT_EQ(one.hi, 0.75);
  EXPECT_TRUE(one.covers_zero());
  // Swapping the runs negates the interval exactly; the same key draws the same resamples.
  std::vector<double> b = {1, 1, 1, 0, 0, 1, 1, 1};
  PairedInterval ab = paired_bootstrap(a, b, 2000, 0.95, key), ba = paired_bootstrap(b, a, 2000, 0.95, key);
  EXPECT_EQ(ba.estimate, -ab.estimate);
  EXPECT_EQ(ba.lo, -ab.hi);
  EXPECT_EQ(ba.hi, -ab.lo);
  PairedInterval again = paired_bootstrap(a, b, 2000, 0.95, key);
  EXPECT_EQ(again.lo, ab.lo);
  EXPECT_EQ(again.hi, ab.hi);
  EXPECT_LE(ab.lo, ab.estimate);
  EXPECT_GE(ab.hi, ab.estimate);
}

// One row of `replay diff`'s fast_p table.
struct DiffRow {
  std::string level;
  int tasks = 0;
  double p = 0, a = 0, b = 0, delta = 0, lo = 0, hi = 0;
  std::string verdict;
};

std::vector<DiffRow> diff_rows(const std::string& out) {
  std::vector<DiffRow> rows;
  std::regex re(
      "\\| (L\\d|all) \\| (\\d+) \\| ([\\d.]+) \\| ([\\d.]+) \\| ([\\d.]+) \\| ([+-][\\d.]+) \\| "
      "\\[([+-][\\d.]+), ([+-][\\d.]+)\\] \\| (no effect detected|effect detected) \\|\\n");
  for (std::sregex_iterator it(out.begin(), out.end(), re), end; it != end; ++it) {
    const std::smatch& m = *it;
    rows.push_back({m[1], std::stoi(m[2]), std::stod(m[3]), std::stod(m[4]), std::stod(m[5]), std::stod(m[6]),
                    std::stod(m[7]), std::stod(m[8]), m[9]});
  }
  return rows;
}

// P(K <= k) for K ~ Binomial(n, q).
double binomial_cdf(int k, int n, double q) {
  double sum = 0;
  for (int i = 0; i <= k; ++i) {
    double log_c = std::lgamma(n + 1.0) - std::lgamma(i + 1.0) - std::lgamma(n - i + 1.0);
    sum += std::exp(log_c + i * std::log(q) + (n - i) * std::log1p(-q));
  }
  return sum;
}

// `replay diff` of two real runs on the same held-out tasks (the smoke config with and without its
// cold start): B - A per level and threshold with a paired bootstrap interval over the tasks, the
// figures `replay score` gives each run, and intervals checked where they are known: where each
// run's figure is 0 or 100%, every task's difference is the same, and where one run's is 0 or
// 100%, k of n tasks differ by the same amount, so a resample's mean is K/n with K ~ Binomial(n,
// k/n), whose 2.5% and 97.5% points the bootstrap's 2000 resamples find (checked where no
// binomial tail is within 0.01 of 2.5%).
TEST(Replay, DiffGivesPairedIntervalsOverTheHeldOutTasks) {
  std::string root = temp_dir(), out, again, back, score_a, score_b;
  const std::string run = kBin + "harness run " + kSrc + "experiments/smoke.toml --out " + root;
  ASSERT_EQ(sh(run + " --name nocs --set coldstart.enabled=false", &out), 0) << out;
  const std::string b = root + "/nocs";
  EXPECT_EQ(sh(kBin + "replay diff " + kGolden + " " + b, &out), 1) << out;
  EXPECT_NE(out.find("with a paired bootstrap 95% interval: the held-out tasks, which both runs evaluated, are "
                     "resampled with replacement (2000 keyed resamples, the same tasks in A and B)"),
            std::string::npos)
      << out;
  std::vector<DiffRow> rows = diff_rows(out);
  ASSERT_EQ(rows.size(), 12u) << out;  // L1, L2, all x 4 thresholds
  ASSERT_EQ(sh(kBin + "replay score " + kGolden + " --format csv --turn last", &score_a), 0) << score_a;
  ASSERT_EQ(sh(kBin + "replay score " + b + " --format csv --turn last", &score_b), 0) << score_b;
  int moved = 0, known = 0;
  for (const DiffRow& r : rows) {
    char p[32];
    std::snprintf(p, sizeof p, "%g", r.p);
    // last,all,LEVEL,P,VALUE,NUMERATOR,COUNT of each run.
    std::smatch ma, mb;
    std::regex line("last,all," + r.level + "," + p + ",([^,]+),(\\d+),(\\d+)\\n");
    ASSERT_TRUE(std::regex_search(score_a, ma, line)) << r.level << " " << p;
    ASSERT_TRUE(std::regex_search(score_b, mb, line)) << r.level << " " << p;
    const int n = std::stoi(ma[3]), na = std::stoi(ma[2]), nb = std::stoi(mb[2]);
    ASSERT_EQ(n, std::stoi(mb[3]));
    EXPECT_EQ(r.tasks, n);
    EXPECT_NEAR(r.a, 100.0 * na / n, 0.051);
    EXPECT_NEAR(r.b, 100.0 * nb / n, 0.051);
    EXPECT_NEAR(r.delta, 100.0 * (nb - na) / n, 0.051);
    EXPECT_LE(r.lo, r.delta + 0.05);
    EXPECT_GE(r.hi, r.delta - 0.05);
    EXPECT_EQ(r.verdict, r.lo <= 0 && r.hi >= 0 ? "no effect detected" : "effect detected");
    if (r.lo != r.hi) ++moved;
    // Tasks that differ (k of n), each by `sign`, where one run's figure is 0 or 100%.
    int k = -1, sign = 0;
    if (nb == 0 || na == n) {
      k = nb == 0 ? na : n - nb, sign = -1;
    } else if (na == 0 || nb == n) {
      k = na == 0 ? nb : n - na, sign = 1;
    }
    if (k < 0) continue;
    if (k == 0 || k == n) {
      EXPECT_NEAR(r.lo, sign * 100.0 * k / n, 0.051) << r.level << " " << p;
      EXPECT_NEAR(r.hi, sign * 100.0 * k / n, 0.051) << r.level << " " << p;
      ++known;
      continue;
    }
    // The 2.5% point of K: the first K whose cdf passes 0.025; the 97.5% point: the last K whose
    // upper tail holds 0.025.
    const double q = static_cast<double>(k) / n;
    int k_lo = 0, k_hi = n;
    while (binomial_cdf(k_lo, n, q) < 0.025) ++k_lo;
    while (1 - binomial_cdf(k_hi - 1, n, q) < 0.025) --k_hi;
    bool clear = true;
    for (int i = 0; i <= n; ++i)
      clear = clear && std::fabs(binomial_cdf(i, n, q) - 0.025) > 0.01 &&
              std::fabs(1 - binomial_cdf(i - 1, n, q) - 0.025) > 0.01;
    if (!clear) continue;
    double lo = 100.0 * (sign > 0 ? k_lo : -k_hi) / n, hi = 100.0 * (sign > 0 ? k_hi : -k_lo) / n;
    EXPECT_NEAR(r.lo, lo, 0.051) << r.level << " " << p << "\n" << out;
    EXPECT_NEAR(r.hi, hi, 0.051) << r.level << " " << p << "\n" << out;
    ++known;
  }
  EXPECT_GT(moved, 0) << "the cold start moves no fast_p of the smoke run:\n" << out;
  EXPECT_GT(known, 0) << out;
  // The same intervals every time; B and A swapped negate them.
  EXPECT_EQ(sh(kBin + "replay diff " + kGolden + " " + b, &again), 1);
  EXPECT_EQ(again, out);
  EXPECT_EQ(sh(kBin + "replay diff " + b + " " + kGolden, &back), 1) << back;
  std::vector<DiffRow> swapped = diff_rows(back);
  ASSERT_EQ(swapped.size(), rows.size()) << back;
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(swapped[i].lo, -rows[i].hi) << back;
    EXPECT_EQ(swapped[i].hi, -rows[i].lo) << back;
    EXPECT_EQ(swapped[i].verdict, rows[i].verdict);
  }
  // Another split of the tasks: no paired interval, and why.
  ASSERT_EQ(sh(run + " --name split --set tasks.split_seed=5", &out), 0) << out;
  EXPECT_EQ(sh(kBin + "replay diff " + kGolden + " " + root + "/split", &out), 1) << out;
  EXPECT_NE(out.find("; no intervals: the runs' held-out task sets differ (A 6 tasks, B 6, 4 in common), and a "
                     "paired interval resamples tasks that both runs evaluated."),
            std::string::npos)
      << out;
  EXPECT_TRUE(diff_rows(out).empty()) << out;
  EXPECT_NE(out.find("| all | - | 1.2 | "), std::string::npos) << out;
}

TEST(Replay, DiffErrorsAreExitTwo) {
  std::string out;
  EXPECT_EQ(sh(kBin + "replay diff " + kGolden + " /tmp/vinci_no_such_run", &out), 2) << out;
  EXPECT_NE(out.find("/tmp/vinci_no_such_run"), std::string::npos) << out;
  EXPECT_EQ(sh(kBin + "replay verify /tmp/vinci_no_such_run", &out), 2) << out;
}

// A finished run's log cut at a frame boundary has only valid frames: every reader checks it
// against the manifest's record count and says it is damaged, instead of scoring what is left.
TEST(Replay, ALogCutAtAFrameBoundaryIsDamageToEveryReader) {
  std::string root = temp_dir(), out;
  std::string run = copy_run(kGolden, root);
  std::string seg = run + "/log/00000000.vlog";
  std::string bytes = read_file(seg).value();
  std::vector<size_t> frames = frame_offsets(bytes);
  ASSERT_GT(frames.size(), 40u);
  ASSERT_TRUE(write_file_atomic(seg, bytes.substr(0, frames[frames.size() - 40])).ok());
  const std::string says = "but the manifest records " + std::to_string(frames.size());
  EXPECT_EQ(sh(kBin + "replay score " + run, &out), 2) << out;
  EXPECT_NE(out.find(says), std::string::npos) << out;
  EXPECT_EQ(sh("(" + kBin + "replay cat " + run + " > /dev/null)", &out), 1) << out;
  EXPECT_NE(out.find("replay cat: log damaged after record " + std::to_string(frames.size() - 40)), std::string::npos)
      << out;
  EXPECT_NE(out.find(says), std::string::npos) << out;
  EXPECT_EQ(sh(kBin + "replay verify " + run, &out), 2) << out;
  EXPECT_NE(out.find(says), std::string::npos) << out;
  EXPECT_EQ(sh(kBin + "replay diff " + kGolden + " " + run, &out), 2) << out;
  EXPECT_NE(out.find(says), std::string::npos) << out;
  EXPECT_NE(sh(kBin + "replay export " + run + " --out " + root + "/x.jsonl", &out), 0) << out;
  EXPECT_NE(out.find(says), std::string::npos) << out;
}

// An object the run stores, cut short: verify reads every stored object back and fails naming
// it; cat --objects calls it corrupt (not missing) and exits 1.
TEST(Replay, AnObjectCutShortIsCorrupt) {
  std::string root = temp_dir(), out;
  std::string run = copy_run(kGolden, root);
  // The library object the step-0 snapshot names: its file is compressed, so a cut is caught.
  ASSERT_EQ(sh(kBin + "replay cat " + run, &out), 0);
  std::string address = hex_after(out, "\"librarySnapshot\"", "snapshot");
  ASSERT_EQ(address.size(), 32u) << out.substr(0, 2000);
  std::string path = root + "/objects/" + address.substr(0, 2) + "/" + address.substr(2);
  std::string file = read_file(path).value();
  ASSERT_TRUE(write_file_atomic(path, file.substr(0, file.size() - 5)).ok());
  EXPECT_EQ(sh(kBin + "replay verify " + run, &out), 2) << out;
  EXPECT_NE(out.find("object " + address + " (a 'library' its records name) is corrupt"), std::string::npos) << out;
  EXPECT_EQ(sh(kBin + "replay cat " + run + " --objects", &out), 1);
  EXPECT_NE(out.find("\"" + address + "\":{\"corrupt\":"), std::string::npos);
  EXPECT_EQ(out.find("\"" + address + "\":{\"missing\""), std::string::npos);
  EXPECT_NE(out.find("replay cat: object " + address + " is corrupt"), std::string::npos);
  // Gone altogether, it is missing.
  ASSERT_EQ(::unlink(path.c_str()), 0);
  EXPECT_EQ(sh(kBin + "replay verify " + run, &out), 2) << out;
  EXPECT_NE(out.find("object " + address + " (a 'library' its records name) is missing"), std::string::npos) << out;
}

// --objects looks up objects only: digests (sample keys, parameter and run digests) are not
// printed as missing objects, and a really missing object, or a missing objects/ folder, fails.
TEST(Replay, CatObjectsTellsDigestsFromMissingObjects) {
  std::string root = temp_dir(), out;
  std::string run = copy_run(kGolden, root);
  EXPECT_EQ(sh(kBin + "replay cat " + run + " --objects 2>&1", &out), 0) << out.substr(0, 2000);
  EXPECT_EQ(out.find("\"missing\""), std::string::npos) << "a clean run has no missing object";
  // Every address it inlines is an object: its kind is printed.
  EXPECT_NE(out.find("\"kind\":\"library\""), std::string::npos);
  ASSERT_EQ(sh(kBin + "replay cat " + run, &out), 0);
  std::string address = hex_after(out, "\"librarySnapshot\"", "snapshot");
  ASSERT_EQ(address.size(), 32u) << out.substr(0, 2000);
  std::string path = root + "/objects/" + address.substr(0, 2) + "/" + address.substr(2);
  ASSERT_EQ(::unlink(path.c_str()), 0);
  EXPECT_EQ(sh(kBin + "replay cat " + run + " --objects", &out), 1) << out.substr(0, 2000);
  EXPECT_NE(out.find("\"" + address + "\":{\"missing\":true}"), std::string::npos);
  EXPECT_NE(out.find("replay cat: object " + address + " is missing from " + root + "/objects"), std::string::npos)
      << out.substr(out.size() > 2000 ? out.size() - 2000 : 0);
  // Without its objects/ folder: refused, nothing printed as if it were there.
  ASSERT_EQ(sh("rm -r " + root + "/objects", &out), 0) << out;
  EXPECT_EQ(sh(kBin + "replay cat " + run + " --objects", &out), 2) << out.substr(0, 2000);
  EXPECT_NE(out.find("replay cat: --objects: expected the run's object store, a folder at " + root + "/objects"),
            std::string::npos)
      << out.substr(0, 2000);
  EXPECT_EQ(out.find("\"missing\""), std::string::npos);
  // Without --objects the log alone is printed.
  EXPECT_EQ(sh(kBin + "replay cat " + run + " >/dev/null", &out), 0) << out;
}

// A stopped run (its manifest not complete) scores with a header and a line on stderr that say
// so and which evaluation was scored; a finished run's tables have neither.
TEST(Replay, ScoreOfAnUnfinishedRunSaysSo) {
  std::string dir = temp_dir(), out;
  const std::string run = kBin + "harness run " + kSrc + "experiments/smoke.toml --out " + dir + " --set loop.steps=1";
  ASSERT_EQ(sh(run + " --name whole", &out), 0) << out;
  // summary.md a folder: the run stops before its reports, its manifest not complete.
  ASSERT_EQ(sh("mkdir -p " + dir + "/stopped/summary.md", &out), 0) << out;
  ASSERT_EQ(sh(run + " --name stopped", &out), 2) << out;
  ASSERT_FALSE(read_manifest(dir + "/stopped/manifest.bin").value().completed);
  // In a subshell: sh() sends stderr to stdout after the command's own redirections.
  EXPECT_EQ(sh("(" + kBin + "replay score " + dir + "/stopped 2>" + dir + "/err)", &out), 0) << out;
  const std::string said =
      "unfinished run (its manifest is not complete: stopped, or still running): scored the "
      "evaluation before step 1, the last one it recorded";
  EXPECT_EQ(out.rfind("**Unfinished run**: " + said, 0), 0u) << out;
  EXPECT_NE(read_file(dir + "/err").value().find("replay score: " + dir + "/stopped: " + said), std::string::npos)
      << read_file(dir + "/err").value();
  EXPECT_EQ(sh("(" + kBin + "replay score " + dir + "/stopped --format csv 2>" + dir + "/err)", &out), 0) << out;
  EXPECT_NE(read_file(dir + "/err").value().find(said), std::string::npos);
  EXPECT_EQ(sh(kBin + "replay score " + dir + "/whole 2>&1", &out), 0) << out;
  EXPECT_EQ(out.find("nfinished"), std::string::npos) << out;
  // Its log holds every record of its loop: verify matches them all and says the run is unfinished.
  EXPECT_EQ(sh(kBin + "replay verify " + dir + "/stopped", &out), 0) << out;
  EXPECT_NE(out.find("note: the run is unfinished (its manifest is not complete): its log holds every record of "
                     "its loop, but it stopped before its reports were written; `harness run --resume " +
                     dir + "/stopped` finishes it"),
            std::string::npos)
      << out;
  EXPECT_EQ(sh(kBin + "replay verify " + dir + "/whole", &out), 0) << out;
  EXPECT_EQ(out.find("nfinished"), std::string::npos) << out;
}

// Marks `run` unfinished as a run stopped mid-way leaves it: its manifest as written when the run
// started (not complete, no record count or digest).
void mark_unfinished(const std::string& run) {
  auto m = read_manifest(run + "/manifest.bin");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  m->completed = false;
  m->record_count = 0;
  m->run_digest = Digest();
  ASSERT_TRUE(write_file_atomic(run + "/manifest.bin", encode_manifest(*m)).ok());
}

// A run stopped mid-way (its manifest not complete, its log ending at a frame boundary: what a
// kill between two writes of its log leaves) is unfinished, not diverged: `replay verify` says so
// (exit 2), where its log ends, that every record it holds re-derived and matched, and that
// `harness run --resume` continues it (it said "Mismatch: the run's log ends after N records, but
// re-driving it produces more"). A record that differs in what it holds is a mismatch all the same.
TEST(Replay, VerifyOfAnUnfinishedRunSaysWhereItEnds) {
  std::string root = temp_dir(), out;
  std::string run = copy_run(kGolden, root);
  std::string seg = run + "/log/00000000.vlog";
  std::string bytes = read_file(seg).value();
  std::vector<size_t> frames = frame_offsets(bytes);
  ASSERT_GT(frames.size(), 40u);
  const size_t kept = frames.size() / 2;
  ASSERT_TRUE(write_file_atomic(seg, bytes.substr(0, frames[kept])).ok());
  mark_unfinished(run);
  // The last record it holds, as replay cat prints it: its step.
  ASSERT_EQ(sh(kBin + "replay cat " + run + " --no-manifest | tail -n 1", &out), 0) << out;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(out, m, std::regex("\"step\":(\\d+)"))) << out;
  const std::string step = m[1];
  const std::string n = std::to_string(kept);

  EXPECT_EQ(sh(kBin + "replay verify " + run, &out), 2) << out;
  EXPECT_NE(out.find("replay verify: FailedPrecondition: run " + run +
                     " is unfinished (its manifest is not complete: stopped, or still running): its log ends after " +
                     n + " records, in step " + step + " ("),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("; the last record: step " + step + " "), std::string::npos) << out;
  EXPECT_NE(out.find("; the " + n + " records it holds re-derived and matched. `harness run --resume " + run +
                     "` continues it"),
            std::string::npos)
      << out;
  EXPECT_EQ(out.find("Mismatch"), std::string::npos) << out;
  EXPECT_EQ(out.find("digest:"), std::string::npos) << out;

  // Then a frame a kill cut short (its header, part of its payload): left out, as the resume
  // leaves it out, and named.
  ASSERT_TRUE(write_file_atomic(seg, bytes.substr(0, frames[kept] + kFrameHeaderSize + 2)).ok());
  EXPECT_EQ(sh(kBin + "replay verify " + run, &out), 2) << out;
  EXPECT_NE(out.find(" is unfinished (its manifest is not complete: stopped, or still running): its log ends after " +
                     n + " records, in step " + step + " ("),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("), then a damaged frame ("), std::string::npos) << out;
  EXPECT_NE(out.find(" at offset " + std::to_string(frames[kept]) + ": "), std::string::npos) << out;
  EXPECT_NE(out.find("), which `harness run --resume` drops; the " + n + " records it holds re-derived and matched"),
            std::string::npos)
      << out;
  ASSERT_TRUE(write_file_atomic(seg, bytes.substr(0, frames[kept])).ok());

  // A record that differs before the log's end: the record, both values, exit 1.
  int64_t at = tamper_first(run, [](schema::Record::Builder r) {
    if (!r.isReward()) return false;
    r.getReward().setValue(r.getReward().getValue() + 1);
    return true;
  });
  ASSERT_GE(at, 0);
  ASSERT_LT(at, static_cast<int64_t>(kept));
  EXPECT_EQ(sh(kBin + "replay verify " + run, &out), 1) << out;
  EXPECT_NE(out.find("replay verify: Mismatch: record " + std::to_string(at) + " ("), std::string::npos) << out;
  EXPECT_EQ(out.find("unfinished"), std::string::npos) << out;
}

// `replay verify` is read-only: its scratch store is under $TMPDIR (it was always /tmp), nothing
// is written in the run's folder, and a verify killed with SIGKILL leaves a folder the next one
// removes. The kill is strace's: a SIGKILL at the entry of the third rename (the scratch store's
// writes).
TEST(Replay, VerifyWritesOnlyUnderTmpdirAndTheNextRemovesAKilledOnesScratch) {
  std::string root = temp_dir(), out;
  const std::string tmp = root + "/tmp";
  ASSERT_EQ(sh("mkdir -p " + tmp, &out), 0) << out;
  std::string run = copy_run(kGolden, root + "/runs");
  std::string before;
  ASSERT_EQ(sh("cd " + root + "/runs && find . -printf '%p %s\\n' | sort", &before), 0);
  const std::string verify = "TMPDIR=" + tmp + " " + kBin + "replay verify " + run;
  ASSERT_EQ(sh(verify, &out), 0) << out;
  EXPECT_EQ(sh("ls -A " + tmp, &out), 0);
  EXPECT_EQ(out, "") << "left in TMPDIR";
  std::string after;
  ASSERT_EQ(sh("cd " + root + "/runs && find . -printf '%p %s\\n' | sort", &after), 0);
  EXPECT_EQ(before, after) << "verify wrote beside the run";
  EXPECT_EQ(sh("TMPDIR=" + root + "/none " + kBin + "replay verify " + run, &out), 2) << out;
  EXPECT_NE(out.find("cannot create a scratch folder in " + root + "/none (TMPDIR)"), std::string::npos) << out;

  if (std::string why = clitest::strace_unusable(); !why.empty()) GTEST_SKIP() << why;
  int rc = sh("TMPDIR=" + tmp + " strace -f -qq -o /dev/null -e trace=rename -e inject=rename:signal=KILL:when=3 " +
                  kBin + "replay verify " + run,
              &out);
  EXPECT_NE(rc, 0) << out;
  ASSERT_EQ(sh("ls -A " + tmp, &out), 0);
  EXPECT_EQ(out.rfind("vinci_verify_", 0), 0u) << "the killed verify left: '" << out << "'";
  ASSERT_EQ(sh(verify, &out), 0) << out;
  EXPECT_EQ(sh("ls -A " + tmp, &out), 0);
  EXPECT_EQ(out, "") << "the next verify removes what a killed one left";
}

// Numbers that make no sense are refused, naming the option.
TEST(Replay, NonsenseNumbersAreRefused) {
  std::string out;
  for (const char* t : {"nan", "-1", "1,inf", "1,,2", "x"}) {
    EXPECT_EQ(sh(kBin + "replay score " + kGolden + " --thresholds '" + t + "'", &out), 2) << t << "\n" << out;
    EXPECT_NE(out.find("replay score: --thresholds: expected"), std::string::npos) << t << "\n" << out;
  }
  for (const char* r : {"-1", "0", "1e9", "many"}) {
    EXPECT_EQ(sh(kBin + "replay diff " + kGolden + " " + kGolden + " --resamples " + r, &out), 2) << r << "\n" << out;
    EXPECT_NE(
        out.find("replay diff: --resamples: expected an integer from 1 to 1000000, found '" + std::string(r) + "'"),
        std::string::npos)
        << out;
  }
  std::string root = temp_dir();
  for (const char* r : {"--seed -1", "--samples 99999", "--trials -2", "--timeout nan", "--timing-budget -1"}) {
    EXPECT_EQ(sh(kBin + "replay rescore " + kGolden + " --device sim --out " + root + "/new " + r, &out), 2)
        << r << "\n"
        << out;
    std::string opt = std::string(r).substr(0, std::string(r).find(' '));
    EXPECT_NE(out.find("replay rescore: " + opt + ": expected"), std::string::npos) << out;
  }
  EXPECT_EQ(access((root + "/new").c_str(), F_OK), -1);
}

}  // namespace
}  // namespace vinci
