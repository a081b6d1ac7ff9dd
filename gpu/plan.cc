#include "gpu/plan.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <set>

#include "gpu/expr.h"
#include "gpu/kernelbench_module.h"
#include "gpu/ops.h"

namespace vinci {

const char* kernel_family_name(KernelFamily family) {
  switch (family) {
    case KernelFamily::kElementwise: return "elementwise";
    case KernelFamily::kRowReduction: return "row_reduction";
    case KernelFamily::kGemm: return "gemm";
    case KernelFamily::kCustom: return "custom";
  }
  return "?";
}

Result<KernelFamily> parse_kernel_family(const std::string& name) {
  for (KernelFamily f :
       {KernelFamily::kElementwise, KernelFamily::kRowReduction, KernelFamily::kGemm, KernelFamily::kCustom})
    if (name == kernel_family_name(f)) return f;
  return invalid_argument("expected a kernel family (elementwise, row_reduction, gemm or custom), found '" + name +
                          "'");
}

namespace {

using nlohmann::json;

json cost_to_json(const KernelCost& c) {
  return {
      {"elements", c.elements}, {"bytes_read", c.bytes_read}, {"bytes_written", c.bytes_written}, {"flops", c.flops}};
}

json kernel_to_json(const PlanKernel& k) {
  json j = {{"name", k.name},
            {"source", k.source},
            {"family", kernel_family_name(k.family)},
            {"knobs", k.knobs},
            {"fused_ops", k.fused_ops},
            {"fused_values", k.fused_values},
            {"block_threads", k.block_threads},
            {"vector_width", k.vector_width},
            {"items_per_thread", k.items_per_thread},
            {"tile", k.tile},
            {"thread_tile", k.thread_tile},
            {"tensor_cores", k.tensor_cores},
            {"precision", kPrecisions.name(k.precision)},
            {"reduction", k.reduction},
            {"algorithm", k.algorithm},
            {"shared_bytes", k.shared_bytes},
            {"cost", cost_to_json(k.cost)}};
  if (k.language != kLanguageCuda) j["language"] = k.language;
  j["verdict"] = {{"status", k.verdict.guaranteed ? "guaranteed" : "risky"},
                  {"reason", k.verdict.reason},
                  {"fails_when", k.verdict.fails_when}};
  return j;
}

json step_to_json(const PlanStep& s) {
  json j = {{"kind", step_kind_name(s.kind)}};
  if (s.kind == StepKind::kKernel) {
    j["kernel"] = s.kernel;
    j["grid"] = s.grid;
    j["block"] = s.block;
    json args = json::array();
    for (const auto& a : s.args) {
      if (!a.buffer.empty())
        args.push_back({{"buffer", a.buffer}});
      else
        args.push_back({{"i64", a.i64}});
    }
    j["args"] = args;
    if (s.triton.num_warps != 0)
      j["triton"] = {
          {"constexprs", s.triton.constexprs}, {"num_warps", s.triton.num_warps}, {"num_stages", s.triton.num_stages}};
  } else {
    j["op"] = s.op.op;
    j["in"] = s.op.inputs;
    j["out"] = s.op.outputs;
    j["module"] = s.op.module;
    j["attrs"] = s.op.attrs.is_null() ? json::object() : s.op.attrs;
    if (s.precision != Precision::kFp32) j["precision"] = kPrecisions.name(s.precision);
  }
  return j;
}

// A reader that remembers where it is, so every error names its JSON path.
class Reader {
 public:
  Reader(const json& j, std::string path) : j_(j), path_(std::move(path)) {}

