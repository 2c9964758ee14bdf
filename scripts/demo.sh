#!/usr/bin/env bash
# The main job on the bundled example: installs, builds, then imports the generated ResNet-18,
# shows the head of its IR, and runs it on the reference executor.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
model=build/models/resnet18.onnx
echo "== autotune inspect --model $model (first lines)"
build/tools/autotune inspect --model "$model" | head -12
echo "== autotune run --model $model --output build/resnet18_out.npy"
build/tools/autotune run --model "$model" --output build/resnet18_out.npy
