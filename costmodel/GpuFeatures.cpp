#include "costmodel/GpuFeatures.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <set>

namespace autotune {

using namespace loop;

const std::vector<std::string> &gpu_feature_names() {
  static const std::vector<std::string> names = {
      "stages",           "blocks",         "threads_per_block", "occupancy",        "blocks_per_sm",    "waves",
      "last_wave_idle",   "shared_bytes",   "registers",         "global_sectors",   "global_bytes",     "coalescing",
      "shared_loads",     "shared_stores",  "flops",             "barriers",         "arith_intensity",  "local_floats",
  };
  return names;
}

namespace {

/** Floats a thread keeps in its private buffers inside the thread loop (its register tile). */
int64_t local_floats(const Stmt &s) {
  if (!s) return 0;
  int64_t n = s->kind == StmtKind::kAllocate && s->buffer->scope == BufferScope::kLocal ? s->buffer->size : 0;
  for (const Stmt &b : s->body) n += local_floats(b);
  return n;
}

int64_t shared_bytes_of(const Stmt &s) {
  if (!s) return 0;
  int64_t n = s->kind == StmtKind::kAllocate && s->buffer->scope == BufferScope::kShared ? static_cast<int64_t>(s->buffer->bytes()) : 0;
  for (const Stmt &b : s->body) n += shared_bytes_of(b);
  return n;
}

/** The loads from shared memory in the innermost loop body that reads shared memory most: a thread's operands held at once. */
int64_t operand_registers(const Stmt &s) {
  if (!s) return 0;
  int64_t best = 0;
  if (s->kind == StmtKind::kFor && s->body[0]->kind != StmtKind::kFor) {
    std::set<std::string> distinct;
    std::function<void(const Stmt &)> stmts = [&](const Stmt &x) {
      if (!x) return;
      if (x->kind == StmtKind::kStore)
        for_each_node(x->value, [&](const Expr &e) {
          if (e->kind == ExprKind::kLoad && e->buffer->scope == BufferScope::kShared) distinct.insert(to_string(e));
        });
      if (x->kind != StmtKind::kFor)
        for (const Stmt &b : x->body) stmts(b);
    };
    stmts(s->body[0]);
    best = static_cast<int64_t>(distinct.size());
  }
  for (const Stmt &b : s->body) best = std::max(best, operand_registers(b));
  return best;
}

struct Counts {
  double sectors = 0, bytes = 0, shared_loads = 0, shared_stores = 0, flops = 0, barriers = 0;
};

/** Per-thread counts of one stage's thread body, weighted by the loops around each statement. */
class Walker {
 public:
  /** The thread loop's variable; the block's is taken at block 0. */
  Walker(const std::string &thread_var, const std::string &block_var) : t_(thread_var) { at_[block_var] = 0; }
  Counts counts;

  void walk(const Stmt &s, double mult) {
    if (!s) return;
    switch (s->kind) {
      case StmtKind::kFor: {
        auto mn = evaluate(subst(s->min), at_), ex = as_int(s->extent);
        at_[s->var] = mn ? *mn : 0;
        // A vectorized loop's lanes are one access each: their sectors together, counted once.
        bool vector = s->for_kind == ForKind::kVectorized && ex && *ex > 1 && vec_var_.empty();
        if (vector) vec_var_ = s->var, vec_lanes_ = *ex;
        walk(s->body[0], mult * (ex ? static_cast<double>(*ex) : 1.0));
        if (vector) vec_var_.clear(), vec_lanes_ = 1;
        at_.erase(s->var);
        return;
      }
      case StmtKind::kStore:
        access(s->buffer, s->index, mult, true);
        expr(s->index, mult);
        expr(s->value, mult);
        return;
      case StmtKind::kLet:
        lets_.push_back({s->var, s->value});
        expr(s->value, mult);
        walk(s->body[0], mult);
        lets_.pop_back();
        return;
      case StmtKind::kIf: expr(s->index, mult); break;
      case StmtKind::kBarrier: counts.barriers += mult; return;
      case StmtKind::kPrefetch:
      case StmtKind::kAllocate:
      case StmtKind::kSeq: break;
    }
    for (const Stmt &b : s->body) walk(b, mult);
  }

 private:
  Expr subst(Expr e) const {
    for (size_t i = lets_.size(); i-- > 0;) e = loop::substitute(e, lets_[i].first, lets_[i].second);
    return e;
  }

  void access(const Buffer &b, const Expr &index, double mult, bool is_store) {
    if (b->scope == BufferScope::kLocal) return;  // registers
    if (b->scope == BufferScope::kShared) {
      (is_store ? counts.shared_stores : counts.shared_loads) += mult;
      return;
    }
    // Inside a vectorized loop an access is one for all its lanes: a vector, or one element they share.
    Expr i = subst(index);
    bool vector = !vec_var_.empty();
    auto [sectors, bytes] = vector ? warp_sectors(i, t_, at_, vec_var_, vec_lanes_) : warp_sectors(i, t_, at_);
    double times = vector ? mult / static_cast<double>(vec_lanes_) : mult;  // mult counts the lanes
    counts.sectors += times * static_cast<double>(sectors) / 32.0;  // per thread: a warp's sectors over its 32 threads
    counts.bytes += times * static_cast<double>(bytes) / 32.0;
  }

