// Assertions that stay on in release builds.
//
// VINCI_ASSERT(cond) guards vinci's own invariants: a failure is a bug in vinci.
// VINCI_REQUIRE(cond, what) guards a caller's precondition: a failure is a bug in the caller, and
// the message names the bad value. Both print file:line and abort; neither is for expected
// failures (a kernel that does not compile, a missing file), which are values (core/status.h).
#ifndef VINCI_CORE_CHECK_H_
#define VINCI_CORE_CHECK_H_

#include <sstream>
#include <string>

namespace vinci {

[[noreturn]] void assertion_failed(const char* kind, const char* file, int line, const char* expr,
                                   const std::string& detail);

}  // namespace vinci

#define VINCI_ASSERT(cond)                                                                         \
  do {                                                                                             \
    if (!(cond)) ::vinci::assertion_failed("assertion", __FILE__, __LINE__, #cond, std::string()); \
  } while (0)

#define VINCI_ASSERT_MSG(cond, ...)                                                       \
  do {                                                                                    \
    if (!(cond)) {                                                                        \
      std::ostringstream vinci_os_;                                                       \
      vinci_os_ << __VA_ARGS__;                                                           \
      ::vinci::assertion_failed("assertion", __FILE__, __LINE__, #cond, vinci_os_.str()); \
    }                                                                                     \
  } while (0)

#define VINCI_REQUIRE(cond, ...)                                                             \
  do {                                                                                       \
    if (!(cond)) {                                                                           \
      std::ostringstream vinci_os_;                                                          \
      vinci_os_ << __VA_ARGS__;                                                              \
      ::vinci::assertion_failed("precondition", __FILE__, __LINE__, #cond, vinci_os_.str()); \
    }                                                                                        \
  } while (0)

#endif  // VINCI_CORE_CHECK_H_
