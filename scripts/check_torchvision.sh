#!/usr/bin/env bash
# Exports torchvision models (models/export_torchvision.py), runs each through
# `autotune run --executor reference` on PyTorch's input, and prints the largest error relative
# to the output's largest magnitude and the BatchNormalization count of each export.
# Needs Debian's python3-torchvision (installed here if missing). Exit 1 if any model is off by
# more than 1e-4.
set -euo pipefail
cd "$(dirname "$0")/.."
dpkg -s python3-torchvision >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq --no-install-recommends python3-torchvision; }
[ -x build/tools/autotune ] || scripts/build.sh
out=build/torchvision
/usr/bin/python3 models/export_torchvision.py --out "$out" ${1:+--models "$1"}
status=0
for input in "$out"/*.input.npy; do
  name=$(basename "$input" .input.npy)
  for form in "" _bn; do
    model="$out/$name$form.onnx"
    [ -f "$model" ] || continue
    log=$(build/tools/autotune run --model "$model" --input "$input" --output "$out/$name$form.autotune.npy")
    ms=$(echo "$log" | sed -n 's/.*run \([0-9.]*\) ms.*/\1/p')
    /usr/bin/python3 - "$model" "$out/$name.torch.npy" "$out/$name$form.autotune.npy" "$ms" <<'PY' || status=1
import sys, numpy as np, onnx
model, ref, got, ms = sys.argv[1:]
a, b = np.load(got), np.load(ref)
rel = float(np.abs(a - b).max() / np.abs(b).max())
bns = sum(n.op_type == "BatchNormalization" for n in onnx.load(model).graph.node)
print(f"{model.split('/')[-1]:26s} BN nodes {bns:3d}  rel err {rel:.2e}  reference run {ms} ms  {'ok' if rel <= 1e-4 else 'FAIL'}")
sys.exit(0 if rel <= 1e-4 else 1)
PY
  done
done
exit $status