  Status error(const std::string& key, const std::string& expected) const {
    auto it = j_.is_object() ? j_.find(key) : j_.end();
    std::string found = !j_.is_object()  ? j_.type_name()
                        : it == j_.end() ? std::string("nothing")
                                         : std::string(it->type_name());
    return invalid_argument("plan: " + path_ + (path_.empty() ? "" : ".") + key + ": expected " + expected +
                            ", found " + found);
  }
  Result<std::string> str(const std::string& key, bool required = true) const {
    auto it = j_.find(key);
    if (it == j_.end() && !required) return std::string();
    if (it == j_.end() || !it->is_string()) return error(key, "a string");
    return it->get<std::string>();
  }
  Result<int64_t> i64(const std::string& key, int64_t dflt) const {
    auto it = j_.find(key);
    if (it == j_.end()) return dflt;
    if (!it->is_number_integer()) return error(key, "an integer");
    return it->get<int64_t>();
  }
  Result<bool> boolean(const std::string& key, bool dflt) const {
    auto it = j_.find(key);
    if (it == j_.end()) return dflt;
    if (!it->is_boolean()) return error(key, "true or false");
    return it->get<bool>();
  }
  Result<std::vector<std::string>> strings(const std::string& key, bool required = true) const {
    auto it = j_.find(key);
    std::vector<std::string> out;
    if (it == j_.end() && !required) return out;
    if (it == j_.end() || !it->is_array()) return error(key, "an array of strings");
    for (const auto& e : *it) {
      if (!e.is_string()) return error(key, "an array of strings");
      out.push_back(e.get<std::string>());
    }
    return out;
  }
  Result<std::vector<std::string>> exprs(const std::string& key, size_t n) const {
    VINCI_ASSIGN_OR_RETURN(std::vector<std::string> v, strings(key));
    if (n && v.size() != n) return error(key, std::to_string(n) + " size expressions");
    for (size_t i = 0; i < v.size(); ++i) {
      Status st = check_expr_syntax(v[i]);
      if (!st.ok())
        return invalid_argument("plan: " + path_ + "." + key + "[" + std::to_string(i) + "]: " + st.message());
    }
    return v;
  }
  Result<std::map<std::string, std::string>> string_map(const std::string& key) const {
    std::map<std::string, std::string> out;
    auto it = j_.find(key);
    if (it == j_.end()) return out;
    if (!it->is_object()) return error(key, "an object of strings");
    for (const auto& [k, v] : it->items()) {
      if (!v.is_string()) return error(key + "." + k, "a string");
      out[k] = v.get<std::string>();
    }
    return out;
  }
  const json& j() const { return j_; }
  const std::string& path() const { return path_; }

