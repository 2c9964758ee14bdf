#!/usr/bin/env bash
# Exports torchvision models (models/export_torchvision.py), runs each through
# autotune on PyTorch's input three ways: the reference executor on the imported graph and on the
# optimized and fused graph, and the compiled executor (JIT-compiled kernels); prints the largest
# error relative to the output's largest magnitude, the BatchNormalization count of each export
# and its node or group count.
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
    for stage in imported fused compiled; do
      if [ $stage = compiled ]; then
        log=$(build/tools/autotune run --model "$model" --input "$input" --output "$out/$name$form.$stage.npy")
      else
        log=$(build/tools/autotune run --executor reference --model "$model" --input "$input" --stage $stage --output "$out/$name$form.$stage.npy")
      fi
      ms=$(echo "$log" | sed -n 's/.*run \([0-9.]*\) ms.*/\1/p')
      nodes=$(echo "$log" | sed -n 's/.*graph: \([0-9]*\) nodes.*/\1/p; s/.*compiled: \([0-9]*\) kernels.*/\1/p')
      /usr/bin/python3 - "$model" "$out/$name.torch.npy" "$out/$name$form.$stage.npy" "$ms" "$stage" "$nodes" <<'PY' || status=1
import sys, numpy as np, onnx
model, ref, got, ms, stage, nodes = sys.argv[1:]
a, b = np.load(got), np.load(ref)
rel = float(np.abs(a - b).max() / np.abs(b).max())
bns = sum(n.op_type == "BatchNormalization" for n in onnx.load(model).graph.node)
what = f"{nodes} nodes" if stage == "imported" else f"{nodes} groups"
print(f"{model.split('/')[-1]:22s} {stage:8s} BN {bns:3d}  {what:11s} rel err {rel:.2e}  run {ms:>7s} ms  {'ok' if rel <= 1e-4 else 'FAIL'}")
sys.exit(0 if rel <= 1e-4 else 1)
PY
    done
  done
done
exit $status
