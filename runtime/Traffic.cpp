#include "runtime/Traffic.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <memory>

#include "codegen/Kernel.h"
#include "ir/Ops.h"
#include "ir/Rewriter.h"
#include "ir/Stats.h"

namespace autotune {
namespace {

constexpr int64_t kBlock = 4096;  // floats per parallel unit (16 KiB)
constexpr size_t kSmallest = size_t{64} << 10, kLargest = size_t{32} << 20;

double rate_at(const StreamRates &r, const std::vector<double> &gbs, size_t b) {
  if (r.bytes.empty()) return 0;
  if (b <= r.bytes.front()) return gbs.front();
  if (b >= r.bytes.back()) return gbs.back();
  size_t i = 1;
  while (r.bytes[i] < b) ++i;
  double f = (std::log(static_cast<double>(b)) - std::log(static_cast<double>(r.bytes[i - 1]))) /
             (std::log(static_cast<double>(r.bytes[i])) - std::log(static_cast<double>(r.bytes[i - 1])));
  return gbs[i - 1] + (gbs[i] - gbs[i - 1]) * f;
}

double ms_at(double bytes, double gbs) { return gbs > 0 ? bytes / gbs / 1e6 : 0; }

/** The stream kernels: `write` fills its blocks of `buf`, `read` sums each block on four vector accumulators into `sums`. */
Expected<std::pair<CompiledKernel, CompiledKernel>> stream_kernels(Jit &jit, int64_t blocks) {
  using namespace loop;
  const int lanes = jit.target().lanes;
  Buffer buf = make_buffer("buf", Type::kF32, blocks * kBlock, BufferScope::kParam);
  Buffer sums = make_buffer("sums", Type::kF32, blocks * 4 * lanes, BufferScope::kParam);
  Buffer acc = make_buffer("acc", Type::kF32, 4 * lanes, BufferScope::kLocal);
  Expr at = var("b") * kBlock + var("i") * (4 * lanes) + var("k") * lanes + var("v");
  auto chains = [&](const std::function<Stmt(Expr)> &body) {  // i over the block, k over 4 vectors, v over lanes
    return for_loop("i", int_imm(0), int_imm(kBlock / (4 * lanes)), ForKind::kSerial,
                    for_loop("k", int_imm(0), int_imm(4), ForKind::kUnrolled,
                             for_loop("v", int_imm(0), int_imm(lanes), ForKind::kVectorized, body(var("k") * lanes + var("v")))));
  };
  LoweredKernel w;
  w.name = "stream_write";
  w.buffers = {buf};  // the output
  w.num_params = 0;
  w.stages.push_back({"write", "b", blocks, chains([&](Expr) { return store(buf, at, cast(Type::kF32, var("b"))); })});
  LoweredKernel r;
  r.name = "stream_read";
  r.buffers = {buf, sums};
  r.num_params = 1;
  Stmt zero = for_loop("z", int_imm(0), int_imm(4 * lanes), ForKind::kSerial, store(acc, var("z"), float_imm(0)));
  Stmt add = chains([&](Expr j) { return store(acc, j, load(acc, j) + load(buf, at)); });
  // The accumulators are stored as they are: a sum across the lanes per block costs as much as the block's loads.
  Stmt fold = for_loop("j", int_imm(0), int_imm(4), ForKind::kUnrolled,
                       for_loop("u", int_imm(0), int_imm(lanes), ForKind::kVectorized,
                                store(sums, var("b") * (4 * lanes) + var("j") * lanes + var("u"), load(acc, var("j") * lanes + var("u")))));
  r.stages.push_back({"read", "b", blocks, allocate(acc, seq({zero, add, fold}))});
  AT_ASSIGN(cw, jit.compile(w));
  AT_ASSIGN(cr, jit.compile(r));
  return std::make_pair(cw, cr);
}

}  // namespace

double StreamRates::write_ms(size_t b) const { return ms_at(static_cast<double>(b), rate_at(*this, write_gbs, b)); }
double StreamRates::read_ms(size_t b) const { return ms_at(static_cast<double>(b), rate_at(*this, read_gbs, b)); }

Expected<StreamRates> measure_stream_rates(Jit &jit, ThreadPool &pool, int reps) {
  const int64_t most = static_cast<int64_t>(kLargest / sizeof(float)) / kBlock;
  AT_ASSIGN(kernels, stream_kernels(jit, most));
  constexpr int kBuffers = 4;
  struct Free { void operator()(float *p) const { std::free(p); } };
  std::vector<std::unique_ptr<float, Free>> bufs;
  for (int k = 0; k < kBuffers; ++k) {
    float *p = static_cast<float *>(std::aligned_alloc(64, kLargest));
    if (!p) return make_error("stream rates: cannot allocate " + std::to_string(kLargest >> 20) + " MiB");
    std::fill(p, p + kLargest / sizeof(float), 0.0f);  // touch every page before timing
    bufs.emplace_back(p);
  }
  std::vector<float> sums(static_cast<size_t>(most * 4 * jit.target().lanes));
  using Clock = std::chrono::steady_clock;
  std::vector<size_t> sizes;
  for (size_t bytes = kSmallest; bytes <= kLargest; bytes *= 2) sizes.push_back(bytes);
  // A call's time is its slowest thread's, from its own start: the hand-off to the threads is
  // priced apart (TrafficBound::handoff_ms).
  auto timed = [&](StageFn stage, void **args, int64_t blocks) {
    std::atomic<int64_t> slowest{0};
    pool.parallel_for(blocks, [&](int64_t lo, int64_t hi) {
      auto t0 = Clock::now();
      stage(args, lo, hi);
      int64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
      int64_t seen = slowest.load();
      while (ns > seen && !slowest.compare_exchange_weak(seen, ns)) {
      }
    });
    return static_cast<double>(slowest.load()) * 1e-9;
  };
  // Every size in each round, so that a burst of the host's load costs each size one timing of
  // its median instead of all of one size's. Before each timing the size's four buffers are
  // written and read in turn, so the timed one (the first again) was last used three buffers
  // ago, as an arena's slots are reused, and not a round ago, after every other size.
  std::vector<std::vector<double>> w(sizes.size()), r(sizes.size());
  for (int rep = 0; rep < reps; ++rep)
    for (size_t k = 0; k < sizes.size(); ++k) {
      int64_t blocks = static_cast<int64_t>(sizes[k] / sizeof(float)) / kBlock;
      double tw = 0, tr = 0;
      for (int b = 0; b <= kBuffers; ++b) {
        void *args[] = {bufs[b % kBuffers].get(), sums.data()};
        tw = timed(kernels.first.stages[0], args, blocks);
        tr = timed(kernels.second.stages[0], args, blocks);
      }
      w[k].push_back(tw);  // the first buffer's second pass
      r[k].push_back(tr);
    }
  StreamRates rates;
  for (size_t k = 0; k < sizes.size(); ++k) {
    rates.bytes.push_back(sizes[k]);
    rates.write_gbs.push_back(static_cast<double>(sizes[k]) / median(w[k]) / 1e9);
    rates.read_gbs.push_back(static_cast<double>(sizes[k]) / median(r[k]) / 1e9);
  }
  return rates;
}

TrafficBound traffic_bound(const Graph &fused, const std::vector<double> &group_ms, double e2e_ms, double handoff_ns,
                           const StreamRates &rates) {
  TrafficBound t;
  t.rates = rates;
  size_t n = fused.nodes.size();
  t.groups = static_cast<int>(n);
  Uses uses = find_uses(fused);
  // after[i][j]: node j depends on node i (node order is topological).
  std::vector<std::vector<bool>> after(n, std::vector<bool>(n, false));
  for (size_t j = 0; j < n; ++j)
    for (ValueId v : fused.nodes[j].inputs)
      if (v.kind == ValueId::Kind::kNode) {
        after[v.index][j] = true;
        for (size_t i = 0; i < n; ++i)
          if (after[i][v.index]) after[i][j] = true;
      }
  auto reduces = [&](int c) {  // a reduction (mean, sum) or a global pool, which needs the whole value
    const Node &node = fused.nodes[c];
    if (!node.is_function()) return false;
    for (const Node &m : node.body->nodes)
      if (find_op(m.op)->pattern == OpPattern::kCommReduce || m.op == "nn.global_avg_pool2d") return true;
    return false;
  };
  double sum_groups = 0;
  for (size_t i = 0; i < n; ++i) {
    sum_groups += i < group_ms.size() ? group_ms[i] : 0;
    if (uses.is_output[i] || uses.consumers[i].empty()) continue;
    size_t b = fused.nodes[i].type.nbytes();
    double readers = static_cast<double>(uses.consumers[i].size());
    t.written_mb += static_cast<double>(b) / 1e6;
    t.read_mb += readers * static_cast<double>(b) / 1e6;
    double ms = rates.write_ms(b) + readers * rates.read_ms(b);
    t.traffic_ms += ms;
    bool kept = false;
    for (int a : uses.consumers[i])
      for (int c : uses.consumers[i])
        kept = kept || (a != c && reduces(a) && after[a][c]);
    if (kept) {
      t.kept_ms += rates.write_ms(b) + rates.read_ms(b);
      ++t.kept_values;
    }
    t.values.push_back({static_cast<int>(i), b, static_cast<int>(uses.consumers[i].size()), ms, kept});
  }
  std::stable_sort(t.values.begin(), t.values.end(), [](const TrafficBound::Value &a, const TrafficBound::Value &b) { return a.ms > b.ms; });
  t.handoff_ms = n > 1 ? static_cast<double>(n - 1) * handoff_ns / 1e6 : 0;
  t.dispatch_ms = std::max(0.0, e2e_ms - sum_groups);
  t.e2e_ms = e2e_ms;
  t.floor_ms = e2e_ms - (t.traffic_ms - t.kept_ms) - t.handoff_ms - t.dispatch_ms;
  t.bound = t.floor_ms > 0 ? e2e_ms / t.floor_ms : 0;
  return t;
}

}  // namespace autotune
