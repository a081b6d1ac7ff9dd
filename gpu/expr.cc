#include "gpu/expr.h"

#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <map>

namespace vinci {
namespace {

// Deeper nesting than any real expression: bounds the parser's recursion, so text from a model
// ("((((...") is an error, not a stack overflow.
constexpr int kMaxExprDepth = 64;

class Parser {
 public:
  Parser(const std::string& text, const ExprEnv* env) : text_(text), env_(env) {}

  Result<int64_t> parse_all() {
    VINCI_ASSIGN_OR_RETURN(int64_t v, expr());
    skip_ws();
    if (pos_ != text_.size()) return error("unexpected '" + text_.substr(pos_, 1) + "'");
    return v;
  }

 private:
  Status error(const std::string& what) const {
    return invalid_argument("expression '" + text_ + "' at column " + std::to_string(pos_ + 1) + ": " + what);
  }
  // An overflow names the expression and the values of the names it used, so a size that
  // overflows reads "size expression 'N*N*N*N': overflows 64 bits at N=65536".
  Status overflow() const {
    std::string at;
    for (const auto& [n, v] : used_) at += (at.empty() ? " at " : ", ") + n + "=" + v;
    return invalid_argument("size expression '" + text_ + "': overflows 64 bits" + at);
  }
  void skip_ws() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  bool eat(char c) {
    skip_ws();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  std::string name() {
    skip_ws();
    size_t start = pos_;
    while (pos_ < text_.size() &&
           (std::isalnum(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '_' || text_[pos_] == '.'))
      ++pos_;
    return text_.substr(start, pos_ - start);
  }

  // Values are int64: an overflow is an error, never a wrapped launch size.
  Result<int64_t> checked(char op, int64_t a, int64_t b) const {
    int64_t r = 0;
    bool over = op == '+'   ? __builtin_add_overflow(a, b, &r)
                : op == '-' ? __builtin_sub_overflow(a, b, &r)
                            : __builtin_mul_overflow(a, b, &r);
    if (over) {
      // A syntax check skips '/' and '%' and resolves no name, so its values are not the
      // expression's: an overflow among them says nothing about the text.
      if (!env_) return int64_t{0};
      return overflow();
    }
    return r;
  }
  Result<int64_t> expr() {
    if (++depth_ > kMaxExprDepth) return error("nested too deeply");
    VINCI_ASSIGN_OR_RETURN(int64_t v, term());
    for (;;) {
      char op = eat('+') ? '+' : eat('-') ? '-' : 0;
      if (!op) break;
      VINCI_ASSIGN_OR_RETURN(int64_t r, term());
      VINCI_ASSIGN_OR_RETURN(v, checked(op, v, r));
    }
    --depth_;
    return v;
  }
  Result<int64_t> term() {
    VINCI_ASSIGN_OR_RETURN(int64_t v, unary());
    for (;;) {
      char op = 0;
      if (eat('*'))
        op = '*';
      else if (eat('/'))
        op = '/';
      else if (eat('%'))
        op = '%';
      else
        return v;
      VINCI_ASSIGN_OR_RETURN(int64_t r, unary());
      if (op == '*') {
        VINCI_ASSIGN_OR_RETURN(v, checked('*', v, r));
      } else {
        if (!env_) continue;  // syntax check only: names are not resolved
        if (r == 0) return error("division by zero");
        if (r == -1) {  // INT64_MIN / -1 overflows
          VINCI_ASSIGN_OR_RETURN(v, checked('*', v, op == '/' ? -1 : 0));
        } else {
          v = op == '/' ? v / r : v % r;
        }
      }
    }
  }
  Result<int64_t> unary() {
    if (eat('-')) {
      if (++depth_ > kMaxExprDepth) return error("nested too deeply");
      VINCI_ASSIGN_OR_RETURN(int64_t v, unary());
      --depth_;
      return checked('*', v, -1);
    }
    return primary();
  }
  Result<int64_t> primary() {
    skip_ws();
    if (pos_ >= text_.size()) return error("expected a number, name or '('");
    if (eat('(')) {
      VINCI_ASSIGN_OR_RETURN(int64_t v, expr());
      if (!eat(')')) return error("expected ')'");
      return v;
    }
    char c = text_[pos_];
    if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t start = pos_;
      int64_t v = 0;
      for (; pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_])); ++pos_)
        if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, text_[pos_] - '0', &v))
          return error("integer " + text_.substr(start, pos_ - start + 1) + "... does not fit in 64 bits");
      return v;
    }
    if (!(std::isalpha(static_cast<unsigned char>(c)) || c == '_')) return error(std::string("unexpected '") + c + "'");
    std::string id = name();
    if (eat('(')) return call(id);
    if (!env_) return int64_t{0};
    auto it = env_->symbols.find(id);
    if (it == env_->symbols.end()) return error("unknown name '" + id + "'");
    used_[id] = std::to_string(it->second);
    return it->second;
  }
  Result<std::vector<int64_t>> shape_of(const std::string& buf) {
    if (!env_) return std::vector<int64_t>{1};
    if (!env_->buffer_shape) return Status(error("no buffers known, found '" + buf + "'"));
    return env_->buffer_shape(buf);
  }
  Result<int64_t> call(const std::string& fn) {
    if (fn == "numel" || fn == "rank" || fn == "dim") {
      std::string buf = name();
      if (buf.empty()) return error(fn + "() expects a buffer name");
      int64_t index = 0;
      if (fn == "dim") {
        if (!eat(',')) return error("dim() expects (buffer, index)");
        VINCI_ASSIGN_OR_RETURN(index, expr());
      }
      if (!eat(')')) return error("expected ')' after " + fn + " arguments");
      VINCI_ASSIGN_OR_RETURN(std::vector<int64_t> shape, shape_of(buf));
      if (!env_) return int64_t{1};
      if (fn == "rank") return static_cast<int64_t>(shape.size());
      if (fn == "numel") {
        std::string dims;
        for (int64_t d : shape) dims += (dims.empty() ? "" : ",") + std::to_string(d);
        used_["shape(" + buf + ")"] = "[" + dims + "]";
        int64_t n = 1;
        for (int64_t d : shape) {
          VINCI_ASSIGN_OR_RETURN(n, checked('*', n, d));
        }
        return n;
      }
      int64_t r = static_cast<int64_t>(shape.size());
      int64_t i = index < 0 ? index + r : index;
      if (i < 0 || i >= r)
        return error("dim(" + buf + ", " + std::to_string(index) + ") out of range for rank " + std::to_string(r));
      return shape[static_cast<size_t>(i)];
    }
    if (fn == "ceil_div" || fn == "min" || fn == "max") {
      VINCI_ASSIGN_OR_RETURN(int64_t a, expr());
      if (!eat(',')) return error(fn + "() expects two arguments");
      VINCI_ASSIGN_OR_RETURN(int64_t b, expr());
      if (!eat(')')) return error("expected ')' after " + fn + " arguments");
      if (fn == "min") return a < b ? a : b;
      if (fn == "max") return a > b ? a : b;
      if (b == 0) return env_ ? Result<int64_t>(error("ceil_div by zero")) : Result<int64_t>(int64_t{0});
      if (a >= 0 && b > 0) return a / b + (a % b != 0 ? 1 : 0);  // never overflows
      VINCI_ASSIGN_OR_RETURN(int64_t b1, checked('-', b, 1));
      VINCI_ASSIGN_OR_RETURN(int64_t sum, checked('+', a, b1));
      return sum / b;
    }
    return error("unknown function '" + fn + "'");
  }

  const std::string& text_;
  const ExprEnv* env_;
  size_t pos_ = 0;
  int depth_ = 0;
  std::map<std::string, std::string> used_;  // names resolved so far and their values
};

