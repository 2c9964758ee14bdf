#include "ir/Pass.h"

#include <cstdio>

#include "ir/Printer.h"
#include "ir/Reference.h"
#include "ir/Verify.h"
#include "ir/passes/Passes.h"

namespace autotune {

bool PassContext::enabled(const Pass &p) const {
  if (disabled.count(p.name)) return false;
  if (required.count(p.name)) return true;
  return opt_level >= p.opt_level;
}

const std::vector<Pass> &all_passes() {
  // Opt levels follow TVM's for the passes TVM has: FuseOps 0, DeadCodeElimination 1,
  // FoldConstant 2, EliminateCommonSubexpr 3.
  static const std::vector<Pass> passes = {
      {"infer-shapes", 0, infer_shapes, {}},
      {"simplify", 1, simplify, {}},
      {"fold-constants", 2, fold_constants, {}},
      {"fold-batch-norm", 1, fold_batch_norm, {}},
      {"fuse-layer-norm", 1, fuse_layer_norm, {}},
      {"eliminate-common-subexpr", 3, eliminate_common_subexpr, {}},
      {"eliminate-dead-code", 1, eliminate_dead_code, {}},
      // At TVM's AlterOpLayout's level: on by default.
      {"nchwc-layout", 3, [](const Graph &g) { return nchwc_layout(g); }, {}},
      {"fuse-ops", 0, [](const Graph &g) { return fuse_ops(g); }, {"infer-shapes"}},
  };
  return passes;
}

const Pass *find_pass(const std::string &name) {
  for (const Pass &p : all_passes())
    if (p.name == name) return &p;
  return nullptr;
}

namespace {
Status run_one(const Pass &p, Graph &g, const PassContext &ctx) {
  for (const auto &inst : ctx.instruments) AT_TRY(inst->before_pass(p, g));
  auto next = p.run(g);
  if (!next) return make_error("pass " + p.name + ": " + next.error().message);
  // After-hooks run in reverse, so instruments nest: the last one added sees only the pass.
  for (auto it = ctx.instruments.rbegin(); it != ctx.instruments.rend(); ++it) AT_TRY((*it)->after_pass(p, g, *next));
  g = next.take();
  return Status::ok();
}
}  // namespace

Expected<Graph> run_passes(const Graph &g, const std::vector<std::string> &names, const PassContext &ctx) {
  for (const std::string &n : ctx.disabled) {
    if (find_pass(n)) continue;
    std::string known;
    for (const Pass &p : all_passes()) known += (known.empty() ? "" : ", ") + p.name;
    return make_error("unknown pass '" + n + "' (passes: " + known + ")");
  }
  Graph cur = g;
  for (const std::string &name : names) {
    const Pass *p = find_pass(name);
    if (!p) return make_error("unknown pass '" + name + "'");
    if (!ctx.enabled(*p)) continue;
    for (const std::string &req : p->required) {
      const Pass *r = find_pass(req);
      AT_CHECK(r != nullptr, "pass " + name + " requires unknown pass " + req);
      if (!ctx.disabled.count(req)) AT_TRY(run_one(*r, cur, ctx));
    }
    AT_TRY(run_one(*p, cur, ctx));
  }
  return cur;
}

Expected<Stage> parse_stage(const std::string &s) {
  if (s == "imported") return Stage::kImported;
  if (s == "optimized") return Stage::kOptimized;
  if (s == "fused") return Stage::kFused;
  return make_error("unknown stage '" + s + "' (imported, optimized or fused)");
}

std::vector<std::string> stage_pipeline(Stage s) {
  std::vector<std::string> names;
  if (s == Stage::kImported) return names;
  names = {"infer-shapes", "simplify", "fold-constants", "fold-batch-norm", "fuse-layer-norm", "eliminate-common-subexpr", "eliminate-dead-code", "nchwc-layout"};
  if (s == Stage::kFused) names.push_back("fuse-ops");
  return names;
}

Expected<Graph> lower_to_stage(const Graph &g, Stage s, const PassContext &ctx) {
  AT_ASSIGN(out, run_passes(g, stage_pipeline(s), ctx));
  // The fused stage is what kernels are made of: every op must be inside a function. With
  // fuse-ops disabled nothing fuses, so each op becomes a function of its own (TVM's FuseOps at
  // fuse level 0 does the same): the model runs unfused, which is what disabling fusion asks for.
  if (s == Stage::kFused && ctx.disabled.count("fuse-ops")) return fuse_ops(out, FuseOptions{/*max_group_size=*/1});
  return out;
}

Status PrintIRInstrument::after_pass(const Pass &p, const Graph &, const Graph &after) {
  std::fprintf(out_, "// IR after %s\n%s\n", p.name.c_str(), print_text(after).c_str());
  return Status::ok();
}

Status TimingInstrument::before_pass(const Pass &, const Graph &) {
  start_ = std::chrono::steady_clock::now();
  return Status::ok();
}

Status TimingInstrument::after_pass(const Pass &p, const Graph &, const Graph &) {
  times_.emplace_back(p.name, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count());
  return Status::ok();
}

std::string TimingInstrument::report() const {
  std::string s;
  double total = 0;
  char buf[128];
  for (const auto &[name, ms] : times_) {
    std::snprintf(buf, sizeof buf, "  %-26s %9.2f ms\n", name.c_str(), ms);
    s += buf;
    total += ms;
  }
  std::snprintf(buf, sizeof buf, "  %-26s %9.2f ms\n", "total", total);
  return s + buf;
}

Status VerifyInstrument::before_pass(const Pass &, const Graph &before) {
  if (last_.empty()) {
    auto outs = run_reference(before, random_inputs(before, seed_));
    if (!outs) return make_error("verify: the graph before the first pass does not run: " + outs.error().message);
    last_ = outs.take();
  }
  return Status::ok();
}

Status VerifyInstrument::after_pass(const Pass &p, const Graph &before, const Graph &after) {
  auto outs = run_reference(after, random_inputs(before, seed_));
  if (!outs) return make_error("verify: the graph after " + p.name + " does not run: " + outs.error().message);
  AT_ASSIGN(diffs, compare_outputs(last_, *outs));
  if (log_) std::fprintf(log_, "verify %-26s %s\n", p.name.c_str(), describe(diffs).c_str());
  if (auto st = check_within(diffs, tolerance_); !st) return make_error("verify: pass " + p.name + " changed the result: " + st.error().message);
  last_ = outs.take();
  return Status::ok();
}

}  // namespace autotune
