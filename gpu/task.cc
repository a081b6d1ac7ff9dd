#include "gpu/task.h"

#include <dirent.h>
#include <algorithm>
#include <cctype>
#include <functional>
#include <set>

#include <toml++/toml.h>

#include "core/atomic_file.h"
#include "gpu/expr.h"
#include "gpu/ops.h"
#include "gpu/shapes.h"

namespace vinci {
namespace {

std::string line_of(const toml::node& n) { return std::to_string(n.source().begin.line); }

// Converts a TOML value (scalar or array of scalars) to JSON.
Result<nlohmann::json> to_json(const toml::node& n, const std::string& where) {
  if (auto v = n.as_integer()) return nlohmann::json(v->get());
  if (auto v = n.as_floating_point()) return nlohmann::json(v->get());
  if (auto v = n.as_boolean()) return nlohmann::json(v->get());
  if (auto v = n.as_string()) return nlohmann::json(v->get());
  if (auto arr = n.as_array()) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& e : *arr) {
      VINCI_ASSIGN_OR_RETURN(nlohmann::json j, to_json(e, where));
      out.push_back(std::move(j));
    }
    return out;
  }
  return invalid_argument(where + " (line " + line_of(n) +
                          "): expected a number, bool, string or array, found a table");
}

// Strings and integers both allowed as shape entries: ["B", 4096, "C/4"].
Result<std::vector<std::string>> shape_list(const toml::node* n, const std::string& where) {
  if (!n || !n->is_array()) return invalid_argument(where + ": expected an array of size expressions");
  std::vector<std::string> out;
  for (const auto& e : *n->as_array()) {
    if (auto s = e.as_string()) {
      VINCI_RETURN_IF_ERROR(check_expr_syntax(s->get()));
      out.push_back(s->get());
    } else if (auto i = e.as_integer()) {
      out.push_back(std::to_string(i->get()));
    } else {
      return invalid_argument(where + " (line " + line_of(e) + "): expected a size expression string or an integer");
    }
  }
  return out;
}

Result<std::vector<std::string>> string_list(const toml::node* n, const std::string& where) {
  std::vector<std::string> out;
  if (!n) return out;
  if (auto s = n->as_string()) {
    out.push_back(s->get());
    return out;
  }
  if (!n->is_array())
    return invalid_argument(where + " (line " + line_of(*n) + "): expected a string or array of strings");
  for (const auto& e : *n->as_array()) {
    auto s = e.as_string();
    if (!s) return invalid_argument(where + " (line " + line_of(e) + "): expected a string");
    out.push_back(s->get());
  }
  return out;
}

Result<InputDomain> parse_domain(const std::string& s, const std::string& where) {
  if (s == "real") return InputDomain::kReal;
  if (s == "positive") return InputDomain::kPositive;
  if (s == "probability") return InputDomain::kProbability;
  if (s == "index") return InputDomain::kIndex;
  if (s == "sign") return InputDomain::kSign;
  if (s == "symmetric") return InputDomain::kSymmetric;
  if (s == "upper_triangular") return InputDomain::kUpperTriangular;
  if (s == "lower_triangular") return InputDomain::kLowerTriangular;
  return invalid_argument(where +
                          ": expected domain real|positive|probability|index|sign|symmetric|"
                          "upper_triangular|lower_triangular, found '" +
                          s + "'");
}

// kernelbench.init = ["In", "Out", 2.0, 1.5], kernelbench.signature = "in_features, out_features, ...":
// the problem's constructor (gpu/task.h). Both or neither.
Status parse_kernelbench_constructor(const toml::table& kt, const std::string& kw, Task* task) {
  const toml::node* init = kt.get("init");
  const toml::node* sig = kt.get("signature");
  if (!init && !sig) return Status();
  if (!init || !sig) return invalid_argument(kw + ": init and signature go together (the problem's constructor)");
  auto signature = sig->value<std::string>();
  if (!signature) return invalid_argument(kw + ".signature: expected a string (Model.__init__'s parameters)");
  // It is written into the rendered module's `def __init__(self, ...)`: one line, brackets balanced.
  int depth = 0;
  bool bad = false;
  for (char ch : *signature) {
    if (ch == '(' || ch == '[' || ch == '{') ++depth;
    if (ch == ')' || ch == ']' || ch == '}') --depth;
    bad = bad || depth < 0 || ch == '\n' || ch == '\r' || ch == ';';
  }
  if (bad || depth != 0)
    return invalid_argument(kw +
                            ".signature: expected Model.__init__'s parameters on one line, brackets balanced, "
                            "found '" +
                            *signature + "'");
  const toml::array* items = init->as_array();
  if (!items) return invalid_argument(kw + ".init: expected an array (get_init_inputs()'s items)");
  std::function<Result<nlohmann::json>(const toml::node&, const std::string&)> item =
      [&](const toml::node& e, const std::string& at) -> Result<nlohmann::json> {
    if (auto s = e.value<std::string>()) {
      Status syntax = check_expr_syntax(*s);
      if (!syntax.ok()) return invalid_argument(kw + ".init" + at + ": " + syntax.message());
      return nlohmann::json(*s);
    }
    if (auto b = e.as_boolean()) return nlohmann::json(b->get());
    if (auto i = e.as_integer()) return nlohmann::json(i->get());
    if (auto f = e.as_floating_point()) return nlohmann::json(f->get());
    if (const toml::array* a = e.as_array()) {
      nlohmann::json out = nlohmann::json::array();
      for (size_t k = 0; k < a->size(); ++k) {
        VINCI_ASSIGN_OR_RETURN(nlohmann::json x, item(*a->get(k), at + "[" + std::to_string(k) + "]"));
        out.push_back(std::move(x));
      }
      return out;
    }
    return invalid_argument(kw + ".init" + at +
                            ": expected a size expression (a string), a number, a boolean or an array of them");
  };
  nlohmann::json out = nlohmann::json::array();
  for (size_t k = 0; k < items->size(); ++k) {
    VINCI_ASSIGN_OR_RETURN(nlohmann::json x, item(*items->get(k), "[" + std::to_string(k) + "]"));
    out.push_back(std::move(x));
  }
  task->kernelbench_constructor = true;
  task->kernelbench_signature = *signature;
  task->kernelbench_init = std::move(out);
  return Status();
}

