# The fuzzing build (VINCI_FUZZ=ON; scripts/fuzz.sh configures it in build-fuzz/). Included by the
# top-level CMakeLists.txt after the packages every build needs were found; it adds only what the
# fuzz targets and the sanitized tests link: core, recorder, the torch-free parser sources of gpu,
# agents and harness, and for the tests the sources of these that the unit tests reach
# (fuzz/CMakeLists.txt). docs/testing.md says what runs here and why.
if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  message(FATAL_ERROR "VINCI_FUZZ needs clang++ (libFuzzer): configure with "
                      "-DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang, found "
                      "${CMAKE_CXX_COMPILER_ID} ${CMAKE_CXX_COMPILER}")
endif()

add_compile_options(-Wall -Wextra -Wno-unused-parameter)
# OSS-Fuzz's optimisation and debug level: -O1 keeps sanitizer reports exact and compiles in about
# half the time of -O2 -g; line tables are all a stack trace needs.
set(CMAKE_C_FLAGS_RELWITHDEBINFO "-O1 -gline-tables-only")
set(CMAKE_CXX_FLAGS_RELWITHDEBINFO "-O1 -gline-tables-only")

# Every object of vinci's own code: AddressSanitizer (leaks included) and UndefinedBehaviorSanitizer,
# which aborts at the first report rather than printing and going on, and libFuzzer's coverage
# instrumentation. Prebuilt libraries (Cap'n Proto, zstd, xxhash, GoogleTest, libtorch) are not
# instrumented.
set(VINCI_SANITIZERS -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer)
add_compile_options(${VINCI_SANITIZERS} -fsanitize=fuzzer-no-link)
add_link_options(${VINCI_SANITIZERS})

find_package(CURL REQUIRED)  # the chat client's reply parser lives beside its HTTP code
# Only the sanitized unit tests that link libtorch need it (fuzz/CMakeLists.txt); no fuzz target does.
if(VINCI_BUILD_TESTS)
  find_package(Torch REQUIRED)
  find_package(CUDAToolkit REQUIRED)  # NVRTC, which the sim evaluator's compile check calls
endif()

include_directories(${CMAKE_SOURCE_DIR} ${CMAKE_BINARY_DIR})

add_subdirectory(core)
add_subdirectory(recorder)
add_subdirectory(fuzz)
