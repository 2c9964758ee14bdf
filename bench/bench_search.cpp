// The search's own cost: lowering candidate schedules for the cost model's features, which is most
// of what the model-guided search spends between batches (issue 9: a 2000-trial ResNet-50 run
// lowers about 8000 points). Each benchmark is one task of a model: a fixed set of its points
// (random samples of its space and mutations of them, seeded), lowered and featurized by a fresh
// ModelSearch each iteration (nothing cached from the iteration before), on one thread or on
// every thread as the search runs them; and all of a model's tasks in one iteration
// (lower/<model>/all-tasks), the figure to compare two builds by, task after task or in turn, 16
// points of each at a time (all-tasks-in-turn, as the search's batches come: what the replay cache
// keeps of one task must outlast the others' turns). Reports points lowered per second.
//
//   bench_search [--benchmark_filter=conv] [google benchmark flags] [MODEL.onnx...]
//   (the model defaults to the generated ResNet-50)
#include <benchmark/benchmark.h>

#include "codegen/Schedule.h"
#include "ir/OnnxImport.h"
#include "ir/Pass.h"
#include "search/ModelSearch.h"
#include "search/Task.h"

namespace autotune::bench {
namespace {

constexpr int kRandomPoints = 32, kMutations = 32;

/** The task's benchmark points: kRandomPoints samples, then kMutations mutations of them (seed 1). */
std::vector<ModelSearch::Point> points_of(const ScheduleSpace &space) {
  Rng rng(1);
  std::vector<KernelSchedule> s;
  for (int i = 0; i < kRandomPoints; ++i) s.push_back(space.sample(rng));
  for (int i = 0; i < kMutations; ++i) s.push_back(space.mutate(s[static_cast<size_t>(rng.uniform(kRandomPoints))], rng));
  std::vector<ModelSearch::Point> out;
  for (KernelSchedule &k : s) {
    std::string j = schedule_to_json(k);
    out.push_back({std::move(k), std::move(j)});
  }
  return out;
}

using TaskPoints = std::vector<std::pair<Task, std::vector<ModelSearch::Point>>>;

/**
 * Each iteration a fresh ModelSearch (nothing cached from the one before) lowers and featurizes
 * every task's points on `threads` threads; each task's default is lowered first, untimed (the
 * tuner lowers it once a run, not once a batch).
 */
void lower_points(benchmark::State &state, const TaskPoints &tasks, int threads, size_t batch = 0) {
  ModelSearchOptions o;
  o.threads = threads;
  size_t points = 0;
  for (auto _ : state) {
    state.PauseTiming();
    ModelSearch search(host_target(), o, 0);
    for (const auto &[t, p] : tasks) search.features(t, {default_schedule(t.body, host_target()), ""});
    state.ResumeTiming();
    if (batch == 0) {
      for (const auto &[t, p] : tasks) search.compute_features(t, p), points += p.size();
      continue;
    }
    // The tasks in turn, `batch` points of one at a time, as the task scheduler takes them.
    for (size_t from = 0; from < kRandomPoints + kMutations; from += batch)
      for (const auto &[t, p] : tasks) {
        std::vector<ModelSearch::Point> part(p.begin() + static_cast<std::ptrdiff_t>(std::min(from, p.size())),
                                             p.begin() + static_cast<std::ptrdiff_t>(std::min(from + batch, p.size())));
        search.compute_features(t, part), points += part.size();
      }
  }
  state.counters["points/s"] = benchmark::Counter(static_cast<double>(points), benchmark::Counter::kIsRate);
}

void register_model(const std::string &path) {
  auto g = import_onnx_file(path);
  auto fused = g ? lower_to_stage(*g, Stage::kFused, PassContext{}) : Expected<Graph>(g.error());
  if (!fused) {
    std::fprintf(stderr, "%s\n", fused.error().message.c_str());
    return;
  }
  std::string model = path.substr(path.rfind('/') + 1);
  TaskPoints all;
  for (Task &t : extract_tasks(*fused)) all.emplace_back(t, points_of(ScheduleSpace::of(t.body, host_target())));
  int threads = host_target().threads;
  benchmark::RegisterBenchmark(("lower/" + model + "/all-tasks").c_str(), [all, threads](benchmark::State &state) {
    lower_points(state, all, threads);
  })->Unit(benchmark::kMillisecond)->UseRealTime();
  benchmark::RegisterBenchmark(("lower/" + model + "/all-tasks-in-turn").c_str(), [all, threads](benchmark::State &state) {
    lower_points(state, all, threads, 16);
  })->Unit(benchmark::kMillisecond)->UseRealTime();
  // A point's JSON is its identity (the pools, the records): written once per point the search makes.
  benchmark::RegisterBenchmark(("json/" + model + "/all-tasks").c_str(), [all](benchmark::State &state) {
    size_t points = 0, bytes = 0;
    for (auto _ : state)
      for (const auto &[t, p] : all)
        for (const ModelSearch::Point &pt : p) bytes += schedule_to_json(pt.schedule).size(), ++points;
    benchmark::DoNotOptimize(bytes);
    state.counters["points/s"] = benchmark::Counter(static_cast<double>(points), benchmark::Counter::kIsRate);
  })->Unit(benchmark::kMillisecond)->UseRealTime();
  for (const auto &task : all) {
    const Task &t = task.first;
    std::string name = "lower/" + model + "/" + t.ops + t.shape + "/" + t.hash.substr(0, 6);  // the hash tells a 1x1 from a 3x3 conv
    for (int n : {1, threads}) {
      benchmark::RegisterBenchmark((name + "/threads:" + std::to_string(n)).c_str(), [one = TaskPoints{task}, n](benchmark::State &state) {
        lower_points(state, one, n);
      })->Unit(benchmark::kMillisecond)->UseRealTime();
      if (threads == 1) break;
    }
  }
}

}  // namespace
}  // namespace autotune::bench

int main(int argc, char **argv) {
  benchmark::Initialize(&argc, argv);
  if (argc < 2) autotune::bench::register_model(std::string(AUTOTUNE_MODELS_DIR) + "/resnet50.onnx");
  for (int i = 1; i < argc; ++i) autotune::bench::register_model(argv[i]);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
