#!/usr/bin/env bash
# Set up a development environment in .venv: nprof with the torch, test and spark
# extras, plus (with --browser) Debian's chromium and a Java runtime. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
# torch is pinned first so the optional extra resolves to the local CPU build.
.venv/bin/python -m pip install -q "torch==2.13.0" 2>&1 | grep -v '^WARNING: Location' || true
.venv/bin/python -m pip install -q -e ".[torch,test,spark,zoo,compat]" 2>&1 | grep -v '^WARNING: Location' || true
.venv/bin/python -c "import nprof, torch, duckdb, perfetto, playwright, numba, msgspec" # fail loudly if install failed
# Compile nprof's numba cores now (~40 s CPU on a cold cache, then cached on disk beside the sources)
# rather than inside a user's first trace or torch.compile (nprof.compiler.warmup).
.venv/bin/python -c "
from nprof.compiler.warmup import warm_cores
for core, cpu, compiled in warm_cores():
    print(f'setup: numba core {core}: {cpu:.1f} s CPU, {compiled} signature(s) compiled')"
# Debian packages the tests need: chromium (browser tests) and a Java runtime (the Spark engine of
# `nprof analyze`); the Spark test is skipped, saying why, only when Java cannot be installed.
apt_install() {
  local sudo=""
  [ "$(id -u)" = 0 ] || sudo=sudo
  $sudo apt-get update -qq && $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}
if [ "${1:-}" = "--browser" ]; then
  command -v chromium >/dev/null 2>&1 || apt_install chromium
  command -v java >/dev/null 2>&1 || apt_install default-jre-headless || echo "setup: no Java runtime; the Spark test will be skipped"
fi
