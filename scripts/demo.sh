#!/usr/bin/env bash
# The main job on the bundled example: installs, builds, then tunes the generated ResNet-18
# (100 trials into build/demo.db; rerunning resumes) and benchmarks it without and with the
# tuned plans.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
model=build/models/resnet18.onnx
echo "== autotune --model $model --trials 100 --db build/demo.db"
build/tools/autotune --model "$model" --trials 100 --db build/demo.db
echo "== autotune bench --model $model (untuned)"
build/tools/autotune bench --model "$model" --runs 20 | tail -1
echo "== autotune bench --model $model --db build/demo.db (tuned)"
build/tools/autotune bench --model "$model" --runs 20 --db build/demo.db | tail -1
