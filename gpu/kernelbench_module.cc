#include "gpu/kernelbench_module.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstring>
#include <map>
#include <set>
#include <unordered_map>

#include "core/text.h"
#include "gpu/fenced_blocks.h"

namespace vinci {
namespace {

// Messages and flags quote what a model wrote in part: a 100 KiB name is cut here.
constexpr size_t kMaxQuote = 80;
// Items a message or flag lists before "and N more".
constexpr size_t kMaxListed = 8;
// As gpu/model_plan.cc: a longer message is cut.
constexpr size_t kMaxMessage = 2000;
// Tokens read of one class statement's base list, and C++ tokens read after __global__ looking
// for the function's name: far more than a real declaration takes (`__global__ void
// __launch_bounds__(256, 2) name(` is 10), and they keep hostile text (thousands of `class A(`
// never closed) linear.
constexpr size_t kMaxBaseTokens = 256;
constexpr size_t kMaxDeclarationTokens = 64;

constexpr const char* kModelNew = "ModelNew";

bool is_ident_start(char c) {
  auto u = static_cast<unsigned char>(c);
  return std::isalpha(u) || c == '_' || u >= 0x80;  // Python names may hold any Unicode letter
}
bool is_ident_char(char c) { return is_ident_start(c) || std::isdigit(static_cast<unsigned char>(c)); }

bool starts_with(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }
bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}
// chain is name or an attribute of it: within("torch.cuda.Event", "torch.cuda").
bool within(std::string_view chain, std::string_view name) {
  return starts_with(chain, name) && (chain.size() == name.size() || chain[name.size()] == '.');
}

// At most kMaxQuote bytes of s, each outside printable ASCII written '?': messages and flags are
// stored as JSON and read by people, whatever bytes a model sent.
std::string printable(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size() && i < kMaxQuote; ++i) {
    auto u = static_cast<unsigned char>(s[i]);
    out += u >= 0x20 && u < 0x7f ? s[i] : '?';
  }
  if (s.size() > kMaxQuote) out += "...";
  return out;
}

std::string listed(const std::vector<std::string>& items) {
  std::string out;
  for (size_t i = 0; i < items.size() && i < kMaxListed; ++i) out += (i ? ", " : "") + items[i];
  if (items.size() > kMaxListed) out += ", and " + std::to_string(items.size() - kMaxListed) + " more";
  return out;
}

// Distinct items in order of first appearance, each made printable.
class FoundList {
 public:
  void add(std::string_view item) {
    std::string p = printable(item);
    if (seen_.insert(p).second) items_.push_back(std::move(p));
  }
  bool empty() const { return items_.empty(); }
  const std::vector<std::string>& items() const { return items_; }

 private:
  std::set<std::string> seen_;
  std::vector<std::string> items_;
};

// ---------------------------------------------------------------------------------------------
// Python lexing: code told from comments and strings

enum class PyKind : uint8_t { kName, kNumber, kString, kOp };

struct PyToken {
  PyKind kind = PyKind::kOp;
  std::string_view text;         // as written; a string with its prefix and quotes
  std::string_view body;         // a string's contents between its quotes
  size_t line = 0;               // 1-based
  size_t column = 0;             // bytes from the start of its line
  bool statement_start = false;  // the first token of a logical line
};

bool is_op(const PyToken& t, std::string_view op) { return t.kind == PyKind::kOp && t.text == op; }
bool is_word(const PyToken& t, std::string_view w) { return t.kind == PyKind::kName && t.text == w; }
bool opens(const PyToken& t) { return t.kind == PyKind::kOp && t.text.size() == 1 && std::strchr("([{", t.text[0]); }
bool closes(const PyToken& t) { return t.kind == PyKind::kOp && t.text.size() == 1 && std::strchr(")]}", t.text[0]); }

// The string prefixes Python takes, in any case.
bool is_string_prefix(std::string_view p) {
  static const std::set<std::string> kPrefixes = {"r", "u", "b", "f", "t", "br", "rb", "fr", "rf", "tr", "rt"};
  std::string lower;
  for (char c : p) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return kPrefixes.count(lower) > 0;
}

// Tokens of Python source, comments dropped. Logical lines end at a newline outside brackets and
// not after a backslash. An unterminated string ends at its line's end (one quote) or at the end
// of the text (three), as far as Python would have read before reporting it.
class PyLexer {
 public:
  explicit PyLexer(std::string_view s) : s_(s) {}

