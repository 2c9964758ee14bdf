#include "costmodel/Features.h"

#include <algorithm>
#include <cmath>
#include <map>

namespace autotune {

using namespace loop;

namespace {

double log2p(double x) { return std::log2(1.0 + std::max(0.0, x)); }

/** One walk over a kernel's stages, accumulating per-call counts. */
class Walker {
 public:
  explicit Walker(const Target &t) : t_(t) {}

  void stage(const KernelStage &s, const std::vector<Buffer> &buffers) {
    read_.clear(), written_.clear();
    double flops_before = flops();
    mult_ = static_cast<double>(s.parallel_extent);
    depth_ = 1;
    walk(s.body);
    double stage_flops = flops() - flops_before;
    // Footprints: all of each memory buffer the stage touches (compulsory traffic), and what one
    // iteration of its parallel loop touches (the working set a thread holds at once).
    double unique = 0, per_iteration = 0, executed = 0;
    auto add = [&](const std::map<const BufferNode *, double> &m) {
      for (const auto &[b, bytes] : m) {
        unique += std::min(static_cast<double>(b->bytes()), bytes);
        per_iteration += std::min(static_cast<double>(b->bytes()), bytes / static_cast<double>(s.parallel_extent));
        executed += bytes;
      }
    };
    add(read_), add(written_);
    auto miss = [&](double cache) { return per_iteration <= cache ? 0.0 : 1.0 - cache / per_iteration; };
    double reuse = std::max(0.0, executed - unique);
    compulsory_ += unique;
    from_l2_ += unique + reuse * miss(static_cast<double>(t_.l1_bytes));
    from_l3_ += unique + reuse * miss(static_cast<double>(t_.l2_bytes));
    from_dram_ += unique + reuse * miss(static_cast<double>(std::max<int64_t>(t_.l3_bytes, t_.l2_bytes)));
    working_set_ = std::max(working_set_, per_iteration);
    // Parallelism, weighted by the stage's share of the work.
    double threads = std::max(1, t_.threads), extent = static_cast<double>(s.parallel_extent);
    double balance = extent / (std::ceil(extent / threads) * threads);
    double weight = std::max(stage_flops, 1.0);
    balance_sum_ += balance * weight, extent_sum_ += log2p(extent / threads) * weight, weight_sum_ += weight;
    for (const Buffer &b : buffers)
      if (b->scope == BufferScope::kTemp && written_.count(b.get())) temp_stored_ += written_[b.get()];
    ++stages_;
  }

  std::vector<float> finish(const LoweredKernel &k) const {
    double f = std::max(flops(), 1.0);
    double accesses = std::max(contiguous_ + broadcast_ + strided_ + gather_, 1.0);
    double out_elems = 1;
    if (static_cast<size_t>(k.num_params) < k.buffers.size()) out_elems = static_cast<double>(k.buffers[k.num_params]->size);
    double per_cycle = 2.0 * std::max(1, t_.fma_units) * std::max(1, t_.lanes) * std::max(1, t_.threads);  // flops at the FMA peak
    double balance = weight_sum_ > 0 ? balance_sum_ / weight_sum_ : 1.0;
    std::vector<float> v = {
        static_cast<float>(log2p(flops())),
        static_cast<float>(2 * fma_ / f),
        static_cast<float>(add_ / f),
        static_cast<float>(mul_ / f),
        static_cast<float>(div_ / f),
        static_cast<float>(cmp_ / f),
        static_cast<float>(transcendental_ / f),
        static_cast<float>(int_ops_ / f),
        static_cast<float>(vector_flops_ / f),
        static_cast<float>(lane_flops_ / f / std::max(1, t_.lanes)),
        static_cast<float>(log2p(mem_load_)),
        static_cast<float>(log2p(mem_store_)),
        static_cast<float>(log2p(local_bytes_)),
        static_cast<float>(contiguous_ / accesses),
        static_cast<float>(broadcast_ / accesses),
        static_cast<float>(strided_ / accesses),
        static_cast<float>(gather_ / accesses),
        static_cast<float>(masked_ / accesses),
        static_cast<float>(log2p(compulsory_)),
        static_cast<float>(log2p(from_l2_)),
        static_cast<float>(log2p(from_l3_)),
        static_cast<float>(log2p(from_dram_)),
        static_cast<float>(std::log2(f / std::max(from_dram_, 1.0))),
        static_cast<float>(std::log2(std::max(working_set_, 1.0) / static_cast<double>(std::max<int64_t>(t_.l1_bytes, 1)))),
        static_cast<float>(std::log2(std::max(working_set_, 1.0) / static_cast<double>(std::max<int64_t>(t_.l2_bytes, 1)))),
        static_cast<float>(std::log2(std::max(working_set_, 1.0) / static_cast<double>(std::max<int64_t>(t_.l3_bytes, 1)))),
        static_cast<float>(stages_),
        static_cast<float>(balance),
        static_cast<float>(weight_sum_ > 0 ? extent_sum_ / weight_sum_ : 0),
        static_cast<float>(max_depth_),
        static_cast<float>(log2p(unrolled_)),
        static_cast<float>(max_local_ / std::max(1, t_.lanes) / std::max(1, t_.vector_registers)),
        static_cast<float>(log2p(prefetches_)),
        static_cast<float>(log2p(f / (per_cycle * balance))),
        static_cast<float>(log2p(temp_stored_)),
        static_cast<float>(log2p(f / out_elems)),
        static_cast<float>(t_.lanes),
        static_cast<float>(t_.threads),
    };
    return v;
  }

