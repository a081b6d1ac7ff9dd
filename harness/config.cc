#include "harness/config.h"

#include <toml++/toml.h>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include "core/atomic_file.h"

namespace vinci {
namespace {

std::string where(const std::string& source, const toml::source_region& r) {
  if (!r.begin) return source;
  return source + ":" + std::to_string(r.begin.line) + ":" + std::to_string(r.begin.column);
}

const char* node_type_name(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::table: return "a table";
    case toml::node_type::array: return "an array";
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a float";
    case toml::node_type::boolean: return "a boolean";
    case toml::node_type::date: return "a date";
    case toml::node_type::time: return "a time";
    case toml::node_type::date_time: return "a date-time";
    default: return "nothing";
  }
}

std::string format_double(double v) {
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (std::isnan(v)) return "nan";
  char buf[64];
  // The shortest of %.15g/%.17g that reads back exactly, always with a '.' or exponent.
  std::snprintf(buf, sizeof buf, "%.15g", v);
  if (std::strtod(buf, nullptr) != v) std::snprintf(buf, sizeof buf, "%.17g", v);
  std::string s = buf;
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

std::string render(const ConfigValue& v) {
  struct {
    std::string operator()(bool b) const { return b ? "true" : "false"; }
    std::string operator()(int64_t i) const { return std::to_string(i); }
    std::string operator()(double d) const { return format_double(d); }
    std::string operator()(const std::string& s) const { return quote(s); }
    std::string operator()(const std::vector<int64_t>& l) const {
      std::string out = "[";
      for (size_t i = 0; i < l.size(); ++i) out += (i ? ", " : "") + std::to_string(l[i]);
      return out + "]";
    }
    std::string operator()(const std::vector<double>& l) const {
      std::string out = "[";
      for (size_t i = 0; i < l.size(); ++i) out += (i ? ", " : "") + format_double(l[i]);
      return out + "]";
    }
    std::string operator()(const std::vector<std::string>& l) const {
      std::string out = "[";
      for (size_t i = 0; i < l.size(); ++i) out += (i ? ", " : "") + quote(l[i]);
      return out + "]";
    }
  } visitor;
  return std::visit(visitor, v);
}

std::string expected_text(const ConfigKey& k) {
  std::string t = config_type_name(k.type);
  if (!k.choices.empty()) {
    t += " (one of";
    for (const auto& c : k.choices) t += " \"" + c + "\"";
    t += ")";
  }
  return t;
}

// Converts a TOML node to the key's type; integers are accepted where floats are expected.
Result<ConfigValue> convert(const ConfigKey& k, const toml::node& n, const std::string& at) {
  auto type_error = [&](const std::string& found) {
    return invalid_argument(at + ": key '" + k.path + "' expects " + expected_text(k) + ", found " + found);
  };
  auto number = [&](const toml::node& e, double* out) -> bool {
    if (auto i = e.as_integer()) {
      *out = static_cast<double>(i->get());
      return true;
    }
    if (auto f = e.as_floating_point()) {
      *out = f->get();
      return true;
    }
    return false;
  };
  auto range_check = [&](double v) -> Status {
    if (std::isnan(v)) {
      return invalid_argument(at + ": key '" + k.path + "' expects a number, found nan");
    }
    if (v < k.min || v > k.max) {
      return invalid_argument(at + ": key '" + k.path + "' must be in [" + format_double(k.min) + ", " +
                              format_double(k.max) + "], found " + format_double(v));
    }
    return Status();
  };
  switch (k.type) {
    case ConfigType::kBool:
      if (auto b = n.as_boolean()) return ConfigValue(b->get());
      return type_error(node_type_name(n));
    case ConfigType::kInt:
      if (auto i = n.as_integer()) {
        VINCI_RETURN_IF_ERROR(range_check(static_cast<double>(i->get())));
        return ConfigValue(static_cast<int64_t>(i->get()));
      }
      return type_error(node_type_name(n));
    case ConfigType::kFloat: {
      double d;
      if (number(n, &d)) {
        VINCI_RETURN_IF_ERROR(range_check(d));
        return ConfigValue(d);
      }
      return type_error(node_type_name(n));
    }
    case ConfigType::kString:
      if (auto s = n.as_string()) {
        std::string v = s->get();
        if (!k.choices.empty() && std::find(k.choices.begin(), k.choices.end(), v) == k.choices.end()) {
          return type_error("\"" + v + "\"");
        }
        return ConfigValue(v);
      }
      return type_error(node_type_name(n));
    case ConfigType::kIntList:
    case ConfigType::kFloatList:
    case ConfigType::kStringList: {
      auto arr = n.as_array();
      if (!arr) return type_error(node_type_name(n));
      std::vector<int64_t> ints;
      std::vector<double> floats;
      std::vector<std::string> strings;
      for (const auto& e : *arr) {
        if (k.type == ConfigType::kIntList) {
          auto i = e.as_integer();
          if (!i) return type_error(std::string("an array holding ") + node_type_name(e));
          VINCI_RETURN_IF_ERROR(range_check(static_cast<double>(i->get())));
          ints.push_back(i->get());
        } else if (k.type == ConfigType::kFloatList) {
          double d;
          if (!number(e, &d)) return type_error(std::string("an array holding ") + node_type_name(e));
          VINCI_RETURN_IF_ERROR(range_check(d));
          floats.push_back(d);
        } else {
          auto s = e.as_string();
          if (!s) return type_error(std::string("an array holding ") + node_type_name(e));
          if (!k.choices.empty() && std::find(k.choices.begin(), k.choices.end(), s->get()) == k.choices.end()) {
            return type_error("an array holding \"" + s->get() + "\"");
          }
          strings.push_back(s->get());
        }
      }
      if (k.type == ConfigType::kIntList) return ConfigValue(ints);
      if (k.type == ConfigType::kFloatList) return ConfigValue(floats);
      return ConfigValue(strings);
    }
  }
  return internal_error("unreachable");
}

Status walk(const ConfigSchema& schema, const toml::table& table, const std::string& prefix, const std::string& source,
            std::map<std::string, ConfigValue, std::less<>>* out) {
  for (const auto& [name, node] : table) {
    std::string path = prefix.empty() ? std::string(name.str()) : prefix + "." + std::string(name.str());
    std::string at = where(source, node.source());
    if (auto sub = node.as_table()) {
      bool is_section = false;
      for (const auto& k : schema.keys()) {
        if (k.path.rfind(path + ".", 0) == 0) is_section = true;
      }
      if (!is_section) {
        return invalid_argument(at + ": unknown section [" + path + "]");
      }
      VINCI_RETURN_IF_ERROR(walk(schema, *sub, path, source, out));
      continue;
    }
    const ConfigKey* key = schema.find(path);
    if (!key) {
      std::string known;
      std::string section = prefix;
      for (const auto& k : schema.keys()) {
        auto dot = k.path.rfind('.');
        std::string ks = dot == std::string::npos ? "" : k.path.substr(0, dot);
        if (ks == section) known += (known.empty() ? "" : ", ") + k.path.substr(dot + 1);
      }
      return invalid_argument(where(source, name.source()) + ": unknown key '" + path + "'" +
                              (known.empty() ? "" : " (keys of [" + section + "]: " + known + ")"));
    }
    VINCI_ASSIGN_OR_RETURN(ConfigValue v, convert(*key, node, at));
    (*out)[path] = std::move(v);
  }
  return Status();
}

// One file of a config's `base` chain: its table (without the `base` key) and its name.
struct Layer {
  toml::table table;
  std::string source;
};

Result<toml::table> parse_toml(std::string_view text, const std::string& source) {
  try {
    return toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    return invalid_argument(where(source, e.source()) + ": " + std::string(e.description()));
  }
}

// A file of a base chain: what identifies it (its canonical path) and how errors name it.
struct ChainLink {
  std::string id, name;
};

ChainLink link_of(const std::string& path) {
  std::error_code ec;
  std::filesystem::path canon = std::filesystem::weakly_canonical(path, ec);
  return {ec ? path : canon.string(), path};
}

std::string chain_text(const std::vector<ChainLink>& chain) {
  std::string out;
  for (const auto& c : chain) out += (out.empty() ? "" : " -> ") + c.name;
  return out;
}

// The layers of `text` (named source), base first: a top-level `base = "FILE"` names a config
// (relative to the folder of source) whose keys this one is laid over; a base may have its own.
// chain holds the files being read, outermost first, to catch cycles.
Status read_layers(std::string_view text, const std::string& source, std::vector<ChainLink>* chain,
                   std::vector<Layer>* layers) {
  VINCI_ASSIGN_OR_RETURN(toml::table table, parse_toml(text, source));
  if (const toml::node* b = table.get("base")) {
    std::string at = where(source, b->source());
    auto name = b->as_string();
    if (!name) {
      return invalid_argument(at + ": key 'base' expects a string (a config file, relative to " + source + "), found " +
                              node_type_name(*b));
    }
    namespace fs = std::filesystem;
    fs::path rel = name->get();
    fs::path file = rel.is_absolute() ? rel : fs::path(source).parent_path() / rel;
    std::string path = file.lexically_normal().string();
    chain->push_back(link_of(path));
    for (size_t i = 0; i + 1 < chain->size(); ++i) {
      if ((*chain)[i].id == chain->back().id) {
        return invalid_argument(at + ": key 'base': \"" + name->get() + "\" makes a cycle (" + chain_text(*chain) +
                                ")");
      }
    }
    auto base_text = read_file(path, kConfigFile);
    if (!base_text.ok()) {
      if (base_text.status().code() == StatusCode::kNotFound) {
        return not_found(at + ": key 'base': base config " + path + " does not exist");
      }
      return invalid_argument(at + ": key 'base': cannot read " + path + ": " + base_text.status().message());
    }
    VINCI_RETURN_IF_ERROR(read_layers(*base_text, path, chain, layers));
    chain->pop_back();
    table.erase("base");
  }
  layers->push_back({std::move(table), source});
  return Status();
}

}  // namespace

const char* config_type_name(ConfigType type) {
  switch (type) {
    case ConfigType::kBool: return "a boolean";
    case ConfigType::kInt: return "an integer";
    case ConfigType::kFloat: return "a number";
    case ConfigType::kString: return "a string";
    case ConfigType::kIntList: return "an array of integers";
    case ConfigType::kFloatList: return "an array of numbers";
    case ConfigType::kStringList: return "an array of strings";
  }
  return "?";
}

ConfigSchema& ConfigSchema::add(ConfigKey key) {
  VINCI_REQUIRE(find(key.path) == nullptr, "config key declared twice: " << key.path);
  VINCI_REQUIRE(key.path.find('.') != std::string::npos, "config key needs a section: " << key.path);
  keys_.push_back(std::move(key));
  return *this;
}

const ConfigKey* ConfigSchema::find(std::string_view path) const {
  for (const auto& k : keys_) {
    if (k.path == path) return &k;
  }
  return nullptr;
}

std::string ConfigSchema::reference_toml() const {
  std::string out;
  std::string section;
  for (const auto& k : keys_) {
    auto dot = k.path.rfind('.');
    std::string s = k.path.substr(0, dot);
    if (s != section) {
      out += (out.empty() ? "" : "\n") + std::string("[") + s + "]\n";
      section = s;
    }
    std::istringstream doc(k.doc);
    std::string line;
    while (std::getline(doc, line)) out += "# " + line + "\n";
    if (!k.choices.empty()) {
      out += "# one of:";
      for (const auto& c : k.choices) out += " " + c;
      out += "\n";
    }
    out += k.path.substr(dot + 1) + " = " + render(k.default_value) + "\n";
  }
  return out;
}

Result<Config> Config::load(const ConfigSchema& schema, const std::string& path,
                            const std::vector<std::string>& overrides) {
  auto text = read_file(path, kConfigFile);
  if (!text.ok()) {
    if (text.status().code() == StatusCode::kNotFound) {
      return not_found("experiment config " + path + " does not exist");
    }
    return text.status();
  }
  // A file that sets nothing would run every default: most likely the wrong file, or one cut short.
  auto table = parse_toml(*text, path);
  if (table.ok() && table->empty()) {
    return invalid_argument(
        "experiment config " + path +
        " sets nothing: expected at least one key or a "
        "`base = \"FILE\"`, found " +
        std::string(text->find_first_not_of(" \t\r\n") == std::string::npos ? "an empty file" : "only comments"));
  }
  return parse(schema, *text, path, overrides);
}

Result<Config> Config::parse(const ConfigSchema& schema, std::string_view text, const std::string& source,
                             const std::vector<std::string>& overrides) {
  Config c;
  c.schema_ = &schema;
  c.source_ = source;
  // The base chain, base first: each file's keys replace its base's, key by key (every key is
  // "section.key", so this is a deep merge of tables in which arrays and scalars replace).
  std::vector<Layer> layers;
  std::vector<ChainLink> chain{link_of(source)};
  VINCI_RETURN_IF_ERROR(read_layers(text, source, &chain, &layers));
  for (const Layer& l : layers) VINCI_RETURN_IF_ERROR(walk(schema, l.table, "", l.source, &c.values_));
  for (const auto& o : overrides) {
    auto eq = o.find('=');
    if (eq == std::string::npos || eq == 0) {
      return invalid_argument("--set " + o + ": expected key=value");
    }
    std::string path = o.substr(0, eq);
    std::string rhs = o.substr(eq + 1);
    const ConfigKey* key = schema.find(path);
    if (!key) return invalid_argument("--set " + o + ": unknown key '" + path + "'");
    // Bare words are strings, so `--set run.name=abl4` needs no shell quoting.
    if (key->type == ConfigType::kString && (rhs.empty() || rhs.front() != '"')) rhs = quote(rhs);
    toml::table t;
    try {
      t = toml::parse("v = " + rhs, "--set " + path);
    } catch (const toml::parse_error& e) {
      return invalid_argument("--set " + o + ": value does not parse as " + expected_text(*key) + ": " +
                              std::string(e.description()));
    }
    VINCI_ASSIGN_OR_RETURN(ConfigValue v, convert(*key, *t.get("v"), "--set " + o));
    c.values_[path] = std::move(v);
  }
  for (const auto& k : schema.keys()) {
    if (!c.values_.count(k.path)) c.values_[k.path] = k.default_value;
  }
  return c;
}

const ConfigValue& Config::value(std::string_view path, ConfigType type) const {
  const ConfigKey* key = schema_ ? schema_->find(path) : nullptr;
  VINCI_REQUIRE(key != nullptr, "config key not declared: " << path);
  VINCI_REQUIRE(key->type == type, "config key " << path << " is " << config_type_name(key->type) << ", read as "
                                                 << config_type_name(type));
  return values_.find(path)->second;
}

bool Config::get_bool(std::string_view p) const { return std::get<bool>(value(p, ConfigType::kBool)); }
int64_t Config::get_int(std::string_view p) const { return std::get<int64_t>(value(p, ConfigType::kInt)); }
double Config::get_float(std::string_view p) const { return std::get<double>(value(p, ConfigType::kFloat)); }
const std::string& Config::get_string(std::string_view p) const {
  return std::get<std::string>(value(p, ConfigType::kString));
}
const std::vector<int64_t>& Config::get_int_list(std::string_view p) const {
  return std::get<std::vector<int64_t>>(value(p, ConfigType::kIntList));
}
const std::vector<double>& Config::get_float_list(std::string_view p) const {
  return std::get<std::vector<double>>(value(p, ConfigType::kFloatList));
}
const std::vector<std::string>& Config::get_string_list(std::string_view p) const {
  return std::get<std::vector<std::string>>(value(p, ConfigType::kStringList));
}

std::string Config::effective_toml() const {
  std::string out;
  std::string section;
  for (const auto& k : schema_->keys()) {
    if (k.omit_when_default && values_.find(k.path)->second == k.default_value) continue;
    auto dot = k.path.rfind('.');
    std::string s = k.path.substr(0, dot);
    if (s != section) {
      out += (out.empty() ? "" : "\n") + std::string("[") + s + "]\n";
      section = s;
    }
    out += k.path.substr(dot + 1) + " = " + render(values_.find(k.path)->second) + "\n";
  }
  return out;
}

}  // namespace vinci