bool is_int(const std::string& s, int64_t* v) {
  if (s.empty()) return false;
  size_t i = s[0] == '-' ? 1 : 0;
  if (i == s.size()) return false;
  for (size_t j = i; j < s.size(); ++j)
    if (!std::isdigit(static_cast<unsigned char>(s[j]))) return false;
  errno = 0;
  *v = std::strtoll(s.c_str(), nullptr, 10);
  return errno == 0;  // a literal past 64 bits is left to eval_expr, which reports it
}

// Parenthesizes a non-atomic operand.
std::string wrap(const std::string& s) {
  for (char c : s)
    if (c == '+' || c == '-' || c == '*' || c == '/' || c == '%' || c == ' ') return "(" + s + ")";
  return s;
}

}  // namespace

Result<int64_t> eval_expr(const std::string& text, const ExprEnv& env) {
  Parser p(text, &env);
  return p.parse_all();
}

Status check_expr_syntax(const std::string& text) {
  Parser p(text, nullptr);
  Result<int64_t> r = p.parse_all();
  return r.ok() ? Status() : r.status();
}

std::string expr_mul(const std::string& a, const std::string& b) {
  int64_t x, y;
  bool ia = is_int(a, &x), ib = is_int(b, &y);
  int64_t r;
  if (ia && ib && !__builtin_mul_overflow(x, y, &r)) return std::to_string(r);
  if (ia && x == 1) return b;
  if (ib && y == 1) return a;
  return wrap(a) + "*" + wrap(b);
}
std::string expr_add(const std::string& a, const std::string& b) {
  int64_t x, y;
  bool ia = is_int(a, &x), ib = is_int(b, &y);
  int64_t r;
  if (ia && ib && !__builtin_add_overflow(x, y, &r)) return std::to_string(r);
  if (ia && x == 0) return b;
  if (ib && y == 0) return a;
  return a + " + " + b;
}
std::string expr_sub(const std::string& a, const std::string& b) {
  int64_t x, y;
  bool ia = is_int(a, &x), ib = is_int(b, &y);
  int64_t r;
  if (ia && ib && !__builtin_sub_overflow(x, y, &r)) return std::to_string(r);
  if (ib && y == 0) return a;
  return a + " - " + wrap(b);
}
std::string expr_div(const std::string& a, const std::string& b) {
  int64_t x, y;
  bool ia = is_int(a, &x), ib = is_int(b, &y);
  if (ia && ib && y != 0 && !(y == -1 && x == INT64_MIN)) return std::to_string(x / y);
  if (ib && y == 1) return a;
  return wrap(a) + "/" + wrap(b);
}
std::string expr_ceil_div(const std::string& a, const std::string& b) {
  int64_t x, y;
  int64_t sum;
  if (is_int(a, &x) && is_int(b, &y) && y > 0 && !__builtin_add_overflow(x, y - 1, &sum))
    return std::to_string(sum / y);
  return "ceil_div(" + a + ", " + b + ")";
}
std::string expr_product(const std::vector<std::string>& factors) {
  std::string r = "1";
  for (const auto& f : factors) r = expr_mul(r, f);
  return r;
}

}  // namespace vinci