  std::vector<PyToken> run() {
    std::vector<PyToken> out;
    size_t depth = 0;
    bool at_start = true;
    if (starts_with(s_, "\xEF\xBB\xBF")) i_ = line_start_ = 3;  // a UTF-8 byte order mark
    while (i_ < s_.size()) {
      char c = s_[i_];
      if (c == '\n') {
        newline(i_++);
        at_start = at_start || depth == 0;
        continue;
      }
      if (c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v' || c == '\0') {
        ++i_;
        continue;
      }
      if (c == '#') {
        while (i_ < s_.size() && s_[i_] != '\n') ++i_;
        continue;
      }
      if (c == '\\') {  // explicit line joining: the next line continues this one
        ++i_;
        if (i_ < s_.size() && s_[i_] == '\r') ++i_;
        if (i_ < s_.size() && s_[i_] == '\n') newline(i_++);
        continue;
      }
      PyToken t;
      t.line = line_;
      t.column = i_ - line_start_;
      t.statement_start = at_start;
      at_start = false;
      size_t start = i_, word_end = i_;
      while (word_end < s_.size() && (word_end == i_ ? is_ident_start(s_[word_end]) : is_ident_char(s_[word_end])))
        ++word_end;
      bool quote_after = word_end < s_.size() && (s_[word_end] == '"' || s_[word_end] == '\'');
      if (c == '"' || c == '\'') {
        t.kind = PyKind::kString;
        i_ = string_end(i_, &t.body);
      } else if (quote_after && word_end - i_ <= 2 && is_string_prefix(s_.substr(i_, word_end - i_))) {
        t.kind = PyKind::kString;
        i_ = string_end(word_end, &t.body);
      } else if (word_end > i_) {
        t.kind = PyKind::kName;
        i_ = word_end;
      } else if (std::isdigit(static_cast<unsigned char>(c)) ||
                 (c == '.' && i_ + 1 < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_ + 1])))) {
        t.kind = PyKind::kNumber;
        for (++i_; i_ < s_.size(); ++i_) {
          char d = s_[i_];
          bool exp_sign = (d == '+' || d == '-') && (s_[i_ - 1] == 'e' || s_[i_ - 1] == 'E');
          if (!is_ident_char(d) && d != '.' && !exp_sign) break;
        }
      } else {
        t.kind = PyKind::kOp;
        i_ += op_length();  // no operator of two or three bytes starts with a bracket
        if (c == '(' || c == '[' || c == '{') ++depth;
        if ((c == ')' || c == ']' || c == '}') && depth > 0) --depth;
      }
      t.text = s_.substr(start, i_ - start);
      out.push_back(t);
    }
    return out;
  }

 private:
  void newline(size_t at) {
    ++line_;
    line_start_ = at + 1;
  }

  size_t op_length() const {
    static const char* const kOps[] = {"**=", "//=", ">>=", "<<=", "...", "**", "//", ">>", "<<", "<=", ">=", "==",
                                       "!=",  "->",  ":=",  "+=",  "-=",  "*=", "/=", "%=", "&=", "|=", "^=", "@="};
    for (const char* op : kOps)
      if (starts_with(s_.substr(i_), op)) return std::strlen(op);
    return 1;
  }

  // The string whose opening quote is at q: where it ends, and its contents in *body. A
  // backslash keeps the next byte in the string, as in raw strings too (r"\"" is one string).
  size_t string_end(size_t q, std::string_view* body) {
    const size_t n = s_.size();
    const char quote = s_[q];
    const bool triple = q + 2 < n && s_[q + 1] == quote && s_[q + 2] == quote;
    const size_t begin = q + (triple ? 3 : 1);
    size_t k = begin;
    while (k < n) {
      char d = s_[k];
      if (d == '\\') {
        if (k + 1 < n && s_[k + 1] == '\n') newline(k + 1);
        if (k + 2 < n && s_[k + 1] == '\r' && s_[k + 2] == '\n') {
          newline(k + 2);
          ++k;
        }
        k += 2;
        continue;
      }
      if (d == quote && (!triple || (k + 2 < n && s_[k + 1] == quote && s_[k + 2] == quote))) {
        *body = s_.substr(begin, k - begin);
        return k + (triple ? 3 : 1);
      }
      if (d == '\n') {
        if (!triple) break;  // the newline is left for the caller's line count
        newline(k);
      }
      ++k;
    }
    k = std::min(k, n);
    *body = s_.substr(begin, k - begin);
    return k;
  }

  std::string_view s_;
  size_t i_ = 0, line_ = 1, line_start_ = 0;
};

// A dotted name as written, `torch.cuda.synchronize`: tokens [begin, end).
struct Chain {
  std::string text;
  size_t begin = 0, end = 0;
};

// The dotted name starting at name token i, read no further than token limit.
Chain read_chain(const std::vector<PyToken>& t, size_t i, size_t limit) {
  Chain c{std::string(t[i].text), i, i + 1};
  limit = std::min(limit, t.size());
  while (c.end + 1 < limit && is_op(t[c.end], ".") && t[c.end + 1].kind == PyKind::kName) {
    c.text += '.';
    c.text += t[c.end + 1].text;
    c.end += 2;
  }
  return c;
}

// ---------------------------------------------------------------------------------------------
// What a module's text holds, in one pass over its tokens