 private:
  const json& j_;
  std::string path_;
};

Result<const json*> array_at(const json& j, const std::string& key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_array())
    return Status(invalid_argument("plan: " + key + ": expected an array, found " +
                                   (it == j.end() ? std::string("nothing") : std::string(it->type_name()))));
  return &*it;
}

Result<PlanKernel> kernel_from_json(const json& j, const std::string& path) {
  if (!j.is_object()) return invalid_argument("plan: " + path + ": expected an object");
  Reader r(j, path);
  PlanKernel k;
  VINCI_ASSIGN_OR_RETURN(k.name, r.str("name"));
  VINCI_ASSIGN_OR_RETURN(k.source, r.str("source"));
  std::string family;
  VINCI_ASSIGN_OR_RETURN(family, r.str("family", false));
  if (!family.empty()) {
    Result<KernelFamily> f = parse_kernel_family(family);
    if (!f.ok()) return invalid_argument("plan: " + path + ".family: " + f.status().message());
    k.family = *f;
  }
  VINCI_ASSIGN_OR_RETURN(k.knobs, r.string_map("knobs"));
  VINCI_ASSIGN_OR_RETURN(k.fused_ops, r.strings("fused_ops", false));
  VINCI_ASSIGN_OR_RETURN(k.fused_values, r.strings("fused_values", false));
  VINCI_ASSIGN_OR_RETURN(k.block_threads, r.i64("block_threads", 0));
  VINCI_ASSIGN_OR_RETURN(k.vector_width, r.i64("vector_width", 1));
  VINCI_ASSIGN_OR_RETURN(k.items_per_thread, r.i64("items_per_thread", 1));
  for (auto [key, n] : {std::pair<const char*, size_t>{"tile", 3}, {"thread_tile", 2}}) {
    auto it = j.find(key);
    if (it == j.end()) continue;
    if (!it->is_array() || it->size() != n) return r.error(key, std::to_string(n) + " integers");
    for (size_t i = 0; i < n; ++i) {
      if (!(*it)[i].is_number_integer()) return r.error(key, std::to_string(n) + " integers");
      if (n == 3)
        k.tile[i] = (*it)[i].get<int64_t>();
      else
        k.thread_tile[i] = (*it)[i].get<int64_t>();
    }
  }
  VINCI_ASSIGN_OR_RETURN(k.tensor_cores, r.boolean("tensor_cores", false));
  VINCI_ASSIGN_OR_RETURN(std::string precision, r.str("precision", false));
  if (!precision.empty()) {
    Result<Precision> p = kPrecisions.parse(precision);
    if (!p.ok()) return r.error("precision", "fp32, tf32, bf16 or fp16");
    k.precision = *p;
  }
  VINCI_ASSIGN_OR_RETURN(k.reduction, r.str("reduction", false));
  if (k.reduction.empty()) k.reduction = "none";
  VINCI_ASSIGN_OR_RETURN(k.algorithm, r.str("algorithm", false));
  VINCI_ASSIGN_OR_RETURN(k.shared_bytes, r.i64("shared_bytes", 0));
  VINCI_ASSIGN_OR_RETURN(k.language, r.str("language", false));
  if (k.language.empty()) k.language = kLanguageCuda;
  if (k.language != kLanguageCuda && k.language != kLanguageTriton) return r.error("language", "cuda or triton");
  if (auto it = j.find("cost"); it != j.end()) {
    if (!it->is_object()) return r.error("cost", "an object");
    Reader c(*it, path + ".cost");
    VINCI_ASSIGN_OR_RETURN(k.cost.elements, c.str("elements", false));
    VINCI_ASSIGN_OR_RETURN(k.cost.bytes_read, c.str("bytes_read", false));
    VINCI_ASSIGN_OR_RETURN(k.cost.bytes_written, c.str("bytes_written", false));
    VINCI_ASSIGN_OR_RETURN(k.cost.flops, c.str("flops", false));
  }
  if (auto it = j.find("verdict"); it != j.end()) {
    if (!it->is_object()) return r.error("verdict", "an object");
    Reader v(*it, path + ".verdict");
    VINCI_ASSIGN_OR_RETURN(std::string status, v.str("status"));
    if (status != "guaranteed" && status != "risky") return v.error("status", "guaranteed or risky");
    k.verdict.guaranteed = status == "guaranteed";
    VINCI_ASSIGN_OR_RETURN(k.verdict.reason, v.str("reason", false));
    VINCI_ASSIGN_OR_RETURN(k.verdict.fails_when, v.str("fails_when", false));
  } else {
    // A kernel nobody vouched for (an LLM's) is not guaranteed.
    k.verdict.guaranteed = false;
    k.verdict.reason = "not generated by vinci's code generator";
  }
  return k;
}

Result<PlanStep> step_from_json(const json& j, const std::string& path) {
  if (!j.is_object()) return invalid_argument("plan: " + path + ": expected an object");
  Reader r(j, path);
  PlanStep s;
  VINCI_ASSIGN_OR_RETURN(std::string kind, r.str("kind"));
  if (kind == "kernel") {
    s.kind = StepKind::kKernel;
    VINCI_ASSIGN_OR_RETURN(s.kernel, r.str("kernel"));
    VINCI_ASSIGN_OR_RETURN(std::vector<std::string> grid, r.exprs("grid", 3));
    VINCI_ASSIGN_OR_RETURN(std::vector<std::string> block, r.exprs("block", 3));
    for (size_t i = 0; i < 3; ++i) s.grid[i] = grid[i], s.block[i] = block[i];
    auto it = j.find("args");
    if (it == j.end() || !it->is_array()) return r.error("args", "an array of {buffer} or {i64} objects");
    for (size_t i = 0; i < it->size(); ++i) {
      const json& a = (*it)[i];
      std::string ap = path + ".args[" + std::to_string(i) + "]";
      PlanArg arg;
      if (a.is_object() && a.size() == 1 && a.contains("buffer") && a["buffer"].is_string()) {
        arg.buffer = a["buffer"].get<std::string>();
      } else if (a.is_object() && a.size() == 1 && a.contains("i64") && a["i64"].is_string()) {
        arg.i64 = a["i64"].get<std::string>();
        Status st = check_expr_syntax(arg.i64);
        if (!st.ok()) return invalid_argument("plan: " + ap + ": " + st.message());
      } else {
        return invalid_argument("plan: " + ap + ": expected {\"buffer\": name} or {\"i64\": expression}, found " +
                                a.dump());
      }
      s.args.push_back(std::move(arg));
    }
    if (auto t = j.find("triton"); t != j.end()) {
      if (!t->is_object()) return r.error("triton", "an object {constexprs, num_warps, num_stages}");
      Reader tr(*t, path + ".triton");
      VINCI_ASSIGN_OR_RETURN(s.triton.constexprs, tr.string_map("constexprs"));
      VINCI_ASSIGN_OR_RETURN(s.triton.num_warps, tr.i64("num_warps", 0));
      VINCI_ASSIGN_OR_RETURN(s.triton.num_stages, tr.i64("num_stages", 0));
      for (const auto& [name, value] : s.triton.constexprs) {
        Status st = check_triton_constexpr(value);
        if (!st.ok()) return invalid_argument("plan: " + path + ".triton.constexprs." + name + ": " + st.message());
      }
    }
  } else if (kind == "library") {
    s.kind = StepKind::kLibrary;
    VINCI_ASSIGN_OR_RETURN(s.op.op, r.str("op"));
    s.op.resolved = op_code(s.op.op);
    VINCI_ASSIGN_OR_RETURN(s.op.inputs, r.strings("in"));
    VINCI_ASSIGN_OR_RETURN(s.op.outputs, r.strings("out"));
    VINCI_ASSIGN_OR_RETURN(s.op.module, r.str("module", false));
    auto it = j.find("attrs");
    s.op.attrs = it == j.end() ? json::object() : *it;
    if (!s.op.attrs.is_object()) return r.error("attrs", "an object");
    VINCI_ASSIGN_OR_RETURN(std::string precision, r.str("precision", false));
    if (!precision.empty()) {
      Result<Precision> p = kPrecisions.parse(precision);
      if (!p.ok()) return r.error("precision", "fp32, tf32, bf16 or fp16");
      s.precision = *p;
    }
  } else {
    return invalid_argument("plan: " + path + ".kind: expected kernel or library, found '" + kind + "'");
  }
  return s;
}

}  // namespace

