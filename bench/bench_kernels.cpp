// Per-kernel benchmarks: every distinct fused group of ResNet-50 (each conv shape with its
// epilogue, the dense layer, the pools) compiled alone with its default schedule and run on the
// thread pool. Reports GFLOP/s and the share of the measured FMA peak of all threads. Each 3x3
// stride-1 conv is also run with the direct, Winograd F(2x2) and F(4x4) algorithms side by side
// (benchmarks named .../algo:winograd2, .../algo:winograd4, and for the direct kernel on
// activations in NCHW[b]c, as nchwc-layout leaves ResNets, .../algo:direct-nchwc-copy with its
// padding copied first or .../algo:direct-nchwc-tilepad with it in its tiles), and the same conv
// in NCHW (the model fused without nchwc-layout, named layout:nchw/..., algo:direct too).
//
//   bench_kernels [--benchmark_filter=conv] [google benchmark flags] [MODEL.onnx...]
//   (the models default to the generated ResNet-50; any other model's groups can be timed alike)
//   bench_kernels --benchmark_filter=algo --benchmark_repetitions=5 --benchmark_report_aggregates_only
#include <benchmark/benchmark.h>

#include <map>

#include "bench/Peak.h"
#include "ir/OnnxImport.h"
#include "ir/Printer.h"
#include "ir/Reference.h"
#include "codegen/Lower.h"
#include "runtime/Runtime.h"
#include "runtime/BoundKernel.h"