struct ClassStatement {
  std::string_view name;
  size_t token = 0, line = 0, column = 0;
  bool has_bases = false;          // `class NAME(`
  std::vector<std::string> bases;  // the bases that are dotted names, as written
};

struct ModuleFacts {
  std::vector<PyToken> toks;
  // How often each name occurs in code, and each C++ word in strings (comments skipped).
  std::unordered_map<std::string_view, size_t> uses;
  std::vector<ClassStatement> classes;
  bool load_call = false;                 // load_inline(...) or cpp_extension's load(...)
  bool source_global = false;             // a string holds a __global__ function
  bool triton_jit = false;                // a function is decorated triton.jit
  bool tl_use = false;                    // code uses tl. (triton.language)
  std::vector<std::string_view> kernels;  // __global__ and @triton.jit functions, in order
  std::vector<size_t> try_lines;
  FoundList torch_ops, host, timing, concurrency, lazy, dynamic;
};

// A chain matches a pattern when it is the pattern's name or an attribute of it; a call pattern
// matches only `name(` itself.
struct Pattern {
  const char* name;
  bool call;
};

constexpr Pattern kHostPatterns[] = {
    {"os.environ", false}, {"environ", false},  {"os.getenv", false},  {"getenv", true},  {"os.putenv", false},
    {"os.system", false},  {"os.popen", false}, {"subprocess", false}, {"open", true},    {"io.open", false},
    {"torch.load", true},  {"shutil", false},   {"socket", false},     {"urllib", false}, {"requests", false}};
constexpr Pattern kConcurrencyPatterns[] = {{"threading", false},
                                            {"_thread", false},
                                            {"multiprocessing", false},
                                            {"torch.multiprocessing", false},
                                            {"concurrent.futures", false},
                                            {"ThreadPoolExecutor", false},
                                            {"ProcessPoolExecutor", false},
                                            {"torch.cuda.Stream", false},
                                            {"torch.cuda.stream", false},
                                            {"torch.cuda.ExternalStream", false},
                                            {"torch.cuda.set_stream", false},
                                            {"torch.Stream", false},
                                            {"cuda.Stream", false},
                                            {"cuda.stream", false}};
constexpr Pattern kDynamicPatterns[] = {
    {"exec", true}, {"eval", true}, {"compile", true}, {"__import__", true}, {"importlib", false}};

// PyTorch computation ops called as torch.NAME: matmul and convolution families, pooling,
// activations, normalisations, softmax, reductions and scans, pointwise math, losses, distances.
const std::set<std::string_view>& torch_ops() {
  // clang-format off
  static const std::set<std::string_view> kOps = {
      "mm", "bmm", "matmul", "einsum", "addmm", "addbmm", "baddbmm", "addmv", "mv", "dot", "vdot", "inner",
      "outer", "tensordot", "kron", "chain_matmul", "linear", "bilinear", "conv1d", "conv2d", "conv3d",
      "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "convolution", "avg_pool1d", "avg_pool2d",
      "avg_pool3d", "max_pool1d", "max_pool2d", "max_pool3d", "adaptive_avg_pool1d", "adaptive_avg_pool2d",
      "adaptive_avg_pool3d", "adaptive_max_pool1d", "adaptive_max_pool2d", "adaptive_max_pool3d", "relu",
      "relu_", "relu6", "gelu", "silu", "selu", "celu", "elu", "mish", "sigmoid", "tanh", "hardtanh",
      "hardsigmoid", "hardswish", "leaky_relu", "prelu", "rrelu", "softplus", "softsign", "logsigmoid",
      "threshold", "softmax", "log_softmax", "softmin", "batch_norm", "layer_norm", "group_norm",
      "instance_norm", "rms_norm", "local_response_norm", "norm", "renorm", "normalize", "sum", "mean",
      "prod", "amax", "amin", "max", "min", "argmax", "argmin", "logsumexp", "cumsum", "cumprod", "cummax",
      "cummin", "var", "std", "var_mean", "std_mean", "median", "topk", "sort", "argsort", "exp", "exp2",
      "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "pow", "square", "abs", "neg", "reciprocal",
      "sign", "erf", "erfc", "sin", "cos", "tan", "atan", "clamp", "clamp_min", "clamp_max", "clip",
      "maximum", "minimum", "where", "add", "sub", "mul", "div", "true_divide", "floor_divide", "remainder",
      "fmod", "lerp", "addcmul", "addcdiv", "tril", "triu", "diag", "cross", "cross_entropy", "nll_loss",
      "kl_div", "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "binary_cross_entropy",
      "hinge_embedding_loss", "margin_ranking_loss", "triplet_margin_loss", "cosine_embedding_loss",
      "cosine_similarity", "pairwise_distance", "cdist", "dist", "dropout", "embedding",
      "scaled_dot_product_attention"};
  // clang-format on
  return kOps;
}

