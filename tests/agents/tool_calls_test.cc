#include "agents/tool_calls.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "agents/prompts.h"
#include "agents/skill_library.h"
#include "core/rng.h"

namespace vinci {
namespace {

const std::vector<std::string> kCandidates = {"online_softmax", "warp_shuffle_reduction", "vectorized_float4_loads",
                                              "shared_memory_tiling", "tensor_core_wmma"};

std::vector<std::string> names(const SkillSelection& s) {
  std::vector<std::string> out;
  for (const auto& x : s.selected) out.push_back(x.name);
  return out;
}

TEST(SelectSkills, QwenXml) {
  const char* reply =
      "Let me look at the task.\n"
      "<tool_call>\n<function=select_skills>\n<parameter=think>\nRow softmax is memory bound; "
      "fuse passes.\n</parameter>\n<parameter=selected_skills>\n"
      "[{\"name\": \"online_softmax\", \"reason\": \"one pass\"}, "
      "{\"name\": \"warp_shuffle_reduction\", \"reason\": \"row max\"}]\n"
      "</parameter>\n</function>\n</tool_call>";
  auto sel = parse_select_skills(reply, kCandidates);
  ASSERT_TRUE(sel.ok()) << sel.status().to_string();
  EXPECT_EQ(sel->format, ToolCallFormat::kQwenXml);
  EXPECT_EQ(sel->think, "Row softmax is memory bound; fuse passes.");
  EXPECT_EQ(names(*sel), (std::vector<std::string>{"online_softmax", "warp_shuffle_reduction"}));
  EXPECT_EQ(sel->selected[0].reason, "one pass");
  EXPECT_TRUE(sel->dropped.empty());
}

TEST(SelectSkills, QwenXmlWithoutClosingTags) {
  const char* reply =
      "<function=select_skills>\n<parameter=think>\nshort\n<parameter=selected_skills>\n"
      "[{\"name\": \"tensor_core_wmma\", \"reason\": \"gemm\"}]";
  auto sel = parse_select_skills(reply, kCandidates);
  ASSERT_TRUE(sel.ok()) << sel.status().to_string();
  EXPECT_EQ(sel->think, "short");
  EXPECT_EQ(names(*sel), std::vector<std::string>{"tensor_core_wmma"});
}

TEST(SelectSkills, JsonInsideToolCall) {
  // arguments as an object, and as a JSON string holding the object (OpenAI style).
  for (const char* reply :
       {"<tool_call>\n{\"name\": \"select_skills\", \"arguments\": {\"think\": \"t\", "
        "\"selected_skills\": [{\"name\": \"shared_memory_tiling\", \"reason\": \"r\"}]}}\n"
        "</tool_call>",
        "<tool_call>{\"name\": \"select_skills\", \"arguments\": \"{\\\"think\\\": \\\"t\\\", "
        "\\\"selected_skills\\\": [{\\\"name\\\": \\\"shared_memory_tiling\\\"}]}\"}</tool_call>"}) {
    auto sel = parse_select_skills(reply, kCandidates);
    ASSERT_TRUE(sel.ok()) << sel.status().to_string();
    EXPECT_EQ(sel->format, ToolCallFormat::kJsonInToolCall);
    EXPECT_EQ(sel->think, "t");
    EXPECT_EQ(names(*sel), std::vector<std::string>{"shared_memory_tiling"});
  }
}

TEST(SelectSkills, FencedJsonBlock) {
  const char* bare =
      "I pick these:\n```json\n{\"think\": \"bandwidth\", \"selected_skills\": "
      "[{\"name\": \"vectorized_float4_loads\", \"reason\": \"16B\"}]}\n```\n";
  auto sel = parse_select_skills(bare, kCandidates);
  ASSERT_TRUE(sel.ok()) << sel.status().to_string();
  EXPECT_EQ(sel->format, ToolCallFormat::kFencedJson);
  EXPECT_EQ(names(*sel), std::vector<std::string>{"vectorized_float4_loads"});
  const char* wrapped =
      "```json\n{\"name\": \"select_skills\", \"arguments\": {\"think\": \"x\", "
      "\"selected_skills\": [\"online_softmax\"]}}\n```";
  sel = parse_select_skills(wrapped, kCandidates);
  ASSERT_TRUE(sel.ok()) << sel.status().to_string();
  EXPECT_EQ(names(*sel), std::vector<std::string>{"online_softmax"});  // bare name strings too
}

TEST(SelectSkills, XmlWinsOverLaterFormatsAndOtherFunctionsAreIgnored) {
  const char* reply =
      "<tool_call>{\"name\": \"other_tool\", \"arguments\": {}}</tool_call>\n"
      "```json\n{\"think\": \"\", \"selected_skills\": [\"online_softmax\"]}\n```\n"
      "<tool_call><function=select_skills><parameter=selected_skills>[\"tensor_core_wmma\"]"
      "</parameter></function></tool_call>";
  auto sel = parse_select_skills(reply, kCandidates);
  ASSERT_TRUE(sel.ok()) << sel.status().to_string();
  EXPECT_EQ(sel->format, ToolCallFormat::kQwenXml);
  EXPECT_EQ(names(*sel), std::vector<std::string>{"tensor_core_wmma"});
  EXPECT_EQ(sel->think, "");
}

TEST(SelectSkills, CapUnknownNamesAndRepeats) {
  const char* reply =
      "<tool_call><function=select_skills><parameter=selected_skills>"
      "[{\"name\": \"Online Softmax\"}, {\"name\": \"made_up_skill\"}, {\"name\": \"online_softmax\"},"
      " {\"name\": \"tensor_core_wmma\"}, {\"reason\": \"no name\"}]"
      "</parameter></function></tool_call>";
  auto sel = parse_select_skills(reply, kCandidates, 3);
  ASSERT_TRUE(sel.ok()) << sel.status().to_string();
  // "Online Softmax" matches after normalisation; the cap of 3 counts the list as written.
  EXPECT_EQ(names(*sel), std::vector<std::string>{"online_softmax"});
  ASSERT_EQ(sel->dropped.size(), 4u);
  EXPECT_EQ(sel->dropped[0].name, "made_up_skill");
  EXPECT_EQ(sel->dropped[0].reason, "not among the candidates");
  EXPECT_EQ(sel->dropped[1].reason, "selected twice");
  EXPECT_EQ(sel->dropped[2].index, 3u);
  EXPECT_EQ(sel->dropped[2].reason, "over the cap of 3");
  EXPECT_EQ(sel->dropped[3].reason, "over the cap of 3");

  const char* four =
      "```json\n{\"selected_skills\": [\"online_softmax\", \"tensor_core_wmma\", "
      "\"shared_memory_tiling\", \"warp_shuffle_reduction\"]}\n```";
  sel = parse_select_skills(four, kCandidates);
  ASSERT_TRUE(sel.ok());
  EXPECT_EQ(sel->selected.size(), 3u);
  EXPECT_EQ(sel->dropped.size(), 1u);
  // An empty list is a valid choice of nothing.
  sel = parse_select_skills("```json\n{\"think\": \"none fit\", \"selected_skills\": []}\n```", kCandidates);
  ASSERT_TRUE(sel.ok());
  EXPECT_TRUE(sel->selected.empty());
}

TEST(SelectSkills, GarbageIsAFailureValueNotACrash) {
  const std::vector<std::string> replies = {
      "",
      "I think online_softmax is best.",
      "<tool_call>{not json}</tool_call>",
      "<tool_call>\n<function=select_skills>\n<parameter=selected_skills>\n[{\"name\": \"a\",",
      "<tool_call><function=select_skills><parameter=think>x</parameter></function></tool_call>",
      "<tool_call><function=select_skills><parameter=selected_skills>{\"name\": \"x\"}"
      "</parameter></function></tool_call>",
      "```json\n[1, 2, 3]\n```",
      "```json\n{\"selected_skills\": 7}\n```",
      "<function=",
      "<tool_call>",
      "```json",
      std::string("\0\xff\xfe<tool_call>\x80", 9),
  };
  for (const auto& r : replies) {
    auto sel = parse_select_skills(r, kCandidates);
    EXPECT_FALSE(sel.ok()) << r;
    EXPECT_EQ(sel.status().code(), StatusCode::kInvalidArgument);
  }
  auto missing = parse_select_skills("hello", kCandidates);
  EXPECT_NE(missing.status().message().find("expected a select_skills tool call"), std::string::npos)
      << missing.status().message();
  auto bad_list = parse_select_skills(replies[3], kCandidates);
  EXPECT_NE(bad_list.status().message().find("argument 'selected_skills': expected a JSON list"), std::string::npos)
      << bad_list.status().message();
  auto not_list = parse_select_skills(replies[7], kCandidates);
  EXPECT_NE(not_list.status().message().find("expected a list, found number"), std::string::npos)
      << not_list.status().message();
}

std::string skill_json(const std::string& name, const std::string& content,
                       const std::string& tags = "[\"fusion\", \"softmax\", \"reduction\"]") {
  return "{\"name\": \"" + name +
         "\", \"description\": \"Fuse the passes.\", \"scope\": "
         "\"general\", \"tags\": " +
         tags + ", \"content\": \"" + content + "\"}";
}

TEST(UpdateSkillLibrary, ParsesSkillsInAllFormats) {
  std::string list = "[" + skill_json("online_softmax_fusion", "## Key Idea\\nOne pass.") + "]";
  const std::string replies[] = {
      "<tool_call>\n<function=update_skill_library>\n<parameter=think>\nwhy\n</parameter>\n"
      "<parameter=new_skills>\n" +
          list + "\n</parameter>\n</function>\n</tool_call>",
      "<tool_call>{\"name\": \"update_skill_library\", \"arguments\": {\"think\": \"why\", "
      "\"new_skills\": " +
          list + "}}</tool_call>",
      "```json\n{\"think\": \"why\", \"new_skills\": " + list + "}\n```"};
  for (const auto& r : replies) {
    auto p = parse_update_skill_library(r);
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    ASSERT_EQ(p->skills.size(), 1u);
    EXPECT_EQ(p->think, "why");
    const Skill& s = p->skills[0];
    EXPECT_EQ(s.name, "online_softmax_fusion");
    EXPECT_EQ(s.scope, "general");
    EXPECT_EQ(s.tags, (std::vector<std::string>{"fusion", "softmax", "reduction"}));
    EXPECT_EQ(s.content, "## Key Idea\nOne pass.");
  }
  // Tags written as one comma-separated string are split.
  auto p = parse_update_skill_library("```json\n{\"new_skills\": [" + skill_json("a", "x", "\"tiling, gemm ,smem\"") +
                                      "]}\n```");
  ASSERT_TRUE(p.ok());
  ASSERT_EQ(p->skills.size(), 1u);
  EXPECT_EQ(p->skills[0].tags, (std::vector<std::string>{"tiling", "gemm", "smem"}));
}

TEST(UpdateSkillLibrary, CapOfTwoAndLazyFilter) {
  std::string list = "[" + skill_json("good_one", "Use float4 loads.") + ", " +
                     skill_json("compiled", "Wrap the model in torch.compile(model).") + ", " +
                     skill_json("third", "Fine but over the cap.") + "]";
  auto p = parse_update_skill_library("```json\n{\"new_skills\": " + list + "}\n```");
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  ASSERT_EQ(p->skills.size(), 1u);
  EXPECT_EQ(p->skills[0].name, "good_one");
  ASSERT_EQ(p->dropped.size(), 2u);
  EXPECT_EQ(p->dropped[0].name, "compiled");
  EXPECT_EQ(p->dropped[0].reason, "lazy: uses torch.compile (torch.compile)");  // filter + reason
  EXPECT_EQ(p->dropped[1].name, "third");
  EXPECT_EQ(p->dropped[1].reason, "over the cap of 2");

  std::string missing =
      "[{\"name\": \"no_content\", \"description\": \"d\", \"scope\": \"general\", \"tags\": "
      "[\"a\"]}, 5]";
  p = parse_update_skill_library("```json\n{\"new_skills\": " + missing + "}\n```");
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(p->skills.empty());
  ASSERT_EQ(p->dropped.size(), 2u);
  EXPECT_EQ(p->dropped[0].reason, "field 'content': missing");
  EXPECT_EQ(p->dropped[1].reason, "expected a skill object, found number");
  EXPECT_FALSE(parse_update_skill_library("no tool call here").ok());
}

Skill make_skill(const std::string& content) {
  Skill s;
  s.name = "x";
  s.description = "A technique.";
  s.scope = "general";
  s.tags = {"a", "b", "c"};
  s.content = content;
  return s;
}

TEST(LazyFilter, Rules) {
  EXPECT_EQ(lazy_skill_reason(make_skill("Use __shfl_down_sync; allocate with torch.empty_like(x).")), std::nullopt);
  EXPECT_EQ(lazy_skill_reason(make_skill("## Example\nreturn torch.matmul(a, b)")),
            "falls back to PyTorch (torch.matmul()");
  EXPECT_EQ(lazy_skill_reason(make_skill("y = F.softmax(x, dim=-1)")), "falls back to PyTorch (f.softmax()");
  EXPECT_EQ(lazy_skill_reason(make_skill("y = torch.nn.functional.gelu(x)")),
            "falls back to PyTorch (torch.nn.functional.gelu()");
  // A method of another object named like an op is not a PyTorch call.
  EXPECT_EQ(lazy_skill_reason(make_skill("self.softmax(x) inside buf.relu(y)")), std::nullopt);
  EXPECT_EQ(lazy_skill_reason(make_skill("For big shapes, fall back to PyTorch.")),
            "falls back to PyTorch (\"fall back to pytorch\")");
  EXPECT_EQ(lazy_skill_reason(make_skill("call cublasGemmEx with tensor op math")), "calls cuBLAS");
  EXPECT_EQ(lazy_skill_reason(make_skill("torch._dynamo.optimize('inductor')")), "uses torch.compile (torch._dynamo)");
  EXPECT_EQ(lazy_skill_reason(make_skill("When dropout is active, skip the computation and "
                                         "return zeros.")),
            "skips the computation (\"skip the computation\")");
  Skill no_tags = make_skill("fine");
  no_tags.tags.clear();
  EXPECT_EQ(lazy_skill_reason(no_tags), "missing field 'tags'");
  Skill blank = make_skill("  \n ");
  EXPECT_EQ(lazy_skill_reason(blank), "missing field 'content'");
  Skill no_scope = make_skill("fine");
  no_scope.scope = "";
  EXPECT_EQ(lazy_skill_reason(no_scope), "missing field 'scope'");
}

TEST(Prompts, SelectionShowsCandidatesWithoutBodies) {
  Skill a = make_skill("SECRET BODY TEXT");
  a.name = "online_softmax";
  a.scope = "task_specific/softmax";
  a.tags = {"softmax", "fusion"};
  a.description = "Single pass softmax.";
  auto msgs = selection_messages("Optimize torch.softmax on [128, 16384].", {&a});
  ASSERT_EQ(msgs.size(), 2u);
  EXPECT_EQ(msgs[0].role, "system");
  EXPECT_NE(msgs[0].content.find("at most 3"), std::string::npos);
  EXPECT_EQ(msgs[1].role, "user");
  EXPECT_NE(msgs[1].content.find("Optimize torch.softmax on [128, 16384]."), std::string::npos);
  EXPECT_NE(msgs[1].content.find("1. name: online_softmax\n   scope: task_specific/softmax\n"
                                 "   tags: [softmax, fusion]\n   description: Single pass softmax."),
            std::string::npos)
      << msgs[1].content;
  EXPECT_EQ(msgs[1].content.find("SECRET BODY TEXT"), std::string::npos);
}

TEST(Prompts, PolicySystemCarriesTheInjectionBlock) {
  Skill a = make_skill("body a");
  EXPECT_EQ(policy_system_prompt("SYS", {&a}), "SYS\n\n" + skill_injection_block({&a}));
  EXPECT_EQ(policy_system_prompt("SYS", {}), "SYS");  // the null scheme
  auto msgs = policy_messages(kDefaultPolicySystem, "task", {&a});
  ASSERT_EQ(msgs.size(), 2u);
  EXPECT_NE(msgs[0].content.find("## [Skill Library] Potentially Relevant Optimization Techniques"), std::string::npos);
  EXPECT_EQ(msgs[1].content, "task");
}

TEST(Prompts, SummaryShowsTheRollout) {
  Skill a = make_skill("body");
  a.name = "tiling";
  std::vector<RolloutTurnText> turns = {{1, "kernel v1", "correct, 1.1x", 1.1}, {2, "kernel v2", "correct, 1.5x", 1.5}};
  auto msgs = summary_messages("the task", {&a}, turns);
  ASSERT_EQ(msgs.size(), 2u);
  EXPECT_NE(msgs[0].content.find("at most 2"), std::string::npos);
  const std::string& u = msgs[1].content;
  EXPECT_NE(u.find("- tiling: A technique."), std::string::npos);
  EXPECT_NE(u.find("## Turn 1 (speedup 1.1)\n\n### Response\n\nkernel v1\n\n### Evaluation\n\n"
                   "correct, 1.1x\n"),
            std::string::npos)
      << u;
  EXPECT_LT(u.find("## Turn 1"), u.find("## Turn 2"));
}

TEST(Prompts, ToolSchemasNameTheTools) {
  EXPECT_EQ(select_skills_tool_schema()["function"]["name"], "select_skills");
  EXPECT_EQ(update_skill_library_tool_schema()["function"]["parameters"]["required"],
            nlohmann::json::parse(R"(["think", "new_skills"])"));
}

}  // namespace
}  // namespace vinci

