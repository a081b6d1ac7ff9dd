#!/usr/bin/env bash
# Sets up, builds and runs every test (the README's second command; .ci/run calls it).
# Pass ctest arguments to narrow it: scripts/test.sh -LE slow
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
ctest --test-dir build --output-on-failure --parallel "$(nproc)" "$@"
if (($# == 0)); then
  # The C++ layout of .clang-format (scripts/format.sh rewrites what differs).
  bash scripts/format.sh --check
  # vinci's Python package against the real binaries (docs/python.md).
  echo "test.sh: python tests (tests/python)"
  python3 -m pytest -q -p no:cacheprovider tests/python
  # Recorded vLLM answers replayed byte for byte (tests/llm/README.md; no vLLM needed).
  echo "test.sh: vLLM transcript tests (tests/llm)"
  python3 -m pytest -q -p no:cacheprovider tests/llm
  # Replays must not depend on variables a machine happens to set: the replay tests once more with
  # the OpenBLAS variables unset, and once with them set (docs/determinism.md, "Numeric pinning").
  # Only the tests that re-derive numbers (verify, score, rescore under the run's own profile); the
  # ones about bad input and damage do not depend on these variables.
  numeric='Golden.*:Checkpoints.*:TestTimeScaling.*:Replay.Verify*:Replay.ScoreMatches*:Replay.ScoreOf*'
  numeric+=':Replay.OtherNumericSettingsAreNamed:Replay.EnvironmentStringsAreNotSettings'
  numeric+=':Rescore.UnderTheRunsOwnProfileNothingMoves'
  echo "test.sh: replay tests with OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset"
  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE build/bin/replay_tests --gtest_brief=1 --gtest_filter="$numeric"
  echo "test.sh: replay tests with OPENBLAS_CORETYPE=Haswell OPENBLAS_L2_SIZE=1048576"
  env OPENBLAS_CORETYPE=Haswell OPENBLAS_L2_SIZE=1048576 build/bin/replay_tests --gtest_brief=1 --gtest_filter="$numeric"
  # Every parser under the fuzzers, and the unit tests under AddressSanitizer and
  # UndefinedBehaviorSanitizer, in build-fuzz/ (docs/testing.md). VINCI_FUZZ_SECONDS sets the time
  # per fuzz target; the default keeps CI on two cores within its budget.
  bash scripts/fuzz.sh "${VINCI_FUZZ_SECONDS:-20}"
fi
