#!/usr/bin/env bash
# The benchmark report: results.json, results.png and, in RESULTS.md, the
# section between its markers (the machine, the exact commands, the table).
# Every op at its standard shapes and every shipped capability (bf16 and int8
# arithmetic, each cache type contiguous and paged, the modules' steps) on
# the dispatched SIMD target (BENCH_TARGETS=all: every one this CPU has), at
# 1 thread and at all cores, beside oneDNN and OpenBLAS when simdattn was
# built with them. `./dev.sh bench` runs it; the prose after the markers
# (what bounds each kernel, the kept decisions) stays, and
# bench/check_report.py checks its version and the constants it cites.
#
#   bench/results.sh [--smoke] [--out DIR] [path/to/simdattn]
#
#   --smoke    a few tiny shapes, one repetition: the path end to end (CI)
#   --out DIR  where the three files go (default: bench/)
#
# Default binary: build/bench/tools/simdattn, else build/release/tools/simdattn.
# A binary for another architecture (the aarch64 preset's) runs under
# qemu-<arch>, whose QEMU_CPU picks the CPU (max,sve256=on: NEON, SVE, SVE2);
# the report then says that its numbers are an emulator's. The outputs are
# checked: records for every target measured, a PNG. Plotting needs
# python3-matplotlib.
set -euo pipefail

usage() { sed -n '12,15p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
die() { echo "bench/results.sh: $*" >&2; exit 1; }

smoke=0 out='' bin=''
while [ $# -gt 0 ]; do
  case $1 in
    --smoke) smoke=1 ;;
    --out) [ $# -ge 2 ] || usage; out=$(realpath -m "$2"); shift ;;
    -*) usage ;;
    *) [ -z "$bin" ] || usage; bin=$(realpath -m "$1") ;;
  esac
  shift
done
cd "$(dirname "$0")/.."
out=${out:-bench}
if [ -z "$bin" ]; then
  for b in build/bench/tools/simdattn build/release/tools/simdattn; do
    [ -x "$b" ] && { bin=$b; break; }
  done
fi
if [ -z "$bin" ] || [ ! -x "$bin" ]; then
  die "no simdattn binary${bin:+ at $bin}; build simdattn_cli"
fi
mkdir -p "$out"
json=$out/results.json png=$out/results.png md=$out/RESULTS.md

# Debian's python3-matplotlib lives in /usr/bin/python3's path, which a
# pyenv or venv python3 earlier in PATH does not see. Checked before the
# measurements, which take minutes.
python=${PYTHON:-python3}
if ! "$python" -c 'import matplotlib' 2> /dev/null && [ -x /usr/bin/python3 ]; then
  python=/usr/bin/python3
fi
"$python" -c 'import matplotlib' 2> /dev/null \
  || die "no matplotlib for $python: apt-get install python3-matplotlib" \
         "(./dev.sh bench does)"

# The machine. A foreign binary (ELF e_machine) runs under qemu-user.
host_cpu=$(lscpu 2> /dev/null | sed -n 's/^Model name: *//p' | head -1)
host_cpu=${host_cpu:-$(uname -m)}
case $(od -An -tx1 -j18 -N2 "$bin" | tr -d ' \n') in
  3e00) arch=x86_64 ;;
  b700) arch=aarch64 ;;
  *) arch=$(uname -m) ;;
esac
run=("$bin") emulator=
if [ "$arch" != "$(uname -m)" ]; then
  command -v "qemu-$arch" > /dev/null \
    || die "$bin is for $arch: needs qemu-$arch (qemu-user)"
  run=("qemu-$arch" "$bin")
  emulator="qemu-$arch (QEMU_CPU=${QEMU_CPU:-unset})"
  machine="$emulator on $host_cpu"
else
  machine=$host_cpu
fi
cores=$(nproc)
threads=1
[ "$cores" -eq 1 ] || threads="1 and $cores"
info=$("${run[@]}" info)
# targets LINE: the targets `simdattn info` lists there, one a line.
targets() { sed -n "s/^$1: *//p" <<< "$info" | tr ' ' '\n'; }
supported=$(targets 'supported on CPU')
# SCALAR (EMU128 in newer Highway) is the fallback without SIMD.
fallback='SCALAR|EMU128'
simd=$(grep -vxE "$fallback" <<< "$supported" | paste -sd, -) || true
fallback=$(grep -xE "$fallback" <<< "$supported" | paste -sd' ' -) || true
[ -n "$simd" ] || die "this CPU supports no SIMD target (${supported//$'\n'/ })"
lacking=$(targets 'compiled targets' | grep -vxF -f <(echo "$supported") \
  | paste -sd' ' -) || true

