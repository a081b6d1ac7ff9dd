#include "gpu/task.h"

#include <algorithm>
#include <dirent.h>
#include <set>

#include <toml++/toml.h>

#include "core/atomic_file.h"
#include "gpu/expr.h"
#include "gpu/ops.h"
#include "gpu/shapes.h"

namespace vinci {
namespace {

const char* const kModuleTypes[] = {"linear",     "conv1d",           "conv2d",
                                    "conv3d",     "conv_transpose2d", "conv_transpose3d",
                                    "batch_norm", "layer_norm",       "group_norm",
                                    "parameter",  "mha"};

bool known_module_type(const std::string& t) {
  for (const char* m : kModuleTypes)
    if (t == m) return true;
  return false;
}

std::string line_of(const toml::node& n) {
  return std::to_string(n.source().begin.line);
}

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
  if (!n || !n->is_array())
    return invalid_argument(where + ": expected an array of size expressions");
  std::vector<std::string> out;
  for (const auto& e : *n->as_array()) {
    if (auto s = e.as_string()) {
      VINCI_RETURN_IF_ERROR(check_expr_syntax(s->get()));
      out.push_back(s->get());
    } else if (auto i = e.as_integer()) {
      out.push_back(std::to_string(i->get()));
    } else {
      return invalid_argument(where + " (line " + line_of(e) +
                              "): expected a size expression string or an integer");
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
  return invalid_argument(where + ": expected domain real|positive|probability|index|sign|symmetric|"
                          "upper_triangular|lower_triangular, found '" + s + "'");
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
    if (key != "problem" && key != "globals")
      return invalid_argument(kw + ": unknown key '" + key + "' (expected problem, globals)");
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
      if (auto s = v.value<std::string>()) {
        VINCI_RETURN_IF_ERROR(check_expr_syntax(*s));
        task->kernelbench_globals[name] = *s;
      } else if (auto i = v.as_integer()) {
        task->kernelbench_globals[name] = std::to_string(i->get());
      } else if (v.is_array() && !v.as_array()->empty()) {  // a tuple constant: input_shape = (32768,)
        VINCI_ASSIGN_OR_RETURN(std::vector<std::string> items, shape_list(&v, kw + ".globals." + name));
        std::string t = "(";
        for (size_t j = 0; j < items.size(); ++j) t += (j ? ", " : "") + items[j];
        task->kernelbench_globals[name] = t + (items.size() == 1 ? ",)" : ")");
      } else {
        return invalid_argument(kw + ".globals." + name + ": expected a size expression, an integer or an array of them");
      }
    }
  }
  return Status();
}

Result<Task> parse_task(const toml::table& t, const std::string& path, size_t index) {
  Task task;
  task.source_file = path;
  std::string where = path + ": task[" + std::to_string(index) + "]";
  auto need_str = [&](const char* key, std::string* out) -> Status {
    auto v = t[key].value<std::string>();
    if (!v) return invalid_argument(where + ": key '" + key + "': expected a string, found " +
                                    (t.contains(key) ? "another type" : "nothing"));
    *out = *v;
    return Status();
  };
  VINCI_RETURN_IF_ERROR(need_str("id", &task.id));
  where = path + ": task '" + task.id + "'";
  auto level = t["level"].value<int64_t>();
  if (!level || *level < 1 || *level > 3)
    return invalid_argument(where + ": key 'level': expected 1, 2 or 3");
  task.level = static_cast<int>(*level);
  VINCI_RETURN_IF_ERROR(need_str("name", &task.name));
  VINCI_RETURN_IF_ERROR(need_str("family", &task.family));
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
      auto i = v.value<int64_t>();
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
      if (auto c = (*it)["classes"].value<std::string>()) in.classes = *c;
      else if (auto ci = (*it)["classes"].value<int64_t>()) in.classes = std::to_string(*ci);
      else return invalid_argument(where + ": input '" + in.name + "': domain index needs key 'classes'");
    }
    if (auto sc = (*it)["scaled"].value<bool>()) in.scaled = *sc;
    if (in.scaled && (in.domain == InputDomain::kIndex || in.domain == InputDomain::kSign))
      return invalid_argument(where + ": input '" + in.name + "': key 'scaled': not for index or sign inputs");
    bool matrix_domain = in.domain == InputDomain::kSymmetric || in.domain == InputDomain::kUpperTriangular ||
                         in.domain == InputDomain::kLowerTriangular;
    if (matrix_domain && in.shape.size() != 2)
      return invalid_argument(where + ": input '" + in.name + "': key 'domain': " + *(*it)["domain"].value<std::string>() +
                              " needs a rank-2 shape, found rank " + std::to_string(in.shape.size()));
    if (in.domain == InputDomain::kSymmetric && in.shape[0] != in.shape[1])
      return invalid_argument(where + ": input '" + in.name + "': key 'domain': symmetric needs a square shape");
    task.inputs.push_back(std::move(in));
  }

  if (const toml::array* mods = t["modules"].as_array()) {
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
      if (!known_module_type(m.type))
        return invalid_argument(where + ": module '" + m.name + "' key 'type': unknown type '" + m.type +
                                "' (expected linear, conv1d, conv2d, conv3d, conv_transpose2d, "
                                "conv_transpose3d, batch_norm, layer_norm, group_norm, parameter, mha)");
      m.attrs = nlohmann::json::object();
      for (const auto& [k, v] : *mt) {
        std::string key(k.str());
        if (key == "name" || key == "type") continue;
        VINCI_ASSIGN_OR_RETURN(m.attrs[key], to_json(v, where + ": module '" + m.name + "' key '" + key + "'"));
      }
      task.modules.push_back(std::move(m));
    }
  }

  const toml::array* ops = t["ops"].as_array();
  if (!ops || ops->empty()) return invalid_argument(where + ": key 'ops': expected a non-empty array of tables");
  for (const auto& n : *ops) {
    const toml::table* ot = n.as_table();
    if (!ot) return invalid_argument(where + ": key 'ops': expected tables");
    OpSpec op;
    std::string ow = where + ": op (line " + line_of(n) + ")";
    auto name = (*ot)["op"].value<std::string>();
    if (!name) return invalid_argument(ow + ": key 'op' missing");
    op.op = *name;
    VINCI_ASSIGN_OR_RETURN(op.inputs, string_list(ot->get("in"), ow + " key 'in'"));
    VINCI_ASSIGN_OR_RETURN(op.outputs, string_list(ot->get("out"), ow + " key 'out'"));
    if (auto m = (*ot)["module"].value<std::string>()) op.module = *m;
    op.attrs = nlohmann::json::object();
    for (const auto& [k, v] : *ot) {
      std::string key(k.str());
      if (key == "op" || key == "in" || key == "out" || key == "module") continue;
      VINCI_ASSIGN_OR_RETURN(op.attrs[key], to_json(v, ow + " key '" + key + "'"));
    }
    task.ops.push_back(std::move(op));
  }
  return task;
}

