#!/usr/bin/env bash
# Installs everything autotune needs to build and test on Debian 12. Idempotent: packages
# already present are left alone, so a second run costs one `dpkg -s` per package.
#   scripts/setup.sh            build + test dependencies
#   scripts/setup.sh --peers    also the PyPI peers used by bench/ (onnxruntime, TVM), in build/peers (a venv)
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
  # The peers go into a virtual environment: pip's NumPy 2 would break Debian's python3-torch.
  dpkg -s python3-venv >/dev/null 2>&1 || { "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends python3-venv python3-pip; }
  venv="$(cd "$(dirname "$0")/.." && pwd)/build/peers"
  [ -x "$venv/bin/python" ] || /usr/bin/python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet onnxruntime onnx numpy
  # TVM with MetaSchedule's extras (its XGBoost, the builder's process pool), at the release it was
  # checked with; apache-tvm-ffi is held at 0.1.14.post0: with 0.1.15.post2, which pip picks for
  # apache-tvm 0.27.0.post1, every MetaSchedule tuning (a 128 x 128 matmul too) crashed in
  # tvm::ffi::ToJSONGraph.
  "$venv/bin/pip" install --quiet "apache-tvm[meta-schedule,popen-pool]==0.27.0.post1" "apache-tvm-ffi==0.1.14.post0"
  echo "setup: peers in $venv (run bench/compare_onnxruntime.py and bench/compare_tvm.py with $venv/bin/python)"
fi
