#!/usr/bin/env bash
# Builds the fuzz targets and the sanitized unit tests into build-fuzz/ (clang, AddressSanitizer and
# UndefinedBehaviorSanitizer on all of vinci's code; libtorch, prebuilt, is not instrumented;
# docs/testing.md), runs the unit tests under them (core, recorder, the parsers, the agents and the
# sim backbone, the chat client, the reference executor and output comparison, Triton plans; not
# the GPU, CLI or slow tests, the sim's and the harness loop's tests (their build time), nor three
# slow single tests named below), then every fuzz target from a copy of its committed corpus (fuzz/corpus/<target>/) for
# SECONDS_PER_TARGET seconds (default 30).
# Fails on any crash, leak, sanitizer report or broken invariant; the input that caused it is kept
# in build-fuzz/crashes/<target>/. Prints the executions of every target.
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]   TARGET: run_log, manifest, ... (default: all)
#   VINCI_FUZZ_SKIP_TESTS=1 scripts/fuzz.sh            the fuzzers only, not the sanitized tests
#   VINCI_FUZZ_MORE_TESTS=1 scripts/fuzz.sh            also sim_tests and harness_tests, and every
#                                                      test left out below (not in CI: build time)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-30}
shift || true
if ! [[ "$seconds" =~ ^[0-9]+$ ]] || ((seconds < 1)); then
  echo "fuzz.sh: SECONDS_PER_TARGET must be a whole number of seconds >= 1, found '$seconds'" >&2
  exit 2
fi
all_targets=(run_log object_file manifest experiment_config skill_library tool_calls model_plan
             kernelbench_module plan_json expr queue_request task_file sim_checkpoint bounded_read)
targets=("$@")
if ((${#targets[@]} == 0)); then targets=("${all_targets[@]}"); fi
for t in "${targets[@]}"; do
  if [ ! -d "fuzz/corpus/$t" ]; then
    echo "fuzz.sh: no target '$t' (expected one of: ${all_targets[*]})" >&2
    exit 2
  fi
done

launcher=()
if command -v ccache >/dev/null 2>&1; then
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
generator=()
if command -v ninja >/dev/null 2>&1; then generator=(-G Ninja); fi
if [ ! -f build-fuzz/CMakeCache.txt ]; then
  cmake -S . -B build-fuzz "${generator[@]}" -DVINCI_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ "${launcher[@]}" >/dev/null
fi
build_targets=(fuzzers)
if [ -z "${VINCI_FUZZ_SKIP_TESTS:-}" ]; then build_targets+=(sanitized_tests); fi
if [ -z "${VINCI_FUZZ_SKIP_TESTS:-}" ] && [ -n "${VINCI_FUZZ_MORE_TESTS:-}" ]; then
  build_targets+=(sanitized_tests_more)
fi
cmake --build build-fuzz --parallel "$(nproc)" --target "${build_targets[@]}"

export ASAN_OPTIONS=halt_on_error=1:print_stacktrace=1:detect_leaks=1:abort_on_error=0
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1

if [ -z "${VINCI_FUZZ_SKIP_TESTS:-}" ]; then
  # The unit tests under the sanitizers (docs/testing.md): BINARY [GTEST_FILTER].
  # With VINCI_FUZZ_MORE_TESTS set, the filter is ignored: every test runs.
  sanitized() {
    local filter=${2:-*}
    if [ -n "${VINCI_FUZZ_MORE_TESTS:-}" ]; then filter='*'; fi
    echo "fuzz.sh: $1 under AddressSanitizer and UndefinedBehaviorSanitizer"
    build-fuzz/bin/$1 --gtest_brief=1 --gtest_filter="$filter"
  }
  sanitized core_tests
  sanitized recorder_tests
  sanitized agents_tests
  sanitized agent_rules_tests
  sanitized backbone_tests
  sanitized chat_client_tests
  # Left out: ModelPlan.RandomSettingsRoundTripAndMatchWithAndWithoutTheHint, a randomized search of
  # half a minute in build/ and six under the sanitizers, over code the other model-plan tests and
  # the model_plan fuzz target cover; two TritonCompile tests whose time is Triton's own compiler in
  # Python (uninstrumented: 10 s each anywhere), and the module build cache's test, whose time is
  # torch's extension build (30 s anywhere); TritonCompile.AMissingTritonIsAClearError runs.
  sanitized gpu_task_test -ModelPlan.RandomSettingsRoundTripAndMatchWithAndWithoutTheHint
  sanitized gpu_triton_test \
    -TritonCompile.CommittedPlansCompileToSm90CubinsAndAreCached:TritonCompile.FailuresAreCleanRejectionsWithTritonsMessage:ModuleCheck.ABuiltModuleIsKeptAndTheNextCheckStartsFromItsBuild
  sanitized config_tests
  if [ -n "${VINCI_FUZZ_MORE_TESTS:-}" ]; then
    sanitized sim_tests
    sanitized harness_tests
  fi
fi

rm -rf build-fuzz/work
mkdir -p build-fuzz/work build-fuzz/crashes
# One fuzz target: its exit status goes to build-fuzz/work/<target>/rc.
fuzz_one() {
  local t=$1 work=build-fuzz/work/$1 crashes=build-fuzz/crashes/$1
  local dict=() rc=0
  if [ -f "fuzz/dict/$t.dict" ]; then dict=(-dict="fuzz/dict/$t.dict"); fi
  build-fuzz/bin/fuzz_$t "$work/corpus" "${dict[@]}" -max_total_time="$seconds" -seed=1 -timeout=10 \
    -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$crashes/" \
    >"$work/log" 2>&1 || rc=$?
  echo "$rc" >"$work/rc"
}
# The targets run as many at a time as there are cores (each is single-threaded), so the time per
# target stays SECONDS_PER_TARGET and the wall time shrinks.
jobs=$(nproc)
running=0
for t in "${targets[@]}"; do
  rm -rf "build-fuzz/crashes/$t"
  mkdir -p "build-fuzz/work/$t/corpus" "build-fuzz/crashes/$t"
  cp -r "fuzz/corpus/$t/." "build-fuzz/work/$t/corpus/"
  echo "fuzz.sh: $t for ${seconds}s"
  fuzz_one "$t" &
  running=$((running + 1))
  if ((running >= jobs)); then
    wait -n || true
    running=$((running - 1))
  fi
done
wait
failed=()
summary=()
for t in "${targets[@]}"; do
  work=build-fuzz/work/$t
  crashes=build-fuzz/crashes/$t
  rc=$(cat "$work/rc" 2>/dev/null || echo "no exit status")
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log" | tail -1)
  summary+=("$(printf '%-18s %10s executions in %ss' "$t" "${execs:-?}" "$seconds")")
  if [ "$rc" != 0 ]; then
    failed+=("$t")
    echo "fuzz.sh: $t FAILED (exit $rc); the end of its log ($work/log):" >&2
    tail -n 60 "$work/log" >&2
    echo "fuzz.sh: the input is in $crashes/; reproduce with build-fuzz/bin/fuzz_$t FILE" >&2
  fi
done
printf 'fuzz.sh: %s\n' "${summary[@]}"
if ((${#failed[@]})); then
  echo "fuzz.sh: ${#failed[@]} target(s) failed: ${failed[*]}" >&2
  exit 1
fi
echo "fuzz.sh: ok"