// kernelbench = { problem = "level1/19_ReLU.py", globals = { batch_size = "B", dim = 393216 } },
// flag = "reason", size_note = "why full differs".
Status parse_provenance(const toml::table& t, const std::string& where, Task* task) {
  for (const char* key : {"flag", "size_note"}) {
    const toml::node* n = t.get(key);
    if (!n) continue;
    auto v = n->value<std::string>();
    if (!v || v->empty())
      return invalid_argument(where + " (line " + line_of(*n) + "): key '" + key +
                              "': expected a non-empty string (the reason)");
    (std::string(key) == "flag" ? task->flag : task->size_note) = *v;
  }
  const toml::node* kb = t.get("kernelbench");
  if (!kb) return Status();
  std::string kw = where + " (line " + line_of(*kb) + "): key 'kernelbench'";
  const toml::table* kt = kb->as_table();
  if (!kt) return invalid_argument(kw + ": expected a table { problem = \"levelN/NN_Name.py\", globals = { ... } }");
  for (const auto& [k, v] : *kt) {
    std::string key(k.str());
    if (key != "problem" && key != "globals" && key != "init" && key != "signature")
      return invalid_argument(kw + ": unknown key '" + key + "' (expected problem, globals, init, signature)");
  }
  auto problem = (*kt)["problem"].value<std::string>();
  if (!problem || problem->empty() || problem->find("..") != std::string::npos || (*problem)[0] == '/')
    return invalid_argument(kw + ".problem: expected a relative path such as \"level1/19_ReLU.py\"");
  task->kernelbench_problem = *problem;
  if (const toml::node* g = kt->get("globals")) {
    const toml::table* gt = g->as_table();
    if (!gt) return invalid_argument(kw + ".globals: expected a table of name = size expression");
    for (const auto& [k, v] : *gt) {
      std::string name(k.str());
      Task::KernelBenchGlobal global;
      global.list = v.is_array();
      auto add = [&](const toml::node& e) -> Status {
        if (auto s = e.value<std::string>()) {
          VINCI_RETURN_IF_ERROR(check_expr_syntax(*s));
          global.values.push_back(*s);
        } else if (auto i = e.as_integer()) {
          global.values.push_back(std::to_string(i->get()));
        } else {
          return invalid_argument(kw + ".globals." + name +
                                  ": expected a size expression, an integer or a list of them");
        }
        return Status();
      };
      if (global.list) {
        for (const auto& e : *v.as_array()) VINCI_RETURN_IF_ERROR(add(e));
      } else {
        VINCI_RETURN_IF_ERROR(add(v));
      }
      task->kernelbench_globals[name] = std::move(global);
    }
  }
  return parse_kernelbench_constructor(*kt, kw, task);
}

// modules = [...]: one ModuleSpec a table, attributes as JSON. `block` modules (an instance of a
// [[block]]) are kept here and expanded by expand_blocks.
Result<std::vector<ModuleSpec>> parse_modules(const toml::array* mods, const std::string& where) {
  std::vector<ModuleSpec> out;
  if (!mods) return out;
  for (const auto& n : *mods) {
    const toml::table* mt = n.as_table();
    if (!mt) return invalid_argument(where + ": key 'modules': expected tables");
    ModuleSpec m;
    auto name = (*mt)["name"].value<std::string>();
    auto type = (*mt)["type"].value<std::string>();
    if (!name || !type)
      return invalid_argument(where + ": modules entry (line " + line_of(n) + "): expected keys 'name' and 'type'");
    m.name = *name;
    m.type = *type;
    m.resolved = m.kind();
    if (m.resolved == ModuleType::kUnknown)
      return invalid_argument(where + ": module '" + m.name + "' key 'type': unknown type '" + m.type + "' (expected " +
                              kModuleTypeNames.expected() + ")");
    m.attrs = nlohmann::json::object();
    for (const auto& [k, v] : *mt) {
      std::string key(k.str());
      if (key == "name" || key == "type") continue;
      VINCI_ASSIGN_OR_RETURN(m.attrs[key], to_json(v, where + ": module '" + m.name + "' key '" + key + "'"));
    }
    out.push_back(std::move(m));
  }
  return out;
}

