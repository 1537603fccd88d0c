#!/usr/bin/env bash
# The fuzzing job: builds the libFuzzer targets with clang (ASan + UBSan) in ./build-fuzz and
# runs each for FUZZ_SECONDS (default 60) from its committed seed corpus in fuzz/corpus/.
# A crash leaves its input in build-fuzz/fuzz/ and fails the job; make it a regression test
# (add it to the corpus and fix the bug).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --deps
command -v clang++ >/dev/null || { echo "fuzz: clang++ is needed (apt install clang)" >&2; exit 2; }
CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTESSERA_FUZZ=ON \
  -DTSR_BUILD_TESTS=OFF -DTSR_BUILD_BENCH=OFF >/dev/null
targets=(request_json_fuzz step_codec_fuzz store_wire_fuzz chat_template_fuzz tokenizer_fuzz safetensors_fuzz
         launch_flags_fuzz gateway_request_fuzz tool_call_stream_fuzz grammar_fuzz)
cmake --build build-fuzz -j "$(nproc)" --target "${targets[@]}"
rm -f build-fuzz/fuzz/crash-* build-fuzz/fuzz/leak-* build-fuzz/fuzz/timeout-*
seconds="${FUZZ_SECONDS:-60}"
for t in "${targets[@]}"; do
  work="build-fuzz/fuzz/corpus-$t"
  mkdir -p "$work"
  echo "fuzz: $t for ${seconds}s" >&2
  (cd build-fuzz/fuzz && ASAN_OPTIONS=detect_leaks=1 ./"$t" -max_total_time="$seconds" -rss_limit_mb=4096 \
     -print_final_stats=1 "corpus-$t" "../../fuzz/corpus/$t") 2>&1 | grep -E "stat::number_of_executed_units|ERROR|SUMMARY" || true
  # A failure writes crash-*, leak-* or timeout-* next to the binary.
  failing=$(find build-fuzz/fuzz -maxdepth 1 \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' \) -print)
  if [ -n "$failing" ]; then
    echo "fuzz: $t found a failing input: $failing" >&2
    exit 1
  fi
done
