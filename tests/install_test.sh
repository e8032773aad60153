#!/usr/bin/env bash
# Installs the build tree into a temporary prefix, then builds and runs
# examples/consumer against it twice: through find_package(simdattn) and
# through pkg-config.
# Usage: install_test.sh <build-dir> <source-dir> [compiler flags]
# The flags are the build's own (a sanitizer build's consumer must link the
# sanitizer runtime too).
set -euo pipefail
build=$1
source=$2
flags=${3:-}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cmake --install "$build" --prefix "$work/prefix" > "$work/install.log"
for f in include/simdattn/simdattn.h include/simdattn/export.h \
         lib/cmake/simdattn/simdattnConfig.cmake \
         lib/cmake/simdattn/simdattnConfigVersion.cmake \
         lib/cmake/simdattn/simdattnTargets.cmake lib/pkgconfig/simdattn.pc; do
  [ -e "$work/prefix/$f" ] || { echo "missing after install: $f"; exit 1; }
done
ls "$work"/prefix/lib/libsimdattn.* > /dev/null
# No Highway or TBB header may leak into the public API.
if grep -rlE '#include [<"](hwy|tbb|oneapi)/' "$work/prefix/include/simdattn"; then
  echo "a public header includes Highway or TBB"; exit 1
fi

echo "== find_package(simdattn)"
cmake -S "$source/examples/consumer" -B "$work/cmake-consumer" -G Ninja \
  -DCMAKE_PREFIX_PATH="$work/prefix" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="$flags" > "$work/configure.log" \
  || { cat "$work/configure.log"; exit 1; }
cmake --build "$work/cmake-consumer" > "$work/build.log" || { cat "$work/build.log"; exit 1; }
"$work/cmake-consumer/consumer"

echo "== pkg-config simdattn"
export PKG_CONFIG_PATH="$work/prefix/lib/pkgconfig"
# shellcheck disable=SC2046,SC2086
c++ -std=c++17 $flags "$source/examples/consumer/main.cc" -o "$work/pc-consumer" \
  $(pkg-config --cflags --libs simdattn)
"$work/pc-consumer"