const char* step_kind_name(StepKind kind) {
  switch (kind) {
    case StepKind::kKernel: return "kernel";
    case StepKind::kLibrary: return "library";
  }
  return "kernel";
}

bool is_float_literal(const std::string& text) {
  size_t i = 0, n = text.size();
  if (i < n && (text[i] == '-' || text[i] == '+')) ++i;
  size_t digits = 0;
  bool dot = false, exp = false;
  while (i < n && std::isdigit(static_cast<unsigned char>(text[i]))) ++i, ++digits;
  if (i < n && text[i] == '.') {
    dot = true;
    ++i;
    while (i < n && std::isdigit(static_cast<unsigned char>(text[i]))) ++i, ++digits;
  }
  if (digits == 0) return false;
  if (i < n && (text[i] == 'e' || text[i] == 'E')) {
    exp = true;
    ++i;
    if (i < n && (text[i] == '-' || text[i] == '+')) ++i;
    size_t e = 0;
    while (i < n && std::isdigit(static_cast<unsigned char>(text[i]))) ++i, ++e;
    if (e == 0) return false;
  }
  return i == n && (dot || exp);
}

Status check_triton_constexpr(const std::string& text) {
  if (text == "True" || text == "False" || is_float_literal(text)) return Status();
  Status st = check_expr_syntax(text);
  if (!st.ok())
    return invalid_argument("expected True, False, a float literal or a size expression, found '" + text +
                            "': " + st.message());
  return Status();
}

bool Plan::library_only() const {
  for (const auto& s : steps)
    if (s.kind == StepKind::kKernel) return false;
  return true;
}

bool Plan::guaranteed() const {
  for (const auto& k : kernels)
    if (!k.verdict.guaranteed) return false;
  for (const auto& s : steps)
    if (s.kind == StepKind::kLibrary && s.precision != Precision::kFp32) return false;
  return true;
}

const PlanKernel* Plan::find_kernel(const std::string& name) const {
  for (const auto& k : kernels)
    if (k.name == name) return &k;
  return nullptr;
}

const PlanBuffer* Plan::find_buffer(const std::string& name) const {
  for (const auto& b : buffers)
    if (b.name == name) return &b;
  return nullptr;
}