Result<std::vector<OpSpec>> parse_ops(const toml::array& ops, const std::string& where) {
  std::vector<OpSpec> out;
  for (const auto& n : ops) {
    const toml::table* ot = n.as_table();
    if (!ot) return invalid_argument(where + ": key 'ops': expected tables");
    OpSpec op;
    std::string ow = where + ": op (line " + line_of(n) + ")";
    auto name = (*ot)["op"].value<std::string>();
    if (!name) return invalid_argument(ow + ": key 'op' missing");
    op.op = *name;
    op.resolved = op_code(op.op);
    VINCI_ASSIGN_OR_RETURN(op.inputs, string_list(ot->get("in"), ow + " key 'in'"));
    VINCI_ASSIGN_OR_RETURN(op.outputs, string_list(ot->get("out"), ow + " key 'out'"));
    if (auto m = (*ot)["module"].value<std::string>()) op.module = *m;
    op.attrs = nlohmann::json::object();
    for (const auto& [k, v] : *ot) {
      std::string key(k.str());
      if (key == "op" || key == "in" || key == "out" || key == "module") continue;
      VINCI_ASSIGN_OR_RETURN(op.attrs[key], to_json(v, ow + " key '" + key + "'"));
    }
    out.push_back(std::move(op));
  }
  return out;
}

// ---- Blocks: named sub-graphs a task composes (docs/tasks.md, "Blocks") ----
//
// A [[block]] is expanded where a task (or another block) instantiates it: a `block` module
// becomes the block's modules, named <instance>_<module> (with repeat = N: <instance>_<r>_<module>),
// in construction order at the instance's place; an op `block` becomes the block's ops, internal
// values named like the modules, the block's inputs bound to the op's `in` and its outputs to the
// op's `out`. Parameters are substituted into every string attribute: a string that is exactly a
// parameter name takes the parameter's value (an integer stays an integer), a parameter inside an
// expression is replaced by its value in parentheses. `i` is the repeat index (0 without repeat).
struct BlockDef {
  std::string name;
  std::vector<std::string> params;
  nlohmann::json defaults = nlohmann::json::object();
  std::vector<std::string> inputs, outputs;
  std::vector<ModuleSpec> modules;
  std::vector<OpSpec> ops;
  std::string where;
};
using BlockMap = std::map<std::string, BlockDef>;
using Params = std::map<std::string, nlohmann::json>;

constexpr int kMaxBlockDepth = 16;

bool is_name_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool is_name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// Substitutes parameters into one string; sets *changed when any name was replaced.
std::string subst_string(const std::string& s, const Params& params, bool* changed) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    if (!is_name_start(s[i])) {
      out += s[i++];
      continue;
    }
    size_t start = i;
    while (i < s.size() && is_name_char(s[i])) ++i;
    std::string name = s.substr(start, i - start);
    size_t next = s.find_first_not_of(" \t", i);
    bool call = next != std::string::npos && s[next] == '(';
    auto it = params.find(name);
    if (call || it == params.end()) {
      out += name;
      continue;
    }
    *changed = true;
    out += "(" + (it->second.is_string() ? it->second.get<std::string>() : it->second.dump()) + ")";
  }
  return out;
}

Result<nlohmann::json> subst(const nlohmann::json& v, const Params& params, const std::string& where) {
  if (v.is_string()) {
    const std::string& s = v.get<std::string>();
    auto it = params.find(s);
    if (it != params.end()) return it->second;
    bool changed = false;
    std::string r = subst_string(s, params, &changed);
    if (!changed) return v;
    Status ok = check_expr_syntax(r);
    if (!ok.ok())
      return invalid_argument(where + ": '" + s + "' with the parameters substituted is '" + r +
                              "', not a size expression: " + ok.message());
    return nlohmann::json(r);
  }
  if (v.is_array() || v.is_object()) {
    nlohmann::json out = v;
    for (auto it = out.begin(); it != out.end(); ++it) {
      VINCI_ASSIGN_OR_RETURN(*it, subst(*it, params, where));
    }
    return out;
  }
  return v;
}

Result<std::vector<std::string>> block_names(const toml::node* n, const std::string& where) {
  if (!n) return invalid_argument(where + ": expected an array of names, found nothing");
  return string_list(n, where);
}

Result<BlockMap> parse_blocks(const toml::table& root, const std::string& path) {
  BlockMap out;
  const toml::node* node = root.get("block");
  if (!node) return out;
  const toml::array* arr = node->as_array();
  if (!arr) return invalid_argument(path + ": key 'block': expected [[block]] tables");
  for (size_t i = 0; i < arr->size(); ++i) {
    const toml::table* t = (*arr)[i].as_table();
    std::string where = path + ": block[" + std::to_string(i) + "]";
    if (!t) return invalid_argument(where + ": expected a table");
    BlockDef b;
    auto name = (*t)["name"].value<std::string>();
    if (!name) return invalid_argument(where + ": key 'name': expected a string");
    b.name = *name;
    where = path + ": block '" + b.name + "'";
    b.where = where;
    for (const auto& [k, v] : *t) {
      std::string key(k.str());
      if (key != "name" && key != "params" && key != "defaults" && key != "inputs" && key != "outputs" &&
          key != "modules" && key != "ops")
        return invalid_argument(where + ": unknown key '" + key +
                                "' (expected name, params, defaults, inputs, outputs, modules, ops)");
    }
    if (t->contains("params")) {
      VINCI_ASSIGN_OR_RETURN(b.params, string_list(t->get("params"), where + ": key 'params'"));
    }
    for (const auto& p : b.params) {
      if (p.empty() || !is_name_start(p[0]) || !std::all_of(p.begin(), p.end(), [](char c) { return is_name_char(c); }))
        return invalid_argument(where + ": key 'params': '" + p + "' is not a name");
      if (p == "i") return invalid_argument(where + ": key 'params': 'i' is the repeat index, not a parameter");
    }
    if (const toml::node* d = t->get("defaults")) {
      const toml::table* dt = d->as_table();
      if (!dt) return invalid_argument(where + ": key 'defaults': expected a table");
      for (const auto& [k, v] : *dt) {
        std::string key(k.str());
        if (std::find(b.params.begin(), b.params.end(), key) == b.params.end())
          return invalid_argument(where + ": key 'defaults." + key + "': not one of the block's params");
        VINCI_ASSIGN_OR_RETURN(b.defaults[key], to_json(v, where + ": key 'defaults." + key + "'"));
      }
    }
    VINCI_ASSIGN_OR_RETURN(b.inputs, block_names(t->get("inputs"), where + ": key 'inputs'"));
    VINCI_ASSIGN_OR_RETURN(b.outputs, block_names(t->get("outputs"), where + ": key 'outputs'"));
    if (b.inputs.empty() || b.outputs.empty())
      return invalid_argument(where + ": keys 'inputs' and 'outputs': expected at least one name each");
    VINCI_ASSIGN_OR_RETURN(b.modules, parse_modules((*t)["modules"].as_array(), where));
    const toml::array* ops = (*t)["ops"].as_array();
    if (!ops || ops->empty()) return invalid_argument(where + ": key 'ops': expected a non-empty array of tables");
    VINCI_ASSIGN_OR_RETURN(b.ops, parse_ops(*ops, where));
    std::string bname = b.name;
    if (!out.emplace(bname, std::move(b)).second) return invalid_argument(where + ": block defined twice");
  }
  return out;
}

