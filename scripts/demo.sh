#!/usr/bin/env bash
# The main job on the bundled example: installs, builds, then tunes the generated ResNet-18
# (100 trials into build/demo.db; rerunning resumes). The tuning job ends with the model's
# latency without and with the tuned plans, measured in alternation in one run (separate
# benchmark runs on a shared machine can differ by more than any tuning gain). Then the model
# runs with the database, as a deployment would.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
model=build/models/resnet18.onnx
echo "== autotune --model $model --trials 100 --db build/demo.db"
build/tools/autotune --model "$model" --trials 100 --db build/demo.db
echo "== autotune run --model $model --db build/demo.db"
build/tools/autotune run --model "$model" --db build/demo.db