json plan_to_json(const Plan& plan) {
  std::vector<const PlanBuffer*> bufs;
  for (const auto& b : plan.buffers) bufs.push_back(&b);
  std::sort(bufs.begin(), bufs.end(), [](auto* a, auto* b) { return a->name < b->name; });
  std::vector<const PlanKernel*> kers;
  for (const auto& k : plan.kernels) kers.push_back(&k);
  std::sort(kers.begin(), kers.end(), [](auto* a, auto* b) { return a->name < b->name; });
  json j = {{"format", kPlanFormat},
            {"task", plan.task_id},
            {"origin", plan.origin},
            {"knobs", plan.knobs},
            {"output", plan.output}};
  j["buffers"] = json::array();
  for (auto* b : bufs)
    j["buffers"].push_back({{"name", b->name}, {"role", b->role}, {"dtype", b->dtype}, {"shape", b->shape}});
  j["kernels"] = json::array();
  for (auto* k : kers) j["kernels"].push_back(kernel_to_json(*k));
  j["steps"] = json::array();
  for (const auto& s : plan.steps) j["steps"].push_back(step_to_json(s));
  if (plan.is_module()) j["module"] = plan.module;
  return j;
}

Plan module_plan(const std::string& task_id, std::string source, std::string origin) {
  Plan p;
  p.task_id = task_id;
  p.origin = std::move(origin);
  p.module = std::move(source);
  return p;
}

std::string canonical_bytes(const Plan& plan) { return plan_to_json(plan).dump(); }

Digest plan_address(const Plan& plan) { return hash_tagged("plan", canonical_bytes(plan)); }

Digest kernel_source_address(const std::string& source) { return hash_tagged("kernel_source", source); }

Result<Plan> plan_from_json(const json& j) {
  if (!j.is_object()) return invalid_argument(std::string("plan: expected a JSON object, found ") + j.type_name());
  Reader r(j, "");
  VINCI_ASSIGN_OR_RETURN(std::string format, r.str("format"));
  if (format != kPlanFormat)
    return invalid_argument("plan: format: expected '" + std::string(kPlanFormat) + "', found '" + format + "'");
  Plan p;
  VINCI_ASSIGN_OR_RETURN(p.task_id, r.str("task"));
  VINCI_ASSIGN_OR_RETURN(p.origin, r.str("origin", false));
  VINCI_ASSIGN_OR_RETURN(p.knobs, r.string_map("knobs"));
  VINCI_ASSIGN_OR_RETURN(p.output, r.str("output"));
  VINCI_ASSIGN_OR_RETURN(const json* bufs, array_at(j, "buffers"));
  for (size_t i = 0; i < bufs->size(); ++i) {
    std::string path = "buffers[" + std::to_string(i) + "]";
    if (!(*bufs)[i].is_object()) return invalid_argument("plan: " + path + ": expected an object");
    Reader b((*bufs)[i], path);
    PlanBuffer buf;
    VINCI_ASSIGN_OR_RETURN(buf.name, b.str("name"));
    VINCI_ASSIGN_OR_RETURN(buf.role, b.str("role"));
    if (buf.role != "input" && buf.role != "weight" && buf.role != "intermediate" && buf.role != "output")
      return b.error("role", "input, weight, intermediate or output");
    VINCI_ASSIGN_OR_RETURN(buf.dtype, b.str("dtype"));
    if (buf.dtype != "f32" && buf.dtype != "i64") return b.error("dtype", "f32 or i64");
    VINCI_ASSIGN_OR_RETURN(buf.shape, b.exprs("shape", 0));
    p.buffers.push_back(std::move(buf));
  }
  VINCI_ASSIGN_OR_RETURN(const json* kers, array_at(j, "kernels"));
  for (size_t i = 0; i < kers->size(); ++i) {
    VINCI_ASSIGN_OR_RETURN(PlanKernel k, kernel_from_json((*kers)[i], "kernels[" + std::to_string(i) + "]"));
    p.kernels.push_back(std::move(k));
  }
  VINCI_ASSIGN_OR_RETURN(const json* steps, array_at(j, "steps"));
  for (size_t i = 0; i < steps->size(); ++i) {
    VINCI_ASSIGN_OR_RETURN(PlanStep s, step_from_json((*steps)[i], "steps[" + std::to_string(i) + "]"));
    p.steps.push_back(std::move(s));
  }
  VINCI_ASSIGN_OR_RETURN(p.module, r.str("module", false));
  return p;
}

