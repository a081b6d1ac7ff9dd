// The task suite the plan fuzz targets check plans against (data/tasks, loaded once).
#ifndef VINCI_FUZZ_FUZZ_TASKS_H_
#define VINCI_FUZZ_FUZZ_TASKS_H_

#include <cstdio>
#include <cstdlib>
#include <string>

#include "gpu/task.h"

namespace vinci {

inline const TaskSuite& fuzz_suite() {
  static const TaskSuite suite = [] {
    Result<TaskSuite> s = load_task_suite(default_task_dir());
    if (!s.ok()) {
      std::fprintf(stderr, "%s\n", s.status().to_string().c_str());
      std::abort();
    }
    return *s;
  }();
  return suite;
}

inline const Task& fuzz_task(const std::string& id) {
  const Task* t = fuzz_suite().find(id);
  if (t == nullptr) std::abort();
  return *t;
}

}  // namespace vinci

#endif  // VINCI_FUZZ_FUZZ_TASKS_H_
