// Numbers as text, the one way every module writes them.
#ifndef VINCI_CORE_TEXT_H_
#define VINCI_CORE_TEXT_H_

#include <string>
#include <string_view>

namespace vinci {

// printf_format applied to one double ("%.3g", "%+.1f"). REQUIRES: the format takes one double.
std::string format_number(const char* printf_format, double v);

// Enough digits to read the same double back ("%.17g"): for values that feed records.
inline std::string exact_number(double v) { return format_number("%.17g", v); }

// The fewest significant digits that still read back as v ("0.99" for 0.99, where exact_number
// writes "0.98999999999999999"): for settings a person reads that must still name the value.
std::string shortest_exact_number(double v);

// v beside a threshold it is judged against (v >= threshold): 3 significant digits, or as many
// more as it takes for the printed number to fall on the same side of the threshold as v
// (0.99963 beside 1 is "0.9996", not "1").
std::string number_beside(double v, double threshold);

// Bytes as lower-case hex, two digits a byte; and back (false on an odd length or a non-hex digit).
std::string hex_encode(std::string_view bytes);
bool hex_decode(std::string_view hex, std::string* bytes);

// The offset of the first byte that is not part of well-formed UTF-8 (RFC 3629: no overlong
// forms, no surrogates, nothing above U+10FFFF), or std::string_view::npos when s is all UTF-8.
// JSON carries only UTF-8: what vinci stores as JSON is checked with this first.
size_t first_invalid_utf8(std::string_view s);

}  // namespace vinci

#endif  // VINCI_CORE_TEXT_H_
