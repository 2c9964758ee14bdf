#!/usr/bin/env bash
# Installs everything autotune needs to build and test on Debian 12. Idempotent: packages
# already present are left alone, so a second run costs one `dpkg -s` per package.
#   scripts/setup.sh            build + test dependencies
#   scripts/setup.sh --peers    also the PyPI peers used by bench/ (onnxruntime)
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  llvm-19-dev libzstd-dev                       # ORC JIT, NVPTX; LLVM's CMake export needs zstd
  libxgboost-dev xgboost                        # Debian's xgboost CMake config names /usr/bin/xgboost
  libsqlite3-dev sqlite3
  libbenchmark-dev libgtest-dev nlohmann-json3-dev
  libonnx-dev libprotobuf-dev protobuf-compiler
  libonnx-testdata                              # ONNX's conformance data for the reference executor
  python3 python3-numpy python3-onnx            # test-model generators (models/)
)

sudo_cmd=()
[ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all Debian packages present"
fi

if [ "${1:-}" = "--peers" ]; then
  dpkg -s python3-pip >/dev/null 2>&1 || { "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends python3-pip; }
  /usr/bin/python3 -m pip install --quiet --break-system-packages onnxruntime
fi
