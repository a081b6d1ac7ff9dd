#include "core/text.h"

#include <cstdio>

namespace vinci {

std::string format_number(const char* printf_format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, printf_format, v);
  return buf;
}

}  // namespace vinci
