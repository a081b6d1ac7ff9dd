#include "agents/skill_library.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>

#include "core/atomic_file.h"

namespace vinci {
namespace {

std::string temp_dir() {
  char tmpl[] = "/tmp/vinci_skills_XXXXXX";
  char* d = mkdtemp(tmpl);
  EXPECT_NE(d, nullptr);
  return d;
}

// Two lines in daVinci-kernel's format, one with the offline extractor's source_uuid and an
// extra nested field, keys in a different order than vinci writes them.
const char kDavinciFile[] =
    R"({"name": "online_softmax", "description": "Single-pass softmax with running max.", "scope": "general", "tags": ["softmax", "reduction", "fusion"], "content": "## Motivation\nThree passes.\n## Key Idea\nRescale the running sum.\n## Example\n```cuda\nm = fmaxf(m, x);\n```", "verify_speedup": 1.87, "source_uuid": "3f1c-22", "meta": {"z": 1, "a": [true, null]}}
{"tags": ["gemm", "tiling"], "verify_speedup": 2, "content": "Tile through shared memory.", "scope": "task_specific/matmul", "description": "32x32 tiles.", "name": "Shared Memory Tiling"}
)";

TEST(SkillLibrary, ReadsDavinciFormatAndRoundTripsExtraFields) {
  auto lib = SkillLibrary::parse_jsonl(kDavinciFile, "lib.jsonl");
  ASSERT_TRUE(lib.ok()) << lib.status().to_string();
  ASSERT_EQ(lib->size(), 2u);
  const Skill& a = lib->at(0);
  EXPECT_EQ(a.name, "online_softmax");
  EXPECT_EQ(a.tags, (std::vector<std::string>{"softmax", "reduction", "fusion"}));
  EXPECT_EQ(a.verify_speedup, 1.87);
  EXPECT_EQ(a.extra.dump(), R"({"source_uuid":"3f1c-22","meta":{"z":1,"a":[true,null]}})");
  const Skill& b = lib->at(1);
  EXPECT_EQ(b.name, "shared_memory_tiling");  // normalised on read
  EXPECT_EQ(b.verify_speedup, 2.0);
  EXPECT_TRUE(b.extra.empty());

  // Writing puts the known keys first, then the extras in read order, values unchanged.
  std::string written = lib->to_jsonl();
  EXPECT_EQ(written.substr(0, written.find('\n')),
            R"({"name":"online_softmax","description":"Single-pass softmax with running max.",)"
            R"("scope":"general","tags":["softmax","reduction","fusion"],"content":"## Motivation\n)"
            R"(Three passes.\n## Key Idea\nRescale the running sum.\n## Example\n```cuda\n)"
            R"(m = fmaxf(m, x);\n```","verify_speedup":1.87,"source_uuid":"3f1c-22",)"
            R"("meta":{"z":1,"a":[true,null]}})");

  // Through a file and back: equal skills, equal bytes, equal digest.
  std::string path = temp_dir() + "/skill_library.jsonl";
  ASSERT_TRUE(lib->save(path).ok());
  auto again = SkillLibrary::load(path);
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_EQ(again->skills(), lib->skills());
  EXPECT_EQ(again->to_jsonl(), written);
  EXPECT_EQ(again->digest(), lib->digest());
}

TEST(SkillLibrary, CanonicalBytesIgnoreKeyOrderAndSpacingButNotContentOrOrder) {
  auto a = SkillLibrary::parse_jsonl(
      R"({"name":"x","description":"d","scope":"general","tags":["t"],"content":"c","k2":1,"k1":2})"
      "\n",
      "a");
  auto b = SkillLibrary::parse_jsonl(
      "\n  \n"
      R"({ "k1": 2, "content": "c", "tags": ["t"], "scope": "general", "description": "d", "k2": 1, "name": "X" })"
      "\n",
      "b");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->canonical_bytes(), b->canonical_bytes());
  EXPECT_EQ(a->digest(), b->digest());
  EXPECT_EQ(a->canonical_bytes(),
            "vinci-skill-library 1\n"
            R"({"content":"c","description":"d","k1":2,"k2":1,"name":"x","scope":"general","tags":["t"]})"
            "\n");
  SkillLibrary c = *a;
  Skill extra = c.at(0);
  extra.name = "y";
  c.add(extra);
  EXPECT_NE(c.digest(), a->digest());
  SkillLibrary d;
  d.add(c.at(1));
  d.add(c.at(0));
  EXPECT_NE(d.digest(), c.digest());  // order is part of the library (BM25 ties, doc ids)
}