// One instantiated block module: its definition, the name prefix and parameters of each repeat,
// and the block modules inside each repeat (for the block's own `block` ops).
struct Instance {
  const BlockDef* def = nullptr;
  std::vector<std::string> prefixes;
  std::vector<Params> params;
  std::vector<std::map<std::string, Instance>> nested;
  bool used = false;
};
using Scope = std::map<std::string, Instance>;

struct Expanded {
  std::vector<ModuleSpec> modules;
  std::vector<OpSpec> ops;
};

Status expand_modules(const std::vector<ModuleSpec>& mods, const Params& params, const std::string& prefix,
                      const BlockMap& blocks, const std::string& where, int depth, std::vector<ModuleSpec>* out,
                      Scope* scope) {
  for (const auto& m : mods) {
    std::string mw = where + ": module '" + m.name + "'";
    VINCI_ASSIGN_OR_RETURN(nlohmann::json attrs, subst(m.attrs, params, mw));
    std::string full = prefix + m.name;
    if (m.kind() != ModuleType::kBlock) {
      out->push_back({full, m.type, std::move(attrs)});
      continue;
    }
    auto b = attrs.find("block");
    if (b == attrs.end() || !b->is_string())
      return invalid_argument(mw + ": key 'block': expected the name of a [[block]]");
    auto def_it = blocks.find(b->get<std::string>());
    if (def_it == blocks.end())
      return invalid_argument(mw + ": key 'block': no [[block]] named '" + b->get<std::string>() + "' in the file");
    const BlockDef& def = def_it->second;
    if (depth >= kMaxBlockDepth)
      return invalid_argument(mw + ": blocks nested deeper than " + std::to_string(kMaxBlockDepth) + " (does block '" +
                              def.name + "' use itself?)");
    int64_t repeat = 1;
    bool repeated = attrs.contains("repeat");
    if (repeated) {
      if (!attrs["repeat"].is_number_integer() || attrs["repeat"].get<int64_t>() < 1)
        return invalid_argument(mw + ": key 'repeat': expected a positive integer, found " + attrs["repeat"].dump());
      repeat = attrs["repeat"].get<int64_t>();
    }
    Instance inst;
    inst.def = &def;
    Params base;
    for (auto d = def.defaults.begin(); d != def.defaults.end(); ++d) base[d.key()] = d.value();
    for (auto a = attrs.begin(); a != attrs.end(); ++a) {
      const std::string& k = a.key();
      const nlohmann::json& v = a.value();
      if (k == "block" || k == "repeat") continue;
      if (std::find(def.params.begin(), def.params.end(), k) == def.params.end())
        return invalid_argument(mw + ": key '" + k + "': not a parameter of block '" + def.name + "' (its params: " +
                                [&] {
                                  std::string s;
                                  for (const auto& p : def.params) s += (s.empty() ? "" : ", ") + p;
                                  return s.empty() ? std::string("none") : s;
                                }() +
                                ")");
      if (!v.is_string() && !v.is_number_integer())
        return invalid_argument(mw + ": key '" + k + "': expected an integer or a size expression, found " + v.dump());
      base[k] = v;
    }
    for (const auto& p : def.params)
      if (!base.count(p)) return invalid_argument(mw + ": key '" + p + "' missing: block '" + def.name + "' needs it");
    for (int64_t r = 0; r < repeat; ++r) {
      Params p = base;
      p["i"] = r;
      std::string rp = full + "_" + (repeated ? std::to_string(r) + "_" : "");
      inst.prefixes.push_back(rp);
      inst.params.push_back(p);
      inst.nested.emplace_back();
      VINCI_RETURN_IF_ERROR(expand_modules(def.modules, p, rp, blocks, mw + " (block '" + def.name + "')", depth + 1,
                                           out, &inst.nested.back()));
    }
    if (!scope->emplace(m.name, std::move(inst)).second) return invalid_argument(mw + ": defined twice");
  }
  return Status();
}

