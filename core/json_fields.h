// Fields of JSON that came from outside vinci: a server's reply, a client's request, the answer a
// sandboxed process wrote (model-written code may have written it itself). A field of the wrong type,
// or any field of a value that is not an object, reads as absent (nlohmann's value() and get() throw).
#ifndef VINCI_CORE_JSON_FIELDS_H_
#define VINCI_CORE_JSON_FIELDS_H_

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace vinci {

inline std::string text_field(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

inline int64_t int_field(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number_integer() ? it->get<int64_t>() : 0;
}

inline double number_field(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : 0.0;
}

// The numbers of an array field; entries that are not numbers are left out.
inline std::vector<double> numbers_field(const nlohmann::json& j, const char* key) {
  std::vector<double> out;
  auto it = j.find(key);
  if (it == j.end() || !it->is_array()) return out;
  for (const auto& v : *it)
    if (v.is_number()) out.push_back(v.get<double>());
  return out;
}

// The strings of an array field; entries that are not strings are left out.
inline std::vector<std::string> texts_field(const nlohmann::json& j, const char* key) {
  std::vector<std::string> out;
  auto it = j.find(key);
  if (it == j.end() || !it->is_array()) return out;
  for (const auto& v : *it)
    if (v.is_string()) out.push_back(v.get<std::string>());
  return out;
}

}  // namespace vinci

#endif  // VINCI_CORE_JSON_FIELDS_H_
