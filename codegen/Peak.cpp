#include "codegen/Peak.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <thread>
#include <vector>

namespace autotune {

Expected<double> measure_fma_peak(Jit &jit, int threads) {
  using namespace loop;
  const Target &t = jit.target();
  // Chains: all registers but a few (the multiplier, the addend, scratch); each is `lanes` wide.
  int chains = std::max(8, t.vector_registers - 4), lanes = t.lanes;
  Buffer iters = make_buffer("iters", Type::kI64, 1, BufferScope::kParam);
  Buffer out = make_buffer("out", Type::kF32, threads, BufferScope::kParam);
  Buffer acc = make_buffer("acc", Type::kF32, chains * lanes, BufferScope::kLocal);
  auto each = [&](const std::string &k, const std::string &v, const std::function<Stmt(Expr)> &body) {
    return for_loop(k, int_imm(0), int_imm(chains), ForKind::kUnrolled,
                    for_loop(v, int_imm(0), int_imm(lanes), ForKind::kVectorized, body(var(k) * lanes + var(v))));
  };
  Stmt body = allocate(
      // Start values that depend on the thread, so LLVM cannot evaluate the chains at compile time.
      acc, seq({each("k0", "v0", [&](Expr i) { return store(acc, i, cast(Type::kF32, var("r") + i) * float_imm(1e-9) + float_imm(1)); }),
                for_loop("i", int_imm(0), load(iters, int_imm(0)), ForKind::kSerial,
                         each("k1", "v1", [&](Expr i) { return store(acc, i, call("fmuladd", {load(acc, i), float_imm(0.9999999), float_imm(1e-7)})); })),
                // Every chain feeds the result, or LLVM drops the unused ones.
                store(out, var("r"), float_imm(0)),
                for_loop("j", int_imm(0), int_imm(chains * lanes), ForKind::kSerial, store(out, var("r"), load(out, var("r")) + load(acc, var("j"))))}));
  LoweredKernel k;
  k.name = "fma_peak";
  k.buffers = {iters, out};  // out is the kernel's output buffer, one value per thread
  k.num_params = 1;
  k.stages.push_back({"fma", "r", threads, body});
  AT_ASSIGN(ck, jit.compile(k));
  std::vector<float> results(threads);
  auto run = [&](int64_t n) {
    void *bufs[] = {&n, results.data()};
    auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    for (int r = 0; r < threads; ++r) pool.emplace_back([&, r] { ck.stages[0](bufs, r, r + 1); });
    for (auto &th : pool) th.join();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  int64_t n = 100000;
  while (run(n) < 0.02 && n < (int64_t{1} << 40)) n *= 4;  // calibrate to tens of milliseconds
  n = static_cast<int64_t>(static_cast<double>(n) * 0.1 / std::max(run(n), 1e-6));
  double best = 0, flops = 2.0 * chains * lanes * static_cast<double>(n) * threads;
  for (int rep = 0; rep < 3; ++rep) best = std::max(best, flops / run(n) / 1e9);
  return best;
}

}  // namespace autotune
