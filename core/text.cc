#include "core/text.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace vinci {

std::string format_number(const char* printf_format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, printf_format, v);
  return buf;
}

std::string shortest_exact_number(double v) {
  char buf[40];
  for (int digits = 1; digits < 17; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, v);
    if (std::strtod(buf, nullptr) == v) return buf;
  }
  return exact_number(v);
}

std::string number_beside(double v, double threshold) {
  char buf[40];
  for (int digits = 3; digits <= 17; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, v);
    if ((std::strtod(buf, nullptr) >= threshold) == (v >= threshold)) break;
  }
  return buf;
}

std::string hex_encode(std::string_view bytes) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out.push_back(kHex[c >> 4]);
    out.push_back(kHex[c & 15]);
  }
  return out;
}

bool hex_decode(std::string_view hex, std::string* bytes) {
  auto digit = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  if (hex.size() % 2) return false;
  std::string out(hex.size() / 2, '\0');
  for (size_t i = 0; i < out.size(); ++i) {
    int hi = digit(hex[2 * i]), lo = digit(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    out[i] = static_cast<char>(hi * 16 + lo);
  }
  *bytes = std::move(out);
  return true;
}

size_t first_invalid_utf8(std::string_view s) {
  static const uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};  // below these, a form is overlong
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return i;
    if (n == 1) {
      ++i;
      continue;
    }
    uint32_t cp = c & (0x7F >> n);
    for (size_t k = 1; k < n; ++k) {
      unsigned char cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
    i += n;
  }
  return std::string_view::npos;
}

}  // namespace vinci
