// A skill library file (daVinci's JSONL: `library.seed_library`, snapshots, `harness skills
// search`): parsed, indexed for BM25 and searched, rendered as text for the agents. A library that
// parses saves to JSONL that parses back to the same library (equal canonical bytes).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "agents/bm25.h"
#include "agents/skill.h"
#include "agents/skill_library.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  vinci::Result<vinci::SkillLibrary> lib = vinci::SkillLibrary::parse_jsonl(text, "fuzz.jsonl");
  if (!lib.ok()) return 0;
  std::vector<const vinci::Skill*> skills;
  for (const vinci::Skill& s : lib->skills()) skills.push_back(&s);
  (void)vinci::skill_injection_block(skills);
  vinci::Bm25Index index;
  vinci::index_new_skills(*lib, &index);
  if (!lib->empty()) {
    (void)index.top_k(vinci::bm25_tokenize(vinci::skill_document_text(lib->at(0))), 3);
  }
  std::string saved = lib->to_jsonl();
  vinci::Result<vinci::SkillLibrary> again = vinci::SkillLibrary::parse_jsonl(saved, "saved.jsonl");
  VINCI_FUZZ_CHECK(again.ok(), again.status().to_string());
  VINCI_FUZZ_CHECK(again->canonical_bytes() == lib->canonical_bytes(), "saved library differs");
  return 0;
}
