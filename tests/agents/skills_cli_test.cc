// `harness skills search` end to end: the binary's output against the library API in-process.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "agents/bm25.h"
#include "agents/skill_library.h"
#include "core/atomic_file.h"

namespace vinci {
namespace {

struct CliRun {
  int exit_code = -1;
  std::string out, err;
};

std::string temp_dir() {
  char tmpl[] = "/tmp/vinci_skills_cli_XXXXXX";
  char* d = mkdtemp(tmpl);
  EXPECT_NE(d, nullptr);
  return d;
}

// Runs the harness binary with arguments already quoted for the shell.
CliRun harness(const std::string& dir, const std::string& args) {
  std::string cmd =
      std::string(VINCI_BINARY_DIR "/bin/harness ") + args + " >" + dir + "/out.txt 2>" + dir + "/err.txt";
  int status = std::system(cmd.c_str());
  CliRun r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = read_file(dir + "/out.txt").value();
  r.err = read_file(dir + "/err.txt").value();
  return r;
}

std::vector<std::vector<std::string>> tab_lines(const std::string& text) {
  std::vector<std::vector<std::string>> rows;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> cols;
    size_t p = 0;
    for (size_t q; (q = line.find('\t', p)) != std::string::npos; p = q + 1) {
      cols.push_back(line.substr(p, q - p));
    }
    cols.push_back(line.substr(p));
    rows.push_back(cols);
  }
  return rows;
}

const char kLibrary[] =
    R"({"name":"online_softmax","description":"Single pass softmax with a running max.","scope":"general","tags":["softmax","reduction"],"content":"Rescale the running sum when the max grows."})"
    "\n"
    R"({"name":"warp_shuffle_reduction","description":"Reduce in registers with warp shuffles.","scope":"general","tags":["reduction","warp_shuffle"],"content":"__shfl_down_sync over offsets 16..1."})"
    "\n"
    R"({"name":"shared_memory_tiling","description":"Tile GEMM through shared memory.","scope":"task_specific/gemm","tags":["gemm","tiling"],"content":"32x32 tiles, padded to avoid bank conflicts."})"
    "\n"
    R"({"name":"Online Softmax","description":"a duplicate","scope":"general","tags":[],"content":"dup"})"
    "\n"
    R"({"name":"vectorized_loads","description":"float4 loads for bandwidth.","scope":"general","tags":["memory"],"content":"reinterpret_cast to float4."})"
    "\n";

TEST(SkillsCli, SearchPrintsRankNameAndFullPrecisionScore) {
  std::string dir = temp_dir();
  std::string lib_path = dir + "/lib.jsonl";
  ASSERT_TRUE(write_file_atomic(lib_path, kLibrary).ok());
  const std::string query = "softmax reduction with warp shuffles";
  CliRun r = harness(dir, "skills search " + lib_path + " '" + query + "' --top 3");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // The duplicate name is reported, not loaded.
  EXPECT_NE(r.err.find("lib.jsonl:4: skill 'online_softmax' repeats an earlier name"), std::string::npos) << r.err;

  auto lib = SkillLibrary::load(lib_path);
  ASSERT_TRUE(lib.ok());
  Bm25Index index;
  for (const Skill& s : lib->skills()) index.add_text(skill_document_text(s));
  auto want = index.top_k(bm25_tokenize(query), 3);
  auto rows = tab_lines(r.out);
  ASSERT_EQ(rows.size(), want.size()) << r.out;
  for (size_t i = 0; i < rows.size(); ++i) {
    ASSERT_EQ(rows[i].size(), 3u) << r.out;
    EXPECT_EQ(rows[i][0], std::to_string(i + 1));
    EXPECT_EQ(rows[i][1], lib->at(want[i].doc).name);
    EXPECT_EQ(std::strtod(rows[i][2].c_str(), nullptr), want[i].score) << rows[i][2];
  }
  // Only two skills score: "reduction" and "with" are in 2 of the 4 skills, so their idf is
  // ln(2.5) - ln(2.5) = 0 exactly (not floored), and the other two skills hold no other query word.
  EXPECT_EQ(rows.size(), 2u);
}

TEST(SkillsCli, NothingScoresPrintsTheKeyedSample) {
  std::string dir = temp_dir();
  std::string lib_path = dir + "/lib.jsonl";
  ASSERT_TRUE(write_file_atomic(lib_path, kLibrary).ok());
  CliRun a = harness(dir, "skills search " + lib_path + " 'zebra quokka' --top 2 --seed 5");
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_NE(a.err.find("no skill scores above 0"), std::string::npos);
  auto rows = tab_lines(a.out);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0][2], "0");
  CliRun b = harness(dir, "skills search " + lib_path + " 'zebra quokka' --top 2 --seed 5");
  EXPECT_EQ(a.out, b.out);  // same seed and query, same sample
}

