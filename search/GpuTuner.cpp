#include "search/GpuTuner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "codegen/Lower.h"
#include "costmodel/GpuFeatures.h"
#include "ir/Printer.h"
#include "ir/Reference.h"
#include "search/Task.h"

namespace autotune {

namespace {

struct GpuTask {
  const Task *task = nullptr;
  std::vector<GpuSchedule> queue;  // the default, then the space in seeded order
  size_t next = 0;
  std::set<std::string> known;  // schedules the database already holds for this task and target
  std::vector<Tensor> args;
  Tensor want;
  double default_s = 0, best_s = std::numeric_limits<double>::infinity();
  std::string best_tile;

  /** The next schedule not measured before, or nullopt when the space is spent. */
  std::optional<GpuSchedule> take(int &skipped) {
    while (next < queue.size()) {
      const GpuSchedule &t = queue[next++];
      if (known.insert(gpu_schedule_to_json(t)).second) return t;
      ++skipped;
    }
    return std::nullopt;
  }
};

}  // namespace

Expected<GpuKernelTimer::Result> DeviceKernelTimer::run(const LoweredKernel &k, const std::vector<Tensor> &args, const TensorType &out, int runs) {
  AT_ASSIGN(r, run_kernel_on_device(driver_, ordinal_, device_, k, args, out, runs));
  return Result{r.output, r.median_s, r.min_s, r.compile_s};
}

Expected<GpuTuneReport> tune_gpu(const Graph &fused, GpuKernelTimer &timer, TuningDb &db, const std::string &target_key, const GpuTuneOptions &o) {
  const GpuTarget &gpu = timer.target();
  std::vector<Task> tasks = extract_tasks(fused);
  std::vector<GpuTask> work;
  for (const Task &t : tasks) {
    if (t.body.type_of(t.body.outputs[0]).dtype != DType::kFloat32) continue;
    auto naive = lower_naive(t.body, "naive", KernelSchedule{});
    if (!naive) continue;  // runs as it does untuned (its error shows there)
    // The space of the stage lower_gpu schedules: a GEMM's tiles, else a long reduction's rows.
    std::vector<GpuSchedule> space;
    std::optional<GpuSchedule> fallback;
    for (const KernelStage &st : naive->stages) {
      if (auto g = gemm_shape(st); g && g->m >= 16 && g->n >= 16) {
        fallback = GpuSchedule{default_gpu_tile(*g, gpu), std::nullopt};
        space.clear();
        for (const GpuTile &x : gpu_tile_space(*g, gpu)) space.push_back({x, std::nullopt});
      } else if (auto r = row_reduce_shape(st); r && r->k >= 32 && !fallback) {
        fallback = GpuSchedule{std::nullopt, default_gpu_reduce(*r, gpu)};
        for (const GpuReduce &x : gpu_reduce_space(*r, gpu)) space.push_back({std::nullopt, x});
      } else if (auto p = row_program_shape(st); p && p->k >= 32 && !fallback) {
        fallback = GpuSchedule{std::nullopt, default_gpu_reduce(*p, gpu)};
        for (const GpuReduce &x : gpu_reduce_space(*p, gpu)) space.push_back({std::nullopt, x});
      }
    }
    if (!fallback) continue;  // one element per thread: nothing to tune yet
    GpuTask w;
    w.task = &t;
    w.queue.push_back(*fallback);
    std::mt19937_64 rng(o.seed ^ std::hash<std::string>{}(t.hash));
    std::shuffle(space.begin(), space.end(), rng);
    w.queue.insert(w.queue.end(), space.begin(), space.end());
    AT_ASSIGN(old, db.records(t.hash, target_key));
    for (const TuningRecord &r : old) {
      w.known.insert(r.schedule);
      if (r.status != "ok") continue;
      if (r.schedule == gpu_schedule_to_json(w.queue[0])) w.default_s = r.median_s;
      if (r.median_s < w.best_s) w.best_s = r.median_s, w.best_tile = r.schedule;
    }
    AT_TRY(db.upsert_workload(t.hash, target_key, print_text(t.body), t.flops));
    work.push_back(std::move(w));
  }
  GpuTuneReport rep;
  rep.tasks = static_cast<int>(work.size());
  int left = o.trials;
  for (bool any = true; left > 0 && any;) {
    any = false;
    for (GpuTask &w : work) {
      if (left <= 0 || (o.stop && o.stop())) {
        left = 0;
        break;
      }
      auto sched = w.take(rep.skipped_known);
      if (!sched) continue;
      any = true;
      --left;
      const Task &t = *w.task;
      TuningRecord rec;
      rec.workload_hash = t.hash;
      rec.target = target_key;
      rec.schedule = gpu_schedule_to_json(*sched);
      rec.baseline_s = w.default_s;
      auto k = lower_gpu(t.body, "tune_" + t.hash, gpu, *sched);
      if (!k) {
        rec.status = "invalid", rec.error = k.error().message;
      } else {
        if (w.args.empty()) {
          w.args = random_inputs(t.body, o.seed + 1);
          AT_ASSIGN(want, run_reference(t.body, w.args));
          w.want = want[0];
        }
        auto f = gpu_kernel_features(*k, gpu);
        rec.features = nlohmann::json(f).dump();
        rec.feature_version = kGpuFeatureVersion;
        auto r = timer.run(*k, w.args, w.want.type(), o.runs);
        if (!r) {
          rec.status = "crash", rec.error = r.error().message;
        } else {
          auto d = compare(r->output, w.want);
          rec.compile_s = r->compile_s;
          if (!d || d->relative() > o.tolerance) {
            rec.status = "wrong_result";
            rec.error = d ? "relative error " + std::to_string(d->relative()) + " against the reference executor" : d.error().message;
          } else {
            rec.status = "ok", rec.median_s = r->median_s, rec.min_s = r->min_s, rec.runs = o.runs;
            if (w.default_s == 0) w.default_s = r->median_s, rec.baseline_s = r->median_s;
            if (r->median_s < w.best_s) w.best_s = r->median_s, w.best_tile = rec.schedule;
          }
        }
      }
      AT_TRY(db.add_record(rec));  // at once: an interrupted run keeps every measurement
      ++rep.measured;
      rep.failed += rec.status != "ok";
      if (o.progress) {
        char line[512];
        std::snprintf(line, sizeof line, "trial %d of %d: %s %s %s: %s", o.trials - left, o.trials, t.hash.c_str(), t.ops.c_str(), rec.schedule.c_str(),
                      rec.status == "ok" ? (std::to_string(rec.median_s * 1e3) + " ms").c_str() : (rec.status + ": " + rec.error).c_str());
        o.progress(line);
      }
    }
  }
  for (const GpuTask &w : work)
    rep.best.push_back({w.task->hash, w.task->ops, w.best_tile, w.default_s, std::isfinite(w.best_s) ? w.best_s : 0});
  return rep;
}

}  // namespace autotune
