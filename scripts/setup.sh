#!/usr/bin/env bash
# Installs every Debian package tessera needs (idempotent), then configures and builds.
# Usage: bash scripts/setup.sh            (Release build in ./build)
#        bash scripts/setup.sh --deps     (packages only)
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
  python3-jinja2                # regenerating the chat-template goldens
)

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

[ "${1:-}" = "--deps" ] && exit 0

werror=OFF
[ "${CI:-}" = "true" ] && werror=ON
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTSR_WERROR=$werror >/dev/null
# Two cores: the compile of a few heavy translation units dominates; -j2 keeps memory sane.
cmake --build build -j "$(nproc)"