namespace vinci {
namespace {

// Truncations and random byte edits of valid replies: every result is either a failure value or
// a selection/proposal that keeps the caps, names only candidates and holds no lazy skill.
TEST(ToolCallParsers, MutatedRepliesNeverCrashAndKeepTheRules) {
  const uint64_t seed = 6;
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  std::string skills = "[" + skill_json("a_skill", "Use float4.") + ", " +
                       skill_json("b_skill", "Fall back to PyTorch.") + ", " + skill_json("c_skill", "Tile it.") + "]";
  const std::vector<std::string> replies = {
      "<tool_call>\n<function=select_skills>\n<parameter=think>\nx\n</parameter>\n"
      "<parameter=selected_skills>\n[{\"name\": \"online_softmax\", \"reason\": \"r\"}, "
      "{\"name\": \"tensor_core_wmma\"}, \"shared_memory_tiling\", \"warp_shuffle_reduction\"]\n"
      "</parameter>\n</function>\n</tool_call>",
      "<tool_call>{\"name\": \"select_skills\", \"arguments\": {\"selected_skills\": "
      "[\"online_softmax\", \"nope\"]}}</tool_call>",
      "<tool_call>\n<function=update_skill_library>\n<parameter=new_skills>\n" + skills +
          "\n</parameter>\n</function>\n</tool_call>",
      "```json\n{\"name\": \"update_skill_library\", \"arguments\": {\"new_skills\": " + skills + "}}\n```"};
  auto check = [&](const std::string& r) {
    auto sel = parse_select_skills(r, kCandidates);
    if (sel.ok()) {
      EXPECT_LE(sel->selected.size(), 3u) << r;
      for (const auto& s : sel->selected) {
        EXPECT_NE(std::find(kCandidates.begin(), kCandidates.end(), s.name), kCandidates.end());
      }
    } else {
      EXPECT_FALSE(sel.status().message().empty());
    }
    auto prop = parse_update_skill_library(r);
    if (prop.ok()) {
      EXPECT_LE(prop->skills.size(), 2u) << r;
      for (const auto& s : prop->skills) EXPECT_EQ(lazy_skill_reason(s), std::nullopt) << r;
    }
  };
  size_t cases = 0;
  for (const auto& r : replies) {
    for (size_t n = 0; n <= r.size(); ++n, ++cases) check(r.substr(0, n));
  }
  Stream s(RngKey::root(seed).with("purpose", "tool_call_mutations"));
  for (int i = 0; i < 3000; ++i, ++cases) {
    std::string r = replies[s.below(replies.size())];
    for (uint64_t e = 0, edits = 1 + s.below(4); e < edits && !r.empty(); ++e) {
      size_t at = s.below(r.size());
      switch (s.below(3)) {
        case 0: r[at] = static_cast<char>(s.below(256)); break;
        case 1: r.erase(at, 1 + s.below(8)); break;
        default: r.insert(at, 1, "<>{}[]\",=/`"[s.below(11)]); break;
      }
    }
    check(r);
  }
  EXPECT_GT(cases, 3000u);
}

}  // namespace
}  // namespace vinci