// The chain as a computation op when a call of it is one, else empty.
std::string_view torch_op(std::string_view x) {
  static const std::set<std::string_view> kStructural = {"Module",     "ModuleList",    "ModuleDict",
                                                         "Parameter",  "ParameterList", "ParameterDict",
                                                         "Sequential", "Identity",      "Buffer"};
  for (std::string_view p : {"F.", "nn.functional.", "torch.nn.functional.", "torch.linalg.", "torch.fft.",
                             "torch.special.", "torch.ops.aten."})
    if (starts_with(x, p) && x.size() > p.size()) return x;
  for (std::string_view p : {"nn.", "torch.nn."}) {
    if (!starts_with(x, p)) continue;
    std::string_view layer = x.substr(p.size());
    bool compute = !layer.empty() && std::isupper(static_cast<unsigned char>(layer[0])) &&
                   layer.find('.') == std::string_view::npos && !kStructural.count(layer);
    return compute ? x : std::string_view();
  }
  if (starts_with(x, "torch.") && torch_ops().count(x.substr(6))) return x;
  return {};
}

bool is_timing_target(std::string_view x) {
  for (std::string_view p : {"torch.cuda.", "cuda.", "time.", "triton.testing."})
    if (starts_with(x, p) && x.size() > p.size()) return true;
  return false;
}

// C++ attributes that take a parenthesised argument between __global__ and the function's name.
bool is_cuda_attribute(std::string_view w) {
  return w == "__launch_bounds__" || w == "__attribute__" || w == "__declspec" || w == "alignas" ||
         w == "__cluster_dims__" || w == "__maxnreg__";
}

class ModuleScanner {
 public:
  explicit ModuleScanner(std::string_view source) { f_.toks = PyLexer(source).run(); }

  ModuleFacts run() {
    const std::vector<PyToken>& t = f_.toks;
    for (size_t i = 0; i < t.size(); ++i) {
      if (t[i].statement_start) statement(i);
      if (t[i].kind == PyKind::kString) source_string(t[i].body);
      if (t[i].kind == PyKind::kName) name(i);
      if ((is_op(t[i], "@") || is_op(t[i], "@=")) && !t[i].statement_start) f_.torch_ops.add("@");
    }
    std::sort(f_.try_lines.begin(), f_.try_lines.end());
    f_.try_lines.erase(std::unique(f_.try_lines.begin(), f_.try_lines.end()), f_.try_lines.end());
    return std::move(f_);
  }

 private:
  // Decorators and the function they decorate (Triton kernels), try statements.
  void statement(size_t i) {
    const std::vector<PyToken>& t = f_.toks;
    if (is_op(t[i], "@")) {
      if (i + 1 < t.size() && t[i + 1].kind == PyKind::kName && read_chain(t, i + 1, t.size()).text == "triton.jit")
        jit_pending_ = true;
      return;
    }
    size_t def = (is_word(t[i], "async") && i + 1 < t.size()) ? i + 1 : i;
    if (is_word(t[def], "def")) {
      if (jit_pending_ && def + 1 < t.size() && t[def + 1].kind == PyKind::kName) {
        f_.triton_jit = true;
        f_.kernels.push_back(t[def + 1].text);
      }
      jit_pending_ = false;
      return;
    }
    jit_pending_ = false;
    if (is_word(t[i], "try") && i + 1 < t.size() && is_op(t[i + 1], ":")) f_.try_lines.push_back(t[i].line);
  }

  void name(size_t i) {
    const std::vector<PyToken>& t = f_.toks;
    std::string_view w = t[i].text;
    ++f_.uses[w];
    if (w == "_make_subclass" || w == "__torch_function__" || w == "__torch_dispatch__") f_.lazy.add(w);
    if (i > 0 && is_op(t[i - 1], ".")) {  // an attribute of an expression: x.wait_stream(s)
      if (w == "wait_stream" || w == "record_stream") f_.concurrency.add("." + std::string(w));
      return;
    }
    if (w == "class" && (t[i].statement_start || t[i].column == 0) && i + 1 < t.size() &&
        t[i + 1].kind == PyKind::kName)
      class_statement(i);
    chain(read_chain(t, i, t.size()));
  }

