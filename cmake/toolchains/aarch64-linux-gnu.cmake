# Cross-compiles for 64-bit Arm with Debian's g++-aarch64-linux-gnu against the
# arm64 multiarch packages (dpkg --add-architecture arm64; libhwy-dev:arm64
# libtbb-dev:arm64 libgtest-dev:arm64). Tests run under qemu-aarch64; the
# QEMU_CPU environment variable picks the CPU: cortex-a72 (NEON only) or
# max,sve256=on (SVE and SVE2 at 256 bits).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)

# Multiarch: arm64 libraries and package configs live in /usr/lib/aarch64-linux-gnu,
# headers are shared in /usr/include. Never pick up x86-64 libraries.
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu /)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
set(ENV{PKG_CONFIG_LIBDIR} /usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig)

find_program(SIMDATTN_QEMU_AARCH64 qemu-aarch64 REQUIRED)
# No -L: the arm64 multiarch libc (a dependency of libhwy1:arm64) is found at
# its usual path; mixing in the cross libc of /usr/aarch64-linux-gnu hangs
# pthread_create under qemu.
set(CMAKE_CROSSCOMPILING_EMULATOR ${SIMDATTN_QEMU_AARCH64})