TEST(SkillLibrary, NormalisesNames) {
  EXPECT_EQ(normalize_skill_name("Warp-Shuffle Reduce"), "warp_shuffle_reduce");
  EXPECT_EQ(normalize_skill_name("  float4 (vectorized) loads\t"), "float4__vectorized__loads");
  EXPECT_EQ(normalize_skill_name("already_ok_123"), "already_ok_123");
  EXPECT_EQ(normalize_skill_name("caf\u00e9"), "caf_");  // one `_` per non-ASCII code point
  EXPECT_EQ(normalize_skill_name("   "), "");
}

TEST(SkillLibrary, FirstReadWinsAndAddRenamesOnClash) {
  auto lib =
      SkillLibrary::parse_jsonl(R"({"name":"Tiling","description":"first","scope":"general","tags":[],"content":"1"})"
                                "\n"
                                R"({"name":"tiling","description":"second","scope":"general","tags":[],"content":"2"})"
                                "\n",
                                "dup.jsonl");
  ASSERT_TRUE(lib.ok());
  ASSERT_EQ(lib->size(), 1u);
  EXPECT_EQ(lib->at(0).description, "first");
  ASSERT_EQ(lib->dropped_duplicates().size(), 1u);
  EXPECT_EQ(lib->dropped_duplicates()[0], (std::pair<std::string, size_t>{"tiling", 2}));

  Skill s;
  s.name = "TILING";
  EXPECT_EQ(lib->add(s), "tiling_1");
  EXPECT_EQ(lib->add(s), "tiling_2");
  s.name = "tiling_1";
  EXPECT_EQ(lib->add(s), "tiling_1_1");
  EXPECT_NE(lib->find("tiling_2"), nullptr);
  EXPECT_EQ(lib->find("Tiling"), nullptr);  // find takes normalised names
}

// Each malformed line is an error that names the file, the line, the field, what was expected
// and what was found, and nothing of the file is returned.
TEST(SkillLibrary, MalformedLinesNameFileLineAndField) {
  const std::string good = R"({"name":"a","description":"d","scope":"general","tags":["t"],"content":"c"})"
                           "\n";
  struct Case {
    std::string line;
    std::string message;
  };
  const Case cases[] = {
      {R"({"description":"d","scope":"general","tags":["t"],"content":"c"})",
       "bad.jsonl:2: field 'name': expected a string, found nothing (field missing)"},
      {R"({"name":"a2","description":5,"scope":"general","tags":["t"],"content":"c"})",
       "bad.jsonl:2: field 'description': expected a string, found number"},
      {R"({"name":"a2","description":"d","scope":"general","tags":"t","content":"c"})",
       "bad.jsonl:2: field 'tags': expected an array of strings, found string"},
      {R"({"name":"a2","description":"d","scope":"general","tags":["t",3],"content":"c"})",
       "bad.jsonl:2: field 'tags[1]': expected a string, found number"},
      {R"({"name":"a2","description":"d","scope":"general","tags":[],"content":"c","verify_speedup":"fast"})",
       "bad.jsonl:2: field 'verify_speedup': expected a number or null, found string"},
      {R"({"name":"!!","description":"d","scope":"general","tags":[],"content":null})",
       "bad.jsonl:2: field 'content': expected a string, found null"},
      {R"({"name":"   ","description":"d","scope":"general","tags":[],"content":"c"})",
       "bad.jsonl:2: field 'name': expected a name with at least one character"},
      {R"(["name","a2"])", "bad.jsonl:2: expected a JSON object, found array"},
      {R"({"name":"a2", "description": "unterminated)", "bad.jsonl:2: expected one JSON object per line"},
  };
  for (const Case& c : cases) {
    auto lib = SkillLibrary::parse_jsonl(good + c.line + "\n" + good, "bad.jsonl");
    ASSERT_FALSE(lib.ok()) << c.line;
    EXPECT_EQ(lib.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(lib.status().message().rfind(c.message, 0), 0u)
        << "got: " << lib.status().message() << "\nwant prefix: " << c.message;
  }
  // A missing file is NotFound-or-IoError from read_file, naming the path.
  auto missing = SkillLibrary::load("/nonexistent/vinci/lib.jsonl");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("/nonexistent/vinci/lib.jsonl"), std::string::npos);
}