  void chain(const Chain& c) {
    const std::vector<PyToken>& t = f_.toks;
    const std::string& x = c.text;
    bool call = c.end < t.size() && is_op(t[c.end], "(");
    bool assign = c.end < t.size() && is_op(t[c.end], "=");
    if (call &&
        (x == "load_inline" || ends_with(x, ".load_inline") || x == "load" || ends_with(x, "cpp_extension.load")))
      f_.load_call = true;
    if (starts_with(x, "tl.") || starts_with(x, "triton.language.")) f_.tl_use = true;
    if (call && !torch_op(x).empty()) f_.torch_ops.add(x);
    if (call && (x == "suppress" || x == "contextlib.suppress")) f_.try_lines.push_back(t[c.begin].line);
    auto match = [&](const Pattern& p) { return p.call ? call && x == p.name : within(x, p.name); };
    for (const Pattern& p : kHostPatterns)
      if (match(p)) f_.host.add(p.name);
    for (const Pattern& p : kConcurrencyPatterns)
      if (match(p)) f_.concurrency.add(p.name);
    for (const Pattern& p : kDynamicPatterns)
      if (match(p)) f_.dynamic.add(p.name);
    if (assign && is_timing_target(x)) f_.timing.add(x);
    if (call && x == "setattr") setattr_target(c.end + 1);
    if (within(x, "torch.Tensor.__new__")) f_.lazy.add("torch.Tensor.__new__");
  }

  // setattr(TARGET, "attr", ...) where TARGET is a timing module: what it patches.
  void setattr_target(size_t i) {
    const std::vector<PyToken>& t = f_.toks;
    if (i >= t.size() || t[i].kind != PyKind::kName) return;
    Chain target = read_chain(t, i, t.size());
    bool timing = false;
    for (std::string_view m : {"torch.cuda", "cuda", "time", "triton.testing"})
      timing = timing || within(target.text, m);
    if (!timing) return;
    if (target.end + 1 < t.size() && is_op(t[target.end], ",") && t[target.end + 1].kind == PyKind::kString)
      target.text += "." + std::string(t[target.end + 1].body);
    f_.timing.add(target.text);
  }

  void class_statement(size_t i) {
    const std::vector<PyToken>& t = f_.toks;
    ClassStatement c;
    c.name = t[i + 1].text;
    c.token = i;
    c.line = t[i].line;
    c.column = t[i].column;
    c.has_bases = i + 2 < t.size() && is_op(t[i + 2], "(");
    size_t limit = std::min(t.size(), i + 2 + kMaxBaseTokens);
    size_t depth = 0;
    for (size_t j = i + 2; c.has_bases && j < limit; ++j) {
      if (opens(t[j])) ++depth;
      if (closes(t[j]) && --depth == 0) break;
      if (depth != 1 || t[j].kind != PyKind::kName || !(is_op(t[j - 1], "(") || is_op(t[j - 1], ","))) continue;
      Chain base = read_chain(t, j, limit);
      if (base.end < limit && (is_op(t[base.end], ",") || is_op(t[base.end], ")"))) c.bases.push_back(base.text);
      j = base.end - 1;
    }
    for (const std::string& b : c.bases)
      if (b == "torch.Tensor" || b == "Tensor") f_.lazy.add("class " + std::string(c.name) + "(" + b + ")");
    f_.classes.push_back(std::move(c));
  }

  // A string read as C++ source (what load_inline compiles): its words counted, its __global__
  // functions named, what it reaches for noted. Comments are skipped; so are escapes, so that the
  // two bytes \n of a one-line Python string end a // comment and start no word.
  void source_string(std::string_view s) {
    bool declaration = false;  // after __global__, before the function's name and '('
    std::string_view last;     // the declaration's last word outside an attribute's parentheses
    size_t attribute_depth = 0, budget = 0;
    for (size_t k = 0; k < s.size();) {
      char c = s[k];
      if (c == '\\') {
        k += 2;
      } else if (c == '/' && k + 1 < s.size() && s[k + 1] == '/') {
        while (k < s.size() && s[k] != '\n' && !(s[k] == '\\' && k + 1 < s.size() && s[k + 1] == 'n')) ++k;
      } else if (c == '/' && k + 1 < s.size() && s[k + 1] == '*') {
        size_t e = s.find("*/", k + 2);
        k = e == std::string_view::npos ? s.size() : e + 2;
      } else if (is_ident_start(c) || std::isdigit(static_cast<unsigned char>(c))) {
        size_t b = k;
        while (k < s.size() && is_ident_char(s[k])) ++k;
        if (std::isdigit(static_cast<unsigned char>(c))) continue;  // a number, 0x1f is no word
        std::string_view w = s.substr(b, k - b);
        source_word(w, b >= 5 && s.substr(b - 5, 5) == "std::");
        if (w == "__global__") {
          f_.source_global = declaration = true;
          last = {};
          attribute_depth = 0;
          budget = kMaxDeclarationTokens;
        } else if (declaration && (budget-- == 0)) {
          declaration = false;
        } else if (declaration && attribute_depth == 0) {
          last = w;
        }
      } else {
        ++k;
        if (!declaration || c == ' ' || c == '\t' || c == '\n' || c == '\r') continue;
        if (budget-- == 0) {
          declaration = false;
        } else if (c == '(' && attribute_depth > 0) {
          ++attribute_depth;
        } else if (c == '(' && is_cuda_attribute(last)) {
          attribute_depth = 1;
        } else if (c == '(') {
          if (!last.empty()) f_.kernels.push_back(last);
          declaration = false;
        } else if (c == ')' && attribute_depth > 0) {
          --attribute_depth;
        } else if ((c == ';' || c == '{' || c == '}') && attribute_depth == 0) {
          declaration = false;
        }
      }
    }
  }