# The dispatched target (BENCH_TARGETS: others, e.g. all); under an
# emulator a smoke run measures the last (simplest) SIMD target only:
# emulated SVE runs ~40x slower than NEON, past the test's time limit.
all_simd=$simd
simd=${BENCH_TARGETS:-$(sed -n 's/^dispatch picks: *//p' <<< "$info")}
[ -n "$simd" ] || simd=${all_simd%%,*}
[ $smoke -eq 0 ] || [ -z "$emulator" ] || simd=${all_simd##*,}
args=(bench --op all --targets "$simd" --threads "1,$cores" --compare)
# Every shipped capability: each op's standard shapes (bench --list), and
# bf16 and int8 arithmetic, every cache type contiguous and paged, grouped
# and latent caches, the modules' steps.
standard() { "${run[@]}" bench --list | sed -n "/^$1 /,/standard:/s/^ *standard: *//p"; }
extra=(matmul=1024x768x768_bf16dot,matmul=1024x768x768_Bt_bf16dot_packed
  matmul=1x768x2304_Bt_bf16,matmul=1x768x2304_Bt_bf16dot_packed
  attention=1x12x1024x64_causal_bf16dot,attention=1x32x2048x128_kv8_causal_bf16dot
  mha=1x1024x768x12_bf16dot,mha=8x1024x768x12_step,mha=8x1024x768x12_step_bf16
  decode=1x32x4096x128_kv8_kvbf16,decode=1x16x4096x576_kv1_mla512_kvbf16
  decode=8x12x4096x64_kvbf16_bf16dot,decode=8x12x4096x64_kvfp8_bf16dot
  serve=32x8x128_ctx4096_d32_kvbf16,serve=32x8x128_ctx4096_d32_kvq8_0)
for type in $(sed -n 's/^cache types: *f32 //p' <<< "$info"); do
  extra+=("decode=8x12x4096x64_kv$type" "decode=8x12x4096x64_kv${type}_paged16"
          "append=8x12x512x64_kv${type}_rope")
done
for type in $(sed -n 's/^int8 scores: *//p' <<< "$info"); do
  extra+=("decode=8x12x4096x64_kv${type}_int8dot")
done
if [ $smoke -eq 0 ]; then
  for op in matmul softmax dropout mha attention decode append serve; do
    args+=(--shape "$(standard "$op" | tr ' ' '\n' | sed "s/^/$op=/" | paste -sd, -)")
  done
  args+=(--shape "$(IFS=,; echo "${extra[*]}")")
fi
# shellcheck disable=SC2054  # Commas separate the --shape items.
[ $smoke -eq 0 ] || args+=(--shape matmul=16x16x16,matmul=64x64x64_Bt
  --shape softmax=1x2x16x16_causal,dropout=1x2x16x16,mha=1x8x16x2
  --shape attention=1x4x32x16_kv2_causal,decode=1x4x64x16,append=1x2x16x8
  --shape decode=1x4x64x32_kviq4_nl_paged16,decode=1x4x64x32_kvq4_1
  --shape serve=4x2x16_ctx40_d3_p1x20_v2x3
  --reps 1 --min-time 0)
args+=(--format json --out "$json")
title="simdattn bench: $machine"
[ $smoke -eq 0 ] || title+=" (smoke run)"
warnings=$(mktemp)
section=$(mktemp)
trap 'rm -f "$warnings" "$section"' EXIT
table=$("${run[@]}" "${args[@]}" 2> "$warnings") || { cat "$warnings" >&2; exit 1; }
cat "$warnings" >&2

# Every record names the machine (bench/plot.py labels series with it);
# every target measured must have records with rates.
"$python" - "$json" "$machine" "$simd" << 'EOF'
import json, sys
path, machine, targets = sys.argv[1:]
with open(path, encoding="utf-8") as f:
    records = json.load(f)
rated = [r for r in records
         if isinstance(r.get("gflops", r.get("gb_per_s")), (int, float))
         and r.get("gflops", r.get("gb_per_s")) > 0]
if not rated or len(rated) != len(records):
    sys.exit(f"{path}: {len(records)} records, {len(rated)} with a rate")
missing = set(targets.split(",")) - {r["target"] for r in records}
if missing:
    sys.exit(f"{path}: no records for {', '.join(sorted(missing))}")
for r in records:
    r["machine"] = machine
with open(path, "w", encoding="utf-8") as f:
    json.dump(records, f, indent=2)
    f.write("\n")
EOF
"$python" bench/plot.py "$json" -o "$png" --title "$title"
[ "$(head -c 4 "$png" | tail -c 3)" = PNG ] || die "$png: not a PNG"

# The commit measured; its own outputs are not local changes.
commit=unknown
if head=$(git rev-parse --short HEAD 2> /dev/null); then
  commit=$head
  git diff --quiet HEAD -- . ':!bench/results.json' ':!bench/results.png' \
    ':!bench/RESULTS.md' || commit+=' + local changes'
fi
begin='<!-- begin: generated by bench/results.sh -->'
end='<!-- end: generated by bench/results.sh -->'
{
  echo "$begin"
  echo "# simdattn bench results"
  echo
  echo "Machine: $machine; $arch, $cores cores, measured at $threads threads;" \
       "simdattn $("${run[@]}" --version)," \
       "commit $commit," \
       "$(date -u +%Y-%m-%d)."
  scope="all this CPU supports"
  if [ $smoke -eq 1 ] && [ -n "$emulator" ]; then
    scope="one of ${all_simd//,/, }: an emulated smoke run"
  elif [ "$simd" != "$all_simd" ]; then
    scope="of ${all_simd//,/, }, which this CPU supports; BENCH_TARGETS=all measures each"
  fi
  echo "SIMD targets measured: ${simd//,/, } ($scope${fallback:+;
$fallback, the fallback without SIMD, is not measured})${lacking:+;
compiled but not supported by this CPU: $lacking}."
  echo "The library saw: $(sed -n 's/^CPU: *//p' <<< "$info"); the policy"
  echo "table's rules that applied (src/ops/policy.cc):"
  rules=$(sed -n 's/^  \(.*\)$/- \1/p' <<< "$info")
  echo "${rules:-- none}"
  if [ $smoke -eq 1 ]; then
    echo
    echo "**A smoke run (tiny shapes, one repetition): it checks the report's"
    echo "path; its numbers mean nothing.**"
  fi
  if [ -n "$emulator" ]; then
    echo
    echo "**Emulated: every number below was measured under $emulator"
    echo "on $host_cpu, not on an $arch CPU. They show that the report runs"
    echo "on $arch, not how fast simdattn is there.**"
  fi
  echo
  echo '```text'
  # The table's preamble: repetitions, units and the measured peaks.
  sed '/^$/,$d' <<< "$table"
  echo '```'
  if [ -s "$warnings" ]; then
    echo
    echo '```text'
    cat "$warnings"
    echo '```'
  fi
  echo
  if [ $smoke -eq 0 ]; then
    echo "Generated by \`./dev.sh bench\` (\`bench/results.sh\`), which ran:"
  else
    echo "Generated by \`bench/results.sh --smoke\`, which ran:"
  fi
  echo
  echo '```sh'
  echo "${run[*]##*/} ${args[*]}"
  echo "python3 bench/plot.py $json -o $png --title '$title'"
  echo '```'
  echo
  echo "Rates are at the median; \"of peak\" divides by the FMA loop (GFLOP/s)"
  echo "or the 64 MiB copy loop (GB/s) of the same target and thread count,"
  echo "measured in the same run. \"vs onednn\" and \"vs openblas\" are"
  echo "simdattn's rate over the library's in the same run at each thread count,"
  echo "> 1 meaning simdattn is faster. Every record (the libraries' own rates"
  echo "and targets, spreads) is in results.json. On a shared machine absolute"
  echo "numbers drift between runs; trust ratios measured together. Shapes:"
  echo "\`simdattn bench --list\` says what each op and suffix measures."
  echo
  echo '```text'
  "$python" bench/table.py "$json"
  echo '```'
  echo
  echo '![GFLOP/s and GB/s per op, by library and target](results.png)'
  echo "$end"
} > "$section"
# Only this script's section is replaced: notes others add to RESULTS.md
# outside the markers (e.g. Google Benchmark tables) survive.
if [ -f "$md" ] && grep -qxF "$begin" "$md"; then
  awk -v begin="$begin" -v end="$end" -v section="$section" '
    $0 == begin { while ((getline line < section) > 0) print line; skip = 1; next }
    $0 == end { skip = 0; next }
    !skip' "$md" > "$md.new"
  mv "$md.new" "$md"
else
  cat "$section" > "$md"
fi
# The committed report must name this version and cite the code's constants
# as they are (a smoke run checks the committed one: CI fails when it lags).
if [ $smoke -eq 1 ]; then
  "$python" bench/check_report.py bench/RESULTS.md
else
  "$python" bench/check_report.py "$md"
fi
echo "Report written:"
echo "  $md  (machine, peaks, table)"
echo "  $json  ($(grep -c '"op"' "$json") records)"
echo "  $png"
