#include "codegen/Sketch.h"

#include <algorithm>

namespace autotune {

using namespace loop;

namespace {

/** The loops named i0, i1, ... and k0, k1, ... of a naive nest, with their extents, in order. */
void naive_loops(const Stmt &s, std::vector<std::pair<std::string, int64_t>> &outs, std::vector<std::pair<std::string, int64_t>> &reds) {
  if (!s) return;
  if (s->kind == StmtKind::kFor) {
    int64_t ex = as_int(s->extent).value_or(0);
    if (s->var.size() > 1 && s->var[0] == 'i' && std::all_of(s->var.begin() + 1, s->var.end(), ::isdigit)) outs.emplace_back(s->var, ex);
    if (s->var.size() > 1 && s->var[0] == 'k' && std::all_of(s->var.begin() + 1, s->var.end(), ::isdigit)) reds.emplace_back(s->var, ex);
  }
  for (const Stmt &b : s->body) naive_loops(b, outs, reds);
}

}  // namespace

Expected<std::vector<Step>> loop_sketch(const LoweredKernel &naive, const LoopSketch &knobs) {
  if (naive.stages.size() != 1) return make_error("the loop sketch needs a one-stage naive nest, not " + std::to_string(naive.stages.size()) + " stages");
  const KernelStage &st = naive.stages[0];
  std::vector<std::pair<std::string, int64_t>> outs, reds;
  naive_loops(st.body, outs, reds);
  if (outs.empty()) return make_error("the nest of stage " + st.name + " has no output loops");
  std::vector<Step> steps;
  auto step = [&](const std::string &op, const std::string &loop) {
    Step s;
    s.op = op, s.stage = st.name, s.loop = loop;
    return s;
  };
  const auto &[last, len] = outs.back();
  int64_t lanes = std::min<int64_t>(knobs.lanes, len);
  if (lanes >= 2) {
    Step split = step("split", last);
    split.factor = lanes;
    split.names = {"xo", "xi"};
    steps.push_back(split);
    steps.push_back(step("vectorize", "xi"));
    if (len % lanes >= 2) steps.push_back(step("vectorize", "xi_tail"));
  }
  if (knobs.unroll_reduction)
    for (const auto &[k, ex] : reds)
      if (ex > 1 && ex <= 16) {
        steps.push_back(step("unroll", k));
        if (lanes >= 2 && len % lanes) steps.push_back(step("unroll", k + "_tail"));
      }
  int fused = knobs.parallel_loops < 0 ? static_cast<int>(outs.size()) - 1 : std::min<int>(knobs.parallel_loops, static_cast<int>(outs.size()) - 1);
  std::string top = fused > 0 ? outs[0].first : "";
  for (int d = 1; d < fused; ++d) {
    Step f = step("fuse", top);
    f.names = {outs[d].first, "f" + std::to_string(d)};
    steps.push_back(f);
    top = f.names[1];
  }
  if (!top.empty()) steps.push_back(step("parallel", top));
  return steps;
}

std::vector<std::vector<Step>> loop_sketches(const LoweredKernel &naive, int lanes) {
  std::vector<std::vector<Step>> out;
  std::vector<int> widths;
  for (int v = lanes; v >= 4; v /= 2) widths.push_back(v);
  widths.push_back(1);
  for (int v : widths)
    for (bool unroll : {false, true})
      for (int par : {-1, 1}) {
        auto steps = loop_sketch(naive, {v, unroll, par});
        if (!steps || std::find(out.begin(), out.end(), *steps) != out.end()) continue;
        if (replay(naive, *steps)) out.push_back(*steps);  // a point the nest refuses is not in the space
      }
  return out;
}

}  // namespace autotune
