// An experiment config (TOML), read as `harness run CONFIG` reads it: the bytes are written to a
// file and loaded with the experiment schema. Comment lines "#--set key=value" in the input are
// also passed as --set overrides. The file's folder holds a copy of experiments/main.toml, so
// `base = "main.toml"` merges. A config that loads renders an effective config that loads again
// (what a recorded run holds and replay re-reads) to the same effective config.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "core/atomic_file.h"
#include "fuzz/fuzz_util.h"
#include "harness/experiment.h"

namespace {

std::string& work_dir() {
  static std::string dir = [] {
    char tmpl[] = "/tmp/vinci_fuzz_config_XXXXXX";
    const char* made = ::mkdtemp(tmpl);
    if (made == nullptr) std::abort();
    std::string d = made;
    vinci::Result<std::string> main_toml = vinci::read_file(std::string(VINCI_SOURCE_DIR) + "/experiments/main.toml");
    if (!main_toml.ok() || !vinci::write_file_atomic(d + "/main.toml", *main_toml).ok()) std::abort();
    return d;
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> overrides;
  constexpr std::string_view kSet = "#--set ";
  for (size_t pos = 0; pos < text.size();) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + pos, end - pos);
    if (line.substr(0, kSet.size()) == kSet) overrides.emplace_back(line.substr(kSet.size()));
    pos = end + 1;
  }
  const std::string path = work_dir() + "/fuzz.toml";
  if (!vinci::write_file_atomic(path, text, /*durable=*/false).ok()) std::abort();
  vinci::Result<vinci::Experiment> e = vinci::load_experiment(path, overrides);
  if (!e.ok()) return 0;
  (void)vinci::effective_settings(e->effective_toml);
  vinci::Result<vinci::Experiment> again =
      vinci::experiment_from_text(e->effective_toml, work_dir() + "/effective.toml");
  VINCI_FUZZ_CHECK(again.ok(), again.status().to_string() + "\n" + e->effective_toml);
  VINCI_FUZZ_CHECK(again->effective_toml == e->effective_toml, "effective config changed");
  return 0;
}
