#!/usr/bin/env bash
# Install nprof into .venv and run the demo (examples/demo.py): an NKI kernel benchmark, then an MLP
# compiled for the virtual NeuronCore, captured, and summarised.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/python examples/demo.py "$@"