// Names defined before use, ops and modules known, module types match.
Status check_task(const Task& task) {
  std::string where = task.source_file + ": task '" + task.id + "'";
  std::set<std::string> defined;
  for (const auto& in : task.inputs) {
    if (!defined.insert(in.name).second)
      return invalid_argument(where + ": input '" + in.name + "' defined twice");
  }
  std::map<std::string, std::string> module_types;
  for (const auto& m : task.modules) {
    if (!module_types.emplace(m.name, m.type).second)
      return invalid_argument(where + ": module '" + m.name + "' defined twice");
    // A parameter module (a bare nn.Parameter) is a value ops can read by its name.
    if (m.type == "parameter" && !defined.insert(m.name).second)
      return invalid_argument(where + ": module '" + m.name + "' shadows an input");
  }
  for (const auto& op : task.ops) {
    std::string ow = where + ": op '" + op.op + "'";
    const OpInfo* info = find_op(op.op);
    if (!info)
      return invalid_argument(where + ": key 'op': unknown op '" + op.op + "', expected one of " +
                              known_op_names());
    if (static_cast<int>(op.inputs.size()) != info->inputs)
      return invalid_argument(ow + ": key 'in': expected " + std::to_string(info->inputs) +
                              " inputs, found " + std::to_string(op.inputs.size()));
    for (const auto& in : op.inputs)
      if (!defined.count(in))
        return invalid_argument(ow + ": key 'in': '" + in + "' is not an input or an earlier op's output");
    if (op.outputs.empty()) return invalid_argument(ow + ": key 'out': expected at least one name");
    if (info->module[0]) {
      auto it = module_types.find(op.module);
      if (it == module_types.end())
        return invalid_argument(ow + ": key 'module': expected the name of a " + info->module +
                                " module, found '" + op.module + "'");
      if (it->second != info->module)
        return invalid_argument(ow + ": key 'module': '" + op.module + "' is a " + it->second +
                                ", expected a " + info->module);
    }
    for (const auto& out : op.outputs)
      if (!defined.insert(out).second)
        return invalid_argument(ow + ": key 'out': '" + out + "' is already defined");
  }
  if (!defined.count(task.output))
    return invalid_argument(where + ": key 'output': '" + task.output + "' is not defined");
  for (const auto& [size_key, sizes] : task.sizes) {
    ExprEnv env;
    env.symbols = sizes;
    for (const auto& [name, e] : task.kernelbench_globals) {
      std::vector<std::string> items = kernelbench_tuple_items(e);
      if (items.empty()) items.push_back(e);
      for (const auto& item : items) {
        Result<int64_t> r = eval_expr(item, env);
        if (!r.ok())
          return invalid_argument(where + ": key 'kernelbench.globals." + name + "' at size " + size_key +
                                  ": " + r.status().message());
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
          return invalid_argument(where + ": shape of '" + value + "' at size " + size_key +
                                  ": dimension '" + d + "' = " + std::to_string(*r) + ", expected > 0");
      }
    }
    for (const auto& in : task.inputs)
      if (!in.classes.empty() && !eval_expr(in.classes, env).ok())
        return invalid_argument(where + ": input '" + in.name + "' key 'classes' does not resolve");
  }
  return Status();
}

}  // namespace

