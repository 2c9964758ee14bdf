#!/usr/bin/env python3
"""Side by side at one trial budget: autotune's tuning job against TVM's MetaSchedule (Relax).

  compare_tvm.py --autotune build/tools/autotune --models build/models/resnet18.onnx [...] --trials N
                 [--out DIR] [--threads 2] [--runs 30] [--rounds 4] [--tvm-trials-per-task K] [--json out.json]

For each model, both tuners get the same number of measured trials on this host:
- autotune: `autotune --model M --trials N --db DIR/<model>.autotune.db` (its evolutionary search
  with the XGBoost cost model);
- TVM: the ONNX file imported by Relax's ONNX frontend and tuned by MetaSchedule as TVM's own
  `relax.pipeline.static_shape_tuning_pipeline` does (its evolutionary search with its XGBoost cost
  model, the gradient task scheduler, weights prepacked for the CPU), with `max_trials_global` N
  and, as that pipeline's documentation advises for a budget to reach every task,
  `max_trials_per_task` N / (its number of tasks), rounded up (--tvm-trials-per-task overrides);
  then compiled with the tuned database and saved as DIR/<model>.tvm.so.
Each tuner's wall time is recorded. Then, in alternating rounds in this one process (TVM, autotune
untuned, autotune tuned; the next round the other way round, so drift on a shared host hits all
alike), each is timed over --runs runs; the medians and the ratios autotune / TVM are printed
(below 1: autotune is faster). The outputs of TVM's module and autotune's tuned plan on the same
seeded input are compared (max abs difference).

A model whose DIR/<model>.autotune.db and DIR/<model>.tvm.so exist is not tuned again (their wall
times are read from DIR/<model>.walls.json): a long MetaSchedule run can be timed later, or on
another day beside a new autotune build. TVM comes from PyPI into the peers' virtual environment
(`scripts/setup.sh --peers`; run this script with `build/peers/bin/python`); it is never a build or
test dependency. TVM's runtime threads are set from --threads (TVM_NUM_THREADS) before it loads.
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare_onnxruntime import autotune_times, model_inputs  # noqa: E402  (one way to make inputs and time autotune)


def host_target(exe, threads):
    """TVM's LLVM target for the CPU autotune detects (the same LLVM CPU name), with the thread count."""
    t = json.loads(subprocess.run([exe, "target", "--json", "--no-peak"], check=True, capture_output=True, text=True).stdout)
    return {"kind": "llvm", "mcpu": t["cpu"], "num-cores": threads}, t


def tvm_prepared(mod, target):
    """The module as static_shape_tuning_pipeline has it just before MetaScheduleTuneIRMod (cpu_weight_prepack):
    the same passes, so the tasks counted here are the ones it tunes."""
    import tvm
    from tvm import relax
    with tvm.target.Target(target):
        return tvm.transform.Sequential([relax.transform.DecomposeOpsForInference(), relax.transform.CanonicalizeBindings(),
                                         relax.pipeline.zero_pipeline(), relax.transform.AttachAttrLayoutFreeBuffers()])(mod)


def tvm_tune(path, target, trials, per_task, work_dir, lib_path):
    """MetaSchedule's tuning of the ONNX model, compiled and saved; returns (tasks, trials per task)."""
    import onnx
    import tvm
    from tvm import relax
    from tvm.relax.frontend import onnx as relax_onnx
    from tvm.s_tir import meta_schedule as ms
    mod = relax_onnx.from_onnx(onnx.load(path), keep_params_in_input=True)
    mod, _ = relax.frontend.detach_params(mod)
    tasks = ms.relax_integration.extract_tasks(tvm_prepared(mod, target), tvm.target.Target(target))
    per_task = per_task or math.ceil(trials / max(1, len(tasks)))
    mod = relax.pipeline.static_shape_tuning_pipeline(total_trials=trials, target=target, work_dir=work_dir,
                                                      cpu_weight_prepack=True, max_trials_per_task=per_task)(mod)
    tvm.compile(mod, target=tvm.target.Target(target)).export_library(lib_path)
    return len(tasks), per_task


