// The language-model agents' prompt templates (harness/llm_agents.h): which files a run reads.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "core/atomic_file.h"
#include "harness/llm_agents.h"

namespace vinci {
namespace {

// The Triton answer format is read only where the experiment accepts Triton, so runs without it
// record the templates they always did.
TEST(PromptTemplates, TheTritonFormatIsLoadedOnlyWhenTritonIsAccepted) {
  std::string dir = std::string(VINCI_SOURCE_DIR) + "/prompts";
  auto cuda = PromptTemplates::load(dir);
  ASSERT_TRUE(cuda.ok()) << cuda.status().to_string();
  EXPECT_EQ(cuda->text.count(PromptTemplates::kTritonFormat), 0u);
  EXPECT_EQ(cuda->text.size(), 5u);
  auto both = PromptTemplates::load(dir, {"cuda", "triton"});
  ASSERT_TRUE(both.ok()) << both.status().to_string();
  ASSERT_EQ(both->text.count(PromptTemplates::kTritonFormat), 1u);
  EXPECT_NE(both->render(PromptTemplates::kTritonFormat, {{"languages", "Triton only"}})
                .find("This experiment accepts kernels in Triton only."),
            std::string::npos);
  // A folder with the five templates but not Triton's: fine for cuda, an error naming it for triton.
  char tmpl[] = "/tmp/vinci_prompts_XXXXXX";
  std::string copy = mkdtemp(tmpl);
  for (const char* f : PromptTemplates::kFiles)
    ASSERT_TRUE(write_file_atomic(copy + "/" + f, cuda->text.at(f) + "\n").ok());
  EXPECT_TRUE(PromptTemplates::load(copy).ok());
  auto missing = PromptTemplates::load(copy, {"triton"});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("policy_format_triton.md"), std::string::npos)
      << missing.status().message();
  std::system(("rm -rf '" + copy + "'").c_str());
}

}  // namespace
}  // namespace vinci
