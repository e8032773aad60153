#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz) with clang-14 in build/fuzz, the
# library included, under ASan + UBSan with coverage, and runs each for a
# bounded time from its seed corpus, all at once (a fuzzer is one thread).
# Fails on any crash, leak, sanitizer report or timeout.
# Usage: run_fuzzers.sh [seconds per target, default 60]
# Findings are written to build/fuzz/findings/<target>/; new corpus entries
# to build/fuzz/corpus/<target>/ (the checked-in seeds are not modified).
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds=${1:-60}
build=build/fuzz
targets=(npy_fuzzer safetensors_fuzzer c_api_shape_fuzzer)
flags="-fsanitize=address,undefined,fuzzer-no-link -fno-sanitize-recover=all"
flags+=" -fno-omit-frame-pointer"
# One SIMD target: the fuzzers test parsing and argument checks, which no
# target changes, and the kernels' targets are the test suites' (release:
# all of them; asan: AVX3 and EMU128). Each kernel file compiles once, as
# AVX2 where the CPU has Highway's AVX2 features: instrumented, EMU128's
# lane-by-lane loops took nine times as long to compile (attend_blocks.cc:
# 444-470 s against 51). The pragma warning: a kernel file with no function
# of its own (a table of another's) leaves an AVX2 target region empty.
avx2=1
for feature in avx2 bmi2 fma f16c aes pclmulqdq; do
  grep -qw "$feature" /proc/cpuinfo 2> /dev/null || avx2=0
done
if [ "$(uname -m)" = x86_64 ] && [ $avx2 = 1 ]; then
  flags+=" -DHWY_COMPILE_ONLY_STATIC -march=haswell -maes"
  flags+=" -Wno-pragma-clang-attribute"
else
  flags+=" -DHWY_COMPILE_ONLY_EMU128"
fi

echo "=== Configure + build: $build (clang-14)"
# -O1 -g1, as in the sanitizer presets: half the compile time of -O2 -g, and
# line numbers in every report.
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
  -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 \
  -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
  -DSIMDATTN_BUILD_FUZZERS=ON -DSIMDATTN_BUILD_TESTS=OFF \
  -DSIMDATTN_BUILD_BENCHMARKS=OFF -DSIMDATTN_BUILD_TOOLS=OFF \
  -DSIMDATTN_INSTALL=OFF > "$build.configure.log" 2>&1 \
  || { cat "$build.configure.log"; exit 1; }
cmake --build "$build" --target "${targets[@]}"

# allocator_may_return_null: a failed huge allocation must reach the library
# as std::bad_alloc (and come out as SIMDATTN_STATUS_OUT_OF_MEMORY), not
# abort inside ASan.
export ASAN_OPTIONS="allocator_may_return_null=1:detect_leaks=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
pids=()
for target in "${targets[@]}"; do
  corpus="$build/corpus/$target"
  findings="$build/findings/$target"
  mkdir -p "$corpus" "$findings"
  echo "=== Fuzz: $target for ${seconds} s"
  "$build/tests/fuzz/$target" "$corpus" "tests/fuzz/corpus/$target" \
    -max_total_time="$seconds" -timeout=25 -max_len=4096 \
    -artifact_prefix="$findings/" -print_final_stats=1 \
    > "$findings/log.txt" 2>&1 &
  pids+=($!)
done
status=0
for i in "${!targets[@]}"; do
  target=${targets[$i]}
  findings="$build/findings/$target"
  if ! wait "${pids[$i]}"; then
    tail -n 60 "$findings/log.txt"
    echo "FAILED: $target (log and reproducer in $findings)" >&2
    status=1
    continue
  fi
  echo "=== $target:"
  grep -E '^(#[0-9]+[[:space:]]+DONE|stat::number_of_executed_units)' \
    "$findings/log.txt" || true
done
exit $status
