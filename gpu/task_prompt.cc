#include "gpu/task_prompt.h"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <map>
#include <set>
#include <vector>

#include "core/text.h"
#include "gpu/expr.h"
#include "gpu/ops.h"
#include "gpu/shapes.h"

namespace vinci {
namespace {

const char* const kPythonKeywords[] = {"False",  "None",   "True",    "and",      "as",       "assert", "async",
                                       "await",  "break",  "class",   "continue", "def",      "del",    "elif",
                                       "else",   "except", "finally", "for",      "from",     "global", "if",
                                       "import", "in",     "is",      "lambda",   "nonlocal", "not",    "or",
                                       "pass",   "raise",  "return",  "try",      "while",    "with",   "yield"};

// Names the rendered file itself binds or calls; a task name equal to one gets a trailing '_'.
const char* const kRenderedNames[] = {"torch",
                                      "nn",
                                      "self",
                                      "super",
                                      "Model",
                                      "get_inputs",
                                      "get_init_inputs",
                                      "float",
                                      "min",
                                      "max",
                                      "relative_coords_log",
                                      "shifted_window_mask",
                                      "relative_position_bias"};

// Module-level functions a rendered file defines where it uses them (Swin V2's constant buffers
// and its relative-position gather), written as the constructors and forward compute them.
const char kRelativeCoordsLog[] = R"(def relative_coords_log(window):
    r = torch.arange(-(window - 1), window, dtype=torch.float32)
    t = torch.stack(torch.meshgrid([r, r], indexing="ij")).permute(1, 2, 0).contiguous().unsqueeze(0)
    t = t / (window - 1) * 8
    return torch.sign(t) * torch.log2(torch.abs(t) + 1.0) / 3.0
)";
const char kShiftedWindowMask[] = R"(def shifted_window_mask(resolution, window, shift):
    labels = torch.zeros((1, resolution, resolution, 1))
    cuts = (0, resolution - window, resolution - shift, resolution)
    label = 0
    for i in range(3):
        for j in range(3):
            labels[:, cuts[i]:cuts[i + 1], cuts[j]:cuts[j + 1], :] = label
            label += 1
    n = resolution // window
    windows = labels.view(1, n, window, n, window, 1).permute(0, 1, 3, 2, 4, 5).reshape(-1, window * window)
    d = windows.unsqueeze(1) - windows.unsqueeze(2)
    return d.masked_fill(d != 0, -100.0).masked_fill(d == 0, 0.0)
)";
const char kRelativePositionBias[] = R"(def relative_position_bias(table, window):
    i = torch.arange(window * window)
    y, x = i // window, i % window
    index = (y[:, None] - y[None, :] + window - 1) * (2 * window - 1) + (x[:, None] - x[None, :] + window - 1)
    pairs = table[index.view(-1).to(table.device)].view(window * window, window * window, -1)
    return pairs.permute(2, 0, 1).contiguous()
)";

// nn.Module attributes a submodule must not shadow.
const char* const kModuleAttributes[] = {"training",
                                         "forward",
                                         "train",
                                         "eval",
                                         "to",
                                         "cuda",
                                         "cpu",
                                         "type",
                                         "float",
                                         "double",
                                         "half",
                                         "bfloat16",
                                         "apply",
                                         "parameters",
                                         "buffers",
                                         "children",
                                         "modules",
                                         "state_dict",
                                         "load_state_dict",
                                         "zero_grad",
                                         "register_buffer",
                                         "register_parameter",
                                         "add_module",
                                         "named_parameters",
                                         "named_buffers",
                                         "named_children",
                                         "named_modules",
                                         "requires_grad_",
                                         "extra_repr",
                                         "get_parameter",
                                         "get_buffer",
                                         "get_submodule",
                                         "share_memory"};

const char* const kConvClasses[][2] = {{"conv1d", "nn.Conv1d"},
                                       {"conv2d", "nn.Conv2d"},
                                       {"conv3d", "nn.Conv3d"},
                                       {"conv_transpose2d", "nn.ConvTranspose2d"},
                                       {"conv_transpose3d", "nn.ConvTranspose3d"},
                                       {"conv_transpose1d", "nn.ConvTranspose1d"}};

// The nn class of a conv module type, nullptr for other types.
const char* conv_class(const std::string& type) {
  for (const auto& c : kConvClasses)
    if (type == c[0]) return c[1];
  return nullptr;
}

