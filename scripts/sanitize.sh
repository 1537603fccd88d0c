#!/usr/bin/env bash
# The sanitizer job: an AddressSanitizer + UndefinedBehaviorSanitizer build of everything in
# ./build-asan (-DTESSERA_SANITIZE=ON), then the unit and integration tests under it. Any
# memory error, leak or undefined behaviour fails the test that hit it. A second CI job next
# to `bash scripts/test.sh` (about 30 minutes on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --deps
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTESSERA_SANITIZE=ON -DTSR_BUILD_BENCH=OFF >/dev/null
cmake --build build-asan -j "$(nproc)"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
ctest --test-dir build-asan -L 'unit|integration' --output-on-failure -j "$(nproc)" --timeout 1800
