// Experiment configs: TOML files checked against a declared schema of keys.
//
// Every key an experiment may set is declared once (name, type, default, allowed values, what it
// means); ConfigSchema::reference_toml() prints them all as a commented reference config, so the
// documentation cannot drift from the code. Loading a file
//   - rejects unknown keys and wrong types with FILE:LINE:COLUMN, the key, what was expected and
//     what was found;
//   - follows a top-level `base = "FILE"` (relative to the file that names it): the base's keys
//     come first and this file's keys replace them key by key (a deep merge of tables; arrays and
//     scalars replace); a base may have its own base; a cycle or a missing base is an error
//     naming the file and the key. The result is one config: nothing downstream sees `base`;
//   - applies `--set key=value` overrides (the value parsed as the key's type), over the merge;
//   - fills defaults, and renders the effective config as canonical TOML (every key, in schema
//     order), which is what a run records and what replay re-reads.
#ifndef VINCI_HARNESS_CONFIG_H_
#define VINCI_HARNESS_CONFIG_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "core/status.h"

namespace vinci {

enum class ConfigType { kBool, kInt, kFloat, kString, kIntList, kFloatList, kStringList };

using ConfigValue = std::variant<bool, int64_t, double, std::string, std::vector<int64_t>, std::vector<double>,
                                 std::vector<std::string>>;

struct ConfigKey {
  std::string path;  // "section.key"
  ConfigType type;
  ConfigValue default_value;
  std::string doc;
  std::vector<std::string> choices;  // for strings: the allowed values (empty = any)
  double min = -1e300, max = 1e300;  // for numbers (and each element of number lists)
  // Left out of effective_toml() while at its default, so that a key added later does not change
  // the recorded config (and digest) of runs that do not use it.
  bool omit_when_default = false;
};

class ConfigSchema {
 public:
  ConfigSchema& add(ConfigKey key);
  const ConfigKey* find(std::string_view path) const;
  const std::vector<ConfigKey>& keys() const { return keys_; }
  // Every key with its doc and default, as a TOML file a user can copy.
  std::string reference_toml() const;

 private:
  std::vector<ConfigKey> keys_;
};

class Config {
 public:
  // Reads path, applies overrides ("key=value"), fills defaults.
  static Result<Config> load(const ConfigSchema& schema, const std::string& path,
                             const std::vector<std::string>& overrides = {});
  // Same, from text; source names it in errors (and a `base` in text resolves against the folder
  // of source).
  static Result<Config> parse(const ConfigSchema& schema, std::string_view text, const std::string& source,
                              const std::vector<std::string>& overrides = {});

  // REQUIRES: path is declared with that type.
  bool get_bool(std::string_view path) const;
  int64_t get_int(std::string_view path) const;
  double get_float(std::string_view path) const;
  const std::string& get_string(std::string_view path) const;
  const std::vector<int64_t>& get_int_list(std::string_view path) const;
  const std::vector<double>& get_float_list(std::string_view path) const;
  const std::vector<std::string>& get_string_list(std::string_view path) const;

  // Canonical TOML of every key (defaults included), in schema order.
  std::string effective_toml() const;
  const std::string& source() const { return source_; }

 private:
  const ConfigValue& value(std::string_view path, ConfigType type) const;
  const ConfigSchema* schema_ = nullptr;
  std::string source_;
  std::map<std::string, ConfigValue, std::less<>> values_;
};

const char* config_type_name(ConfigType type);

}  // namespace vinci

#endif  // VINCI_HARNESS_CONFIG_H_
