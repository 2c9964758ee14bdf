#!/usr/bin/env python3
"""Side-by-side latency: autotune's compiled models against ONNX Runtime's CPU provider.

  compare_onnxruntime.py --autotune build/tools/autotune --models build/models/resnet50.onnx [...]
                         [--threads 2] [--runs 30] [--rounds 3] [--db tuning.db] [--json out.json]
                         [--targets host avx2]

Both run the same model file on the same input with the same thread count, in alternating
rounds (ONNX Runtime then autotune, then the other way round) so that drift on a shared machine hits both
alike. Each reports the median over all its timed runs; the ratio is autotune / ONNX Runtime
(below 1: autotune is faster). With --db, each round also runs autotune with the tuning
database, so untuned, tuned and ONNX Runtime are compared in the same run. With --targets, each
round runs autotune once per target (e.g. `host avx2` on an AVX-512 machine: the AVX-512 and the
AVX2 kernels side by side). ONNX Runtime comes from PyPI into a virtual environment
(`scripts/setup.sh --peers`, then run this script with `build/peers/bin/python`); it is never a
build or test dependency.
"""
import argparse
import json
import statistics
import subprocess
import sys
import time

import numpy as np


def ort_times(path, threads, runs, x):
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    for _ in range(5):
        sess.run(None, x)
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        sess.run(None, x)
        times.append((time.perf_counter() - t0) * 1e3)
    return times, sess.run(None, x)[0]


def model_inputs(m, path):
    """Seeded inputs for every graph input that is not an initializer: floats uniform in [-1, 1], integers
    0 or 1 (valid indices for any embedding table, as autotune's own random inputs are); a dimension
    without a fixed size is 1."""
    rng = np.random.default_rng(0)
    initializers = {i.name for i in m.graph.initializer}
    inputs = {}
    for vi in m.graph.input:
        if vi.name in initializers:
            continue
        t = vi.type.tensor_type
        dims = [d.dim_value if d.dim_value > 0 else 1 for d in t.shape.dim]
        if t.elem_type == 1:  # FLOAT
            inputs[vi.name] = rng.uniform(-1, 1, size=dims).astype(np.float32)
        elif t.elem_type in (6, 7):  # INT32, INT64
            inputs[vi.name] = rng.integers(0, 2, size=dims).astype(np.int32 if t.elem_type == 6 else np.int64)
        else:
            raise SystemExit(f"compare_onnxruntime.py: {path}: input '{vi.name}' has element type {t.elem_type}: "
                             "only float32, int32 and int64 inputs are generated")
    return inputs


def autotune_times(exe, path, threads, runs, input_npys, db, target="host"):
    cmd = [exe, "bench", "--model", path, "--runs", str(runs), "--threads", str(threads), "--json", "--target", target]
    for npy in input_npys:
        cmd += ["--input", npy]
    if db:
        cmd += ["--db", db]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--autotune", required=True)
    ap.add_argument("--models", nargs="+", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--db", default="")
    ap.add_argument("--json", default="")
    ap.add_argument("--targets", nargs="+", default=["host"], help="autotune targets, each timed in every round")
    args = ap.parse_args()
    import onnxruntime
    rows = []
    print(f"onnxruntime {onnxruntime.__version__}, {args.threads} threads, {args.rounds} rounds x {args.runs} runs each")
    tuned_cols = f" {'tuned ms':>9s} {'ratio':>6s}" if args.db else ""
    target_cols = "".join(f" {t + ' ms':>12s} {'ratio':>7s}" for t in args.targets[1:])
    print(f"{'model':28s} {'onnxruntime ms':>15s} {'autotune ms':>12s} {'ratio':>7s}{target_cols}{tuned_cols} {'max abs diff':>13s}")
    for path in args.models:
        import onnx
        m = onnx.load(path, load_external_data=False)
        x = model_inputs(m, path)
        input_npys = []
        for k, value in enumerate(x.values()):
            input_npys.append(f"/tmp/compare_ort_input_{abs(hash(path))}_{k}.npy")
            np.save(input_npys[-1], value)
        ort_all, tuned_all = [], []
        per_target = {t: [] for t in args.targets}
        ort_out = None
        def run_ort():
            nonlocal ort_all, ort_out
            t, ort_out = ort_times(path, args.threads, args.runs, x)
            ort_all += t

        def run_autotune():
            for target in args.targets:
                per_target[target].append(autotune_times(args.autotune, path, args.threads, args.runs, input_npys, "", target)["median_ms"])
            if args.db:
                tuned_all.append(autotune_times(args.autotune, path, args.threads, args.runs, input_npys, args.db,
                                                args.targets[0])["median_ms"])

        # The order alternates round by round: on a shared host the first of a pair was seen to run slower.
        for r in range(args.rounds):
            for run in ((run_ort, run_autotune) if r % 2 == 0 else (run_autotune, run_ort)):
                run()
        at_all = per_target[args.targets[0]]
        # Check that the two compute the same thing on this input.
        out_npy = input_npys[0].replace("input", "output")
        subprocess.run([args.autotune, "run", "--model", path, "--output", out_npy, "--threads", str(args.threads), "--target", args.targets[0]]
                       + [a for npy in input_npys for a in ("--input", npy)] + (["--db", args.db] if args.db else []),
                       check=True, capture_output=True)
        diff = float(np.abs(np.load(out_npy) - ort_out).max())
        ort_med, at_med = statistics.median(ort_all), statistics.median(at_all)
        row = {"model": path, "onnxruntime_median_ms": ort_med, "autotune_median_ms": at_med,
               "ratio": at_med / ort_med, "max_abs_diff": diff, "targets": {}}
        others = ""
        for target in args.targets:
            med = statistics.median(per_target[target])
            row["targets"][target] = {"median_ms": med, "ratio": med / ort_med}
            if target != args.targets[0]:
                others += f" {med:12.2f} {med / ort_med:7.2f}"
        tuned = ""
        if args.db:
            tuned_med = statistics.median(tuned_all)
            row.update({"autotune_tuned_median_ms": tuned_med, "tuned_ratio": tuned_med / ort_med})
            tuned = f" {tuned_med:9.2f} {tuned_med / ort_med:6.2f}"
        rows.append(row)
        print(f"{path.split('/')[-1]:28s} {ort_med:15.2f} {at_med:12.2f} {at_med / ort_med:7.2f}{others}{tuned} {diff:13.2e}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    sys.exit(main())
