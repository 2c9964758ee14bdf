#pragma once
// Random schedule steps for fuzzing the transformations: any op, on a random stage and loop of
// the kernel as it is now, with fresh names. Most are refused; the tests check that every
// accepted sequence still computes the reference's answer.
#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "codegen/Steps.h"
#include "codegen/Transform.h"

namespace autotune::testing {

inline const std::vector<std::string> &random_step_ops() {
  static const std::vector<std::string> ops{"split", "reorder", "fuse", "unroll", "vectorize", "parallel",
                                            "compute_at", "compute_inline", "cache_write", "cache_read", "distribute", "partition", "rfactor", "fission", "trim", "sink"};
  return ops;
}

/**
 * A random step for `k` (step number `t` names its new loops). Producer steps move the first
 * stage into the last; cache_write aims at the kernel's output buffer, cache_read at one of its
 * arguments.
 */
inline Step random_step(const LoweredKernel &k, std::mt19937 &rng, int t) {
  auto pick = [&](size_t n) { return static_cast<size_t>(rng() % std::max<size_t>(n, 1)); };
  const auto &ops = random_step_ops();
  Step s;
  s.op = ops[pick(ops.size())];
  const KernelStage &st = k.stages[pick(k.stages.size())];
  s.stage = st.name;
  std::vector<std::pair<std::string, int64_t>> loops;
  loops_of(st.body, loops);
  if (loops.empty()) return s;  // refused: no loop named ""
  auto [name, extent] = loops[pick(loops.size())];
  s.loop = name;
  std::string fresh = "t" + std::to_string(t);
  if (s.op == "split") s.factor = 1 + static_cast<int64_t>(pick(static_cast<size_t>(std::max<int64_t>(extent, 1)))), s.names = {fresh + "o", fresh + "i"};
  if (s.op == "fuse") {
    auto l = find_loop(st.body, name);
    s.names = {l && (*l)->body[0]->kind == loop::StmtKind::kFor ? (*l)->body[0]->var : name, fresh};
  }
  if (s.op == "reorder") {
    size_t i = pick(loops.size());
    s.names = {loops[i].first};
    for (size_t j = i + 1; j < loops.size() && s.names.size() < 3; ++j) s.names.push_back(loops[j].first);
    std::shuffle(s.names.begin(), s.names.end(), rng);
  }
  if (s.op == "parallel" || s.op == "fission") s.loop = loops[0].first;
  if (s.op == "rfactor") {  // over a loop after it (inside it, or not: then refused)
    size_t i = pick(loops.size());
    s.loop = loops[i].first;
    s.names = {loops[std::min(loops.size() - 1, i + 1 + pick(3))].first};
  }
  const KernelStage &last = k.stages.back();
  // The producer: the first stage, or with more than two any stage before the last (a chain's
  // depthwise conv after its padded input, a producer of statements).
  if (s.op == "compute_at" || s.op == "compute_inline")
    s.stage = last.name, s.producer = k.stages[k.stages.size() > 2 ? pick(k.stages.size() - 1) : 0].name;
  if (s.op == "cache_write") s.stage = last.name, s.buffer = k.buffers[static_cast<size_t>(k.num_params)]->name;
  if (s.op == "cache_read") s.stage = last.name, s.buffer = k.buffers[pick(static_cast<size_t>(k.num_params))]->name;
  if (s.op == "compute_at" || s.op == "cache_write" || s.op == "cache_read") {
    std::vector<std::pair<std::string, int64_t>> cl;
    loops_of(last.body, cl);
    if (pick(4) == 0) s.loop = last.parallel_var;  // at the stage's parallel loop, whether or not it is one
    else if (!cl.empty()) s.loop = cl[pick(cl.size())].first;
  }
  return s;
}

}  // namespace autotune::testing