namespace autotune::bench {
namespace {

/** One group's kernel compiled with a given schedule and bound to seeded arguments. */
struct ScheduledKernel {
  std::unique_ptr<Jit> jit;
  LoweredKernel k;
  CompiledKernel ck;
  std::unique_ptr<BoundKernel> bound;
  static Expected<std::unique_ptr<ScheduledKernel>> make(const Graph &body, const KernelSchedule &s) {
    auto sk = std::make_unique<ScheduledKernel>();
    AT_ASSIGN(jit, Jit::create({default_kernel_cache_dir()}));
    sk->jit = std::move(jit);
    AT_ASSIGN(k, lower_group(body, kernel_name(body), s));
    sk->k = std::move(k);
    AT_ASSIGN(ck, sk->jit->compile(sk->k));
    sk->ck = std::move(ck);
    sk->bound = std::make_unique<BoundKernel>(sk->k, sk->ck, random_inputs(body, 1), Tensor(body.type_of(body.outputs[0])));
    return sk;
  }
};

/**
 * The group with its activations in NCHW[b]c: the conv as conv2d_nchwc, its input and every
 * argument of the output's shape (a residual) blocked; an error where an epilogue op reads
 * anything else (a per-channel constant, say).
 */
Expected<Graph> nchwc_body(const Graph &body, int64_t b) {
  const Shape &os = body.type_of(body.outputs[0]).shape;
  auto blocked = [&](const Shape &s) { return Shape{s[0], s[1] / b, s[2], s[3], b}; };
  int conv = -1;
  for (size_t i = 0; i < body.nodes.size(); ++i)
    if (body.nodes[i].op == "nn.conv2d") conv = static_cast<int>(i);
  if (conv < 0 || os.size() != 4 || os[1] % b) return make_error("no conv with channels in blocks of " + std::to_string(b));
  GraphBuilder g;
  std::vector<ValueId> params;
  for (size_t i = 0; i < body.inputs.size(); ++i) {
    TensorType t = body.inputs[i].type;
    bool activation = (body.nodes[conv].inputs[0] == ValueId{ValueId::Kind::kInput, static_cast<int>(i)} || t.shape == os);
    if (activation) {
      if (t.shape.size() != 4 || t.shape[1] % b) return make_error("input channels not in blocks of " + std::to_string(b));
      t.shape = blocked(t.shape);
    }
    params.push_back(g.add_input(body.inputs[i].name, t));
  }
  std::vector<ValueId> values;
  for (const Node &n : body.nodes) {
    std::vector<ValueId> in;
    for (ValueId v : n.inputs) in.push_back(v.kind == ValueId::Kind::kInput ? params[v.index] : values[v.index]);
    if (&n - body.nodes.data() > conv && n.type.shape != os) return make_error("an epilogue op of another shape");
    AT_ASSIGN(v, g.add_node(n.op == "nn.conv2d" ? "nn.conv2d_nchwc" : n.op, in, n.attrs));
    values.push_back(v);
  }
  g.add_output(values[body.outputs[0].index]);
  return g.finish();
}

/** The direct, F(2x2) and F(4x4) algorithms of a 3x3 stride-1 conv group, one benchmark each. */
void register_algorithms(const std::string &name, const Graph &body, double flops, bool blocked_too = true) {
  // An NCHW group: also its direct kernel with activations in NCHW[lanes]c. A conv2d_nchwc group
  // (nchwc-layout): its direct kernel both ways, and no plain direct (it would be the copy).
  bool nchwc = false;
  for (const Node &n : body.nodes) nchwc |= conv_block(n) > 0;
  auto blocked = nchwc ? Expected<Graph>(body) : blocked_too ? nchwc_body(body, host_target().lanes) : make_error("not asked for");
  // Its default pads in the tiles or copies by the image's width; both are run.
  for (int m : {0, 2, 4, -1, -2}) {
    if ((m < 0 && !blocked) || (m == 0 && nchwc)) continue;
    Graph g = m < 0 ? *blocked : body;
    KernelSchedule s = default_schedule(g);
    s.steps.clear();  // the knobs below, not the step list the default stands for (which would ignore them)
    if (m >= 0) s.winograd = m;
    if (m > 0) s.ic_block = 0;
    if (m < 0) s.winograd = 0;
    if (m == -1) s.pad_at_root = true;                    // a padded copy stage first
    if (m == -2) s.pad_at_root = false, s.ic_block = 0;  // the padding in the tiles: no copy stage
    std::string label = name + "/algo:" +
                        (m > 0 ? "winograd" + std::to_string(m) : m == -1 ? "direct-nchwc-copy" : m == -2 ? "direct-nchwc-tilepad" : std::string("direct"));
    benchmark::RegisterBenchmark(label.c_str(), [body = g, s, flops](benchmark::State &state) {
      auto sk = ScheduledKernel::make(body, s);
      if (!sk) return state.SkipWithError(sk.error().message.c_str());
      auto pool = ThreadPool::shared(0);
      (*sk)->bound->run(*pool);
      for (auto _ : state) (*sk)->bound->run(*pool);
      state.counters["GFLOP/s"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);  // direct-conv FLOPs
      state.SetLabel(s.to_string());
    })->Unit(benchmark::kMillisecond)->UseRealTime();
  }
}

/** A group's benchmark name: the model, its ops, its output shape and its first weight's shape (1x1 or 3x3). */
std::string group_name(const std::string &model, const Graph &fused, const Node &fn) {
  std::string ops;
  for (const Node &n : fn.body->nodes) ops += (ops.empty() ? "" : "+") + n.op.substr(n.op.rfind('.') + 1);
  std::string weights;
  for (ValueId v : fn.inputs)
    if (v.kind == ValueId::Kind::kConstant && weights.empty()) weights = " w" + shape_str(fused.type_of(v).shape);
  return model + "/" + ops + shape_str(fn.type.shape) + weights;
}

void register_model(const std::string &path) {
  auto g = import_onnx_file(path);
  if (!g) {
    std::fprintf(stderr, "%s\n", g.error().message.c_str());
    return;
  }
  std::string model = path.substr(path.rfind('/') + 1);
  // The 3x3 stride-1 convs in NCHW, for the side by side with the layout the model runs.
  PassContext plain;
  plain.disabled.insert("nchwc-layout");
  if (auto nchw = lower_to_stage(*g, Stage::kFused, plain)) {
    std::map<std::string, int> seen;
    for (const Node &fn : nchw->nodes) {
      bool conv = false;
      for (const Node &n : fn.body->nodes) conv |= winograd_eligible(*fn.body, n);
      if (!conv || seen[print_text(*fn.body)]++) continue;
      register_algorithms("layout:nchw/" + group_name(model, *nchw, fn), *fn.body, group_flops(*fn.body), /*blocked_too=*/false);  // the model's own groups have those
    }
  }
  auto fused = lower_to_stage(*g, Stage::kFused, PassContext{});
  if (!fused) return;
  std::map<std::string, int> seen;  // group body text -> uses
  for (const Node &fn : fused->nodes) {
    std::string key = print_text(*fn.body);
    if (seen[key]++) continue;
    std::string name = group_name(model, *fused, fn);
    // The kernel alone, bound once to its arguments, output and temporaries, as the measurer
    // times it. Run as a one-group model, each run's output was a fresh allocation whose pages
    // faulted in inside the kernel: a 256 x 56 x 56 1x1 conv took 1.10 ms that way against 0.45.
    benchmark::RegisterBenchmark(name.c_str(), [body = *fn.body](benchmark::State &state) {
      KernelSchedule s = default_schedule(body);
      auto sk = ScheduledKernel::make(body, s);
      if (!sk) return state.SkipWithError(sk.error().message.c_str());
      auto pool = ThreadPool::shared(0);
      (*sk)->bound->run(*pool);
      for (auto _ : state) (*sk)->bound->run(*pool);
      double flops = group_flops(body);
      double peak = fma_peak_gflops(pool->size());
      state.counters["GFLOP/s"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
      state.counters["peak_GFLOP/s"] = peak;
      state.counters["share_of_peak"] = benchmark::Counter(flops * 1e-9 / peak, benchmark::Counter::kIsIterationInvariantRate);
      state.SetLabel((*sk)->k.schedule);
    })->Unit(benchmark::kMillisecond)->UseRealTime();
    for (const Node &n : fn.body->nodes)
      if (winograd_eligible(*fn.body, n)) register_algorithms(name, *fn.body, group_flops(*fn.body));
  }
}

}  // namespace
}  // namespace autotune::bench

int main(int argc, char **argv) {
  benchmark::Initialize(&argc, argv);
  const autotune::Target &host = autotune::host_target();
  std::printf("target %s (%s, %d lanes, %d vector registers): measured fp32 FMA peak %.1f GFLOP/s on 1 thread, %.1f on 2; "
              "memory bandwidth %.1f GB/s on 1 thread, %.1f on 2\n",
              host.cpu.c_str(), host.isa.c_str(), host.lanes, host.vector_registers, autotune::bench::fma_peak_gflops(1),
              autotune::bench::fma_peak_gflops(2), autotune::bench::memory_bandwidth_gbs(1), autotune::bench::memory_bandwidth_gbs(2));
  // Google Benchmark has taken its own flags out of argv; what is left are models.
  if (argc < 2) autotune::bench::register_model(std::string(AUTOTUNE_MODELS_DIR) + "/resnet50.onnx");
  for (int i = 1; i < argc; ++i) autotune::bench::register_model(argv[i]);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
