// Runs fn(0) .. fn(n-1) on up to `threads` threads (the caller's among them). Which thread runs
// which index is not fixed, so fn must write only to what index i owns; results the caller
// combines in index order are then the same for any thread count.
#ifndef VINCI_CORE_PARALLEL_H_
#define VINCI_CORE_PARALLEL_H_

#include <cstddef>
#include <cstdint>
#include <functional>

#include "core/status.h"

namespace vinci {

// Returns the error of the lowest index that failed (every index runs), ok otherwise.
Status parallel_for(int32_t threads, size_t n, const std::function<Status(size_t)>& fn);

// The threads a compute-bound helper may use here: the hardware's, at least 1, at most `cap`.
int32_t hardware_threads(int32_t cap);

}  // namespace vinci

#endif  // VINCI_CORE_PARALLEL_H_
