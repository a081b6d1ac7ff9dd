// The names of a closed setting, in one table per enum: the enum's values index it. Strings exist
// only at the edges (config files, the command line, records, JSON); everything past the parse
// holds the enum.
//
//   enum class Color { kRed, kBlue };
//   constexpr EnumNames<Color, 2> kColors = {"color", {"red", "blue"}};
//   kColors.name(Color::kBlue)   -> "blue"
//   kColors.parse("green")       -> InvalidArgument: color: expected red or blue, found "green"
//   kColors.choices()            -> {"red", "blue"} (a config schema's allowed values)
#ifndef VINCI_CORE_ENUM_NAMES_H_
#define VINCI_CORE_ENUM_NAMES_H_

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace vinci {

template <typename E, size_t N>
struct EnumNames {
  const char* what;  // what the setting is, for errors
  const char* names[N];

  constexpr const char* name(E e) const { return names[static_cast<size_t>(e)]; }

  Result<E> parse(std::string_view text) const {
    for (size_t i = 0; i < N; ++i)
      if (text == names[i]) return static_cast<E>(i);
    return invalid_argument(std::string(what) + ": expected " + expected() + ", found \"" + std::string(text) + "\"");
  }

  std::vector<std::string> choices() const { return std::vector<std::string>(names, names + N); }

  // "a, b or c"
  std::string expected() const {
    std::string out;
    for (size_t i = 0; i < N; ++i) out += (i == 0 ? "" : i + 1 == N ? " or " : ", ") + std::string(names[i]);
    return out;
  }
};

}  // namespace vinci

#endif  // VINCI_CORE_ENUM_NAMES_H_