bool is_identifier(const std::string& s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  for (char c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  return true;
}

bool is_name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.'; }

// A Python float literal with the fewest digits that read back as v, as Python's repr writes it.
std::string py_float(double v) {
  if (std::isnan(v)) return "float(\"nan\")";
  if (std::isinf(v)) return v > 0 ? "float(\"inf\")" : "float(\"-inf\")";
  std::string s;
  for (int digits = 1; digits <= 17; ++digits) {
    s = format_number(("%." + std::to_string(digits) + "g").c_str(), v);
    if (std::strtod(s.c_str(), nullptr) == v) break;
  }
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

// One int when all entries agree (kernel_size=3), else a tuple (kernel_size=(3, 5)).
std::string py_ints(const std::vector<int64_t>& v) {
  bool same = true;
  for (int64_t x : v) same &= x == v.at(0);
  if (same && !v.empty()) return std::to_string(v[0]);
  std::string s = "(";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + (v.size() == 1 ? ",)" : ")");
}

std::string join(const std::vector<std::string>& parts, const std::string& sep) {
  std::string s;
  for (size_t i = 0; i < parts.size(); ++i) s += (i ? sep : "") + parts[i];
  return s;
}

// Size symbols in the order a reader meets them: input shapes, module arguments, op arguments,
// then any the graph does not mention.
std::vector<std::string> symbol_order(const Task& task, const SizeMap& sizes) {
  std::vector<std::string> order;
  std::set<std::string> seen;
  auto scan = [&](const std::string& text) {
    for (size_t i = 0; i < text.size();) {
      if (!is_name_char(text[i]) || std::isdigit(static_cast<unsigned char>(text[i]))) {
        ++i;
        continue;
      }
      size_t start = i;
      while (i < text.size() && is_name_char(text[i])) ++i;
      std::string name = text.substr(start, i - start);
      if (sizes.count(name) && seen.insert(name).second) order.push_back(name);
    }
  };
  std::function<void(const nlohmann::json&)> scan_json = [&](const nlohmann::json& j) {
    if (j.is_string()) scan(j.get<std::string>());
    if (j.is_array() || j.is_object())
      for (const auto& e : j) scan_json(e);
  };
  for (const auto& in : task.inputs) {
    for (const auto& d : in.shape) scan(d);
    scan(in.classes);
  }
  for (const auto& m : task.modules) scan_json(m.attrs);
  for (const auto& op : task.ops) scan_json(op.attrs);
  for (const auto& [name, value] : sizes)
    if (seen.insert(name).second) order.push_back(name);
  return order;
}

// Words of text in lines of at most width characters (a longer word keeps a line of its own).
std::vector<std::string> wrap(const std::string& text, size_t width) {
  std::vector<std::string> lines;
  std::string line, word;
  auto flush_word = [&] {
    if (word.empty()) return;
    if (!line.empty() && line.size() + 1 + word.size() > width) {
      lines.push_back(line);
      line.clear();
    }
    line += (line.empty() ? "" : " ") + word;
    word.clear();
  };
  for (char c : text) {
    if (std::isspace(static_cast<unsigned char>(c)))
      flush_word();
    else
      word += c;
  }
  flush_word();
  if (!line.empty()) lines.push_back(line);
  return lines;
}

// The class docstring: the task's description, escaped for a """ string.
std::string docstring(const std::string& description) {
  std::string esc;
  for (char c : description) {
    if (c == '\\' || c == '"') esc += '\\';
    esc += c;
  }
  std::vector<std::string> lines = wrap(esc, 88);
  if (lines.size() <= 1) return "    \"\"\"" + (lines.empty() ? "" : lines[0]) + "\"\"\"\n";
  std::string s = "    \"\"\"" + lines[0] + "\n";
  for (size_t i = 1; i < lines.size(); ++i) s += "    " + lines[i] + "\n";
  return s + "    \"\"\"\n";
}

// Renders one task. The Python names of symbols, values and modules are fixed up front; a task
// name that collides with a Python keyword or a name the file binds gets a trailing '_'.
class PyRenderer {
 public:
  PyRenderer(const Task& task, const SizeMap& sizes, bool reserve_f)
      : task_(task),
        sizes_(sizes),
        reserve_f_(reserve_f),
        where_(task.source_file + (task.source_file.empty() ? "" : ": ") + "task '" + task.id + "'") {}

  Result<std::string> render();
  Result<std::string> init_item_py(const nlohmann::json& item) const;
  std::map<std::string, std::string> constructor_names() const;
  bool uses_functional() const { return uses_f_; }

 private:
  Status name_everything();
  std::string fresh(const std::string& name);
  Result<std::string> py_expr(const std::string& e, std::vector<std::string>* used) const;
  Result<std::string> py_size(const nlohmann::json& v, const std::string& where, std::vector<std::string>* used) const;
  Result<std::string> py_shape(const nlohmann::json& list, const std::string& where,
                               std::vector<std::string>* used) const;
  Result<std::string> module_ctor(const ModuleSpec& m, std::vector<std::string>* used) const;
  Result<std::string> batch_norm_class(const ModuleSpec& m) const;
  Result<std::string> op_rhs(const OpSpec& op, const std::vector<std::string>& in);
  struct OpText;
  std::string elementwise_rhs(const OpText& t);
  std::string reduction_rhs(const OpText& t);
  Result<std::string> layout_rhs(const OpText& t);
  Result<std::string> module_rhs(const OpText& t);
  std::string loss_rhs(const OpText& t);
  Result<std::string> pool_call(const OpSpec& op, const std::string& x, const std::string& w);
  Result<std::string> input_draw(const InputSpec& in) const;
  Result<std::string> forward_body();
  std::string functional(const std::string& fn) {
    uses_f_ = true;
    return "F." + fn;
  }

  const Task& task_;
  const SizeMap& sizes_;
  bool reserve_f_;
  std::string where_;
  bool uses_f_ = false;
  mutable bool uses_math_ = false;         // a parameter scaled by 1 / math.sqrt(size)
  mutable std::set<std::string> helpers_;  // module-level functions used (kRelativeCoordsLog, ...)
  std::set<std::string> reserved_;
  std::set<std::string> taken_;       // Python names of symbols and values
  std::vector<std::string> symbols_;  // in symbol_order
  std::map<std::string, std::string> symbol_py_;
  std::map<std::string, std::string> value_py_;   // value -> Python expression
  std::map<std::string, std::string> module_py_;  // module -> attribute name
  ShapeMap shapes_;
};

std::string PyRenderer::fresh(const std::string& name) {
  std::string py = name;
  while (reserved_.count(py) || taken_.count(py)) py += "_";
  taken_.insert(py);
  return py;
}

Status PyRenderer::name_everything() {
  for (const char* k : kPythonKeywords) reserved_.insert(k);
  for (const char* k : kRenderedNames) reserved_.insert(k);
  if (reserve_f_) reserved_.insert("F");
  auto check = [&](const std::string& what, const std::string& name) -> Status {
    if (is_identifier(name)) return Status();
    return invalid_argument(where_ + ": " + what + " '" + name + "' is not a Python identifier");
  };
  symbols_ = symbol_order(task_, sizes_);
  for (const auto& s : symbols_) {
    VINCI_RETURN_IF_ERROR(check("size symbol", s));
    symbol_py_[s] = fresh(s);
  }
  for (const auto& in : task_.inputs) {
    VINCI_RETURN_IF_ERROR(check("input", in.name));
    value_py_[in.name] = fresh(in.name);
  }
  std::set<std::string> attrs(std::begin(kModuleAttributes), std::end(kModuleAttributes));
  for (const auto& m : task_.modules) {
    VINCI_RETURN_IF_ERROR(check("module", m.name));
    std::string py = m.name;
    while (attrs.count(py)) py += "_";
    attrs.insert(py);
    module_py_[m.name] = py;
    if (m.kind() == ModuleType::kParameter || m.kind() == ModuleType::kBuffer) value_py_[m.name] = "self." + py;
  }
  for (const auto& op : task_.ops)
    for (const auto& out : op.outputs) {
      VINCI_RETURN_IF_ERROR(check("op '" + op.op + "' output", out));
      value_py_[out] = fresh(out);
    }
  return Status();
}

// A size expression (gpu/expr.h) in Python: symbols by their Python names, '/' as '//' (the
// sizes are non-negative, where C's and Python's integer division agree), min and max as is.
Result<std::string> PyRenderer::py_expr(const std::string& e, std::vector<std::string>* used) const {
  VINCI_RETURN_IF_ERROR(check_expr_syntax(e));
  std::string out;
  bool operand_before = false;  // a '-' after an operand is binary
  for (size_t i = 0; i < e.size();) {
    char c = e[i];
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      while (i < e.size() && std::isdigit(static_cast<unsigned char>(e[i]))) out += e[i++];
      operand_before = true;
    } else if (is_name_char(c)) {
      size_t start = i;
      while (i < e.size() && is_name_char(e[i])) ++i;
      std::string name = e.substr(start, i - start);
      size_t next = e.find_first_not_of(" \t", i);
      bool call = next != std::string::npos && e[next] == '(';
      if (call && name != "min" && name != "max")
        return invalid_argument(where_ + ": size expression '" + e + "': " + name +
                                "() has no Python rendering (expected sizes, + - * / %, min, max)");
      if (!call && !symbol_py_.count(name))
        return invalid_argument(where_ + ": size expression '" + e + "': '" + name + "' is not a size symbol");
      if (call) {
        out += name;
      } else {
        out += symbol_py_.at(name);
        if (used) used->push_back(name);
      }
      operand_before = !call;
    } else if (c == '(' || c == ',') {
      out += c == '(' ? "(" : ", ";
      operand_before = false;
      ++i;
    } else if (c == ')') {
      out += ")";
      operand_before = true;
      ++i;
    } else if (c == '-' && !operand_before) {
      out += "-";
      ++i;
    } else {
      out += std::string(" ") + (c == '/' ? "//" : std::string(1, c)) + " ";
      operand_before = false;
      ++i;
    }
  }
  return out;
}

Result<std::string> PyRenderer::py_size(const nlohmann::json& v, const std::string& where,
                                        std::vector<std::string>* used) const {
  if (v.is_number_integer()) return std::to_string(v.get<int64_t>());
  if (v.is_string()) return py_expr(v.get<std::string>(), used);
  return invalid_argument(where + ": expected an integer or a size expression, found " + v.dump());
}

// Comma-separated sizes of a JSON list: "B, T, H, C // H".
Result<std::string> PyRenderer::py_shape(const nlohmann::json& list, const std::string& where,
                                         std::vector<std::string>* used) const {
  if (!list.is_array()) return invalid_argument(where + ": expected an array of sizes, found " + list.dump());
  std::vector<std::string> parts;
  for (const auto& e : list) {
    VINCI_ASSIGN_OR_RETURN(std::string p, py_size(e, where, used));
    parts.push_back(p);
  }
  return join(parts, ", ");
}

// nn.BatchNorm1d/2d/3d by the rank of what the module normalises.
Result<std::string> PyRenderer::batch_norm_class(const ModuleSpec& m) const {
  for (const auto& op : task_.ops) {
    if (op.module != m.name || op.inputs.empty()) continue;
    size_t rank = shapes_.at(op.inputs[0]).size();
    if (rank == 2 || rank == 3) return std::string("nn.BatchNorm1d");
    if (rank == 4) return std::string("nn.BatchNorm2d");
    if (rank == 5) return std::string("nn.BatchNorm3d");
    return invalid_argument(where_ + ": module '" + m.name + "': batch_norm of a rank-" + std::to_string(rank) +
                            " value has no nn.BatchNorm class");
  }
  return invalid_argument(where_ + ": module '" + m.name + "': batch_norm used by no op, so its rank is unknown");
}

// The constructor call that builds module m with the arguments (and so the weight draws) the
// executor gives it.
Result<std::string> PyRenderer::module_ctor(const ModuleSpec& m, std::vector<std::string>* used) const {
  std::string where = where_ + ": module '" + m.name + "'";
  const auto& a = m.attrs;
  auto size = [&](const char* key) -> Result<std::string> {
    auto it = a.find(key);
    if (it == a.end()) return invalid_argument(where + ": key '" + key + "' missing");
    return py_size(*it, where + ": key '" + key + "'", used);
  };
  std::string eps = "eps=" + py_float(attr_double_or(a, "eps", 1e-5));
  std::string momentum = a.contains("momentum") ? ", momentum=" + py_float(attr_double_or(a, "momentum", 0.1)) : "";
  std::string no_bias = attr_bool_or(a, "bias", true) ? "" : ", bias=False";
  if (m.kind() == ModuleType::kLinear) {
    VINCI_ASSIGN_OR_RETURN(std::string in, size("in"));
    VINCI_ASSIGN_OR_RETURN(std::string out, size("out"));
    return "nn.Linear(" + in + ", " + out + no_bias + ")";
  }
  if (const char* cls = conv_class(m.type)) {
    size_t rank = static_cast<size_t>(m.type[m.type.size() - 2] - '0');
    bool transposed = m.type.find("transpose") != std::string::npos;
    VINCI_ASSIGN_OR_RETURN(std::string in, size("in"));
    VINCI_ASSIGN_OR_RETURN(std::string out, size("out"));
    VINCI_ASSIGN_OR_RETURN(std::vector<int64_t> k, attr_ints(a, "kernel", rank, where));
    std::string s = std::string(cls) + "(" + in + ", " + out + ", kernel_size=" + py_ints(k);
    const std::pair<const char*, int64_t> optional[] = {
        {"stride", 1}, {"padding", 0}, {"output_padding", 0}, {"dilation", 1}};
    for (const auto& [key, dflt] : optional) {
      if (!a.contains(key) || (!transposed && std::string(key) == "output_padding")) continue;
      s += std::string(", ") + key + "=" + py_ints(attr_ints_or(a, key, rank, dflt));
    }
    if (a.contains("groups")) {
      VINCI_ASSIGN_OR_RETURN(std::string g, size("groups"));  // an integer or a size expression
      s += ", groups=" + g;
    }
    return s + no_bias + ")";
  }
  if (m.kind() == ModuleType::kBatchNorm) {
    VINCI_ASSIGN_OR_RETURN(std::string cls, batch_norm_class(m));
    VINCI_ASSIGN_OR_RETURN(std::string f, size("features"));
    return cls + "(" + f + ", " + eps + momentum + ")";
  }
  if (m.kind() == ModuleType::kLayerNorm) {
    auto it = a.find("shape");
    if (it == a.end()) return invalid_argument(where + ": key 'shape' missing");
    VINCI_ASSIGN_OR_RETURN(std::string shape, py_shape(*it, where + ": key 'shape'", used));
    return "nn.LayerNorm(" + (it->size() == 1 ? shape : "(" + shape + ")") + ", " + eps + ")";
  }
  if (m.kind() == ModuleType::kGroupNorm) {
    VINCI_ASSIGN_OR_RETURN(int64_t groups, attr_int(a, "groups", where));
    VINCI_ASSIGN_OR_RETURN(std::string c, size("channels"));
    return "nn.GroupNorm(num_groups=" + std::to_string(groups) + ", num_channels=" + c + ", " + eps + ")";
  }
  if (m.kind() == ModuleType::kParameter) {
    auto it = a.find("shape");
    if (it == a.end()) return invalid_argument(where + ": key 'shape' missing");
    VINCI_ASSIGN_OR_RETURN(std::string shape, py_shape(*it, where + ": key 'shape'", used));
    std::string init = a.value("init", std::string("randn"));
    if (init == "log_full")
      return "nn.Parameter(torch.log(" + py_float(attr_double_or(a, "value", 1.0)) + " * torch.ones(" +
             (it->empty() ? "()" : shape) + ")))";
    if (init != "randn" && init != "rand" && init != "ones" && init != "zeros")
      return invalid_argument(where + ": key 'init': expected randn|rand|ones|zeros|log_full, found '" + init + "'");
    double scale = attr_double_or(a, "scale", 1.0);
    std::string draw = "torch." + init + "(" + (it->empty() ? "()" : shape) + ")";
    if (a.contains("scale_rsqrt")) {  // (1 / sqrt(n)) * draw, the factor in double as Python's math.sqrt
      VINCI_ASSIGN_OR_RETURN(std::string n, size("scale_rsqrt"));
      uses_math_ = true;
      draw = "(1 / math.sqrt(" + n + ")) * " + draw;
    }
    return "nn.Parameter(" + draw + (scale != 1.0 ? " * " + py_float(scale) : "") + ")";
  }
  if (m.kind() == ModuleType::kBuffer) {
    std::string init = a.value("init", std::string());
    VINCI_ASSIGN_OR_RETURN(std::string window, size("window"));
    if (init == "relative_coords_log") {
      helpers_.insert(init);
      return init + "(" + window + ")";
    }
    if (init == "shifted_window_mask") {
      VINCI_ASSIGN_OR_RETURN(std::string res, size("resolution"));
      VINCI_ASSIGN_OR_RETURN(std::string shift, size("shift"));
      helpers_.insert(init);
      return init + "(" + res + ", " + window + ", " + shift + ")";
    }
    return invalid_argument(where + ": key 'init': expected relative_coords_log or shifted_window_mask, found '" +
                            init + "'");
  }
  if (m.kind() == ModuleType::kMha) {
    VINCI_ASSIGN_OR_RETURN(std::string e, size("embed"));
    VINCI_ASSIGN_OR_RETURN(int64_t heads, attr_int(a, "heads", where));
    return "nn.MultiheadAttention(embed_dim=" + e + ", num_heads=" + std::to_string(heads) + ")";
  }
  if (m.kind() == ModuleType::kLstm || m.kind() == ModuleType::kGru) {
    VINCI_ASSIGN_OR_RETURN(std::string in, size("input"));
    VINCI_ASSIGN_OR_RETURN(std::string h, size("hidden"));
    std::string s = std::string(m.kind() == ModuleType::kLstm ? "nn.LSTM(" : "nn.GRU(") + in + ", " + h;
    if (a.contains("layers")) s += ", num_layers=" + std::to_string(attr_int_or(a, "layers", 1));
    s += no_bias;
    if (attr_bool_or(a, "batch_first", false)) s += ", batch_first=True";
    if (attr_bool_or(a, "bidirectional", false)) s += ", bidirectional=True";
    return s + ")";
  }
  return invalid_argument(where + ": module type '" + m.type + "' has no PyTorch rendering");
}

// max_pool1d/2d/3d and avg_pool2d with the executor's defaults: stride = kernel, padding 0,
// dilation 1 (avg_pool2d takes none).
Result<std::string> PyRenderer::pool_call(const OpSpec& op, const std::string& x, const std::string& w) {
  size_t rank = static_cast<size_t>(op.op[op.op.size() - 2] - '0');
  const auto& a = op.attrs;
  VINCI_ASSIGN_OR_RETURN(std::vector<int64_t> k, attr_ints(a, "kernel", rank, w));
  std::string s = functional(op.op) + "(" + x + ", kernel_size=" + py_ints(k);
  if (a.contains("stride")) {
    std::vector<int64_t> st = attr_ints_or(a, "stride", rank, 0);
    for (size_t i = 0; i < rank; ++i)
      if (st[i] == 0) st[i] = k[i];
    s += ", stride=" + py_ints(st);
  }
  if (a.contains("padding")) s += ", padding=" + py_ints(attr_ints_or(a, "padding", rank, 0));
  if (a.contains("dilation") && op.op.rfind("avg_pool", 0) != 0)
    s += ", dilation=" + py_ints(attr_ints_or(a, "dilation", rank, 1));
  if (attr_bool_or(a, "ceil_mode", false)) s += ", ceil_mode=True";
  return s + ")";
}

// What each family's rendering of one op reads: the op, its inputs' Python expressions, the place
// to name in an error, and the attributes most ops share.
struct PyRenderer::OpText {
  const OpSpec& op;
  const std::vector<std::string>& in;
  std::string w;
  std::string dim, keepdim;
  const std::string& x() const { return in.at(0); }
  const std::string& arg(size_t i) const { return in.at(i); }
  const std::string& name() const { return op.op; }
  std::string num(const char* key, double dflt) const { return py_float(attr_double_or(op.attrs, key, dflt)); }
};

// Unary, scalar and binary elementwise ops.
std::string PyRenderer::elementwise_rhs(const OpText& t) {
  const std::string& n = t.name();
  const std::string& x = t.x();
  const auto& a = t.op.attrs;
  switch (t.op.code()) {
    case OpCode::kRelu:
    case OpCode::kSigmoid:
    case OpCode::kTanh:
    case OpCode::kSelu:
    case OpCode::kExp:
    case OpCode::kLog:
    case OpCode::kAbs:
    case OpCode::kSqrt: return "torch." + n + "(" + x + ")";
    case OpCode::kGelu:
    case OpCode::kSilu:
    case OpCode::kSoftplus:
    case OpCode::kSoftsign:
    case OpCode::kHardsigmoid:
    case OpCode::kHardswish:
    case OpCode::kMish: return functional(n) + "(" + x + ")";
    case OpCode::kLeakyRelu: return functional(n) + "(" + x + ", negative_slope=" + t.num("negative_slope", 0.01) + ")";
    case OpCode::kElu: return functional(n) + "(" + x + ", alpha=" + t.num("alpha", 1.0) + ")";
    case OpCode::kHardtanh:
      return functional(n) + "(" + x + ", min_val=" + t.num("min", -1.0) + ", max_val=" + t.num("max", 1.0) + ")";
    case OpCode::kSquare: return x + " * " + x;
    case OpCode::kClamp: {
      std::string lo = t.num("min", -INFINITY), hi = t.num("max", INFINITY);
      bool has_lo = a.contains("min"), has_hi = a.contains("max");
      if (!has_lo && !has_hi) return "torch.clamp(" + x + ", min=" + lo + ", max=" + hi + ")";
      return "torch.clamp(" + x + (has_lo ? ", min=" + lo : "") + (has_hi ? ", max=" + hi : "") + ")";
    }
    case OpCode::kMulScalar: return x + " * " + t.num("value", 1.0);
    case OpCode::kDivScalar: return x + " / " + t.num("value", 1.0);
    case OpCode::kAddScalar: {
      // x + (-c) and x - c are the same IEEE operation; the subtraction reads as the source does.
      double v = attr_double_or(a, "value", 0.0);
      return std::signbit(v) ? x + " - " + py_float(-v) : x + " + " + py_float(v);
    }
    case OpCode::kAdd: return x + " + " + t.arg(1);
    case OpCode::kSub: return x + " - " + t.arg(1);
    case OpCode::kMul: return x + " * " + t.arg(1);
    case OpCode::kDiv: return x + " / " + t.arg(1);
    default: return "";
  }
}

// Reductions, scans and row ops along `dim`.
std::string PyRenderer::reduction_rhs(const OpText& t) {
  const std::string& n = t.name();
  const std::string& x = t.x();
  const std::string& dim = t.dim;
  switch (t.op.code()) {
    case OpCode::kSum:
    case OpCode::kMean:
    case OpCode::kAmax:
    case OpCode::kAmin: return x + "." + n + "(dim=" + dim + t.keepdim + ")";
    case OpCode::kLogsumexp: return "torch.logsumexp(" + x + ", dim=" + dim + t.keepdim + ")";
    case OpCode::kNormL2: return x + ".norm(p=2, dim=" + dim + t.keepdim + ")";
    case OpCode::kSoftmax:
    case OpCode::kLogSoftmax:
    case OpCode::kCumsum:
    case OpCode::kCumprod: return "torch." + n + "(" + x + ", dim=" + dim + ")";
    case OpCode::kRmsNorm:
      return x + " / torch.sqrt((" + x + " * " + x + ").mean(dim=" + dim + ", keepdim=True) + " + t.num("eps", 1e-5) +
             ")";
    case OpCode::kInstanceNorm: return functional(n) + "(" + x + ", eps=" + t.num("eps", 1e-5) + ")";
    case OpCode::kFrobeniusNorm: return "torch.norm(" + x + ", p=\"fro\")";
    case OpCode::kArgmax:
    case OpCode::kArgmin: return "torch." + n + "(" + x + ", dim=" + dim + t.keepdim + ")";
    case OpCode::kCumsumReverse: return "torch.cumsum(" + x + ".flip(" + dim + "), dim=" + dim + ").flip(" + dim + ")";
    case OpCode::kCumsumExclusive:
      return "torch.cat((torch.zeros_like(" + x + ".select(" + dim + ", 0).unsqueeze(" + dim + ")), torch.cumsum(" + x +
             ".narrow(" + dim + ", 0, " + x + ".size(" + dim + ") - 1), dim=" + dim + ")), dim=" + dim + ")";
    case OpCode::kNormalize: {
      std::string eps = t.op.attrs.contains("eps") ? ", eps=" + t.num("eps", 1e-12) : "";
      return functional(n) + "(" + x + ", dim=" + dim + eps + ")";
    }
    default: return "";
  }
}

// Ops that move, select or pad elements.
Result<std::string> PyRenderer::layout_rhs(const OpText& t) {
  const OpSpec& op = t.op;
  const std::string& x = t.x();
  const auto& a = op.attrs;
  const std::string& w = t.w;
  switch (op.code()) {
    case OpCode::kReshape:
    case OpCode::kExpand: {
      auto it = a.find("shape");
      if (it == a.end()) return invalid_argument(w + ": key 'shape' missing");
      VINCI_ASSIGN_OR_RETURN(std::string shape, py_shape(*it, w + ": key 'shape'", nullptr));
      return x + (op.code() == OpCode::kReshape ? ".reshape(" : ".expand(") + shape + ")";
    }
    case OpCode::kFlatten:
      return "torch.flatten(" + x + ", start_dim=" + std::to_string(attr_int_or(a, "start_dim", 1)) + ")";
    case OpCode::kPermute: {
      VINCI_ASSIGN_OR_RETURN(std::vector<int64_t> dims, attr_ints(a, "dims", shapes_.at(op.inputs[0]).size(), w));
      std::vector<std::string> d;
      for (int64_t v : dims) d.push_back(std::to_string(v));
      return x + ".permute(" + join(d, ", ") + ")";
    }
    case OpCode::kTranspose:
      return x + ".transpose(" + std::to_string(attr_int_or(a, "dim0", 0)) + ", " +
             std::to_string(attr_int_or(a, "dim1", 1)) + ")";
    case OpCode::kSplit:
      return x + ".chunk(" + std::to_string(op.outputs.size()) + ", dim=" + std::to_string(attr_int_or(a, "dim", 0)) +
             ")";
    case OpCode::kCausalMask:  // triu over the last two dims, broadcast over the leading ones
      return x + ".masked_fill(torch.ones_like(" + x + ", dtype=torch.bool).triu(diagonal=1), float(\"-inf\"))";
    case OpCode::kSlice:
    case OpCode::kSelect: {
      // x[:, :, start:end] or x[:, index], the dims before `dim` taken whole.
      size_t rank = shapes_.at(op.inputs[0]).size();
      int64_t d = attr_int_or(a, "dim", 0);
      if (d < 0) d += static_cast<int64_t>(rank);
      auto bound = [&](const char* key) -> Result<std::string> {
        if (!a.contains(key)) return std::string();
        return py_size(a[key], w + ": key '" + key + "'", nullptr);
      };
      std::string idx;
      for (int64_t i = 0; i < d; ++i) idx += ":, ";
      if (op.code() == OpCode::kSelect) {
        VINCI_ASSIGN_OR_RETURN(std::string i, bound("index"));
        idx += i.empty() ? "0" : i;
      } else {
        VINCI_ASSIGN_OR_RETURN(std::string lo, bound("start"));
        VINCI_ASSIGN_OR_RETURN(std::string hi, bound("end"));
        idx += lo + ":" + hi;
      }
      return x + "[" + idx + "]";
    }
    case OpCode::kConcat:
      return "torch.cat([" + join(t.in, ", ") + "], dim=" + std::to_string(attr_int_or(a, "dim", 0)) + ")";
    case OpCode::kTriu:
    case OpCode::kTril: {
      std::string diagonal =
          a.contains("diagonal") ? ", diagonal=" + std::to_string(attr_int_or(a, "diagonal", 0)) : "";
      return "torch." + t.name() + "(" + x + diagonal + ")";
    }
    case OpCode::kRoll: {
      std::vector<int64_t> shifts, dims;
      for (const auto& v : a.at("shifts")) shifts.push_back(v.get<int64_t>());
      for (const auto& v : a.at("dims")) dims.push_back(v.get<int64_t>());
      auto tuple = [](const std::vector<int64_t>& v) {  // always a tuple: roll pairs shifts with dims
        std::string s = "(";
        for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
        return s + (v.size() == 1 ? ",)" : ")");
      };
      return "torch.roll(" + x + ", shifts=" + tuple(shifts) + ", dims=" + tuple(dims) + ")";
    }
    case OpCode::kPad: {
      std::vector<std::string> pad;
      for (const auto& p : a.at("pad")) pad.push_back(std::to_string(p.get<int64_t>()));
      return functional(t.name()) + "(" + x + ", [" + join(pad, ", ") + "])";
    }
    default: return std::string();
  }
}

// Ops that call the task's module (self.NAME) and the pooling and attention calls.
Result<std::string> PyRenderer::module_rhs(const OpText& t) {
  const OpSpec& op = t.op;
  const std::string& x = t.x();
  const auto& a = op.attrs;
  auto module = [&]() -> Result<std::string> {
    auto it = module_py_.find(op.module);
    if (it == module_py_.end()) return invalid_argument(t.w + ": key 'module': '" + op.module + "' is not a module");
    return "self." + it->second;
  };
  switch (op.code()) {
    case OpCode::kLinear:
    case OpCode::kLayerNorm:
    case OpCode::kBatchNorm:
    case OpCode::kGroupNorm:
    case OpCode::kConv1d:
    case OpCode::kConv2d:
    case OpCode::kConv3d:
    case OpCode::kConvTranspose1d:
    case OpCode::kConvTranspose2d:
    case OpCode::kConvTranspose3d: {
      VINCI_ASSIGN_OR_RETURN(std::string m, module());
      return m + "(" + x + ")";
    }
    case OpCode::kSelfAttention: {
      // nn.MultiheadAttention(query, key, value) returns (output, weights); the executor computes
      // the output of unmasked self-attention.
      VINCI_ASSIGN_OR_RETURN(std::string m, module());
      return m + "(" + x + ", " + x + ", " + x + ", need_weights=False)[0]";
    }
    case OpCode::kLstm: {
      VINCI_ASSIGN_OR_RETURN(std::string m, module());
      return m + "(" + x + ", (" + t.arg(1) + ", " + t.arg(2) + "))";
    }
    case OpCode::kGru: {
      VINCI_ASSIGN_OR_RETURN(std::string m, module());
      return m + "(" + x + ", " + t.arg(1) + ")";
    }
    case OpCode::kMaxPool1d:
    case OpCode::kMaxPool2d:
    case OpCode::kMaxPool3d:
    case OpCode::kAvgPool1d:
    case OpCode::kAvgPool2d:
    case OpCode::kAvgPool3d: return pool_call(op, x, t.w);
    case OpCode::kAdaptiveAvgPool2d:
    case OpCode::kAdaptiveAvgPool3d: {
      size_t rank = op.code() == OpCode::kAdaptiveAvgPool2d ? 2 : 3;
      VINCI_ASSIGN_OR_RETURN(std::vector<int64_t> o, attr_ints(a, "output", rank, t.w));
      return functional(t.name()) + "(" + x + ", " + py_ints(o) + ")";
    }
    case OpCode::kMatmul: {
      auto tr = [&](size_t i, const char* key) {
        if (!attr_bool_or(a, key, false)) return t.arg(i);
        return t.arg(i) + (shapes_.at(op.inputs[i]).size() == 2 ? ".T" : ".transpose(-2, -1)");
      };
      return "torch.matmul(" + tr(0, "transpose_a") + ", " + tr(1, "transpose_b") + ")";
    }
    case OpCode::kEinsum:
      return "torch.einsum(\"" + a.value("equation", std::string()) + "\", " + join(t.in, ", ") + ")";
    case OpCode::kScaledDotProductAttention:
      return functional(t.name()) + "(" + x + ", " + t.arg(1) + ", " + t.arg(2) + ")";
    case OpCode::kRelativePositionBias: {
      VINCI_ASSIGN_OR_RETURN(std::string window, py_size(a.at("window"), t.w + ": key 'window'", nullptr));
      helpers_.insert(t.name());
      return t.name() + "(" + x + ", " + window + ")";
    }
    default: return std::string();
  }
}

// The losses, as KernelBench's problems write them.
std::string PyRenderer::loss_rhs(const OpText& t) {
  const std::string& n = t.name();
  const std::string& x = t.x();
  switch (t.op.code()) {
    case OpCode::kMseLoss:
    case OpCode::kCrossEntropy:
    case OpCode::kSmoothL1Loss: return functional(n) + "(" + x + ", " + t.arg(1) + ")";
    case OpCode::kKlDiv: return functional(n) + "(torch.log(" + x + "), " + t.arg(1) + ", reduction=\"batchmean\")";
    case OpCode::kHingeLoss: return "torch.clamp(1 - " + x + " * " + t.arg(1) + ", min=0).mean()";
    case OpCode::kCosineSimilarityLoss:
      return "(1 - " + functional("cosine_similarity") + "(" + x + ", " + t.arg(1) + ", dim=1)).mean()";
    case OpCode::kTripletMarginLoss:
      return functional(n) + "(" + x + ", " + t.arg(1) + ", " + t.arg(2) + ", margin=" + t.num("margin", 1.0) + ")";
    default: return "";
  }
}

// The right-hand side of op's assignment over its inputs' Python expressions: one case per op, to
// its family's rendering (the compiler names an op without one).
Result<std::string> PyRenderer::op_rhs(const OpSpec& op, const std::vector<std::string>& in) {
  const auto& a = op.attrs;
  (void)in.at(0);
  const OpText t{op, in, where_ + ": op '" + op.op + "'", std::to_string(attr_int_or(a, "dim", -1)),
                 attr_bool_or(a, "keepdim", false) ? ", keepdim=True" : ""};
  std::string rhs;
  switch (op.code()) {
    case OpCode::kRelu:
    case OpCode::kLeakyRelu:
    case OpCode::kSigmoid:
    case OpCode::kTanh:
    case OpCode::kGelu:
    case OpCode::kSilu:
    case OpCode::kElu:
    case OpCode::kSelu:
    case OpCode::kSoftplus:
    case OpCode::kSoftsign:
    case OpCode::kHardsigmoid:
    case OpCode::kHardswish:
    case OpCode::kHardtanh:
    case OpCode::kMish:
    case OpCode::kExp:
    case OpCode::kLog:
    case OpCode::kAbs:
    case OpCode::kSquare:
    case OpCode::kSqrt:
    case OpCode::kClamp:
    case OpCode::kMulScalar:
    case OpCode::kAddScalar:
    case OpCode::kDivScalar:
    case OpCode::kAdd:
    case OpCode::kSub:
    case OpCode::kMul:
    case OpCode::kDiv: rhs = elementwise_rhs(t); break;
    case OpCode::kSum:
    case OpCode::kMean:
    case OpCode::kAmax:
    case OpCode::kAmin:
    case OpCode::kLogsumexp:
    case OpCode::kNormL2:
    case OpCode::kSoftmax:
    case OpCode::kLogSoftmax:
    case OpCode::kRmsNorm:
    case OpCode::kInstanceNorm:
    case OpCode::kCumsum:
    case OpCode::kCumprod:
    case OpCode::kFrobeniusNorm:
    case OpCode::kArgmax:
    case OpCode::kArgmin:
    case OpCode::kCumsumReverse:
    case OpCode::kCumsumExclusive:
    case OpCode::kNormalize: rhs = reduction_rhs(t); break;
    case OpCode::kReshape:
    case OpCode::kExpand:
    case OpCode::kFlatten:
    case OpCode::kPermute:
    case OpCode::kTranspose:
    case OpCode::kSplit:
    case OpCode::kCausalMask:
    case OpCode::kSlice:
    case OpCode::kSelect:
    case OpCode::kConcat:
    case OpCode::kTriu:
    case OpCode::kTril:
    case OpCode::kRoll:
    case OpCode::kPad: {
      VINCI_ASSIGN_OR_RETURN(rhs, layout_rhs(t));
      break;
    }
    case OpCode::kLinear:
    case OpCode::kLayerNorm:
    case OpCode::kBatchNorm:
    case OpCode::kGroupNorm:
    case OpCode::kConv1d:
    case OpCode::kConv2d:
    case OpCode::kConv3d:
    case OpCode::kConvTranspose1d:
    case OpCode::kConvTranspose2d:
    case OpCode::kConvTranspose3d:
    case OpCode::kSelfAttention:
    case OpCode::kLstm:
    case OpCode::kGru:
    case OpCode::kMaxPool1d:
    case OpCode::kMaxPool2d:
    case OpCode::kMaxPool3d:
    case OpCode::kAvgPool1d:
    case OpCode::kAvgPool2d:
    case OpCode::kAvgPool3d:
    case OpCode::kAdaptiveAvgPool2d:
    case OpCode::kAdaptiveAvgPool3d:
    case OpCode::kMatmul:
    case OpCode::kEinsum:
    case OpCode::kScaledDotProductAttention:
    case OpCode::kRelativePositionBias: {
      VINCI_ASSIGN_OR_RETURN(rhs, module_rhs(t));
      break;
    }
    case OpCode::kMseLoss:
    case OpCode::kCrossEntropy:
    case OpCode::kSmoothL1Loss:
    case OpCode::kKlDiv:
    case OpCode::kHingeLoss:
    case OpCode::kCosineSimilarityLoss:
    case OpCode::kTripletMarginLoss: rhs = loss_rhs(t); break;
    case OpCode::kElmanRnn:
    case OpCode::kUnknown: break;
  }
  if (!rhs.empty()) return rhs;
  return invalid_argument(t.w + ": no PyTorch rendering for this op (output '" +
                          (op.outputs.empty() ? std::string("?") : op.outputs[0]) + "')");
}

// One input drawn as vinci's uniform01 trial draws it, in its domain.
Result<std::string> PyRenderer::input_draw(const InputSpec& in) const {
  std::string where = where_ + ": input '" + in.name + "' key 'shape'";
  std::vector<std::string> dims;
  for (const auto& d : in.shape) {
    VINCI_ASSIGN_OR_RETURN(std::string p, py_expr(d, nullptr));
    dims.push_back(p);
  }
  std::string args = join(dims, ", ");
  std::string tuple = dims.size() == 1 ? "(" + args + ",)" : "(" + args + ")";
  // A scaled input: the scale is drawn first (Python evaluates the left operand first).
  std::string rand = "torch.rand(" + (dims.empty() ? "()" : args) + ")";
  if (in.scaled) rand = "torch.rand(()) * " + rand;
  switch (in.domain) {
    case InputDomain::kReal:
    case InputDomain::kPositive:
    case InputDomain::kSymmetric:  // then made symmetric by input_post
      return rand;
    case InputDomain::kProbability: return (in.scaled ? "(" + rand + ")" : rand) + ".softmax(dim=-1)";
    case InputDomain::kUpperTriangular: return "torch.triu(" + rand + ")";
    case InputDomain::kLowerTriangular: return "torch.tril(" + rand + ")";
    case InputDomain::kIndex: {
      VINCI_ASSIGN_OR_RETURN(std::string classes, py_expr(in.classes, nullptr));
      return "torch.randint(0, " + classes + ", " + tuple + ")";
    }
    case InputDomain::kSign: return "torch.randint(0, 2, " + tuple + ", dtype=torch.float32) * 2 - 1";
  }
  return invalid_argument(where + ": unknown input domain");
}

// A statement after an input's draw, "" when none: (A + A.T) / 2 for a symmetric input.
std::string input_post(const InputSpec& in, const std::string& py) {
  if (in.domain == InputDomain::kSymmetric) return "    " + py + " = (" + py + " + " + py + ".T) / 2\n";
  return "";
}

// forward's statements: one assignment an op, in graph order.
Result<std::string> PyRenderer::forward_body() {
  std::string forward;
  for (const auto& op : task_.ops) {
    std::vector<std::string> in, out;
    for (const auto& v : op.inputs) {
      auto it = value_py_.find(v);
      if (it == value_py_.end())
        return invalid_argument(where_ + ": op '" + op.op + "': input '" + v + "' is not defined");
      in.push_back(it->second);
    }
    const OpInfo* info = find_op(op.op);
    if (!info) return invalid_argument(where_ + ": op '" + op.op + "': unknown op, no PyTorch rendering");
    if (info->inputs < 0 ? in.empty() : static_cast<int>(in.size()) != info->inputs)
      return invalid_argument(where_ + ": op '" + op.op + "': expected " + std::to_string(info->inputs) +
                              " inputs, found " + std::to_string(in.size()));
    for (const auto& v : op.outputs) out.push_back(value_py_.at(v));
    if (op.code() == OpCode::kElmanRnn) {
      // A recurrence is statements, not an expression: the loop over dim 0, every h_t stacked.
      auto m = module_py_.find(op.module);
      if (m == module_py_.end())
        return invalid_argument(where_ + ": op 'elman_rnn': key 'module': '" + op.module + "' is not a module");
      std::string h = fresh("h_t"), steps = fresh("steps"), t = fresh("t");
      forward += "        " + h + " = " + in.at(1) + "\n";
      forward += "        " + steps + " = []\n";
      forward += "        for " + t + " in range(" + in.at(0) + ".size(0)):\n";
      forward += "            " + h + " = torch.tanh(self." + m->second + "(torch.cat((" + in.at(0) + "[" + t + "], " +
                 h + "), dim=1)))\n";
      forward += "            " + steps + ".append(" + h + ")\n";
      forward += "        " + out.at(0) + " = torch.stack(" + steps + ", dim=0)\n";
      continue;
    }
    VINCI_ASSIGN_OR_RETURN(std::string rhs, op_rhs(op, in));
    std::string lhs = join(out, ", ") + (op.code() == OpCode::kSplit && out.size() == 1 ? "," : "");
    if (op.code() == OpCode::kLstm && out.size() == 3) lhs = out[0] + ", (" + out[1] + ", " + out[2] + ")";
    forward += "        " + lhs + " = " + rhs + "\n";
  }
  return forward;
}

// An item of KernelBench's get_init_inputs() (gpu/task.h) in Python: a size that is one of the
// module's globals by its name, any other size expression by its value at this size.
Result<std::string> PyRenderer::init_item_py(const nlohmann::json& item) const {
  if (item.is_array()) {
    std::vector<std::string> parts;
    for (const auto& e : item) {
      VINCI_ASSIGN_OR_RETURN(std::string p, init_item_py(e));
      parts.push_back(std::move(p));
    }
    return "[" + join(parts, ", ") + "]";
  }
  if (item.is_boolean()) return std::string(item.get<bool>() ? "True" : "False");
  if (item.is_number_integer()) return std::to_string(item.get<int64_t>());
  if (item.is_number()) return py_float(item.get<double>());
  const std::string e = item.get<std::string>();
  auto sym = symbol_py_.find(e);
  if (sym != symbol_py_.end() && sizes_.count(e)) return sym->second;
  ExprEnv env;
  env.symbols = sizes_;
  Result<int64_t> v = eval_expr(e, env);
  if (!v.ok()) return invalid_argument(where_ + ": kernelbench.init: " + v.status().message());
  return std::to_string(*v);
}

// The parameters of KernelBench's constructor that receive a size alone (`in_features` for "In"):
// size symbol -> parameter, so that the constructor's body reads its parameter where KernelBench's
// does (nn.Linear(in_features, out_features)). Positional parameters only, up to a `*`; a name
// that another Python name of the module already holds, or a size two parameters receive, stays
// the module's global.
std::map<std::string, std::string> PyRenderer::constructor_names() const {
  std::vector<std::string> names;
  const std::string& sig = task_.kernelbench_signature;
  int depth = 0;
  std::string part;
  for (size_t i = 0; i <= sig.size(); ++i) {
    char c = i < sig.size() ? sig[i] : ',';
    if (c == '(' || c == '[' || c == '{') ++depth;
    if (c == ')' || c == ']' || c == '}') --depth;
    if (c != ',' || depth > 0) {
      part += c;
      continue;
    }
    size_t b = part.find_first_not_of(" \t");
    if (b == std::string::npos || part[b] == '*') break;
    size_t e = b;
    while (e < part.size() && is_name_char(part[e])) ++e;
    names.push_back(part.substr(b, e - b));
    part.clear();
  }
  std::map<std::string, std::string> out;
  std::set<std::string> given;
  for (size_t k = 0; k < names.size() && k < task_.kernelbench_init.size(); ++k) {
    const nlohmann::json& item = task_.kernelbench_init[k];
    if (!item.is_string() || !symbol_py_.count(item.get<std::string>())) continue;
    const std::string sym = item.get<std::string>();
    const std::string& name = names[k];
    bool own = symbol_py_.at(sym) == name;
    if (!is_identifier(name) || reserved_.count(name) || (taken_.count(name) && !own) || !given.insert(sym).second) {
      out.erase(sym);
      continue;
    }
    out[sym] = name;
  }
  return out;
}

Result<std::string> PyRenderer::render() {
  VINCI_RETURN_IF_ERROR(name_everything());
  VINCI_ASSIGN_OR_RETURN(shapes_, infer_shapes(task_));
  std::vector<std::string> used, init_args, ctor_lines;
  // The constructor's body names a size by the parameter that receives it, where one does.
  std::map<std::string, std::string> globals = symbol_py_;
  if (task_.kernelbench_constructor)
    for (const auto& [sym, name] : constructor_names()) symbol_py_[sym] = name;
  for (const auto& m : task_.modules) {
    VINCI_ASSIGN_OR_RETURN(std::string ctor, module_ctor(m, &used));
    if (m.kind() == ModuleType::kBuffer)
      ctor_lines.push_back("        self.register_buffer(\"" + module_py_.at(m.name) + "\", " + ctor + ")\n");
    else
      ctor_lines.push_back("        self." + module_py_.at(m.name) + " = " + ctor + "\n");
  }
  symbol_py_ = globals;
  std::set<std::string> seen;
  for (const auto& s : used)
    if (seen.insert(s).second) init_args.push_back(symbol_py_.at(s));
  VINCI_ASSIGN_OR_RETURN(std::string forward, forward_body());
  auto out_it = value_py_.find(task_.output);
  if (out_it == value_py_.end()) return invalid_argument(where_ + ": output '" + task_.output + "' is not defined");

  std::vector<std::string> in_names;
  std::string draws;
  for (const auto& in : task_.inputs) {
    in_names.push_back(value_py_.at(in.name));
    VINCI_ASSIGN_OR_RETURN(std::string d, input_draw(in));
    draws += "    " + value_py_.at(in.name) + " = " + d + "\n";
    draws += input_post(in, value_py_.at(in.name));
  }
  std::string s =
      uses_math_ ? "import math\n\nimport torch\nimport torch.nn as nn\n" : "import torch\nimport torch.nn as nn\n";
  if (uses_f_) s += "import torch.nn.functional as F\n";
  for (const auto& [name, text] : {std::pair<const char*, const char*>{"relative_coords_log", kRelativeCoordsLog},
                                   {"shifted_window_mask", kShiftedWindowMask},
                                   {"relative_position_bias", kRelativePositionBias}})
    if (helpers_.count(name)) s += std::string("\n\n") + text;
  s += "\n\nclass Model(nn.Module):\n" + docstring(task_.description) + "\n";
  std::vector<std::string> params = {"self"};
  if (task_.kernelbench_constructor) {
    // KernelBench's constructor, so that a module written for the problem file is built here as
    // KernelBench builds it; the body reads a size from its parameter (constructor_names) or else
    // from the module's globals below.
    if (!task_.kernelbench_signature.empty()) params.push_back(task_.kernelbench_signature);
    init_args.clear();
    for (const auto& item : task_.kernelbench_init) {
      VINCI_ASSIGN_OR_RETURN(std::string text, init_item_py(item));
      init_args.push_back(std::move(text));
    }
  } else {
    params.insert(params.end(), init_args.begin(), init_args.end());
  }
  s += "    def __init__(" + join(params, ", ") + "):\n";
  s += "        super().__init__()\n";
  for (const auto& l : ctor_lines) s += l;
  for (const auto& m : task_.modules) {  // the constructor's re-initialisation, in module order
    if (!m.attrs.contains("reinit")) continue;
    std::string self = "self." + module_py_.at(m.name);
    std::string how = m.attrs["reinit"].is_string() ? m.attrs["reinit"].get<std::string>() : "";
    if (how == "kaiming_normal_fan_out") {
      s += "        nn.init.kaiming_normal_(" + self + ".weight, mode=\"fan_out\")\n";
    } else if (how == "normal") {
      s += "        nn.init.normal_(" + self + ".weight, 0, " + py_float(attr_double_or(m.attrs, "reinit_std", 1.0)) +
           ")\n";
    } else {
      return invalid_argument(where_ + ": module '" + m.name + "' key 'reinit': no rendering for " +
                              m.attrs["reinit"].dump());
    }
    if (attr_bool_or(m.attrs, "bias", true)) s += "        nn.init.zeros_(" + self + ".bias)\n";
  }
  s += "\n    def forward(self" + (in_names.empty() ? "" : ", " + join(in_names, ", ")) + "):\n";
  s += forward + "        return " + out_it->second + "\n\n\n";
  for (const auto& sym : symbols_) s += symbol_py_.at(sym) + " = " + std::to_string(sizes_.at(sym)) + "\n";
  s += "\n\ndef get_inputs():\n" + draws + "    return [" + join(in_names, ", ") + "]\n";
  s += "\n\ndef get_init_inputs():\n    return [" + join(init_args, ", ") + "]\n";
  return s;
}

// "[B, (H - 2)/2 + 1]": the shape rules' sums of negative constants read as subtractions.
std::string shape_text(const std::vector<std::string>& dims) {
  std::string s = "[" + join(dims, ", ") + "]";
  for (size_t p = s.find("+ -"); p != std::string::npos; p = s.find("+ -")) s.replace(p, 3, "- ");
  return s;
}

// "[B, In] = [1024, 8192]", or the symbolic shape alone where it does not resolve.
std::string shapes_text(const SymShape& shape, const SizeMap& sizes) {
  if (shape.empty()) return "[] (a scalar)";
  Result<std::vector<int64_t>> v = eval_shape(shape, sizes);
  if (!v.ok()) return shape_text(shape);
  std::vector<std::string> concrete;
  for (int64_t d : *v) concrete.push_back(std::to_string(d));
  return shape_text(shape) + " = " + shape_text(concrete);
}

std::string domain_text(const InputSpec& in) {
  switch (in.domain) {
    case InputDomain::kReal: return "float32";
    case InputDomain::kPositive: return "float32, > 0";
    case InputDomain::kProbability: return "float32, rows on the last dim sum to 1";
    case InputDomain::kIndex: return "int64 in [0, " + in.classes + ")";
    case InputDomain::kSign: return "float32, +1 or -1";
    case InputDomain::kSymmetric: return "float32, a symmetric matrix";
    case InputDomain::kUpperTriangular: return "float32, upper triangular (zero below the diagonal)";
    case InputDomain::kLowerTriangular: return "float32, lower triangular (zero above the diagonal)";
  }
  return "float32";
}

}  // namespace