Result<Plan> parse_plan(const std::string& text) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return invalid_argument("plan: not valid JSON");
  return plan_from_json(j);
}

Status validate_plan(const Plan& plan, const Task& task) {
  if (plan.task_id != task.id)
    return invalid_argument("plan: task: expected '" + task.id + "', found '" + plan.task_id + "'");
  if (plan.is_module()) {
    if (!plan.buffers.empty() || !plan.kernels.empty() || !plan.steps.empty() || !plan.output.empty())
      return invalid_argument(
          "plan: a KernelBench module plan holds its module only: expected no buffers, kernels, steps or output");
    Status s = check_module_source(plan.module);
    if (!s.ok()) return invalid_argument("plan: module: " + s.message());
    return Status();
  }
  std::set<std::string> declared, ready;
  for (const auto& b : plan.buffers) {
    if (!declared.insert(b.name).second) return invalid_argument("plan: buffers: '" + b.name + "' declared twice");
    if (b.role == "input" || b.role == "weight") ready.insert(b.name);
  }
  for (const auto& in : task.inputs)
    if (!ready.count(in.name))
      return invalid_argument("plan: buffers: task input '" + in.name + "' not declared as input");
  std::set<std::string> kernel_names;
  for (const auto& k : plan.kernels) {
    if (!kernel_names.insert(k.name).second) return invalid_argument("plan: kernels: '" + k.name + "' defined twice");
    if (k.source.find(k.name) == std::string::npos)
      return invalid_argument("plan: kernel '" + k.name + "': its source does not mention its entry point");
    if (k.language != kLanguageCuda && k.language != kLanguageTriton)
      return invalid_argument("plan: kernel '" + k.name + "': language: expected cuda or triton, found '" + k.language +
                              "'");
  }
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    const PlanStep& s = plan.steps[i];
    std::string path = "plan: steps[" + std::to_string(i) + "]";
    if (s.kind == StepKind::kKernel) {
      if (!kernel_names.count(s.kernel)) return invalid_argument(path + ".kernel: no kernel '" + s.kernel + "'");
      const PlanKernel* k = plan.find_kernel(s.kernel);
      if (k->language == kLanguageTriton) {
        const TritonLaunch& t = s.triton;
        if (t.num_warps < 1 || t.num_warps > 32 || (t.num_warps & (t.num_warps - 1)) != 0)
          return invalid_argument(path + ".triton.num_warps: expected a power of two from 1 to 32, found " +
                                  std::to_string(t.num_warps) + " (Triton kernel '" + s.kernel + "')");
        if (t.num_stages < 1 || t.num_stages > 8)
          return invalid_argument(path + ".triton.num_stages: expected 1 to 8, found " + std::to_string(t.num_stages));
        std::array<std::string, 3> block{{std::to_string(32 * t.num_warps), "1", "1"}};
        if (s.block != block)
          return invalid_argument(path + ".block: a Triton launch runs 32 * num_warps threads: expected [" + block[0] +
                                  ", 1, 1], found [" + s.block[0] + ", " + s.block[1] + ", " + s.block[2] + "]");
        for (const auto& [name, value] : t.constexprs) {
          bool ident = !name.empty() && (std::isalpha(static_cast<unsigned char>(name[0])) || name[0] == '_') &&
                       std::all_of(name.begin(), name.end(),
                                   [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
          if (!ident || name == "num_warps" || name == "num_stages")
            return invalid_argument(path + ".triton.constexprs: '" + name +
                                    "' is not the name of a tl.constexpr parameter");
          Status st = check_triton_constexpr(value);
          if (!st.ok()) return invalid_argument(path + ".triton.constexprs." + name + ": " + st.message());
        }
      } else if (s.triton.num_warps != 0 || s.triton.num_stages != 0 || !s.triton.constexprs.empty()) {
        return invalid_argument(path + ".triton: kernel '" + s.kernel +
                                "' is CUDA: only Triton launches take "
                                "constexprs, num_warps and num_stages");
      }
      for (const auto& a : s.args) {
        if (a.buffer.empty()) continue;
        if (!declared.count(a.buffer)) return invalid_argument(path + ".args: buffer '" + a.buffer + "' not declared");
        // A kernel may write any declared buffer; reading one before anything wrote it is
        // caught by the evaluator's poisoning, not here.
        ready.insert(a.buffer);
      }
    } else {
      const OpInfo* info = find_op(s.op.op);
      if (!info) return invalid_argument(path + ".op: unknown op '" + s.op.op + "'");
      if (s.precision != Precision::kFp32 && info->kind != OpKind::kGemm)
        return invalid_argument(path + ".precision: " + kPrecisions.name(s.precision) +
                                " applies to matrix products only; op '" + s.op.op + "' runs in fp32");
      for (const auto& in : s.op.inputs)
        if (!ready.count(in)) return invalid_argument(path + ".in: '" + in + "' is not ready at this step");
      for (const auto& out : s.op.outputs) {
        if (!declared.count(out)) return invalid_argument(path + ".out: buffer '" + out + "' not declared");
        ready.insert(out);
      }
    }
  }
  if (!ready.count(plan.output)) return invalid_argument("plan: output: '" + plan.output + "' is never produced");
  return check_plan_expressions(plan, task);
}

Status check_plan_expressions(const Plan& plan, const Task& task) {
  for (const auto& entry : task.sizes) {
    const std::string& size = entry.first;  // a name a lambda can capture (C++17)
    std::map<std::string, std::vector<int64_t>> shapes;
    ExprEnv env;
    env.symbols = entry.second;
    env.buffer_shape = [&shapes](const std::string& name) -> Result<std::vector<int64_t>> {
      auto it = shapes.find(name);
      if (it == shapes.end()) return invalid_argument("no buffer '" + name + "' (declared earlier in buffers)");
      return it->second;
    };
    auto check = [&](const std::string& where, const std::string& text) -> Result<int64_t> {
      if (text.empty()) return int64_t{0};
      Result<int64_t> v = eval_expr(text, env);
      if (!v.ok()) {
        return invalid_argument("plan: " + where + ": " + v.status().message() + " (at the task's " + size + " sizes)");
      }
      return v;
    };
    for (size_t i = 0; i < plan.buffers.size(); ++i) {
      const PlanBuffer& b = plan.buffers[i];
      std::vector<int64_t> dims;
      for (size_t d = 0; d < b.shape.size(); ++d) {
        VINCI_ASSIGN_OR_RETURN(
            int64_t v, check("buffers[" + std::to_string(i) + "].shape[" + std::to_string(d) + "]", b.shape[d]));
        dims.push_back(v);
      }
      shapes.emplace(b.name, std::move(dims));
    }
    for (const auto& k : plan.kernels) {
      const std::string at = "kernel '" + k.name + "'.cost.";
      VINCI_RETURN_IF_ERROR(check(at + "elements", k.cost.elements).status());
      VINCI_RETURN_IF_ERROR(check(at + "bytes_read", k.cost.bytes_read).status());
      VINCI_RETURN_IF_ERROR(check(at + "bytes_written", k.cost.bytes_written).status());
      VINCI_RETURN_IF_ERROR(check(at + "flops", k.cost.flops).status());
    }
    for (size_t i = 0; i < plan.steps.size(); ++i) {
      const PlanStep& s = plan.steps[i];
      if (s.kind != StepKind::kKernel) continue;
      const std::string at = "steps[" + std::to_string(i) + "].";
      for (size_t d = 0; d < 3; ++d) {
        VINCI_RETURN_IF_ERROR(check(at + "grid[" + std::to_string(d) + "]", s.grid[d]).status());
        VINCI_RETURN_IF_ERROR(check(at + "block[" + std::to_string(d) + "]", s.block[d]).status());
      }
      for (size_t a = 0; a < s.args.size(); ++a) {
        if (!s.args[a].i64.empty()) {
          VINCI_RETURN_IF_ERROR(check(at + "args[" + std::to_string(a) + "].i64", s.args[a].i64).status());
        }
      }
      for (const auto& [name, value] : s.triton.constexprs) {
        if (value == "True" || value == "False" || is_float_literal(value)) continue;
        VINCI_RETURN_IF_ERROR(check(at + "triton.constexprs." + name, value).status());
      }
    }
  }
  return Status();
}

std::string plan_limit_error(const Plan& plan, const PlanLimits& limits) {
  auto over = [](const std::string& what, int64_t value, const char* limit, int64_t max) {
    return what + " " + std::to_string(value) + " is over the limit " + limit + " = " + std::to_string(max);
  };
  if (static_cast<int64_t>(plan.module.size()) > limits.max_plan_source_bytes)
    return over("module: source bytes:", static_cast<int64_t>(plan.module.size()), "max_plan_source_bytes",
                limits.max_plan_source_bytes);
  if (static_cast<int64_t>(plan.kernels.size()) > limits.max_kernels)
    return over("kernels:", static_cast<int64_t>(plan.kernels.size()), "max_kernels", limits.max_kernels);
  if (static_cast<int64_t>(plan.steps.size()) > limits.max_steps)
    return over("steps:", static_cast<int64_t>(plan.steps.size()), "max_steps", limits.max_steps);
  int64_t total = 0;
  for (const auto& k : plan.kernels) {
    int64_t n = static_cast<int64_t>(k.source.size());
    if (n > limits.max_kernel_source_bytes)
      return over("kernel '" + k.name + "': source bytes:", n, "max_kernel_source_bytes",
                  limits.max_kernel_source_bytes);
    total += n;
  }
  if (total > limits.max_plan_source_bytes)
    return over("source bytes of all kernels:", total, "max_plan_source_bytes", limits.max_plan_source_bytes);
  return "";
}

void add_limit_settings(const PlanLimits& limits, std::map<std::string, std::string>* settings) {
  PlanLimits d;
  if (limits.max_kernel_source_bytes != d.max_kernel_source_bytes)
    (*settings)["max_kernel_source_bytes"] = std::to_string(limits.max_kernel_source_bytes);
  if (limits.max_plan_source_bytes != d.max_plan_source_bytes)
    (*settings)["max_plan_source_bytes"] = std::to_string(limits.max_plan_source_bytes);
  if (limits.max_kernels != d.max_kernels) (*settings)["max_kernels"] = std::to_string(limits.max_kernels);
  if (limits.max_steps != d.max_steps) (*settings)["max_steps"] = std::to_string(limits.max_steps);
}

Result<int64_t> buffer_bytes(const std::vector<int64_t>& shape, const std::string& dtype) {
  auto text = [&] {
    std::string t;
    for (int64_t d : shape) t += (t.empty() ? "" : ", ") + std::to_string(d);
    return "[" + t + "]";
  };
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return invalid_argument("shape " + text() + ": a negative dimension");
    if (__builtin_mul_overflow(n, d, &n))
      return invalid_argument("shape " + text() + ": the element count overflows 64 bits");
  }
  int64_t bytes = 0;
  if (__builtin_mul_overflow(n, int64_t{dtype == "i64" ? 8 : 4}, &bytes))
    return invalid_argument("shape " + text() + ": " + std::to_string(n) + " elements of " + dtype +
                            ": the byte size overflows 64 bits");
  return bytes;
}

