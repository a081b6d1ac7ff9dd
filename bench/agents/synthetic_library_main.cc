// synthetic_library N OUT_DIR: writes the benchmark's synthetic library of N skills as
// OUT_DIR/library.jsonl (daVinci format) and its 8 task prompts as OUT_DIR/prompt_<i>.txt, so
// `harness skills search` and tests/agents/compare_synthetic_with_rank_bm25.py can use them.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "agents/skill_library.h"
#include "bench/agents/synthetic_skills.h"
#include "core/atomic_file.h"

int main(int argc, char** argv) {
  if (argc != 3 || std::atoll(argv[1]) <= 0) {
    std::fprintf(stderr, "usage: synthetic_library N OUT_DIR\n");
    return 2;
  }
  const uint64_t n = static_cast<uint64_t>(std::atoll(argv[1]));
  const std::string dir = argv[2];
  vinci::SkillLibrary lib;
  for (uint64_t i = 0; i < n; ++i) lib.add(vinci::synthetic_skill(20261202, i));
  vinci::Status st = lib.save(dir + "/library.jsonl");
  for (uint64_t q = 0; st.ok() && q < 8; ++q) {
    st = vinci::write_file_atomic(dir + "/prompt_" + std::to_string(q) + ".txt", vinci::synthetic_task_prompt(q));
  }
  if (!st.ok()) {
    std::fprintf(stderr, "synthetic_library: %s\n", st.to_string().c_str());
    return 2;
  }
  return 0;
}
