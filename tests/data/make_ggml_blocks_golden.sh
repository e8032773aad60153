#!/usr/bin/env bash
# Writes tests/data/ggml_blocks/golden.bin (and cases.txt): q8_0, q4_0, q4_1
# and iq4_nl blocks made by ggml's reference quantizers, for bit-exact tests
# of our own.
#
# Usage:
#
#     tests/data/make_ggml_blocks_golden.sh GGML_SOURCE_TREE
#
# GGML_SOURCE_TREE is a checkout of https://github.com/ggml-org/ggml (the
# directory holding include/ggml.h and src/ggml-quants.c), or of llama.cpp
# (whose ggml/ subdirectory is then used). The checked-in files were made from
#
#     ggml-org/ggml d99724f2b141fed9e1a9f402213506c081433465
#
# e.g.
#     git clone https://github.com/ggml-org/ggml /tmp/ggml
#     git -C /tmp/ggml checkout d99724f2b141fed9e1a9f402213506c081433465
#     tests/data/make_ggml_blocks_golden.sh /tmp/ggml
#
# It compiles tests/data/ggml_blocks_golden.c (our code: inputs, stubs, file
# writer, and an independent check of the arithmetic) with ggml's own
# src/ggml-quants.c, nothing else of ggml, at -O0 with no fast-math and no
# FP contraction (no FMA), for the host's default ISA (no -march), and runs it.
# Running it again writes identical bytes. The format of golden.bin is
# described at the top of ggml_blocks_golden.c. Needs a C11 compiler ($CC,
# default cc) on a target where float arithmetic is plain IEEE binary32
# (x86-64, aarch64; not x87).
set -euo pipefail

if [ $# -ne 1 ]; then
    sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
fi

src=$1
if [ ! -f "$src/src/ggml-quants.c" ] && [ -f "$src/ggml/src/ggml-quants.c" ]; then
    src=$src/ggml
fi
for f in include/ggml.h src/ggml-quants.c src/ggml-quants.h src/ggml-common.h src/ggml-impl.h; do
    if [ ! -f "$src/$f" ]; then
        echo "make_ggml_blocks_golden.sh: $src/$f not found; is $1 a ggml source tree?" >&2
        exit 1
    fi
done

here=$(cd "$(dirname "$0")" && pwd)
out=$here/ggml_blocks
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

cc=${CC:-cc}
cflags=(-std=c11 -O0 -fno-fast-math -ffp-contract=off -I"$src/include" -I"$src/src")

"$cc" "${cflags[@]}" -w -c "$src/src/ggml-quants.c" -o "$tmp/ggml-quants.o"
"$cc" "${cflags[@]}" -Wall -Wextra -c "$here/ggml_blocks_golden.c" -o "$tmp/ggml_blocks_golden.o"
"$cc" "$tmp/ggml_blocks_golden.o" "$tmp/ggml-quants.o" -lm -o "$tmp/ggml_blocks_golden"

mkdir -p "$out"
"$tmp/ggml_blocks_golden" "$tmp/golden.bin" > "$tmp/cases.txt"
mv "$tmp/golden.bin" "$out/golden.bin"
mv "$tmp/cases.txt" "$out/cases.txt"

if commit=$(git -C "$src" rev-parse HEAD 2>/dev/null); then
    echo "ggml commit: $commit"
fi
echo "wrote $out/golden.bin ($(wc -c < "$out/golden.bin") bytes) and $out/cases.txt"