// rename: a name local to the scope -> its name in the task.
Status expand_ops(const std::vector<OpSpec>& ops, const Params& params, const std::string& prefix,
                  const std::map<std::string, std::string>& bound, Scope* scope, const std::string& where,
                  std::vector<OpSpec>* out) {
  auto rename = [&](const std::string& v) {
    auto it = bound.find(v);
    return it != bound.end() ? it->second : prefix + v;
  };
  for (const auto& op : ops) {
    std::string ow =
        where + ": op '" + op.op + "'" + (op.outputs.empty() ? std::string() : " (out '" + op.outputs[0] + "')");
    VINCI_ASSIGN_OR_RETURN(nlohmann::json attrs, subst(op.attrs, params, ow));
    std::vector<std::string> ins, outs;
    for (const auto& v : op.inputs) ins.push_back(rename(v));
    for (const auto& v : op.outputs) outs.push_back(rename(v));
    if (op.op != "block") {
      out->push_back({op.op, std::move(ins), std::move(outs), op.module.empty() ? "" : prefix + op.module,
                      std::move(attrs), op.resolved});
      continue;
    }
    if (!attrs.empty())
      return invalid_argument(ow + ": key '" + attrs.begin().key() +
                              "': a block op takes only in, out and module (parameters go on the block module)");
    auto it = scope->find(op.module);
    if (it == scope->end())
      return invalid_argument(ow + ": key 'module': expected the name of a block module, found '" + op.module + "'");
    Instance& inst = it->second;
    const BlockDef& def = *inst.def;
    std::string bw = ow + " (block '" + def.name + "')";
    if (inst.used)
      return invalid_argument(ow + ": key 'module': block module '" + op.module + "' already run by an earlier op");
    inst.used = true;
    if (ins.size() != def.inputs.size())
      return invalid_argument(bw + ": key 'in': expected " + std::to_string(def.inputs.size()) + " inputs, found " +
                              std::to_string(ins.size()));
    if (outs.size() != def.outputs.size())
      return invalid_argument(bw + ": key 'out': expected " + std::to_string(def.outputs.size()) + " names, found " +
                              std::to_string(outs.size()));
    size_t repeat = inst.prefixes.size();
    if (repeat > 1 && def.inputs.size() != def.outputs.size())
      return invalid_argument(bw + ": repeat needs as many outputs as inputs (each repeat feeds the next)");
    std::vector<std::string> cur = ins;
    for (size_t r = 0; r < repeat; ++r) {
      std::map<std::string, std::string> b;
      for (size_t k = 0; k < def.inputs.size(); ++k) b[def.inputs[k]] = cur[k];
      std::vector<std::string> next;
      for (size_t k = 0; k < def.outputs.size(); ++k) {
        if (b.count(def.outputs[k]))
          return invalid_argument(bw + ": output '" + def.outputs[k] + "' is also an input of the block");
        std::string name = r + 1 == repeat ? outs[k] : inst.prefixes[r] + def.outputs[k];
        b[def.outputs[k]] = name;
        next.push_back(name);
      }
      VINCI_RETURN_IF_ERROR(expand_ops(def.ops, inst.params[r], inst.prefixes[r], b, &inst.nested[r], bw, out));
      cur = next;
    }
  }
  return Status();
}

// Every block module is run by exactly one op (its weights would otherwise be drawn for nothing).
Status check_all_used(const Scope& scope, const std::string& prefix, const std::string& where) {
  for (const auto& [name, inst] : scope) {
    if (!inst.used)
      return invalid_argument(where + ": module '" + prefix + name + "' (block '" + inst.def->name +
                              "'): never run by an op 'block'");
    for (size_t r = 0; r < inst.nested.size(); ++r)
      VINCI_RETURN_IF_ERROR(check_all_used(inst.nested[r], inst.prefixes[r], where));
  }
  return Status();
}

Result<Expanded> expand_blocks(const std::vector<ModuleSpec>& modules, const std::vector<OpSpec>& ops,
                               const BlockMap& blocks, const std::string& where) {
  Expanded e;
  Scope scope;
  VINCI_RETURN_IF_ERROR(expand_modules(modules, Params(), "", blocks, where, 0, &e.modules, &scope));
  VINCI_RETURN_IF_ERROR(expand_ops(ops, Params(), "", {}, &scope, where, &e.ops));
  VINCI_RETURN_IF_ERROR(check_all_used(scope, "", where));
  return e;
}

