#!/usr/bin/env bash
# Install everything the tests need (into .venv, plus Debian's chromium) and run
# the whole suite: ruff, mypy (the packages and strictness in pyproject's [tool.mypy]), then pytest on both cores.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --browser
.venv/bin/ruff check src tests bench examples
PYTHONPATH=src .venv/bin/mypy
.venv/bin/python -m pytest -n 2 -p no:cacheprovider "$@"