 private:
  double flops() const { return 2 * fma_ + add_ + mul_ + div_ + cmp_ + transcendental_; }

  /** Counts the operations of `e`, executed mult_ times with lanes_ lanes. */
  void expr(const Expr &e) {
    if (!e) return;
    double n = mult_ * lanes_;
    switch (e->kind) {
      case ExprKind::kBinary:
        if (e->type == Type::kF32 || (e->args[0] && e->args[0]->type == Type::kF32)) {
          double &c = e->op == BinOp::kAdd || e->op == BinOp::kSub ? add_
                      : e->op == BinOp::kMul                       ? mul_
                      : e->op == BinOp::kDiv                       ? div_
                                                                   : cmp_;
          c += n;
          count_flop(n);
        } else {
          int_ops_ += n;
        }
        break;
      case ExprKind::kSelect:
        if (e->type == Type::kF32) cmp_ += n, count_flop(n);
        break;
      case ExprKind::kCall:
        if (e->name == "fmuladd") fma_ += n, count_flop(2 * n);
        else if (e->name == "exp" || e->name == "log" || e->name == "sqrt") transcendental_ += n, count_flop(n);
        // Counted as the 1 / (1 + exp(0 - x)) it replaced, so features of recorded kernels stay as they were.
        else if (e->name == "sigmoid") add_ += 2 * n, div_ += n, transcendental_ += n, count_flop(4 * n);
        else cmp_ += n, count_flop(n);  // floor
        break;
      case ExprKind::kLoad: access(e->buffer, e->args[0], false); break;
      default: break;
    }
    for (const Expr &a : e->args) expr(a);
  }

  void count_flop(double n) {
    if (lanes_ > 1) vector_flops_ += n;
    lane_flops_ += n * lanes_;
  }

  void access(const Buffer &b, const Expr &index, bool store) {
    double bytes = mult_ * lanes_ * (b->type == Type::kI64 ? 8.0 : b->type == Type::kBool ? 1.0 : 4.0);
    if (b->scope == BufferScope::kLocal) {
      local_bytes_ += bytes;
      return;
    }
    (store ? mem_store_ : mem_load_) += bytes;
    (store ? written_ : read_)[b.get()] += bytes;
    double n = mult_;
    if (lanes_ == 1) {
      broadcast_ += n;
    } else {
      auto s = stride_of(index, vec_var_);
      if (s == 1) contiguous_ += n;
      else if (s == 0) broadcast_ += n;
      else if (s && *s >= 2 && *s <= 4) strided_ += n;
      else gather_ += n;
      if ((lanes_ & (lanes_ - 1)) != 0 && s == 1) masked_ += n;
    }
  }

