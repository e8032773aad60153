"""pytest configuration for simdattn's Python tests.

Run them against a built package (python/CMakeLists.txt), e.g.

    PYTHONPATH=/tmp/pybuild /usr/bin/python3 -m pytest -q tests/python

SIMDATTN_PYTHONPATH, if set, is put first on sys.path instead.
"""
import os
import sys

_path = os.environ.get("SIMDATTN_PYTHONPATH")
if _path:
    sys.path.insert(0, _path)
