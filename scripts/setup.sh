#!/usr/bin/env bash
# Installs every Debian package tessera needs (idempotent), then configures and builds.
# Usage: bash scripts/setup.sh            (Release build in ./build)
#        bash scripts/setup.sh --deps     (packages only)
#        bash scripts/setup.sh --corpus   (packages only, plus what retraining the default
#                                          models needs: scripts/default-model/build.sh)
# With CI=true warnings are errors.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  g++ cmake ninja-build pkg-config
  nlohmann-json3-dev libcli11-dev libspdlog-dev libfmt-dev
  libgtest-dev googletest
  libicu-dev                    # Unicode classes and NFC for the tokenizer
  libboost-dev                  # Boost.Beast for the HTTP server
  libgloo-dev iproute2 procps   # collectives across nodes; network-namespace and process tests
  libyaml-dev                   # SGLang's --config YAML files
  python3-numpy python3-torch   # the independent numerics reference in tests/reference
  libopenblas0-pthread          # a BLAS for python3-torch (Debian's default is the slow reference one)
  wamerican                     # /usr/share/dict/words: the default model's answers are checked against it
  python3-jinja2                # regenerating the chat-template goldens
)

# The public-domain text the default models are trained on, and npm for Hugging Face's
# tokenizers (the BPE trainer); only needed to rebuild those models.
if [ "${1:-}" = "--corpus" ]; then
  packages+=(dict-gcide dict-foldoc dict-jargon dict-devil fortunes fortunes-min)
  command -v npm >/dev/null || packages+=(nodejs npm)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}" >&2
  sudo_cmd=()
  [ "$(id -u)" -ne 0 ] && sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

case "${1:-}" in --deps | --corpus) exit 0 ;; esac

werror=OFF
[ "${CI:-}" = "true" ] && werror=ON
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTSR_WERROR=$werror >/dev/null
# Two cores: the compile of a few heavy translation units dominates; -j2 keeps memory sane.
cmake --build build -j "$(nproc)"
