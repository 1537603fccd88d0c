#!/usr/bin/env bash
# Runs every test: sets up and builds first (idempotent), then CTest over all labels
# (unit, integration, numerics). Select a subset with e.g. `ctest --test-dir build -L unit`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
ctest --test-dir build --output-on-failure -j "$(nproc)" --timeout 900