  void walk(const Stmt &s) {
    if (!s) return;
    switch (s->kind) {
      case StmtKind::kSeq:
        for (const Stmt &b : s->body) walk(b);
        return;
      case StmtKind::kFor: {
        expr(s->min);
        double extent = static_cast<double>(as_int(s->extent).value_or(1));
        double saved_mult = mult_;
        int saved_lanes = lanes_;
        std::string saved_var = vec_var_;
        if (s->for_kind == ForKind::kVectorized) lanes_ = static_cast<int>(extent), vec_var_ = s->var;
        else mult_ *= extent;
        if (s->for_kind == ForKind::kUnrolled) unrolled_ += extent;
        max_depth_ = std::max(max_depth_, ++depth_);
        walk(s->body[0]);
        --depth_;
        mult_ = saved_mult, lanes_ = saved_lanes, vec_var_ = saved_var;
        return;
      }
      case StmtKind::kStore:
        expr(s->index);
        expr(s->value);
        access(s->buffer, s->index, true);
        return;
      case StmtKind::kAllocate:
        max_local_ = std::max(max_local_, static_cast<double>(s->buffer->size));
        walk(s->body[0]);
        return;
      case StmtKind::kIf: {
        // Both branches at half weight: which one runs is data (padding rows) the walk cannot see.
        expr(s->index);
        double saved = mult_;
        mult_ *= s->body.size() > 1 ? 0.5 : 1.0;
        for (const Stmt &b : s->body) walk(b);
        mult_ = saved;
        return;
      }
      case StmtKind::kLet:
        expr(s->value);
        walk(s->body[0]);
        return;
      case StmtKind::kPrefetch: prefetches_ += mult_; return;
      case StmtKind::kBarrier: return;
    }
  }

  const Target &t_;
  double mult_ = 1;
  int lanes_ = 1, depth_ = 0, max_depth_ = 0, stages_ = 0;
  std::string vec_var_;
  double fma_ = 0, add_ = 0, mul_ = 0, div_ = 0, cmp_ = 0, transcendental_ = 0, int_ops_ = 0;
  double vector_flops_ = 0, lane_flops_ = 0;
  double mem_load_ = 0, mem_store_ = 0, local_bytes_ = 0;
  double contiguous_ = 0, broadcast_ = 0, strided_ = 0, gather_ = 0, masked_ = 0, prefetches_ = 0;
  double compulsory_ = 0, from_l2_ = 0, from_l3_ = 0, from_dram_ = 0, working_set_ = 0, temp_stored_ = 0;
  double balance_sum_ = 0, extent_sum_ = 0, weight_sum_ = 0, unrolled_ = 0, max_local_ = 0;
  std::map<const BufferNode *, double> read_, written_;
};

}  // namespace

const std::vector<std::string> &feature_names() {
  static const std::vector<std::string> names = {
      "log2 flops",                      // every float operation per call, an FMA as 2
      "fma share", "add share", "mul share", "div share", "compare/select share", "transcendental share",
      "int ops per flop",                // index arithmetic
      "vectorized flop share",
      "lanes per flop / target lanes",
      "log2 bytes loaded from memory", "log2 bytes stored to memory", "log2 bytes of stack (accumulator) accesses",
      "contiguous share of memory accesses", "broadcast share", "small-stride share", "gather share", "masked share",
      "log2 compulsory bytes",           // every buffer's touched bytes once
      "log2 bytes from L2", "log2 bytes from L3", "log2 bytes from DRAM",  // estimated from working sets
      "log2 flops per DRAM byte",
      "log2 working set / L1", "log2 working set / L2", "log2 working set / L3",
      "stages",
      "parallel balance",                // extent / (ceil(extent / threads) * threads), flop-weighted
      "log2 parallel extent per thread",
      "loop depth",
      "log2 unrolled iterations",
      "stack floats / lanes / vector registers",  // register pressure of the largest local block
      "log2 prefetches",
      "log2 compute-bound cycles",        // flops at the FMA peak of every thread, over the balance
      "log2 bytes stored to temporaries",  // intermediates stored rather than recomputed
      "log2 flops per output element",    // recomputation
      "target lanes", "target threads",
  };
  return names;
}

const std::vector<std::string> &model_feature_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out = feature_names();
    for (const std::string &n : feature_names()) out.push_back(n + " - default's");
    return out;
  }();
  return names;
}

std::vector<float> model_features(const std::vector<float> &kernel, const std::vector<float> &default_kernel) {
  AT_CHECK(kernel.size() == feature_names().size() && default_kernel.size() == kernel.size(), "model_features takes two kernels' features");
  std::vector<float> out = kernel;
  for (size_t i = 0; i < kernel.size(); ++i) out.push_back(kernel[i] - default_kernel[i]);
  return out;
}

std::vector<float> kernel_features(const LoweredKernel &k, const Target &target) {
  Walker w(target);
  for (const KernelStage &s : k.stages) w.stage(s, k.buffers);
  std::vector<float> v = w.finish(k);
  AT_CHECK(v.size() == feature_names().size(), "feature count " + std::to_string(v.size()) + " != names " + std::to_string(feature_names().size()));
  return v;
}

}  // namespace autotune
