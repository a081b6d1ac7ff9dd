// Integer shape expressions: the small language plans and task files use for shapes, grid and
// block sizes, scalar kernel arguments and cost formulas.
//
// Grammar (whitespace ignored):
//   expr    := term (('+' | '-') term)*
//   term    := unary (('*' | '/' | '%') unary)*
//   unary   := '-' unary | primary
//   primary := INT | NAME | NAME '(' args ')' | '(' expr ')'
//   args    := arg (',' arg)*        an arg is an expr, or a bare NAME naming a buffer
// Functions: ceil_div(a,b), min(a,b), max(a,b), numel(buf), dim(buf, i) (i may be negative,
// counted from the end), rank(buf). '/' is floor division on non-negative operands (C's '/' for
// the sizes vinci deals in); division or modulo by zero is an error, not a crash.
// Values are int64; an overflow (a literal, + - * or numel) is an error, not a wrapped size, and
// so is nesting deeper than 64 (the parser recurses). An expression never depends on anything but
// the names it mentions, so the simulator and the live evaluator evaluate the same plan to the
// same launch.
#ifndef VINCI_GPU_EXPR_H_
#define VINCI_GPU_EXPR_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/status.h"

namespace vinci {

// What an expression's names resolve to.
struct ExprEnv {
  // Size symbols of the task (N, M, K, batch, ...).
  std::map<std::string, int64_t> symbols;
  // Shape of a named buffer, for numel/dim/rank. May be empty when no buffer names are used.
  std::function<Result<std::vector<int64_t>>(const std::string&)> buffer_shape;
};

Result<int64_t> eval_expr(const std::string& text, const ExprEnv& env);

// Checks that text parses; does not resolve names.
Status check_expr_syntax(const std::string& text);

// Builders that keep generated expressions short: constants fold, x*1 and x+0 vanish.
std::string expr_mul(const std::string& a, const std::string& b);
std::string expr_add(const std::string& a, const std::string& b);
std::string expr_sub(const std::string& a, const std::string& b);
std::string expr_div(const std::string& a, const std::string& b);
std::string expr_ceil_div(const std::string& a, const std::string& b);
std::string expr_product(const std::vector<std::string>& factors);

}  // namespace vinci

#endif  // VINCI_GPU_EXPR_H_
