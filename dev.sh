#!/usr/bin/env bash
# The project's commands, on a fresh Debian/Ubuntu machine:
#   ./dev.sh demo   install what is missing, build Release, run `simdattn demo`
#   ./dev.sh bench  the same set-up, then the benchmark report (bench/results.sh
#                   [--smoke] [--out DIR]): bench/RESULTS.md, results.json, .png
#   ./dev.sh test   the same set-up, then the whole test suite: x86 on every
#                   SIMD target, install + consumer tests, the Python
#                   package's (pytest), ASan+UBSan, the
#                   libFuzzer targets (45 s, all at once), TSan, and aarch64
#                   under qemu with NEON and with SVE.
# Packages come from the system package manager: apt-get as root (or through
# sudo without a password); otherwise the exact command is printed.
set -euo pipefail
cd "$(dirname "$0")"

BUILD_PACKAGES=(cmake ninja-build g++ ccache pkg-config
  libhwy-dev libtbb-dev libgtest-dev libbenchmark-dev
  nlohmann-json3-dev libcli11-dev
  libxxhash-dev  # The KV transfer format's checksum (header-only use).
  abigail-tools xz-utils  # The ABI check (tests/abi).
  libdnnl-dev ocl-icd-opencl-dev libopenblas-dev  # Comparison benchmarks only.
  clang-14 libclang-rt-14-dev)  # libFuzzer targets (tests/fuzz).
PLOT_PACKAGES=(python3-matplotlib)  # bench/plot.py: the report, its smoke test.
# The Python package (python/) and its tests (tests/python).
PYTHON_PACKAGES=(python3-dev python3-pybind11 python3-numpy python3-torch
  python3-pytest)
ARM_PACKAGES=(qemu-user g++-aarch64-linux-gnu
  libhwy-dev:arm64 libtbb-dev:arm64 libgtest-dev:arm64 libbenchmark-dev:arm64)

log() { printf '\n=== %s\n' "$*"; }

missing_packages() {
  local p
  for p in "$@"; do
    dpkg-query -W -f='${Status}\n' "$p" 2> /dev/null | grep -q 'install ok installed' \
      || echo "$p"
  done
}

# install_packages PACKAGE...: installs those not yet installed.
install_packages() {
  local missing
  mapfile -t missing < <(missing_packages "$@")
  [ ${#missing[@]} -eq 0 ] && return 0
  local sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo > /dev/null && sudo -n true 2> /dev/null; then
      sudo=(sudo)
    else
      echo "Missing packages. Install them with:" >&2
      echo "  sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
      exit 1
    fi
  fi
  if printf '%s\n' "${missing[@]}" | grep -q ':arm64$' &&
     ! dpkg --print-foreign-architectures | grep -qx arm64; then
    "${sudo[@]}" dpkg --add-architecture arm64
  fi
  log "Installing ${missing[*]}"
  "${sudo[@]}" apt-get update -q
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -q --no-install-recommends \
    "${missing[@]}"
}

# build PRESET [TARGETS...]
build() {
  local preset=$1
  shift
  log "Configure + build: $preset"
  cmake --preset "$preset" > "build/$preset.configure.log" 2>&1 \
    || { cat "build/$preset.configure.log"; exit 1; }
  cmake --build --preset "$preset" "$@"
}

# python_tests: the Python package built against build/release, and its
# tests, by Debian's interpreter (which has python3-torch).
python_tests() {
  log "Python package + tests (against build/release)"
  cmake -S python -B build/python -G Ninja -DSIMDATTN_BUILD_DIR=build/release \
    > build/python.configure.log 2>&1 || { cat build/python.configure.log; exit 1; }
  cmake --build build/python
  PYTHONPATH=build/python PYTHONDONTWRITEBYTECODE=1 \
    /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/python
}

# run_tests PRESET: every CTest test of that build, one per core at a time,
# the costliest first (COST in tests/CMakeLists.txt): most of a test's time
# is one thread, so a serial run left the other core mostly idle.
run_tests() {
  log "Tests: $1"
  ctest --preset "$1" --timeout 1500 --parallel "$(nproc)"
}

cmd=${1:-}
case "$cmd" in
  demo)
    install_packages "${BUILD_PACKAGES[@]}"
    mkdir -p build
    build release --target simdattn_cli
    ./build/release/tools/simdattn demo
    ;;
  bench)
    shift
    install_packages "${BUILD_PACKAGES[@]}" "${PLOT_PACKAGES[@]}"
    mkdir -p build
    build release --target simdattn_cli
    log "Benchmark report"
    bench/results.sh "$@" build/release/tools/simdattn
    ;;
  test)
    install_packages "${BUILD_PACKAGES[@]}" "${PLOT_PACKAGES[@]}" \
      "${PYTHON_PACKAGES[@]}" "${ARM_PACKAGES[@]}"
    mkdir -p build
    start=$SECONDS
    build release
    run_tests release
    python_tests
    build asan
    run_tests asan
    build tsan
    run_tests tsan
    # The three fuzzers at once: on two cores, 45 s each is the 30 s of a
    # core each that they had one after another.
    log "Fuzzing: every target for 45 s, all at once"
    bash tests/fuzz/run_fuzzers.sh 45
    build aarch64
    run_tests aarch64-neon
    run_tests aarch64-sve
    log "All test suites passed in $((SECONDS - start)) s"
    ;;
  *)
    sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'
    [ -z "$cmd" ] || { echo "unknown command: $cmd" >&2; exit 2; }
    exit 2
    ;;
esac
