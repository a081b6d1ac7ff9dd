#include "core/check.h"

#include <cstdio>
#include <cstdlib>

namespace vinci {

void assertion_failed(const char* kind, const char* file, int line, const char* expr, const std::string& detail) {
  std::fprintf(stderr, "vinci: %s failed at %s:%d: %s%s%s\n", kind, file, line, expr, detail.empty() ? "" : ": ",
               detail.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace vinci
