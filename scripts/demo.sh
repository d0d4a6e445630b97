#!/usr/bin/env bash
# Install nprof into .venv and run the demo: profile a small workload and print its summary.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/python examples/demo.py "$@"