class TvmModel:
    """A saved MetaSchedule-tuned module with its prepacked weights, ready to run."""

    def __init__(self, path, lib_path, x):
        import onnx
        import tvm
        from tvm import relax
        from tvm.relax.frontend import onnx as relax_onnx
        mod = relax_onnx.from_onnx(onnx.load(path), keep_params_in_input=True)
        _, params = relax.frontend.detach_params(mod)
        self.vm = relax.VirtualMachine(tvm.runtime.load_module(lib_path), tvm.cpu())
        self.params = self.vm["main_transform_params"](params["main"])
        self.inputs = [tvm.runtime.tensor(v) for v in x.values()]

    def run(self):
        return self.vm["main"](*self.inputs, *self.params)

    def times(self, runs):
        for _ in range(5):
            self.run()
        out = []
        for _ in range(runs):
            t0 = time.perf_counter()
            self.run()
            out.append((time.perf_counter() - t0) * 1e3)
        return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--autotune", required=True)
    ap.add_argument("--models", nargs="+", required=True)
    ap.add_argument("--trials", type=int, required=True, help="measured trials for each tuner")
    ap.add_argument("--out", default="build/compare_tvm", help="databases, TVM's work directories and modules")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--tvm-trials-per-task", type=int, default=0)
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    if args.trials < 1:
        raise SystemExit("compare_tvm.py: --trials must be at least 1")
    os.environ["TVM_NUM_THREADS"] = str(args.threads)  # read when TVM's thread pool starts
    try:
        import tvm
    except ImportError:
        raise SystemExit("compare_tvm.py: TVM is not installed here; run `scripts/setup.sh --peers` and this script with build/peers/bin/python")
    target, at_target = host_target(args.autotune, args.threads)
    os.makedirs(args.out, exist_ok=True)
    print(f"TVM {tvm.__version__} (MetaSchedule, Relax) against autotune, target {at_target['cpu']} ({at_target['isa']}), "
          f"{args.threads} threads, {args.trials} trials each; {args.rounds} rounds x {args.runs} runs")
    rows = []
    for path in args.models:
        import onnx
        stem = os.path.splitext(os.path.basename(path))[0]
        db, lib, walls_path = (os.path.join(args.out, f"{stem}{s}") for s in (".autotune.db", ".tvm.so", ".walls.json"))
        walls = json.load(open(walls_path)) if os.path.exists(walls_path) else {}
        if not (os.path.exists(db) and "autotune_s" in walls):
            t0 = time.perf_counter()
            subprocess.run([args.autotune, "--model", path, "--trials", str(args.trials), "--db", db, "--threads", str(args.threads)],
                           check=True, stdout=open(os.path.join(args.out, f"{stem}.autotune.log"), "w"), stderr=subprocess.STDOUT)
            walls["autotune_s"] = time.perf_counter() - t0
            json.dump(walls, open(walls_path, "w"))
        if not (os.path.exists(lib) and "tvm_s" in walls):
            print(f"{stem}: MetaSchedule tuning, {args.trials} trials (its log in {args.out}/{stem}.tvm/logs) ...", flush=True)
            t0 = time.perf_counter()
            try:
                walls["tvm_tasks"], walls["tvm_trials_per_task"] = tvm_tune(path, target, args.trials, args.tvm_trials_per_task,
                                                                             os.path.join(args.out, f"{stem}.tvm"), lib)
            except Exception as e:  # TVM's own failure on this model: say so, go on with the next
                first = next((line for line in str(e).splitlines() if "Error" in line), str(e).splitlines()[0] if str(e) else type(e).__name__)
                print(f"{stem}: TVM failed to tune or compile it: {first.strip()[:300]}", flush=True)
                rows.append({"model": path, "trials": args.trials, "tvm_error": first.strip()})
                continue
            walls["tvm_s"] = time.perf_counter() - t0
            json.dump(walls, open(walls_path, "w"))
        x = model_inputs(onnx.load(path, load_external_data=False), path)
        input_npys = []
        for k, value in enumerate(x.values()):
            input_npys.append(os.path.join(args.out, f"{stem}.input{k}.npy"))
            np.save(input_npys[-1], value)
        tvm_model = TvmModel(path, lib, x)
        tvm_all, untuned_all, tuned_all = [], [], []
        runners = [lambda: tvm_all.extend(tvm_model.times(args.runs)),
                   lambda: untuned_all.append(autotune_times(args.autotune, path, args.threads, args.runs, input_npys, "")["median_ms"]),
                   lambda: tuned_all.append(autotune_times(args.autotune, path, args.threads, args.runs, input_npys, db)["median_ms"])]
        for r in range(args.rounds):
            for run in (runners if r % 2 == 0 else runners[::-1]):
                run()
        out_npy = os.path.join(args.out, f"{stem}.output.npy")
        subprocess.run([args.autotune, "run", "--model", path, "--output", out_npy, "--threads", str(args.threads), "--db", db]
                       + [a for npy in input_npys for a in ("--input", npy)], check=True, capture_output=True)
        diff = float(np.abs(np.load(out_npy) - tvm_model.run().numpy()).max())
        tvm_med, untuned_med, tuned_med = (statistics.median(v) for v in (tvm_all, untuned_all, tuned_all))
        row = {"model": path, "trials": args.trials, "tvm_median_ms": tvm_med, "autotune_untuned_median_ms": untuned_med,
               "autotune_tuned_median_ms": tuned_med, "tuned_ratio": tuned_med / tvm_med, "untuned_ratio": untuned_med / tvm_med,
               "max_abs_diff": diff, **walls}
        rows.append(row)
        print(f"{stem}: TVM {tvm_med:.2f} ms (tuned in {walls['tvm_s']:.0f} s, {walls['tvm_tasks']} tasks, up to "
              f"{walls['tvm_trials_per_task']} trials each); autotune tuned {tuned_med:.2f} ms (in {walls['autotune_s']:.0f} s), "
              f"untuned {untuned_med:.2f} ms; autotune / TVM: tuned {tuned_med / tvm_med:.3f}, untuned {untuned_med / tvm_med:.3f}; "
              f"max abs diff {diff:.2e}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    sys.exit(main())
