// The search's own cost: lowering candidate schedules for the cost model's features, which is most
// of what the model-guided search spends between batches (issue 9: a 2000-trial ResNet-50 run
// lowers about 8000 points). Each benchmark is one task of a model: a fixed set of its points
// (random samples of its space and mutations of them, seeded), lowered and featurized by a fresh
// ModelSearch each iteration (nothing cached from the iteration before), on one thread or on
// every thread as the search runs them. Reports points lowered per second.
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

void register_model(const std::string &path) {
  auto g = import_onnx_file(path);
  auto fused = g ? lower_to_stage(*g, Stage::kFused, PassContext{}) : Expected<Graph>(g.error());
  if (!fused) {
    std::fprintf(stderr, "%s\n", fused.error().message.c_str());
    return;
  }
  std::string model = path.substr(path.rfind('/') + 1);
  for (Task &t : extract_tasks(*fused)) {
    ScheduleSpace space = ScheduleSpace::of(t.body, host_target());
    std::vector<ModelSearch::Point> points = points_of(space);
    std::string name = "lower/" + model + "/" + t.ops + t.shape + "/" + t.hash.substr(0, 6);  // the hash tells a 1x1 from a 3x3 conv
    for (int threads : {1, host_target().threads}) {
      benchmark::RegisterBenchmark((name + "/threads:" + std::to_string(threads)).c_str(), [t, points, threads](benchmark::State &state) {
        ModelSearchOptions o;
        o.threads = threads;
        for (auto _ : state) {
          state.PauseTiming();  // the task's default is lowered once a run, not once a batch
          ModelSearch search(host_target(), o, 0);  // fresh: its caches empty
          search.features(t, {default_schedule(t.body, host_target()), ""});
          state.ResumeTiming();
          search.compute_features(t, points);
          benchmark::DoNotOptimize(search.points_lowered());
        }
        state.counters["points/s"] = benchmark::Counter(static_cast<double>(points.size()), benchmark::Counter::kIsIterationInvariantRate);
      })->Unit(benchmark::kMillisecond)->UseRealTime();
      if (host_target().threads == 1) break;
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
