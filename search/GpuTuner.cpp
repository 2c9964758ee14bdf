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
#include "costmodel/Dataset.h"
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

  std::map<std::string, std::vector<float>> features;  // of the points ranked so far, by schedule (empty: does not lower)

  /** The next schedule not measured before, or nullopt when the space is spent. */
  std::optional<GpuSchedule> take(int &skipped) {
    while (next < queue.size()) {
      const GpuSchedule &t = queue[next++];
      if (known.insert(gpu_schedule_to_json(t)).second) return t;
      ++skipped;
    }
    return std::nullopt;
  }

  /** The best-predicted of the next `window` unmeasured points, or nullopt when none lowers. */
  Expected<std::optional<GpuSchedule>> best_predicted(const CostModel &model, const GpuTarget &gpu, int window) {
    std::vector<const GpuSchedule *> pool;
    std::vector<std::vector<float>> x;
    for (size_t i = next; i < queue.size() && static_cast<int>(pool.size()) < window; ++i) {
      std::string j = gpu_schedule_to_json(queue[i]);
      if (known.count(j)) continue;
      auto [it, fresh] = features.try_emplace(j);
      if (fresh)
        if (auto k = lower_gpu(task->body, "rank", gpu, queue[i])) it->second = gpu_kernel_features(*k, gpu);
      if (it->second.empty()) continue;  // measured as it comes in order: its record says why it does not lower
      pool.push_back(&queue[i]), x.push_back(it->second);
    }
    if (pool.empty()) return std::optional<GpuSchedule>();
    AT_ASSIGN(pred, model.predict(x));
    size_t best = static_cast<size_t>(std::max_element(pred.begin(), pred.end()) - pred.begin());
    known.insert(gpu_schedule_to_json(*pool[best]));
    return std::optional<GpuSchedule>(*pool[best]);
  }
};

/** An ok GPU record as a training sample: its features and log2 of its speed over the default. */
std::optional<Sample> sample_of(const TuningRecord &r) {
  if (r.status != "ok" || r.feature_version != kGpuFeatureVersion || !(r.baseline_s > 0) || !(r.median_s > 0)) return std::nullopt;
  auto j = nlohmann::json::parse(r.features, nullptr, false);
  if (!j.is_array() || j.size() != gpu_feature_names().size()) return std::nullopt;
  Sample s{r.workload_hash, r.schedule, j.get<std::vector<float>>(), static_cast<float>(std::log2(r.baseline_s / r.median_s))};
  return s;
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

Expected<GpuKernelTimer::Result> DeviceKernelTimer::run(const LoweredKernel &k, const std::vector<Tensor> &args, const TensorType &out, int runs) {
  AT_ASSIGN(r, run_kernel_on_device(driver_, ordinal_, device_, k, args, out, runs));
  return Result{r.output, r.median_s, r.min_s, r.compile_s};
}

Expected<GpuTuneReport> tune_gpu(const Graph &fused, GpuKernelTimer &timer, TuningDb &db, const std::string &target_key, const GpuTuneOptions &o) {
  const GpuTarget &gpu = timer.target();
  std::vector<Task> tasks = extract_tasks(fused);
  std::vector<GpuTask> work;
  // Trained on every ok record of this target with features: the database's, then this run's.
  CostModelOptions mo;
  mo.columns = gpu_feature_names().size();
  mo.seed = o.seed;
  OnlineModel online(mo, static_cast<size_t>(std::max(o.min_records, 0)), 8);
  for (const Task &t : tasks) {
    if (t.body.type_of(t.body.outputs[0]).dtype != DType::kFloat32) continue;
    auto naive = lower_naive(t.body, "naive", KernelSchedule{});
    if (!naive) continue;  // runs as it does untuned (its error shows there)
    // The space of the stage lower_gpu schedules: a GEMM's tiles, else a long reduction's rows.
    std::vector<GpuSchedule> space;
    std::optional<GpuSchedule> fallback;
    // A GEMM's tiles win over a reduction's lanes (one space is tuned per task).
    for (const KernelStage &st : naive->stages) {
      auto s = gpu_stage_space(st, gpu);
      if (!s || (!s->tile && fallback)) continue;
      if (s->tile) space.clear();
      fallback = s->fallback;
      space.insert(space.end(), s->space.begin(), s->space.end());
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
      if (auto smp = sample_of(r)) online.add(std::move(*smp));
      if (r.status != "ok") continue;
      if (r.schedule == gpu_schedule_to_json(w.queue[0])) w.default_s = r.median_s;
      if (r.median_s < w.best_s) w.best_s = r.median_s, w.best_tile = r.schedule;
    }
    AT_TRY(db.upsert_workload(t.hash, target_key, print_text(t.body), t.flops));
    work.push_back(std::move(w));
  }
  GpuTuneReport rep;
  rep.tasks = static_cast<int>(work.size());
  // Trains once min_records are in, then again when a quarter more (at least 8) have arrived.
  auto maybe_retrain = [&]() -> Status {
    if (!o.model) return Status::ok();
    auto t0 = std::chrono::steady_clock::now();
    AT_ASSIGN(trained, online.maybe_retrain());
    if (!trained) return Status::ok();
    rep.model_s += seconds_since(t0);
    rep.model_rows = online.trained_rows(), rep.model_trainings = online.trainings(), rep.model_heldout_accuracy = online.heldout_accuracy();
    return Status::ok();
  };
  std::mt19937_64 explore(o.seed + 7);
  int left = o.trials;
  for (bool any = true; left > 0 && any;) {
    any = false;
    for (GpuTask &w : work) {
      if (left <= 0 || (o.stop && o.stop())) {
        left = 0;
        break;
      }
      AT_TRY(maybe_retrain());
      std::optional<GpuSchedule> sched;
      bool by_model = false;
      // The default first; then the model's pick, but for an epsilon share of picks in order.
      const CostModel *model = online.model();
      if (model && w.default_s > 0 && std::uniform_real_distribution<double>(0, 1)(explore) >= o.epsilon) {
        auto t0 = std::chrono::steady_clock::now();
        AT_ASSIGN(p, w.best_predicted(*model, gpu, o.window));
        rep.model_s += seconds_since(t0);
        sched = p;
        by_model = sched.has_value();
        rep.model_picks += by_model;
      }
      if (!sched) sched = w.take(rep.skipped_known);
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
            if (auto smp = sample_of(rec)) online.add(std::move(*smp));
          }
        }
      }
      AT_TRY(db.add_record(rec));  // at once: an interrupted run keeps every measurement
      ++rep.measured;
      rep.failed += rec.status != "ok";
      if (o.progress) {
        char line[512];
        std::snprintf(line, sizeof line, "trial %d of %d: %s %s %s%s: %s", o.trials - left, o.trials, t.hash.c_str(), t.ops.c_str(), rec.schedule.c_str(),
                      by_model ? " (the cost model's pick)" : "",
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