Result<Task> parse_task(const toml::table& t, const std::string& path, size_t index, const BlockMap& blocks) {
  Task task;
  task.source_file = path;
  std::string where = path + ": task[" + std::to_string(index) + "]";
  auto need_str = [&](const char* key, std::string* out) -> Status {
    auto v = t[key].value<std::string>();
    if (!v)
      return invalid_argument(where + ": key '" + key + "': expected a string, found " +
                              (t.contains(key) ? "another type" : "nothing"));
    *out = *v;
    return Status();
  };
  VINCI_RETURN_IF_ERROR(need_str("id", &task.id));
  where = path + ": task '" + task.id + "'";
  // Integers only: toml++'s value<int64_t>() converts a float too, out of range undefined (1e24).
  auto level = t["level"].value_exact<int64_t>();
  if (!level || *level < 1 || *level > 3) return invalid_argument(where + ": key 'level': expected 1, 2 or 3");
  task.level = static_cast<int>(*level);
  VINCI_RETURN_IF_ERROR(need_str("name", &task.name));
  std::string family;
  VINCI_RETURN_IF_ERROR(need_str("family", &family));
  auto parsed_family = parse_task_family(family);
  if (!parsed_family.ok()) return invalid_argument(where + ": key 'family': " + parsed_family.status().message());
  task.family = *parsed_family;
  VINCI_RETURN_IF_ERROR(need_str("description", &task.description));
  VINCI_RETURN_IF_ERROR(need_str("output", &task.output));
  if (auto tol = t["tolerance"].value<double>()) task.atol = task.rtol = *tol;
  VINCI_RETURN_IF_ERROR(parse_provenance(t, where, &task));

  const toml::table* sizes = t["sizes"].as_table();
  if (!sizes) return invalid_argument(where + ": key 'sizes': expected a table with full and small");
  for (const char* s : {"full", "small"}) {
    const toml::table* st = (*sizes)[s].as_table();
    if (!st) return invalid_argument(where + ": key 'sizes." + s + "': expected a table of sizes");
    SizeMap m;
    for (const auto& [k, v] : *st) {
      auto i = v.value_exact<int64_t>();
      if (!i || *i <= 0)
        return invalid_argument(where + ": key 'sizes." + s + "." + std::string(k.str()) +
                                "': expected a positive integer");
      m[std::string(k.str())] = *i;
    }
    task.sizes[s] = std::move(m);
  }

  const toml::array* inputs = t["inputs"].as_array();
  if (!inputs || inputs->empty())
    return invalid_argument(where + ": key 'inputs': expected a non-empty array of tables");
  for (const auto& n : *inputs) {
    const toml::table* it = n.as_table();
    if (!it) return invalid_argument(where + ": key 'inputs': expected tables");
    InputSpec in;
    auto name = (*it)["name"].value<std::string>();
    if (!name) return invalid_argument(where + ": inputs entry (line " + line_of(n) + "): key 'name' missing");
    in.name = *name;
    VINCI_ASSIGN_OR_RETURN(in.shape, shape_list(it->get("shape"), where + ": input '" + in.name + "' key 'shape'"));
    if (auto d = (*it)["domain"].value<std::string>()) {
      VINCI_ASSIGN_OR_RETURN(in.domain, parse_domain(*d, where + ": input '" + in.name + "' key 'domain'"));
    }
    if (in.domain == InputDomain::kIndex) {
      if (auto c = (*it)["classes"].value<std::string>())
        in.classes = *c;
      else if (auto ci = (*it)["classes"].value_exact<int64_t>())
        in.classes = std::to_string(*ci);
      else
        return invalid_argument(where + ": input '" + in.name + "': domain index needs key 'classes'");
    }
    if (auto sc = (*it)["scaled"].value<bool>()) in.scaled = *sc;
    if (in.scaled && (in.domain == InputDomain::kIndex || in.domain == InputDomain::kSign))
      return invalid_argument(where + ": input '" + in.name + "': key 'scaled': not for index or sign inputs");
    bool matrix_domain = in.domain == InputDomain::kSymmetric || in.domain == InputDomain::kUpperTriangular ||
                         in.domain == InputDomain::kLowerTriangular;
    if (matrix_domain && in.shape.size() != 2)
      return invalid_argument(where + ": input '" + in.name +
                              "': key 'domain': " + *(*it)["domain"].value<std::string>() +
                              " needs a rank-2 shape, found rank " + std::to_string(in.shape.size()));
    if (in.domain == InputDomain::kSymmetric && in.shape[0] != in.shape[1])
      return invalid_argument(where + ": input '" + in.name + "': key 'domain': symmetric needs a square shape");
    task.inputs.push_back(std::move(in));
  }

  VINCI_ASSIGN_OR_RETURN(task.modules, parse_modules(t["modules"].as_array(), where));
  const toml::array* ops = t["ops"].as_array();
  if (!ops || ops->empty()) return invalid_argument(where + ": key 'ops': expected a non-empty array of tables");
  VINCI_ASSIGN_OR_RETURN(task.ops, parse_ops(*ops, where));
  if (!blocks.empty() || std::any_of(task.modules.begin(), task.modules.end(),
                                     [](const ModuleSpec& m) { return m.kind() == ModuleType::kBlock; })) {
    VINCI_ASSIGN_OR_RETURN(Expanded e, expand_blocks(task.modules, task.ops, blocks, where));
    task.modules = std::move(e.modules);
    task.ops = std::move(e.ops);
  }
  return task;
}