  void source_word(std::string_view w, bool after_std) {
    ++f_.uses[w];
    static const std::set<std::string_view> kHost = {"getenv",   "secure_getenv", "fopen",  "popen",
                                                     "ifstream", "ofstream",      "fstream"};
    static const std::set<std::string_view> kStreams = {"cudaStreamCreate", "cudaStreamCreateWithFlags",
                                                        "cudaStreamCreateWithPriority", "getStreamFromPool"};
    if (kHost.count(w)) f_.host.add(std::string(w) + " (CUDA source)");
    if (kStreams.count(w)) f_.concurrency.add(std::string(w) + " (CUDA source)");
    if (w == "thread" && after_std) f_.concurrency.add("std::thread (CUDA source)");
  }

  ModuleFacts f_;
  bool jit_pending_ = false;  // decorators so far include triton.jit
};

// ---------------------------------------------------------------------------------------------
// Flags

std::string lines_detail(const std::vector<size_t>& lines) {
  std::vector<std::string> s;
  for (size_t l : lines) s.push_back(std::to_string(l));
  return (lines.size() == 1 ? "line " : "lines ") + listed(s);
}

// The last top-level class statement named name, or null.
const ClassStatement* last_class(const ModuleFacts& f, std::string_view name) {
  const ClassStatement* found = nullptr;
  for (const ClassStatement& c : f.classes)
    if (c.column == 0 && c.name == name) found = &c;
  return found;
}

// Whether the class's body (up to the next top-level statement) defines or assigns forward.
bool defines_forward(const ModuleFacts& f, const ClassStatement& c) {
  const std::vector<PyToken>& t = f.toks;
  for (size_t j = c.token + 1; j + 1 < t.size() && !(t[j].statement_start && t[j].column == 0); ++j) {
    if (is_word(t[j], "def") && is_word(t[j + 1], "forward")) return true;
    if (t[j].statement_start && is_word(t[j], "forward") && is_op(t[j + 1], "=")) return true;
  }
  return false;
}

// "ModelNew(Base), Base(Model)" when ModelNew derives from the reference Model, else empty.
std::string reference_chain(const ModuleFacts& f) {
  std::set<std::string> derived = {"Model"};
  std::map<std::string, std::string> base_of;
  for (const ClassStatement& c : f.classes) {
    if (c.column != 0 || c.name == "Model") continue;
    std::string name(c.name);
    base_of.erase(name);
    derived.erase(name);
    for (const std::string& b : c.bases) {
      if (!derived.count(b.substr(b.rfind('.') + 1))) continue;
      derived.insert(name);
      base_of[name] = b;
      break;
    }
  }
  const ClassStatement* model_new = last_class(f, kModelNew);
  if (!model_new || !derived.count(kModelNew)) return "";
  std::vector<std::string> steps;
  std::set<std::string> seen;
  for (std::string cur = kModelNew; base_of.count(cur) && seen.insert(cur).second;) {
    const std::string& base = base_of[cur];
    steps.push_back(printable(cur) + "(" + printable(base) + ")");
    cur = base.substr(base.rfind('.') + 1);
  }
  return listed(steps) + (defines_forward(f, *model_new) ? "" : ", no forward of its own");
}

std::string missing_backend(const ModuleFacts& f, ModuleBackend expected) {
  if (expected == ModuleBackend::kCuda && !f.source_global) return "cuda (no __global__ kernel in a source string)";
  if (expected == ModuleBackend::kCuda && !f.load_call) return "cuda (no load_inline call)";
  if (expected == ModuleBackend::kTriton && !f.triton_jit) return "triton (no @triton.jit function)";
  if (expected == ModuleBackend::kTriton && !f.tl_use) return "triton (no tl. operation)";
  return "";
}

// A class statement `class ModelNew` at column 0 in code.
bool defines_model_new(std::string_view text) { return last_class(ModuleScanner(text).run(), kModelNew) != nullptr; }

std::string cut_message(std::string m) {
  if (m.size() <= kMaxMessage) return m;
  size_t cut = kMaxMessage;
  while (cut > 0 && (static_cast<unsigned char>(m[cut]) & 0xC0) == 0x80) --cut;  // not inside a UTF-8 character
  return m.substr(0, cut) + "...";
}

}  // namespace

const char* module_backend_name(ModuleBackend b) {
  switch (b) {
    case ModuleBackend::kCuda: return "cuda";
    case ModuleBackend::kTriton: return "triton";
    case ModuleBackend::kTorch: return "torch";
  }
  return "torch";
}

