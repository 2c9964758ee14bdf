// End-to-end latency of whole models, compiled with the default schedules, on all threads.
// Reports GFLOP/s next to the measured FMA peak of all threads.
//
//   bench_models [--benchmark_repetitions=5] [google benchmark flags]
#include <benchmark/benchmark.h>

#include "bench/Peak.h"
#include "ir/Reference.h"
#include "runtime/Runtime.h"

namespace autotune::bench {
namespace {

void model(benchmark::State &state, const std::string &name) {
  auto m = CompiledModel::load(std::string(AUTOTUNE_MODELS_DIR) + "/" + name + ".onnx", {});
  if (!m) return state.SkipWithError(m.error().message.c_str());
  auto inputs = random_inputs((*m)->graph(), 1);
  for (int i = 0; i < 3; ++i) (void)(*m)->run(inputs);  // warm-up
  for (auto _ : state) {
    auto out = (*m)->run(inputs);
    benchmark::DoNotOptimize(out);
  }
  double flops = 0;
  for (const GroupInfo &g : (*m)->groups()) flops += g.flops;
  state.counters["GFLOP/s"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["peak_GFLOP/s"] = fma_peak_gflops((*m)->threads());
  state.counters["threads"] = (*m)->threads();
}

BENCHMARK_CAPTURE(model, resnet18, std::string("resnet18"))->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(model, resnet50, std::string("resnet50"))->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace autotune::bench

BENCHMARK_MAIN();
