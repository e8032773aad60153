# Resolves every dependency: the installed package first (Debian/Ubuntu's
# -dev packages), then, only when SIMDATTN_ALLOW_DOWNLOADS is ON, FetchContent
# at a pinned release; otherwise configuration stops with the install command.
include(FetchContent)

# simdattn_require(<name> <package> <apt-package> <git-url> <tag> [find args])
# After it, the package's imported targets exist or configure has failed.
macro(simdattn_require name package apt_package git_url git_tag)
  find_package(${package} ${ARGN} QUIET)
  if(NOT ${package}_FOUND)
    if(SIMDATTN_ALLOW_DOWNLOADS)
      message(STATUS "simdattn: ${name} not installed; fetching ${git_tag}")
      FetchContent_Declare(${name} GIT_REPOSITORY ${git_url} GIT_TAG ${git_tag}
                           GIT_SHALLOW TRUE)
      FetchContent_MakeAvailable(${name})
    else()
      message(FATAL_ERROR
        "simdattn needs ${name}, which was not found. Install it with:\n"
        "  sudo apt-get install ${apt_package}\n"
        "or configure with -DSIMDATTN_ALLOW_DOWNLOADS=ON to fetch ${git_tag}.")
    endif()
  endif()
endmacro()

set(HWY_ENABLE_TESTS OFF CACHE BOOL "" FORCE)
set(HWY_ENABLE_EXAMPLES OFF CACHE BOOL "" FORCE)
simdattn_require(highway hwy libhwy-dev
  https://github.com/google/highway.git 1.2.0 1.0.3)
set(TBB_TEST OFF CACHE BOOL "" FORCE)
simdattn_require(oneTBB TBB libtbb-dev
  https://github.com/oneapi-src/oneTBB.git v2021.13.0 2021)

if(SIMDATTN_BUILD_TESTS)
  set(INSTALL_GTEST OFF CACHE BOOL "" FORCE)
  simdattn_require(googletest GTest libgtest-dev
    https://github.com/google/googletest.git v1.14.0)
  if(NOT TARGET GTest::gtest_main AND TARGET gtest_main)
    add_library(GTest::gtest_main ALIAS gtest_main)
    add_library(GTest::gtest ALIAS gtest)
  endif()
endif()
if(SIMDATTN_BUILD_BENCHMARKS OR SIMDATTN_BUILD_TOOLS)
  set(BENCHMARK_ENABLE_TESTING OFF CACHE BOOL "" FORCE)
  simdattn_require(benchmark benchmark libbenchmark-dev
    https://github.com/google/benchmark.git v1.8.3)
endif()
# File formats (tools/io), used by the program and the golden-data tests.
if(SIMDATTN_BUILD_TOOLS OR SIMDATTN_BUILD_TESTS OR SIMDATTN_BUILD_FUZZERS)
  simdattn_require(json nlohmann_json nlohmann-json3-dev
    https://github.com/nlohmann/json.git v3.11.3 3.10)
endif()
if(SIMDATTN_BUILD_TOOLS)
  simdattn_require(cli11 CLI11 libcli11-dev
    https://github.com/CLIUtils/CLI11.git v2.3.2 2.1)
endif()

# Optional comparison libraries for the benchmarks: never required.
if(SIMDATTN_BUILD_BENCHMARKS OR SIMDATTN_BUILD_TOOLS)
  # Debian's dnnl-config.cmake find_package()s OpenCL as REQUIRED (its GPU
  # runtime), which would fail our configure when only libdnnl-dev is there.
  find_package(OpenCL QUIET)
  if(OpenCL_FOUND)
    find_package(dnnl CONFIG QUIET)
  endif()
  find_package(PkgConfig QUIET)
  if(PkgConfig_FOUND)
    pkg_check_modules(OPENBLAS QUIET IMPORTED_TARGET openblas)
  endif()
  message(STATUS "simdattn: comparison with oneDNN: ${dnnl_FOUND}, "
                 "OpenBLAS: ${OPENBLAS_FOUND}")
endif()