Result<ModuleBackend> parse_module_backend(const std::string& name) {
  for (ModuleBackend b : {ModuleBackend::kCuda, ModuleBackend::kTriton, ModuleBackend::kTorch})
    if (name == module_backend_name(b)) return b;
  return invalid_argument("unknown module backend '" + printable(name) + "': expected cuda, triton or torch");
}

namespace {

Result<std::string> find_module_answer(std::string_view reply) {
  if (size_t bad = first_invalid_utf8(reply); bad != std::string_view::npos)
    return invalid_argument("reply: byte " + std::to_string(bad) + " is not valid UTF-8");
  LineIndex lines(reply);
  Result<std::vector<FencedBlock>> blocks = find_fenced_blocks(lines);
  if (!blocks.ok()) return invalid_argument(cut_message(blocks.status().message()));
  if (blocks->empty()) {
    if (defines_model_new(reply)) return std::string(reply);
    return invalid_argument(
        "the reply holds no ```python block defining class ModelNew (found no fenced block): write the whole "
        "module, with class ModelNew(nn.Module), in one ```python block");
  }
  static const std::set<std::string> kPython = {"python", "py", "python3"};
  const FencedBlock* module = nullptr;
  const FencedBlock* mislabelled = nullptr;
  std::vector<std::string> found;
  for (const FencedBlock& b : *blocks) {
    bool python = kPython.count(b.info) > 0;
    bool defines = defines_model_new(reply.substr(b.begin, b.end - b.begin));
    if (python && defines) {
      module = &b;
      continue;
    }
    if (defines) mislabelled = &b;
    found.push_back("```" + printable(b.info) + " at line " + std::to_string(b.open_line) +
                    (python ? " (no class ModelNew)" : ""));
  }
  if (module) return std::string(reply.substr(module->begin, module->end - module->begin));
  std::string m = "the reply holds no ```python block defining class ModelNew (found: " + listed(found) + ")";
  if (mislabelled)
    return invalid_argument(m + ": the ```" + printable(mislabelled->info) + " block at line " +
                            std::to_string(mislabelled->open_line) + " defines it: label it ```python");
  return invalid_argument(m + ": write the whole module, with class ModelNew(nn.Module), in one ```python block");
}

}  // namespace

Result<std::string> extract_module_answer(std::string_view reply) {
  // What is returned is a candidate as far as text tells (a NUL byte in the block, say, is not).
  VINCI_ASSIGN_OR_RETURN(std::string module, find_module_answer(reply));
  Status source = check_module_source(module);
  if (!source.ok()) return invalid_argument("the module: " + source.message());
  return module;
}

Status check_module_source(std::string_view source) {
  LineIndex lines(source);
  auto line = [&](size_t off) { return "line " + std::to_string(lines.line_of(off)) + ": "; };
  if (size_t nul = source.find('\0'); nul != std::string_view::npos)
    return invalid_argument(line(nul) + "byte " + std::to_string(nul) +
                            " is a NUL byte, which Python source cannot hold");
  if (size_t bad = first_invalid_utf8(source); bad != std::string_view::npos)
    return invalid_argument(line(bad) + "byte " + std::to_string(bad) + " is not valid UTF-8");
  ModuleFacts f = ModuleScanner(source).run();
  const ClassStatement* without_bases = nullptr;
  const ClassStatement* indented = nullptr;
  for (const ClassStatement& c : f.classes) {
    if (c.name != kModelNew) continue;
    if (c.column == 0 && c.has_bases) return Status();
    if (c.column == 0 && !without_bases) without_bases = &c;
    if (c.column != 0 && !indented) indented = &c;
  }
  if (without_bases)
    return invalid_argument("line " + std::to_string(without_bases->line) +
                            ": class ModelNew has no base class: write `class ModelNew(nn.Module):`");
  if (indented)
    return invalid_argument("line " + std::to_string(indented->line) +
                            ": class ModelNew is indented: define it at the top level of the module, column 0");
  // The words as text, in a comment or string (not a longer name: class ModelNewer).
  constexpr std::string_view kWords = "class ModelNew";
  size_t at = source.find(kWords);
  while (at != std::string_view::npos && at + kWords.size() < source.size() &&
         is_ident_char(source[at + kWords.size()]))
    at = source.find(kWords, at + 1);
  if (at != std::string_view::npos)
    return invalid_argument(line(at) +
                            "`class ModelNew` is inside a comment or string: define the class in code, at the top "
                            "level of the module");
  return invalid_argument(
      "no `class ModelNew(` line: define `class ModelNew(nn.Module):` at the top level of the module");
}

ModuleBackend module_backend(std::string_view source) {
  ModuleFacts f = ModuleScanner(source).run();
  if (f.load_call && f.source_global) return ModuleBackend::kCuda;
  if (f.triton_jit) return ModuleBackend::kTriton;
  return ModuleBackend::kTorch;
}

