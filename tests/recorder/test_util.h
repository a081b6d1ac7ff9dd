// Helpers shared by the recorder tests.
#ifndef VINCI_TESTS_RECORDER_TEST_UTIL_H_
#define VINCI_TESTS_RECORDER_TEST_UTIL_H_

#include <dirent.h>
#include <stdlib.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/atomic_file.h"

namespace vinci {

inline std::string make_temp_dir(const char* tag) {
  std::string tmpl = std::string("/tmp/vinci_") + tag + "_XXXXXX";
  char* d = mkdtemp(tmpl.data());
  return d ? std::string(d) : std::string();
}

// Sorted file names in a folder.
inline std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      std::string n = e->d_name;
      if (n != "." && n != "..") out.push_back(n);
    }
    closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// name -> bytes of every file in a folder.
inline std::vector<std::pair<std::string, std::string>> slurp_dir(const std::string& dir) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& n : list_dir(dir)) out.emplace_back(n, read_file(dir + "/" + n).value());
  return out;
}

// Seed for a randomized test: VINCI_TEST_SEED if set, else the given default. Printed by callers.
inline uint64_t test_seed(uint64_t fallback) {
  const char* s = getenv("VINCI_TEST_SEED");
  return s ? strtoull(s, nullptr, 10) : fallback;
}

}  // namespace vinci

#endif  // VINCI_TESTS_RECORDER_TEST_UTIL_H_