TEST(SkillsCli, ErrorsExitTwoAndSayWhy) {
  std::string dir = temp_dir();
  CliRun missing = harness(dir, "skills search " + dir + "/absent.jsonl q");
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.err.find(dir + "/absent.jsonl"), std::string::npos) << missing.err;

  std::string bad = dir + "/bad.jsonl";
  ASSERT_TRUE(write_file_atomic(bad, std::string(kLibrary) + "{\"name\": 3}\n").ok());
  CliRun malformed = harness(dir, "skills search " + bad + " q");
  EXPECT_EQ(malformed.exit_code, 2);
  EXPECT_NE(malformed.err.find("bad.jsonl:6: field 'name': expected a string, found number"), std::string::npos)
      << malformed.err;

  CliRun params = harness(dir, "skills search " + bad + " q --b 3");
  EXPECT_EQ(params.exit_code, 2);
  EXPECT_NE(params.err.find("BM25 parameter b: expected a number in [0, 1], found 3"), std::string::npos) << params.err;
  EXPECT_EQ(harness(dir, "skills search").exit_code, 2);
  EXPECT_EQ(harness(dir, "skills search --top x a b").exit_code, 2);
  EXPECT_EQ(harness(dir, "skills").exit_code, 2);
  EXPECT_EQ(harness(dir, "skills search --help").exit_code, 0);
}

// --top is a count of at least 1 (one past the library's size prints every skill), --seed is not
// negative, and a library with no skills says so instead of printing nothing.
TEST(SkillsCli, CountsAreCheckedAndAnEmptyLibraryIsNamed) {
  std::string dir = temp_dir();
  std::string lib = dir + "/lib.jsonl";
  ASSERT_TRUE(write_file_atomic(lib, kLibrary).ok());
  for (const char* top : {"-1", "0", "x", "99999999999999999999"}) {
    CliRun r = harness(dir, "skills search " + lib + " softmax --top " + top);
    EXPECT_EQ(r.exit_code, 2) << top << "\n" << r.err;
    EXPECT_NE(r.err.find(std::string("--top: expected an integer from 1 to 9223372036854775807, found '") + top + "'"),
              std::string::npos)
        << r.err;
  }
  CliRun all = harness(dir, "skills search " + lib + " softmax --top 2147483647");
  EXPECT_EQ(all.exit_code, 0) << all.err;
  EXPECT_EQ(tab_lines(all.out).size(), 1u) << all.out;  // the one skill that scores
  CliRun sample = harness(dir, "skills search " + lib + " 'zebra quokka' --top 2147483647");
  EXPECT_EQ(sample.exit_code, 0) << sample.err;
  EXPECT_EQ(tab_lines(sample.out).size(), 4u) << sample.out;  // every skill, in keyed random order
  CliRun seed = harness(dir, "skills search " + lib + " softmax --seed -1");
  EXPECT_EQ(seed.exit_code, 2);
  EXPECT_NE(seed.err.find("--seed: expected an integer from 0 to"), std::string::npos) << seed.err;

  for (const char* text : {"", "\n\n"}) {
    std::string empty = dir + "/empty.jsonl";
    ASSERT_TRUE(write_file_atomic(empty, text).ok());
    CliRun r = harness(dir, "skills search " + empty + " softmax");
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_EQ(r.out, "");
    EXPECT_NE(r.err.find(empty + " holds no skills"), std::string::npos) << r.err;
  }
}

}  // namespace
}  // namespace vinci
