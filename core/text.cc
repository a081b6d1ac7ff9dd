#include "core/text.h"

#include <cstdio>
#include <cstdlib>

namespace vinci {

std::string format_number(const char* printf_format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, printf_format, v);
  return buf;
}

std::string number_beside(double v, double threshold) {
  char buf[40];
  for (int digits = 3; digits <= 17; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, v);
    if ((std::strtod(buf, nullptr) >= threshold) == (v >= threshold)) break;
  }
  return buf;
}

}  // namespace vinci