const char* size_name(SizeName s) { return s == SizeName::kFull ? "full" : "small"; }

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
    return invalid_argument(path + ":" + std::to_string(e.source().begin.line) + ": " +
                            std::string(e.description()));
  }
  const toml::array* arr = root["task"].as_array();
  if (!arr) return invalid_argument(path + ": expected [[task]] tables, found none");
  std::vector<Task> out;
  for (size_t i = 0; i < arr->size(); ++i) {
    const toml::table* t = (*arr)[i].as_table();
    if (!t) return invalid_argument(path + ": task[" + std::to_string(i) + "]: expected a table");
    VINCI_ASSIGN_OR_RETURN(Task task, parse_task(*t, path, i));
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
    VINCI_ASSIGN_OR_RETURN(std::string text, read_file(path));
    VINCI_ASSIGN_OR_RETURN(std::vector<Task> tasks, parse_task_file(path, text));
    for (auto& t : tasks) {
      auto [it, fresh] = seen.emplace(t.id, path);
      if (!fresh)
        return invalid_argument(path + ": task id '" + t.id + "' already defined in " + it->second);
      suite.tasks.push_back(std::move(t));
    }
  }
  std::sort(suite.tasks.begin(), suite.tasks.end(), [](const Task& a, const Task& b) {
    return a.level != b.level ? a.level < b.level : a.id < b.id;
  });
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

Result<std::vector<int64_t>> attr_ints(const nlohmann::json& attrs, const std::string& key,
                                       size_t rank, const std::string& where) {
  auto it = attrs.find(key);
  if (it != attrs.end() && it->is_number_integer())
    return std::vector<int64_t>(rank, it->get<int64_t>());
  if (it != attrs.end() && it->is_array()) {
    std::vector<int64_t> out;
    for (const auto& e : *it) {
      if (!e.is_number_integer()) break;
      out.push_back(e.get<int64_t>());
    }
    if (out.size() == it->size() && (rank == 0 || out.size() == rank)) return out;
  }
  return invalid_argument(where + ": key '" + key + "': expected an integer or " +
                          std::to_string(rank) + " integers, found " +
                          (it == attrs.end() ? std::string("nothing") : it->dump()));
}

std::vector<int64_t> attr_ints_or(const nlohmann::json& attrs, const std::string& key, size_t rank,
                                  int64_t dflt) {
  Result<std::vector<int64_t>> r = attr_ints(attrs, key, rank, "");
  return r.ok() ? *r : std::vector<int64_t>(rank, dflt);
}

}  // namespace vinci