std::vector<std::string> module_static_flags(std::string_view source, ModuleBackend expected) {
  ModuleFacts f = ModuleScanner(source).run();
  std::vector<std::string> flags;
  auto flag = [&](const char* name, const std::string& detail) {
    flags.push_back(std::string("static: ") + name + (detail.empty() ? "" : ": " + detail));
  };
  auto flag_list = [&](const char* name, const FoundList& found) {
    if (!found.empty()) flag(name, listed(found.items()));
  };
  if (!f.try_lines.empty()) flag("try_except_fallback", lines_detail(f.try_lines));
  if (std::string chain = reference_chain(f); !chain.empty()) flag("inherits_reference", chain);
  flag_list("torch_computation", f.torch_ops);
  if (std::string missing = missing_backend(f, expected); !missing.empty()) flag("missing_backend", missing);
  FoundList unused;
  for (std::string_view k : f.kernels)
    if (f.uses[k] <= 1) unused.add(k);
  flag_list("unused_kernel", unused);
  flag_list("host_access", f.host);
  flag_list("timing_patch", f.timing);
  flag_list("concurrency", f.concurrency);
  flag_list("lazy_tensor", f.lazy);
  flag_list("dynamic_code", f.dynamic);
  return flags;
}

ModuleBackend expected_module_backend(std::string_view source) {
  ModuleBackend b = module_backend(source);
  return b == ModuleBackend::kTorch ? ModuleBackend::kCuda : b;
}

void add_module_static_flags(std::string_view source, std::vector<std::string>* flags) {
  for (std::string& f : module_static_flags(source, expected_module_backend(source))) flags->push_back(std::move(f));
}

std::vector<std::string> module_kernel_names(std::string_view source) {
  std::set<std::string> names;
  auto skip_space = [&](size_t i) {
    while (i < source.size() && std::isspace(static_cast<unsigned char>(source[i]))) ++i;
    return i;
  };
  auto ident_at = [&](size_t i) {
    size_t j = i;
    while (j < source.size() && is_ident_char(source[j])) ++j;
    return source.substr(i, j - i);
  };
  // CUDA: after __global__, the words up to the '(' that opens the parameters; groups opened
  // by __launch_bounds__ or an attribute are skipped.
  for (size_t at = source.find("__global__"); at != std::string_view::npos; at = source.find("__global__", at + 10)) {
    size_t i = at + 10;
    std::string_view last;
    for (int words = 0; words < 16; ++words) {
      i = skip_space(i);
      if (i >= source.size()) break;
      if (is_ident_start(source[i])) {
        last = ident_at(i);
        i += last.size();
        continue;
      }
      if (source[i] == '(' && !last.empty() && last != "__launch_bounds__" && last != "__attribute__") {
        names.insert(std::string(last));
        break;
      }
      if (source[i] == '(') {  // a group to skip
        int depth = 0;
        for (; i < source.size(); ++i) {
          depth += source[i] == '(' ? 1 : source[i] == ')' ? -1 : 0;
          if (depth == 0) break;
        }
        ++i;
        last = {};
        continue;
      }
      if (source[i] == '*' || source[i] == '&' || source[i] == ':' || source[i] == '<' || source[i] == '>' ||
          source[i] == ',') {
        ++i;
        continue;
      }
      break;
    }
  }
  // Triton: the next `def NAME(` after a jit decorator.
  for (std::string_view mark : {std::string_view("@triton.jit"), std::string_view("@jit")}) {
    for (size_t at = source.find(mark); at != std::string_view::npos; at = source.find(mark, at + mark.size())) {
      size_t def = source.find("def ", at);
      if (def == std::string_view::npos) break;
      size_t i = skip_space(def + 4);
      std::string_view name = i < source.size() && is_ident_start(source[i]) ? ident_at(i) : std::string_view();
      if (!name.empty()) names.insert(std::string(name));
    }
  }
  return {names.begin(), names.end()};
}

bool is_own_kernel(std::string_view profiled_name, const std::vector<std::string>& own) {
  std::string_view n = profiled_name;
  size_t paren = n.find('(');
  if (paren != std::string_view::npos) n = n.substr(0, paren);
  // Template arguments: from the first '<' of the name itself (after the return type's space).
  size_t space = n.rfind(' ', n.find('<'));
  if (space != std::string_view::npos) n = n.substr(space + 1);
  size_t angle = n.find('<');
  if (angle != std::string_view::npos) n = n.substr(0, angle);
  for (std::string_view lib : {"at::", "c10::", "cutlass::", "cub::", "thrust::", "cudnn", "cublas", "cuda::"})
    if (starts_with(n, lib)) return false;
  size_t colon = n.rfind("::");
  std::string_view base = colon == std::string_view::npos ? n : n.substr(colon + 2);
  return !base.empty() && std::binary_search(own.begin(), own.end(), std::string(base));
}

}  // namespace vinci
