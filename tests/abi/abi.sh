#!/usr/bin/env bash
# The shared library's ABI against the committed baseline of its version,
# tests/abi/simdattn-VERSION.abi.xz (libabigail's XML of the public headers'
# types and the exported symbols, xz-compressed: 6 MB of XML otherwise).
#   abi.sh check  LIB VERSION   fails on any change of the ABI but those
#                               compatible by design (added functions, and
#                               fields appended to the C API's sized structs:
#                               suppressions.abignore), and without a
#                               baseline for VERSION
#   abi.sh update LIB VERSION   writes the baseline: commit it together with
#                               the version it belongs to
# LIB: build/release/abi/libsimdattn.so (the SIMDATTN_ABI_CHECK build).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
mode=${1:-} lib=${2:-} version=${3:-}
baseline=$here/simdattn-$version.abi.xz
headers=$(cd "$here/../../include/simdattn" && pwd)
export_dir=$(dirname "$lib")/include/simdattn

dump() {
  abidw --headers-dir "$headers" --headers-dir "$export_dir" \
    --drop-private-types --no-show-locs --no-corpus-path --out-file "$1" "$lib"
}

case "$mode" in
  update)
    xml=$(mktemp)
    trap 'rm -f "$xml"' EXIT
    dump "$xml"
    xz -9 -c "$xml" > "$baseline"
    echo "wrote $baseline"
    ;;
  check)
    if [ ! -f "$baseline" ]; then
      echo "no ABI baseline for version $version ($baseline)." >&2
      echo "A new version needs one: tests/abi/abi.sh update $lib $version" >&2
      exit 1
    fi
    current=$(mktemp) expected=$(mktemp)
    trap 'rm -f "$current" "$expected"' EXIT
    xz -d -c "$baseline" > "$expected"
    dump "$current"
    # abidiff's status is a bit set: 1 error, 2 usage, 4 a change, 8 an
    # incompatible change. Any change left after the suppressions fails: a
    # C++ struct that grows breaks callers that allocate it.
    status=0
    abidiff --no-added-syms --suppressions "$here/suppressions.abignore" \
      "$expected" "$current" || status=$?
    if (( status != 0 )); then
      echo "ABI of $lib differs from version $version's baseline" \
           "(abidiff status $status): keep the ABI, or bump the version" \
           "and write its baseline in the same commit." >&2
      exit 1
    fi
    echo "ABI compatible with $(basename "$baseline")"
    ;;
  *)
    sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