std::string launch_dims_error(const std::array<int64_t, 3>& grid, const std::array<int64_t, 3>& block) {
  static const char* kAxis[3] = {"x", "y", "z"};
  for (int i = 0; i < 3; ++i) {
    int64_t g = grid[static_cast<size_t>(i)];
    int64_t limit = i == 0 ? kMaxGridX : kMaxGridYZ;
    if (g < 1 || g > limit)
      return std::string("grid ") + kAxis[i] + " = " + std::to_string(g) + " is outside CUDA's limits [1, " +
             std::to_string(limit) + "] (invalid configuration argument)";
  }
  int64_t threads = 1;
  for (int i = 0; i < 3; ++i) {
    int64_t b = block[static_cast<size_t>(i)];
    int64_t limit = i == 2 ? kMaxBlockZ : kMaxBlockXY;
    if (b < 1 || b > limit)
      return std::string("block ") + kAxis[i] + " = " + std::to_string(b) + " is outside CUDA's limits [1, " +
             std::to_string(limit) + "] (invalid configuration argument)";
    threads *= b;  // at most 1024 * 1024 * 64: no overflow
  }
  if (threads > kMaxBlockThreads)
    return "block " + std::to_string(block[0]) + "x" + std::to_string(block[1]) + "x" + std::to_string(block[2]) +
           " = " + std::to_string(threads) + " threads, more than CUDA's " + std::to_string(kMaxBlockThreads) +
           " per block (invalid configuration argument)";
  return "";
}

}  // namespace vinci
