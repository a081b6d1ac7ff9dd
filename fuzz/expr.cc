// Size expressions (plans' grids, blocks and arguments, task files' shapes): evaluated against a
// few symbols and buffers, large ones included so overflow is reachable. An expression that
// evaluates also passes the syntax check.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "gpu/expr.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  static const vinci::ExprEnv env = [] {
    vinci::ExprEnv e;
    e.symbols = {{"N", 1024}, {"M", 7}, {"K", 0}, {"B", 3}, {"BIG", int64_t{1} << 62}, {"NEG", -5}};
    e.buffer_shape = [](const std::string& name) -> vinci::Result<std::vector<int64_t>> {
      if (name == "x") return std::vector<int64_t>{8, 1001};
      if (name == "s") return std::vector<int64_t>{};
      if (name == "huge") return std::vector<int64_t>{int64_t{1} << 40, int64_t{1} << 40};
      return vinci::not_found("no buffer " + name);
    };
    return e;
  }();
  vinci::Status syntax = vinci::check_expr_syntax(text);
  vinci::Result<int64_t> value = vinci::eval_expr(text, env);
  if (value.ok()) VINCI_FUZZ_CHECK(syntax.ok(), syntax.to_string() + ": " + text);
  return 0;
}