// Names defined before use, ops and modules known, module types match.
Status check_task(const Task& task) {
  std::string where = task.source_file + ": task '" + task.id + "'";
  std::set<std::string> defined;
  for (const auto& in : task.inputs) {
    if (!defined.insert(in.name).second) return invalid_argument(where + ": input '" + in.name + "' defined twice");
  }
  std::map<std::string, std::string> module_types;
  for (const auto& m : task.modules) {
    if (!module_types.emplace(m.name, m.type).second)
      return invalid_argument(where + ": module '" + m.name + "' defined twice");
    // A parameter module (a bare nn.Parameter) or a buffer is a value ops can read by its name.
    if ((m.kind() == ModuleType::kParameter || m.kind() == ModuleType::kBuffer) && !defined.insert(m.name).second)
      return invalid_argument(where + ": module '" + m.name + "' shadows an input");
  }
  for (const auto& op : task.ops) {
    std::string ow = where + ": op '" + op.op + "'";
    const OpInfo* info = find_op(op.op);
    if (!info)
      return invalid_argument(where + ": key 'op': unknown op '" + op.op + "', expected one of " + known_op_names());
    if (info->inputs < 0 ? op.inputs.empty() : static_cast<int>(op.inputs.size()) != info->inputs)
      return invalid_argument(ow + ": key 'in': expected " +
                              (info->inputs < 0 ? std::string("at least 1") : std::to_string(info->inputs)) +
                              " inputs, found " + std::to_string(op.inputs.size()));
    for (const auto& in : op.inputs)
      if (!defined.count(in))
        return invalid_argument(ow + ": key 'in': '" + in + "' is not an input or an earlier op's output");
    if (op.outputs.empty()) return invalid_argument(ow + ": key 'out': expected at least one name");
    if (info->module[0]) {
      auto it = module_types.find(op.module);
      if (it == module_types.end())
        return invalid_argument(ow + ": key 'module': expected the name of a " + info->module + " module, found '" +
                                op.module + "'");
      if (it->second != info->module)
        return invalid_argument(ow + ": key 'module': '" + op.module + "' is a " + it->second + ", expected a " +
                                info->module);
    }
    for (const auto& out : op.outputs)
      if (!defined.insert(out).second) return invalid_argument(ow + ": key 'out': '" + out + "' is already defined");
  }
  if (!defined.count(task.output))
    return invalid_argument(where + ": key 'output': '" + task.output + "' is not defined");
  for (const auto& [size_key, sizes] : task.sizes) {
    ExprEnv env;
    env.symbols = sizes;
    for (const auto& [name, g] : task.kernelbench_globals) {
      for (const auto& e : g.values) {
        Result<int64_t> r = eval_expr(e, env);
        if (!r.ok())
          return invalid_argument(where + ": key 'kernelbench.globals." + name + "' at size " + size_key + ": " +
                                  r.status().message());
      }
    }
    // kernelbench.init's size expressions, at any depth of its arrays.
    std::vector<std::pair<std::string, const nlohmann::json*>> items;
    for (size_t k = 0; k < task.kernelbench_init.size(); ++k)
      items.push_back({"[" + std::to_string(k) + "]", &task.kernelbench_init[k]});
    while (!items.empty()) {
      auto [at, item] = items.back();
      items.pop_back();
      if (item->is_array()) {
        for (size_t k = 0; k < item->size(); ++k) items.push_back({at + "[" + std::to_string(k) + "]", &(*item)[k]});
      } else if (item->is_string()) {
        Result<int64_t> r = eval_expr(item->get<std::string>(), env);
        if (!r.ok())
          return invalid_argument(where + ": key 'kernelbench.init" + at + "' at size " + size_key + ": " +
                                  r.status().message());
      }
    }
  }
  // Every shape must resolve at both sizes: catches a symbol missing from one size table.
  VINCI_ASSIGN_OR_RETURN(ShapeMap shapes, infer_shapes(task));
  for (const auto& [size_key, sizes] : task.sizes) {
    ExprEnv env;
    env.symbols = sizes;
    for (const auto& [value, shape] : shapes) {
      for (const auto& d : shape) {
        Result<int64_t> r = eval_expr(d, env);
        if (!r.ok())
          return invalid_argument(where + ": shape of '" + value + "' at size " + size_key + ": " +
                                  r.status().message());
        if (*r <= 0)
          return invalid_argument(where + ": shape of '" + value + "' at size " + size_key + ": dimension '" + d +
                                  "' = " + std::to_string(*r) + ", expected > 0");
      }
    }
    for (const auto& in : task.inputs)
      if (!in.classes.empty() && !eval_expr(in.classes, env).ok())
        return invalid_argument(where + ": input '" + in.name + "' key 'classes' does not resolve");
  }
  return Status();
}

}  // namespace

namespace {
// Indexed by TaskFamily.
constexpr const char* kTaskFamilyNames[kTaskFamilyCount] = {
    "attention", "conv",    "conv_epilogue", "elementwise", "gemm", "gemm_epilogue", "loss", "network",
    "norm",      "pooling", "recurrent",     "reduction",   "scan", "softmax",       "ssm"};
}  // namespace

const char* task_family_name(TaskFamily family) {
  auto i = static_cast<size_t>(family);
  return i < kTaskFamilyCount ? kTaskFamilyNames[i] : "?";
}

Result<TaskFamily> parse_task_family(const std::string& name) {
  std::string names;
  for (int i = 0; i < kTaskFamilyCount; ++i) {
    auto f = static_cast<TaskFamily>(i);
    if (name == task_family_name(f)) return f;
    names += std::string(i == 0 ? "" : i + 1 == kTaskFamilyCount ? " or " : ", ") + task_family_name(f);
  }
  return invalid_argument("expected an op family (" + names + "), found '" + name + "'");
}

const char* size_name(SizeName s) { return s == SizeName::kFull ? "full" : "small"; }

Result<SizeName> parse_size_name(std::string_view name) {
  if (name == "full") return SizeName::kFull;
  if (name == "small") return SizeName::kSmall;
  return invalid_argument("expected full or small, found '" + std::string(name) + "'");
}

std::vector<std::string> kernelbench_tuple_items(const std::string& e) {
  if (e.size() < 3 || e.front() != '(' || e.back() != ')') return {};
  std::vector<std::string> items;
  std::string cur;
  int depth = 0;
  bool comma = false;  // a comma directly inside the outer parentheses: a tuple
  for (size_t i = 1; i + 1 < e.size(); ++i) {
    char c = e[i];
    if (c == '(') ++depth;
    if (c == ')') --depth;
    if (depth < 0) return {};  // "(a) + (b)": the outer parentheses do not enclose it all
    if (c == ',' && depth == 0) {
      comma = true;
      items.push_back(cur);
      cur.clear();
      continue;
    }
    cur += c;
  }
  if (!comma) return {};
  if (cur.find_first_not_of(' ') != std::string::npos) items.push_back(cur);
  for (auto& it : items) {
    it.erase(0, it.find_first_not_of(' '));
    it.erase(it.find_last_not_of(' ') + 1);
  }
  return items;
}

