#!/usr/bin/env python3
"""Checks bench/RESULTS.md against the tree it describes.

    bench/check_report.py [RESULTS.md]

Fails (exit 1, naming each problem) when
  - the report's header names a simdattn version other than the project's
    (CMakeLists.txt's project(... VERSION x.y.z)): the report lags the code
    and must be regenerated (./dev.sh bench);
  - a constant it cites as `kName = value` (path) is not defined with that
    value in that file: the prose has drifted from the code.
bench/results.sh --smoke runs it (CI's bench_report_test).
"""

import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
# `kName = value` (path/to/file), the value a literal as the code writes it.
CITATION = re.compile(r"`(k[A-Za-z0-9_]+) = ([^`]+)` \(([\w./-]+)\)")


def project_version():
    text = (ROOT / "CMakeLists.txt").read_text(encoding="utf-8")
    match = re.search(r"project\(simdattn VERSION (\d+\.\d+\.\d+)", text)
    if not match:
        sys.exit("check_report.py: no project(simdattn VERSION ...) in CMakeLists.txt")
    return match.group(1)


def defines(source, name, value):
    """Whether `source` defines constant `name` as `value` (whitespace and
    the type between them free; the value's text as written)."""
    pattern = (r"\b" + re.escape(name) + r"\s*=\s*" +
               r"\s*".join(map(re.escape, value.split())) + r"\s*[;,)]")
    return re.search(pattern, source) is not None


def main():
    report = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else
                          ROOT / "bench" / "RESULTS.md")
    text = report.read_text(encoding="utf-8")
    problems = []
    want = project_version()
    header = re.search(r"simdattn (\d+\.\d+\.\d+)", text)
    if not header:
        problems.append(f"{report}: names no simdattn version")
    elif header.group(1) != want:
        problems.append(
            f"{report}: measured simdattn {header.group(1)}, the project is "
            f"{want}: regenerate it (./dev.sh bench)")
    cited = 0
    for name, value, path in CITATION.findall(text):
        cited += 1
        source = ROOT / path
        if not source.is_file():
            problems.append(f"{report}: `{name} = {value}` cites {path}, "
                            "which does not exist")
        elif not defines(source.read_text(encoding="utf-8"), name, value):
            problems.append(f"{report}: `{name} = {value}` is not what "
                            f"{path} defines")
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        return 1
    print(f"{report}: simdattn {want}, {cited} cited constants as in the code")
    return 0


if __name__ == "__main__":
    sys.exit(main())