  void expr(const Expr &e, double mult) {
    if (e->kind == ExprKind::kLoad) access(e->buffer, e->args[0], mult, false);
    if (e->type == Type::kF32 && (e->kind == ExprKind::kBinary || e->kind == ExprKind::kCall))
      counts.flops += mult * (e->kind == ExprKind::kCall && e->name == "fmuladd" ? 2.0 : 1.0);
    for (const Expr &a : e->args) expr(a, mult);
  }

  std::string t_;
  std::string vec_var_;  // the vectorized loop around the statement, if any, and its lanes
  int64_t vec_lanes_ = 1;
  std::map<std::string, int64_t> at_;
  std::vector<std::pair<std::string, Expr>> lets_;
};

}  // namespace

GpuOccupancy gpu_occupancy(const KernelStage &st, const GpuTarget &gpu, int64_t registers) {
  GpuOccupancy o;
  o.threads = as_int(st.body->extent).value_or(1);
  o.blocks = st.parallel_extent;
  o.shared_bytes = shared_bytes_of(st.body);
  o.registers = registers > 0 ? registers : std::min<int64_t>(gpu.registers_per_thread, local_floats(st.body->body[0]) + operand_registers(st.body) + 24);
  int64_t warps = (o.threads + gpu.warp_size - 1) / gpu.warp_size;
  int64_t per_warp = (o.registers * gpu.warp_size + 255) / 256 * 256;
  std::vector<std::pair<int64_t, std::string>> limits = {
      {gpu.max_blocks_per_sm, "blocks"},
      {gpu.max_threads_per_sm / std::max<int64_t>(1, warps * gpu.warp_size), "threads"},
      {gpu.registers_per_sm / std::max<int64_t>(1, per_warp * warps), "registers"},
  };
  if (o.shared_bytes > 0 && gpu.shared_bytes_per_sm > 0) limits.push_back({gpu.shared_bytes_per_sm / o.shared_bytes, "shared memory"});
  auto lowest = std::min_element(limits.begin(), limits.end(), [](const auto &a, const auto &b) { return a.first < b.first; });
  o.blocks_per_sm = lowest->first, o.limit = lowest->second;
  o.occupancy = static_cast<double>(o.blocks_per_sm * warps * gpu.warp_size) / gpu.max_threads_per_sm;
  return o;
}

std::vector<float> gpu_kernel_features(const LoweredKernel &k, const GpuTarget &gpu) {
  std::vector<double> f(gpu_feature_names().size(), 0.0);
  double occupancy = 1, bps = 1e9, sectors = 0, bytes = 0;
  for (const KernelStage &st : k.stages) {
    GpuOccupancy o = gpu_occupancy(st, gpu);
    Walker w(st.body->var, st.parallel_var);
    w.walk(st.body->body[0], 1.0);
    double threads = static_cast<double>(o.blocks * o.threads);
    double per_wave = static_cast<double>(std::max<int64_t>(1, o.blocks_per_sm) * gpu.sm_count);
    double waves = std::ceil(static_cast<double>(o.blocks) / per_wave);
    f[0] += 1;
    f[1] += static_cast<double>(o.blocks);
    f[2] = std::max(f[2], static_cast<double>(o.threads));
    occupancy = std::min(occupancy, o.occupancy);
    bps = std::min(bps, static_cast<double>(o.blocks_per_sm));
    f[5] += waves;
    f[6] = std::max(f[6], 1.0 - static_cast<double>(o.blocks) / (waves * per_wave));
    f[7] = std::max(f[7], static_cast<double>(o.shared_bytes));
    f[8] = std::max(f[8], static_cast<double>(o.registers));
    sectors += threads * w.counts.sectors;
    bytes += threads * w.counts.bytes;
    f[12] += threads * w.counts.shared_loads;
    f[13] += threads * w.counts.shared_stores;
    f[14] += threads * w.counts.flops;
    f[15] += static_cast<double>(o.blocks) * w.counts.barriers;
    f[17] = std::max(f[17], static_cast<double>(local_floats(st.body->body[0])));
  }
  f[3] = occupancy;
  f[4] = bps;
  f[9] = sectors;
  f[10] = bytes;
  f[11] = sectors > 0 ? bytes / (sectors * 32.0) : 1.0;
  f[16] = sectors > 0 ? f[14] / (sectors * 32.0) : 0.0;
  return std::vector<float>(f.begin(), f.end());
}

}  // namespace autotune
