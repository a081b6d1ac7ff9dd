#include "harness/sim_world.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

#include "agents/skill_library.h"
#include "gpu/codegen/codegen.h"
#include "gpu/shapes.h"

namespace vinci {
namespace {

// A task family's one-hot slot among the task features: 13 families have one each, and the
// families added to the suite after the features' layout was fixed (recurrent, ssm) share the
// last. The layout is the network's input, so every checkpoint depends on it.
constexpr int kFamilySlots = 14;
int family_slot(TaskFamily family) {
  switch (family) {
    case TaskFamily::kAttention: return 0;
    case TaskFamily::kConv: return 1;
    case TaskFamily::kConvEpilogue: return 2;
    case TaskFamily::kElementwise: return 3;
    case TaskFamily::kGemm: return 4;
    case TaskFamily::kGemmEpilogue: return 5;
    case TaskFamily::kLoss: return 6;
    case TaskFamily::kNetwork: return 7;
    case TaskFamily::kNorm: return 8;
    case TaskFamily::kPooling: return 9;
    case TaskFamily::kReduction: return 10;
    case TaskFamily::kScan: return 11;
    case TaskFamily::kSoftmax: return 12;
    case TaskFamily::kRecurrent:
    case TaskFamily::kSsm: return kFamilySlots - 1;
  }
  return kFamilySlots - 1;
}
const char* const kKnobFamilies[] = {"plan", "elementwise", "row_reduction", "gemm"};

}  // namespace

const KnobTable& KnobTable::get() {
  static const KnobTable table = [] {
    KnobTable t;
    for (const char* fam : kKnobFamilies) {
      for (const Knob& k : family_knobs(fam)) {
        t.index[k.name] = static_cast<int32_t>(t.knobs.size());
        t.knobs.push_back(k);
      }
    }
    return t;
  }();
  return table;
}

int32_t KnobTable::head_of(const std::string& knob) const {
  auto it = index.find(knob);
  return it == index.end() ? -1 : it->second;
}

// Where each global knob's choices start in the backbone's one-hot layout; the last entry is
// choice_dim.
std::vector<int32_t> choice_offsets(const KnobTable& table) {
  std::vector<int32_t> offset(table.knobs.size() + 1, 0);
  for (size_t i = 0; i < table.knobs.size(); ++i) {
    offset[i + 1] = offset[i] + static_cast<int32_t>(table.knobs[i].choices.size());
  }
  return offset;
}

BackboneShape sim_backbone_shape() {
  BackboneShape s;
  s.task_dim = kTaskFeatureDim;
  for (const Knob& k : KnobTable::get().knobs) s.head_sizes.push_back(static_cast<int32_t>(k.choices.size()));
  s.feedback_dim = kFeedbackDim;
  s.candidate_dim = s.choice_dim() + 3;
  return s;
}

std::vector<int32_t> active_heads(const KnobSpace& space) {
  std::vector<int32_t> heads;
  for (const Knob& k : space.knobs) {
    int32_t h = KnobTable::get().head_of(k.name);
    VINCI_ASSERT_MSG(h >= 0, "knob " << k.name << " is not in the global knob table");
    heads.push_back(h);
  }
  return heads;
}

std::vector<float> task_features(const Task& task, SizeName size) {
  std::vector<float> f(kTaskFeatureDim, 0.0f);
  if (task.level >= 1 && task.level <= 3) f[task.level - 1] = 1.0f;
  f[3 + family_slot(task.family)] = 1.0f;  // 3 .. 3 + kFamilySlots - 1
  KnobSpace space = knob_space(task);
  for (int i = 0; i < 4; ++i) {
    for (const Knob& k : family_knobs(kKnobFamilies[i])) {
      if (space.index_of(k.name) >= 0) f[17 + i] = 1.0f;
    }
  }
  double in_elems = 0, out_elems = 0;
  auto shapes = infer_shapes(task);
  if (shapes.ok()) {
    const SizeMap& sizes = task.size_map(size);
    for (const auto& in : task.inputs) {
      auto dims = eval_shape(shapes->at(in.name), sizes);
      if (dims.ok()) {
        double n = 1;
        for (int64_t d : *dims) n *= static_cast<double>(d);
        in_elems += n;
      }
    }
    auto it = shapes->find(task.output);
    if (it != shapes->end()) {
      auto dims = eval_shape(it->second, sizes);
      if (dims.ok()) {
        double n = 1;
        for (int64_t d : *dims) n *= static_cast<double>(d);
        out_elems = n;
      }
    }
  }
  f[21] = static_cast<float>(std::log10(1.0 + in_elems) / 10.0);
  f[22] = static_cast<float>(std::log10(1.0 + out_elems) / 10.0);
  f[23] = static_cast<float>(task.ops.size()) / 10.0f;
  f[24] = task.modules.empty() ? 0.0f : 1.0f;
  return f;
}

std::map<std::string, std::string> skill_knobs(const Skill& skill) {
  std::map<std::string, std::string> out;
  auto v = skill.extra.find("vinci");
  if (v == skill.extra.end() || !v->is_object()) return out;
  auto k = v->find("knobs");
  if (k == v->end() || !k->is_object()) return out;
  for (auto it = k->begin(); it != k->end(); ++it) {
    if (it.value().is_string()) out[it.key()] = it.value().get<std::string>();
  }
  return out;
}

std::vector<float> skill_hint(const std::vector<const Skill*>& skills) {
  const KnobTable& table = KnobTable::get();
  const std::vector<int32_t> offset = choice_offsets(table);
  std::vector<float> hint(static_cast<size_t>(offset.back()), 0.0f);
  for (const Skill* s : skills) {
    for (const auto& [name, value] : skill_knobs(*s)) {
      int32_t h = table.head_of(name);
      if (h < 0) continue;
      const auto& choices = table.knobs[h].choices;
      auto c = std::find(choices.begin(), choices.end(), value);
      if (c == choices.end()) continue;
      hint[static_cast<size_t>(offset[h] + (c - choices.begin()))] = 1.0f;
    }
  }
  return hint;
}

std::vector<float> SimSkillFeaturizer::candidate_features(const Skill& skill, double score) const {
  std::vector<float> f = skill_hint({&skill});
  f.push_back(skill.scope == "general" ? 1.0f : 0.0f);
  f.push_back(static_cast<float>(score / (1.0 + score)));
  std::string family;
  auto v = skill.extra.find("vinci");
  if (v != skill.extra.end() && v->is_object() && v->contains("family") && (*v)["family"].is_string()) {
    family = (*v)["family"].get<std::string>();
  }
  f.push_back(family == task_.family_name() ? 1.0f : 0.0f);
  return f;
}

const std::vector<Technique>& locked_techniques() {
  // Named from the code generator's knobs (gpu/codegen/knobs.cc). Each keeps at least one choice
  // of its knobs open, so a task can always be written without it.
  static const std::vector<Technique> table = {
      {"tensor_cores",
       {{"gemm.tensor_cores", "tf32"}, {"gemm.tensor_cores", "bf16"}, {"gemm.tensor_cores", "fp16"}},
       "GEMMs on tensor cores (wmma, tf32/bf16/fp16 operands)"},
      {"warp_level_rows",
       {{"row.strategy", "warp_shuffle"}, {"row.strategy", "block_shuffle"}, {"row.strategy", "inner_tile"}},
       "row reductions with warp shuffles or a strided-row tile instead of a shared-memory tree or a thread per row"},
      {"vectorized_access",
       {{"ew.vector_width", "2"}, {"ew.vector_width", "4"}, {"row.vector_width", "4"}},
       "float2/float4 loads and stores"},
      {"epilogue_fusion", {{"fusion", "fused"}}, "elementwise epilogues inside the producing kernel"},
      {"fast_math", {{"ew.math", "fast"}}, "fast-math intrinsics (__expf, __fdividef, ...)"},
  };
  return table;
}

std::vector<size_t> taught_techniques(const Skill& skill) {
  std::vector<size_t> out;
  const auto& table = locked_techniques();
  for (size_t t = 0; t < table.size(); ++t) {
    for (const auto& [knob, value] : table[t].choices) {
      if (skill.content.find("`" + knob + " = " + value + "`") != std::string::npos) {
        out.push_back(t);
        break;
      }
    }
  }
  return out;
}

std::string TurnKnowledge::to_json() const {
  if (allowed.empty()) return "";
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  j["locked"] = locked;
  j["taught"] = taught;
  j["carried"] = carried;
  j["discovered"] = discovered;
  return j.dump();
}

TurnKnowledge turn_knowledge(const KnowledgeParams& params, const KnobSpace& space,
                             const std::vector<const Skill*>& skills, const std::vector<std::vector<int32_t>>& earlier,
                             const RngKey& key) {
  TurnKnowledge out;
  if (params.knowledge == SimKnowledge::kOpen) return out;
  const KnobTable& table = KnobTable::get();
  const std::vector<int32_t> offset = choice_offsets(table);
  out.allowed.assign(static_cast<size_t>(offset.back()), 1.0f);
  std::set<size_t> taught;
  for (const Skill* s : skills) {
    for (size_t t : taught_techniques(*s)) taught.insert(t);
  }
  const auto& techniques = locked_techniques();
  for (size_t t = 0; t < techniques.size(); ++t) {
    const Technique& tech = techniques[t];
    // The technique's choices present in this task's space: (position in the space, choice index).
    std::vector<std::pair<int32_t, int32_t>> here;
    for (const auto& [knob, value] : tech.choices) {
      int32_t pos = space.index_of(knob);
      if (pos < 0) continue;
      const auto& choices = space.knobs[static_cast<size_t>(pos)].choices;
      auto c = std::find(choices.begin(), choices.end(), value);
      VINCI_ASSERT_MSG(c != choices.end(), "technique " << tech.name << ": " << knob << " has no choice " << value);
      here.emplace_back(pos, static_cast<int32_t>(c - choices.begin()));
    }
    if (here.empty()) continue;
    bool carried = false;
    for (const auto& setting : earlier) {
      for (const auto& [pos, c] : here) carried = carried || setting.at(static_cast<size_t>(pos)) == c;
    }
    // Drawn for every relevant technique, known or not, so one technique's draw does not depend on
    // another's state.
    bool discovered = Stream(key.with("discover", static_cast<int64_t>(t))).uniform() < params.discovery;
    if (taught.count(t) != 0) {
      out.taught.push_back(tech.name);
    } else if (carried) {
      out.carried.push_back(tech.name);
    } else if (discovered) {
      out.discovered.push_back(tech.name);
    } else {
      out.locked.push_back(tech.name);
      for (const auto& [pos, c] : here) {
        int32_t head = table.head_of(space.knobs[static_cast<size_t>(pos)].name);
        out.allowed[static_cast<size_t>(offset[head] + c)] = 0.0f;
      }
    }
  }
  return out;
}

std::optional<Skill> SimSkillWriter::write_skill(const SummarySample& sample) const {
  const Task& task = *win_.task;
  std::vector<std::pair<const Knob*, std::string>> kept;
  for (size_t i = 0; i < sample.include.size() && i < win_.space.knobs.size(); ++i) {
    if (!sample.include[i]) continue;
    const Knob& k = win_.space.knobs[i];
    kept.emplace_back(&k, k.choices.at(static_cast<size_t>(win_.choices.at(i))));
  }
  if (kept.empty()) return std::nullopt;
  Skill s;
  bool general = sample.scope == 0;
  s.scope = general ? "general" : "task_specific/" + std::string(task.family_name());
  std::string name = task.family_name();
  std::set<std::string> tags = {task.family_name()};
  nlohmann::ordered_json knobs = nlohmann::ordered_json::object();
  std::string settings;
  for (const auto& [k, v] : kept) {
    name += "_" + k->name + "_" + v;
    auto dot = k->name.find('.');
    std::string fam = dot == std::string::npos ? "plan" : k->name.substr(0, dot);
    std::string leaf = dot == std::string::npos ? k->name : k->name.substr(dot + 1);
    if (tags.size() < 6) tags.insert(normalize_skill_name(leaf));
    if (tags.size() < 6 && fam != "plan") tags.insert(normalize_skill_name(fam));
    knobs[k->name] = v;
    settings += (settings.empty() ? "" : ", ") + k->name + " = " + v;
  }
  if (tags.size() < 3) tags.insert("kernel_schedule");
  if (tags.size() < 3) tags.insert("cuda");
  s.name = normalize_skill_name(name);
  if (s.name.size() > 80) s.name.resize(80);
  char line[512];
  std::snprintf(line, sizeof line, "For %s kernels (%s): %s; it took a rollout from %.3gx at turn 1 to %.3gx.",
                task.family_name(), general ? "any task of the family" : task.name.c_str(), settings.c_str(),
                win_.turn1_speedup, win_.best_speedup);
  s.description = line;
  s.tags.assign(tags.begin(), tags.end());
  std::string content = "## Motivation\n";
  std::snprintf(line, sizeof line,
                "On task %s (%s, level %d) a policy rollout improved from %.3gx to %.3gx over "
                "PyTorch eager once its schedule used the settings below.\n\n",
                task.id.c_str(), task.name.c_str(), task.level, win_.turn1_speedup, win_.best_speedup);
  content += line;
  content += "## Key Idea\n";
  for (const auto& [k, v] : kept) {
    content += "- `" + k->name + " = " + v + "`: " + k->help + "\n";
  }
  content += "\n## Example\n```cuda\n" + win_.kernel_excerpt + "\n```\n";
  s.content = content;
  nlohmann::ordered_json meta = nlohmann::ordered_json::object();
  meta["family"] = task.family_name();
  meta["task"] = task.id;
  meta["knobs"] = knobs;
  s.extra["vinci"] = meta;
  return s;
}

}  // namespace vinci
