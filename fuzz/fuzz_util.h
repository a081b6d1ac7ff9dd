// Shared by the fuzz targets (fuzz/*.cc): what every target may treat as a bug beyond a crash.
#ifndef VINCI_FUZZ_FUZZ_UTIL_H_
#define VINCI_FUZZ_FUZZ_UTIL_H_

#include <cstdio>
#include <cstdlib>
#include <string>

// A broken invariant of a parser's contract (a round trip that does not hold, an accepted input
// that a later reader refuses): printed and aborted, so libFuzzer keeps the input as a crash.
#define VINCI_FUZZ_CHECK(cond, what)                                                              \
  do {                                                                                            \
    if (!(cond)) {                                                                                \
      std::fprintf(stderr, "fuzz invariant failed at %s:%d: %s: %s\n", __FILE__, __LINE__, #cond, \
                   std::string(what).c_str());                                                    \
      std::abort();                                                                               \
    }                                                                                             \
  } while (0)

#endif  // VINCI_FUZZ_FUZZ_UTIL_H_