TEST(SkillLibrary, SnapshotForStepIsTheLargestAtOrBelow) {
  std::string dir = temp_dir();
  SkillLibrary lib;
  Skill s;
  s.name = "s0";
  s.scope = "general";
  s.content = "c";
  for (int64_t step : {0, 5, 12}) {
    s.name = "s" + std::to_string(step);
    lib.add(s);
    ASSERT_TRUE(save_snapshot(lib, dir, step).ok());
  }
  // Files that do not match the pattern are ignored.
  ASSERT_TRUE(write_file_atomic(dir + "/global_step_7.jsonl.tmp", "junk").ok());
  ASSERT_TRUE(write_file_atomic(dir + "/global_step_x.jsonl", "junk").ok());
  ASSERT_TRUE(write_file_atomic(dir + "/global_step_08.jsonl", "junk").ok());
  ASSERT_TRUE(write_file_atomic(dir + "/notes.txt", "junk").ok());

  EXPECT_EQ(find_snapshot_step(dir, 0).value(), 0);
  EXPECT_EQ(find_snapshot_step(dir, 4).value(), 0);
  EXPECT_EQ(find_snapshot_step(dir, 5).value(), 5);
  EXPECT_EQ(find_snapshot_step(dir, 11).value(), 5);
  EXPECT_EQ(find_snapshot_step(dir, 1000).value(), 12);
  auto at_9 = load_snapshot(dir, 9);
  ASSERT_TRUE(at_9.ok()) << at_9.status().to_string();
  EXPECT_EQ(at_9->size(), 2u);
  EXPECT_EQ(at_9->at(1).name, "s5");

  auto none = find_snapshot_step(dir, -1);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
  EXPECT_NE(none.status().message().find("N <= -1, found steps 0..12"), std::string::npos) << none.status().message();
  std::string empty = temp_dir();
  auto nothing = find_snapshot_step(empty, 3);
  ASSERT_FALSE(nothing.ok());
  EXPECT_NE(nothing.status().message().find("found no global_step_<N>.jsonl files"), std::string::npos);
  EXPECT_FALSE(find_snapshot_step(empty + "/absent", 3).ok());
  EXPECT_EQ(snapshot_path("runs/a/skills", 42), "runs/a/skills/global_step_42.jsonl");
}

TEST(SkillText, HeaderBlockThenBody) {
  Skill s;
  s.name = "warp_shuffle_reduction";
  s.description = "Reduce within a warp with shuffles.";
  s.scope = "general";
  s.tags = {"reduction", "warp_shuffle", "cuda"};
  s.content = "## Motivation\nFewer barriers.\n## Key Idea\nShuffle.\n## Example\n```cuda\nv += x;\n```";
  EXPECT_EQ(skill_text(s),
            "---\n"
            "name: warp_shuffle_reduction\n"
            "description: Reduce within a warp with shuffles.\n"
            "scope: general\n"
            "tags: [reduction, warp_shuffle, cuda]\n"
            "---\n"
            "## Motivation\nFewer barriers.\n## Key Idea\nShuffle.\n## Example\n```cuda\nv += x;\n```");
  Skill t = s;
  t.name = "tiling";
  t.tags = {};
  t.content = "Tile it.";
  EXPECT_EQ(skill_injection_block({&s, &t}), "## [Skill Library] Potentially Relevant Optimization Techniques\n\n" +
                                                 skill_text(s) + "\n\n" + skill_text(t) + "\n\n---");
  EXPECT_NE(skill_text(t).find("tags: []\n"), std::string::npos);
  EXPECT_EQ(skill_injection_block({}), "");
  EXPECT_EQ(skill_document_text(s),
            "warp_shuffle_reduction Reduce within a warp with shuffles. reduction warp_shuffle "
            "cuda " +
                s.content);
}

}  // namespace
}  // namespace vinci

namespace vinci {
namespace {

TEST(SkillText, Utf8Validity) {
  Skill s;
  s.name = "caf\u00e9_\U0001F680";
  s.content = "ok \u2014 fine";
  EXPECT_TRUE(has_valid_utf8(s));
  for (const char* bad : {"\xff", "\xc0\xaf" /* overlong '/' */, "\xed\xa0\x80" /* surrogate */,
                          "\xe2\x82" /* truncated */, "\xf4\x90\x80\x80" /* > U+10FFFF */}) {
    Skill b = s;
    b.content = bad;
    EXPECT_FALSE(has_valid_utf8(b)) << bad;
  }
  Skill t = s;
  t.tags = {"ok", "\x80"};
  EXPECT_FALSE(has_valid_utf8(t));
}

// A number past double's range is an error naming the line, not an exception.
TEST(SkillLibrary, ANumberPastDoubleRangeIsAnError) {
  auto r = SkillLibrary::parse_jsonl(
      "{\"name\":\"a\",\"description\":\"d\",\"scope\":\"general\",\"tags\":[\"t\"],"
      "\"content\":\"c\",\"verify_speedup\":77e7777}\n",
      "lib.jsonl");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message().rfind("lib.jsonl:1: expected one JSON object per line", 0), 0u)
      << r.status().to_string();
}

}  // namespace
}  // namespace vinci
