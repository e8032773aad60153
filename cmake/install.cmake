# Installs libsimdattn, its headers, a CMake package (find_package(simdattn))
# and a pkg-config file.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(TARGETS simdattn EXPORT simdattnTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/simdattn
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${PROJECT_BINARY_DIR}/include/simdattn/export.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/simdattn)

set(SIMDATTN_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/simdattn)
install(EXPORT simdattnTargets NAMESPACE simdattn::
        DESTINATION ${SIMDATTN_CMAKE_DIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/simdattnConfig.cmake.in
  ${PROJECT_BINARY_DIR}/simdattnConfig.cmake
  INSTALL_DESTINATION ${SIMDATTN_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/simdattnConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/simdattnConfig.cmake
              ${PROJECT_BINARY_DIR}/simdattnConfigVersion.cmake
        DESTINATION ${SIMDATTN_CMAKE_DIR})

# pkg-config: a static library's users link hwy and tbb themselves, so they
# are public requirements there and private ones for a shared build.
if(BUILD_SHARED_LIBS)
  set(SIMDATTN_PC_REQUIRES Requires.private)
else()
  set(SIMDATTN_PC_REQUIRES Requires)
endif()
configure_file(${PROJECT_SOURCE_DIR}/cmake/simdattn.pc.in
               ${PROJECT_BINARY_DIR}/simdattn.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/simdattn.pc
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