const char* Task::set_name() const {
  if (!is_kernelbench()) return "vinci";
  return flag.empty() ? "kernelbench" : "kernelbench-flagged";
}

const SizeMap& Task::size_map(SizeName s) const {
  auto it = sizes.find(size_name(s));
  VINCI_REQUIRE(it != sizes.end(), "task " << id << " has no size " << size_name(s));
  return it->second;
}

const Task* TaskSuite::find(const std::string& id) const {
  for (const auto& t : tasks)
    if (t.id == id) return &t;
  return nullptr;
}

std::vector<const Task*> TaskSuite::at_level(int level) const {
  std::vector<const Task*> out;
  for (const auto& t : tasks)
    if (level == 0 || t.level == level) out.push_back(&t);
  return out;
}

Result<std::vector<Task>> parse_task_file(const std::string& path, const std::string& text) {
  toml::table root;
  try {
    root = toml::parse(text, path);
  } catch (const toml::parse_error& e) {
    return invalid_argument(path + ":" + std::to_string(e.source().begin.line) + ": " + std::string(e.description()));
  }
  const toml::array* arr = root["task"].as_array();
  if (!arr) return invalid_argument(path + ": expected [[task]] tables, found none");
  VINCI_ASSIGN_OR_RETURN(BlockMap blocks, parse_blocks(root, path));
  std::vector<Task> out;
  for (size_t i = 0; i < arr->size(); ++i) {
    const toml::table* t = (*arr)[i].as_table();
    if (!t) return invalid_argument(path + ": task[" + std::to_string(i) + "]: expected a table");
    VINCI_ASSIGN_OR_RETURN(Task task, parse_task(*t, path, i, blocks));
    VINCI_RETURN_IF_ERROR(check_task(task));
    out.push_back(std::move(task));
  }
  return out;
}

Result<TaskSuite> load_task_suite(const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  if (!d) return not_found("task folder " + dir + " cannot be opened");
  std::vector<std::string> files;
  while (dirent* e = readdir(d)) {
    std::string n = e->d_name;
    if (n.size() > 5 && n.substr(n.size() - 5) == ".toml") files.push_back(n);
  }
  closedir(d);
  std::sort(files.begin(), files.end());
  if (files.empty()) return not_found("no *.toml task files in " + dir);
  TaskSuite suite;
  std::map<std::string, std::string> seen;
  for (const auto& f : files) {
    std::string path = dir + "/" + f;
    VINCI_ASSIGN_OR_RETURN(std::string text, read_file(path, kTaskFile));
    VINCI_ASSIGN_OR_RETURN(std::vector<Task> tasks, parse_task_file(path, text));
    for (auto& t : tasks) {
      auto [it, fresh] = seen.emplace(t.id, path);
      if (!fresh) return invalid_argument(path + ": task id '" + t.id + "' already defined in " + it->second);
      suite.tasks.push_back(std::move(t));
    }
  }
  std::sort(suite.tasks.begin(), suite.tasks.end(),
            [](const Task& a, const Task& b) { return a.level != b.level ? a.level < b.level : a.id < b.id; });
  return suite;
}

std::string default_task_dir() { return VINCI_TASK_DIR; }

Result<int64_t> attr_int(const nlohmann::json& attrs, const std::string& key, const std::string& where) {
  auto it = attrs.find(key);
  if (it == attrs.end() || !it->is_number_integer())
    return invalid_argument(where + ": key '" + key + "': expected an integer, found " +
                            (it == attrs.end() ? std::string("nothing") : it->dump()));
  return it->get<int64_t>();
}

int64_t attr_int_or(const nlohmann::json& attrs, const std::string& key, int64_t dflt) {
  auto it = attrs.find(key);
  return it != attrs.end() && it->is_number_integer() ? it->get<int64_t>() : dflt;
}

double attr_double_or(const nlohmann::json& attrs, const std::string& key, double dflt) {
  auto it = attrs.find(key);
  return it != attrs.end() && it->is_number() ? it->get<double>() : dflt;
}

bool attr_bool_or(const nlohmann::json& attrs, const std::string& key, bool dflt) {
  auto it = attrs.find(key);
  return it != attrs.end() && it->is_boolean() ? it->get<bool>() : dflt;
}

Result<std::vector<int64_t>> attr_ints(const nlohmann::json& attrs, const std::string& key, size_t rank,
                                       const std::string& where) {
  auto it = attrs.find(key);
  if (it != attrs.end() && it->is_number_integer()) return std::vector<int64_t>(rank, it->get<int64_t>());
  if (it != attrs.end() && it->is_array()) {
    std::vector<int64_t> out;
    for (const auto& e : *it) {
      if (!e.is_number_integer()) break;
      out.push_back(e.get<int64_t>());
    }
    if (out.size() == it->size() && (rank == 0 || out.size() == rank)) return out;
  }
  return invalid_argument(where + ": key '" + key + "': expected an integer or " + std::to_string(rank) +
                          " integers, found " + (it == attrs.end() ? std::string("nothing") : it->dump()));
}

std::vector<int64_t> attr_ints_or(const nlohmann::json& attrs, const std::string& key, size_t rank, int64_t dflt) {
  Result<std::vector<int64_t>> r = attr_ints(attrs, key, rank, "");
  return r.ok() ? *r : std::vector<int64_t>(rank, dflt);
}

}  // namespace vinci