Result<std::string> task_as_pytorch(const Task& task, SizeName size) {
  auto it = task.sizes.find(size_name(size));
  if (it == task.sizes.end()) return invalid_argument("task '" + task.id + "' has no size '" + size_name(size) + "'");
  // F is reserved only where the file imports it, so a size named F (a feed-forward width)
  // keeps its name in tasks that need no functional call.
  PyRenderer with_f(task, it->second, true);
  VINCI_ASSIGN_OR_RETURN(std::string text, with_f.render());
  if (with_f.uses_functional()) return text;
  PyRenderer without_f(task, it->second, false);
  return without_f.render();
}

std::string task_prompt_header(const Task& task, SizeName size) {
  const SizeMap& sizes = task.size_map(size);
  std::string s = "Task " + task.id + ": " + task.name + " (level " + std::to_string(task.level) + ", " +
                  task.family_name() + ")\n" + task.description + "\n";
  std::vector<std::string> sz;
  for (const auto& sym : symbol_order(task, sizes)) sz.push_back(sym + " = " + std::to_string(sizes.at(sym)));
  s += "Sizes (" + std::string(size_name(size)) + "): " + join(sz, ", ") + "\n";
  for (const auto& in : task.inputs)
    s += "Input " + in.name + ": " + shapes_text(in.shape, sizes) + ", " + domain_text(in) + "\n";
  Result<ShapeMap> shapes = infer_shapes(task);
  std::string out_shape = "unknown shape";
  if (shapes.ok() && shapes->count(task.output)) out_shape = shapes_text(shapes->at(task.output), sizes);
  bool index_output = false;
  for (const auto& op : task.ops)
    for (const auto& o : op.outputs)
      if (o == task.output) index_output = op_outputs_indices(op.op);
  s += "Output " + task.output + ": " + out_shape + (index_output ? ", int64 (indices)\n" : ", float32\n");
  bool index_inputs = false;
  for (const auto& in : task.inputs) index_inputs |= in.domain == InputDomain::kIndex;
  s += std::string("dtype: float32") + (index_inputs ? " (index inputs int64)" : "") +
       "; tolerance: atol = " + py_float(task.atol) + ", rtol = " + py_float(task.rtol) + "\n";
  s += "Correctness is checked on inputs drawn as get_inputs() draws them (torch.rand: U[0, 1)) and on "
       "signed U[-1, 1) and heavy-tailed draws (inputs with a domain stay in it), so a kernel may not "
       "assume non-negative inputs.\n";
  return s;
}

}  // namespace vinci
