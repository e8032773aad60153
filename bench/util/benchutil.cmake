# simdattn_benchutil: what `simdattn bench` (tools/) and the Google Benchmark
# binaries (bench/) share: standard shapes and their FLOP/byte counts, the
# workloads (simdattn, and oneDNN/OpenBLAS when found at configure time), the
# timing loop and the per-target peak loops. Included from both directories
# (either may be built without the other), defined once.
include_guard(GLOBAL)

add_library(simdattn_benchutil STATIC
  ${CMAKE_CURRENT_LIST_DIR}/peak.cc
  ${CMAKE_CURRENT_LIST_DIR}/shapes.cc
  ${CMAKE_CURRENT_LIST_DIR}/timing.cc
  ${CMAKE_CURRENT_LIST_DIR}/workloads.cc)
target_include_directories(simdattn_benchutil PUBLIC ${PROJECT_SOURCE_DIR})
find_package(Threads REQUIRED)
target_link_libraries(simdattn_benchutil
  PUBLIC simdattn
  PRIVATE simdattn_warnings hwy::hwy Threads::Threads)

# Optional comparisons: compile definitions select the adapters in
# workloads.cc; without them the library builds and reports them missing.
# Each library runs at the requested thread count: oneDNN through OpenMP
# (Debian's libdnnl2 uses libgomp), OpenBLAS through openblas_set_num_threads.
if(dnnl_FOUND)
  find_package(OpenMP COMPONENTS CXX QUIET)
  target_compile_definitions(simdattn_benchutil PRIVATE SIMDATTN_HAVE_ONEDNN)
  target_link_libraries(simdattn_benchutil PRIVATE DNNL::dnnl)
  # Without OpenMP we cannot bound an OpenMP oneDNN's threads.
  if(TARGET OpenMP::OpenMP_CXX)
    target_link_libraries(simdattn_benchutil PRIVATE OpenMP::OpenMP_CXX)
  endif()
endif()
if(OPENBLAS_FOUND)
  target_compile_definitions(simdattn_benchutil PRIVATE SIMDATTN_HAVE_OPENBLAS)
  target_link_libraries(simdattn_benchutil PRIVATE PkgConfig::OPENBLAS)
endif()
