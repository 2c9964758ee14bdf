#include "codegen/Gpu.h"

#include <fcntl.h>
#include <llvm/Config/llvm-config.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetOptions.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <sstream>

#include "codegen/Jit.h"
#include "codegen/LLVMEmitter.h"
#include "codegen/Lower.h"
#include "codegen/Target.h"
#include "codegen/Transform.h"
#include "ir/Files.h"
#include "ir/Hash.h"

namespace autotune {

const std::vector<std::pair<std::string, std::string>> &builtin_target_descriptions();  // BuiltinTargets.cpp (generated)

namespace {

using namespace loop;

Expected<GpuTarget> parse_gpu(const std::string &text, const std::string &label) {
  if (!is_gpu_description(text)) return make_error(label + ": not a GPU description (\"kind\": \"gpu\"); CPU kernels are compiled by run, bench and the tuner");
  nlohmann::json j = nlohmann::json::parse(text);
  GpuTarget g;
  try {
    for (auto &[k, v] : j.items()) {
      if (k == "kind") continue;
      if (k == "name") g.name = v.get<std::string>();
      else if (k == "sm") g.sm = v.get<std::string>();
      else if (k == "ptx") g.ptx = v.get<std::string>();
      else if (k == "sm_count") g.sm_count = v.get<int>();
      else if (k == "warp_size") g.warp_size = v.get<int>();
      else if (k == "max_threads_per_block") g.max_threads_per_block = v.get<int>();
      else if (k == "threads_per_block") g.threads_per_block = v.get<int>();
      else if (k == "shared_bytes_per_block") g.shared_bytes_per_block = v.get<int64_t>();
      else if (k == "shared_bytes_per_sm") g.shared_bytes_per_sm = v.get<int64_t>();
      else if (k == "registers_per_thread") g.registers_per_thread = v.get<int>();
      else if (k == "registers_per_sm") g.registers_per_sm = v.get<int>();
      else if (k == "max_threads_per_sm") g.max_threads_per_sm = v.get<int>();
      else if (k == "max_blocks_per_sm") g.max_blocks_per_sm = v.get<int>();
      else return make_error(label + ": unknown field '" + k + "'");
    }
  } catch (const std::exception &e) {
    return make_error(label + ": " + e.what());
  }
  if (g.sm.rfind("sm_", 0) != 0) return make_error(label + ": sm must name an architecture such as sm_80");
  if (g.ptx.rfind("ptx", 0) != 0) return make_error(label + ": ptx must name a PTX ISA version such as ptx78");
  if (g.warp_size < 1 || g.threads_per_block < g.warp_size || g.threads_per_block % g.warp_size || g.threads_per_block > g.max_threads_per_block)
    return make_error(label + ": threads_per_block must be a multiple of the warp size, at most max_threads_per_block");
  return g;
}

/** Whether `s` is stores alone (in sequence): no loop, no branch, no binding, which a vector of lanes could not take as they are. */
bool only_stores(const Stmt &s) {
  if (!s) return true;
  if (s->kind == StmtKind::kStore) return true;
  if (s->kind != StmtKind::kSeq) return false;
  return std::all_of(s->body.begin(), s->body.end(), [](const Stmt &b) { return only_stores(b); });
}

/** The stage under the GPU schedule (lower_gpu). */
Expected<KernelStage> gpu_stage(const KernelStage &st, const GpuTarget &gpu) {
  // The output loops: the perfect nest at the top, each from 0 with a constant extent, each moving every store below it.
  std::vector<std::string> outs;
  int64_t extent = 1;
  for (Stmt cur = st.body; cur && cur->kind == StmtKind::kFor; cur = cur->body[0]) {
    auto mn = as_int(cur->min), ex = as_int(cur->extent);
    if (!mn || *mn != 0 || !ex || !stores_move_with(cur->body[0], cur->var)) break;
    outs.push_back(cur->var);
    extent *= *ex;
  }
  Stmt body = st.body;
  std::string f = outs.empty() ? "" : outs[0];
  for (size_t i = 1; i < outs.size(); ++i) {
    std::string fused = "gpu_f" + std::to_string(i);
    AT_ASSIGN(next, fuse(body, f, outs[i], fused));
    body = next;
    f = fused;
  }
  // An elementwise stage (stores alone inside the output loops) whose extent is a multiple of 4: each
  // thread takes 4 consecutive outputs as a vector, so that an input read in the output's order is
  // one 16-byte load (`ld.global.v4.f32`, the emitter's alignment from the index) and the store one
  // `st.global.v4.f32`; reads in another order are 4 loads, as they were. Reductions (pools,
  // depthwise convs) keep one output per thread: their window loops would run per lane.
  const int64_t lanes = !f.empty() && extent % 4 == 0 && only_stores(body->body[0]) ? 4 : 1;
  const int64_t items = extent / lanes;
  int64_t warp = gpu.warp_size, threads = std::min<int64_t>(gpu.threads_per_block, (items + warp - 1) / warp * warp);
  int64_t blocks = (items + threads - 1) / threads;
  Expr id = var("gpu_block") * threads + var("gpu_thread");
  Stmt inside = f.empty() ? body
                : lanes == 1 ? substitute(body->body[0], f, id)
                             : for_loop("gpu_lane", int_imm(0), int_imm(lanes), ForKind::kVectorized,
                                        substitute(body->body[0], f, id * lanes + var("gpu_lane")));
  if (lanes > 1) inside = simplify_div_mod(inside, {{"gpu_lane", {0, lanes - 1}}});  // (4 t + l) / 3136 is t / 784: one load for the 4 lanes
  if (blocks * threads != items) inside = if_then(id < int_imm(items), inside);
  KernelStage out = st;
  out.parallel_var = "gpu_block";
  out.parallel_extent = blocks;
  out.body = for_loop("gpu_thread", int_imm(0), int_imm(threads), ForKind::kSerial, inside);
  return out;
}

/** Whether `e` loads from buffer `b`. */
bool loads_from(const Expr &e, const BufferNode *b) {
  if (e->kind == ExprKind::kLoad && e->buffer.get() == b) return true;
  for (const Expr &a : e->args)
    if (loads_from(a, b)) return true;
  return false;
}

/** The largest subexpressions of `e` that do not read `acc` and use one of `reds`: a reduction's operands. */
void operands_of(const Expr &e, const BufferNode *acc, const std::vector<std::string> &reds, std::vector<Expr> &out) {
  if (!loads_from(e, acc)) {
    bool reduces = std::any_of(reds.begin(), reds.end(), [&](const std::string &r) { return uses_var(e, r); });
    if (reduces && std::none_of(out.begin(), out.end(), [&](const Expr &o) { return o.get() == e.get(); })) out.push_back(e);
    return;
  }
  for (const Expr &a : e->args) operands_of(a, acc, reds, out);
}

/** `e` with each node that `to` maps replaced by its image (the same node where nothing inside changes). */
Expr replace_nodes(const Expr &e, const std::map<const ExprNode *, Expr> &to) {
  if (auto it = to.find(e.get()); it != to.end()) return it->second;
  std::vector<Expr> args;
  bool changed = false;
  for (const Expr &a : e->args) args.push_back(replace_nodes(a, to)), changed |= args.back().get() != a.get();
  return changed ? with_args(e, std::move(args)) : e;
}

/** `e` with every load from buffer `b` replaced by `value` (an accumulator read as its register or total). */
Expr with_loads(const Expr &e, const BufferNode *b, const Expr &value) {
  if (e->kind == ExprKind::kLoad && e->buffer.get() == b) return value;
  std::vector<Expr> args;
  bool changed = false;
  for (const Expr &a : e->args) args.push_back(with_loads(a, b, value)), changed |= args.back().get() != a.get();
  return changed ? with_args(e, std::move(args)) : e;
}

using Loops = std::vector<std::pair<std::string, int64_t>>;

/** A reduction stage: output loops around acc = init; reduction loops around acc = update(acc, ...); the epilogue. */
struct Reduction {
  Loops outs, reds;          // output and reduction loops, outermost first
  Buffer acc;
  Expr init, update;         // acc[0] = init; acc[0] = update (reads acc[0])
  Stmt epilogue;             // reads acc[0]
};

/** A reduction stage read as a batched GEMM (GpuTile's comment). */
struct GemmStage : Reduction {
  Loops m, n, batch;         // the output loops by side, in nest order
  std::vector<Expr> a_ops, b_ops;
  std::vector<bool> a_m_major, b_n_major;  // whether the operand's loads walk memory contiguously along m (n), not k
  GemmShape shape;
};

int64_t product(const Loops &l) {
  int64_t p = 1;
  for (const auto &[v, e] : l) p *= e;
  return p;
}

/** Whether every load of `op` has stride 1 in `v`, and is not contiguous in `k` as well. */
bool walks_along(const Expr &op, const std::string &v, const std::string &k) {
  bool any = false, along = true;
  for_each_node(op, [&](const Expr &e) {
    if (e->kind != ExprKind::kLoad) return;
    any = true;
    auto sv = stride_of(e->args[0], v), sk = stride_of(e->args[0], k);
    along &= sv && *sv == 1 && !(sk && *sk == 1);
  });
  return any && along;
}

/** The perfect nest of loops from 0 with constant extents at the top of `cur`, appended to `out`; the statement inside them. */
Stmt leading_loops(Stmt cur, Loops &out) {
  for (; cur && cur->kind == StmtKind::kFor; cur = cur->body[0]) {
    auto mn = as_int(cur->min), ex = as_int(cur->extent);
    if (!mn || *mn != 0 || !ex || *ex < 1) break;
    out.push_back({cur->var, *ex});
  }
  return cur;
}

Expected<Reduction> read_reduction(const KernelStage &st) {
  Reduction g;
  Stmt cur = leading_loops(st.body, g.outs);
  if (g.outs.empty() || cur->kind != StmtKind::kAllocate || cur->buffer->scope != BufferScope::kLocal || cur->buffer->size != 1)
    return make_error("stage " + st.name + " has no accumulator inside its output loops");
  g.acc = cur->buffer;
  const Stmt &b = cur->body[0];
  if (b->kind != StmtKind::kSeq || b->body.size() != 3) return make_error("stage " + st.name + " is not init, reduction, epilogue");
  auto is_acc_store = [&](const Stmt &x) { return x && x->kind == StmtKind::kStore && x->buffer.get() == g.acc.get() && as_int(x->index) == 0; };
  if (!is_acc_store(b->body[0])) return make_error("stage " + st.name + ": no accumulator initialization");
  g.init = b->body[0]->value;
  Stmt upd = leading_loops(b->body[1], g.reds);
  if (g.reds.empty() || !is_acc_store(upd)) return make_error("stage " + st.name + ": the reduction is not one update inside its loops");
  g.update = upd->value;
  g.epilogue = b->body[2];
  if (loads_from(g.init, g.acc.get())) return make_error("stage " + st.name + ": the initialization reads the accumulator");
  return g;
}

Expected<GemmStage> read_gemm(const KernelStage &st) {
  AT_ASSIGN(r, read_reduction(st));
  GemmStage g;
  static_cast<Reduction &>(g) = r;
  std::vector<std::string> reds;
  for (const auto &[v, e] : g.reds) reds.push_back(v);
  std::vector<Expr> ops;
  operands_of(g.update, g.acc.get(), reds, ops);
  auto deps = [&](const Expr &e) {
    std::set<std::string> d;
    for (const auto &[v, ex] : g.outs)
      if (uses_var(e, v)) d.insert(v);
    return d;
  };
  std::set<std::string> da, db;
  bool found = false;
  for (size_t i = 0; i < ops.size() && !found; ++i)
    for (size_t j = i + 1; j < ops.size() && !found; ++j) {
      auto di = deps(ops[i]), dj = deps(ops[j]);
      if (!std::includes(di.begin(), di.end(), dj.begin(), dj.end()) && !std::includes(dj.begin(), dj.end(), di.begin(), di.end()))
        da = di, db = dj, found = true;
    }
  if (!found) return make_error("stage " + st.name + ": no two operands over different output loops (no reuse to tile)");
  const std::string &k_inner = g.reds.back().first;
  for (const Expr &op : ops) {
    auto d = deps(op);
    if (std::includes(da.begin(), da.end(), d.begin(), d.end())) g.a_ops.push_back(op);
    else if (std::includes(db.begin(), db.end(), d.begin(), d.end())) g.b_ops.push_back(op);
    else return make_error("stage " + st.name + ": an operand reads output loops of both sides: " + to_string(op));
  }
  for (const auto &[v, e] : g.outs) {
    bool a = da.count(v), bb = db.count(v);
    (a && !bb ? g.m : bb && !a ? g.n : g.batch).push_back({v, e});
  }
  for (const Expr &op : g.a_ops) g.a_m_major.push_back(walks_along(op, g.m.back().first, k_inner));
  for (const Expr &op : g.b_ops) g.b_n_major.push_back(walks_along(op, g.n.back().first, k_inner));
  g.shape = {product(g.batch), product(g.m), product(g.n), product(g.reds)};
  // The output stores walk m contiguously: consecutive threads take consecutive m.
  for (const Stmt &x : stores_of(g.epilogue)) {
    auto sm = stride_of(x->index, g.m.back().first);
    g.shape.m_contiguous = sm && *sm == 1;
  }
  return g;
}

/** Each loop of `loops` as its value in the flattened index `f` (the last loop fastest). */
void unflatten(const Loops &loops, const Expr &f, std::map<std::string, Expr> &out) {
  int64_t stride = 1;
  for (size_t i = loops.size(); i-- > 0;) {
    Expr q = stride == 1 ? f : f / int_imm(stride);
    out[loops[i].first] = i == 0 ? q : q % int_imm(loops[i].second);
    stride *= loops[i].second;
  }
}

Expr substitute_all(Expr e, const std::map<std::string, Expr> &vals) {
  for (const auto &[v, x] : vals) e = loop::substitute(e, v, x);
  return e;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/**
 * `st` as `blocks` blocks of `threads` threads running `body` (the loop over gpu_thread around it),
 * with the divisions and modulos that the block's and thread's ranges resolve ((t % 16) / 16 is 0).
 */
KernelStage gpu_block_stage(const KernelStage &st, int64_t blocks, int64_t threads, const Stmt &body) {
  KernelStage out = st;
  out.parallel_var = "gpu_block";
  out.parallel_extent = blocks;
  Stmt b = simplify_div_mod(body, {{"gpu_block", {0, blocks - 1}}, {"gpu_thread", {0, threads - 1}}});
  out.body = for_loop("gpu_thread", int_imm(0), int_imm(threads), ForKind::kSerial, b);
  return out;
}

/** A block of threads / lanes rows of `outs`, lanes threads each (GpuReduce): a thread's coordinates. */
struct Rows {
  int64_t outputs = 1, blocks = 1;
  Expr th, row, lane, o;
  Expr inside;                     // o < outputs, or null where the blocks cover the outputs exactly
  std::map<std::string, Expr> at;  // the output loops at the thread's row (the last row past the tensor)
};
Rows rows_of(const Loops &outs, const GpuReduce &g) {
  Rows r;
  const int64_t rows = g.threads / g.lanes;
  r.outputs = product(outs), r.blocks = ceil_div(r.outputs, rows);
  r.th = var("gpu_thread"), r.row = r.th / int_imm(g.lanes), r.lane = r.th % int_imm(g.lanes);
  r.o = var("gpu_block") * rows + r.row;
  if (r.outputs % rows) r.inside = r.o < int_imm(r.outputs);
  unflatten(outs, r.inside ? min(r.o, int_imm(r.outputs - 1)) : r.o, r.at);
  return r;
}

int64_t shared_bytes(const GpuTile &t, size_t a_ops, size_t b_ops) {
  return static_cast<int64_t>(a_ops * t.bm + b_ops * t.bn) * (t.bk + (t.pad ? 1 : 0)) * 4;
}

/** The reduction stage `g` as GpuTile `t` (GpuTile's comment). */
Expected<KernelStage> tiled_stage(const KernelStage &st, const GemmStage &g, const GpuTile &t, const GpuTarget &gpu) {
  AT_TRY(check_gpu_tile(t, gpu));
  if (int64_t bytes = shared_bytes(t, g.a_ops.size(), g.b_ops.size()); bytes > gpu.shared_bytes_per_block)
    return make_error("stage " + st.name + ": the tile's shared memory (" + std::to_string(bytes) + " bytes) exceeds the block's " +
                      std::to_string(gpu.shared_bytes_per_block));
  const GemmShape &s = g.shape;
  const int64_t mt = ceil_div(s.m, t.bm), nt = ceil_div(s.n, t.bn), threads = t.threads(), rows = t.bm / t.tm, cols = t.bn / t.tn;
  const int64_t row = t.bk + (t.pad ? 1 : 0);
  Expr blk = var("gpu_block"), th = var("gpu_thread"), kc = var("gpu_kc"), kk = var("gpu_kk");
  Expr bb = blk / int_imm(mt * nt), m0 = (blk / int_imm(nt)) % int_imm(mt) * t.bm, n0 = blk % int_imm(nt) * t.bn;
  Expr tx_m = t.m_fastest ? th % int_imm(rows) : th / int_imm(cols), tx_n = t.m_fastest ? th / int_imm(rows) : th % int_imm(cols);
  Expr k = kc * t.bk + kk;
  // The loops' values at output (m, n) and reduction index kf.
  auto at = [&](const Expr &m, const Expr &n, const Expr &kf) {
    std::map<std::string, Expr> v;
    unflatten(g.batch, bb, v);
    if (m) unflatten(g.m, m, v);
    if (n) unflatten(g.n, n, v);
    if (kf) unflatten(g.reds, kf, v);
    return v;
  };
  auto m_of = [&](int64_t i) { return m0 + (tx_m + int_imm(i * rows)); };
  auto n_of = [&](int64_t j) { return n0 + (tx_n + int_imm(j * cols)); };
  auto clamp_m = [&](const Expr &m) { return s.m % t.bm ? min(m, int_imm(s.m - 1)) : m; };
  auto clamp_n = [&](const Expr &n) { return s.n % t.bn ? min(n, int_imm(s.n - 1)) : n; };
  Buffer tacc = make_buffer("tile_acc", Type::kF32, t.tm * t.tn, BufferScope::kLocal);
  std::vector<Buffer> sh_a, sh_b;
  for (size_t i = 0; i < g.a_ops.size(); ++i) sh_a.push_back(make_buffer("shared_a" + std::to_string(i), Type::kF32, t.bm * row, BufferScope::kShared));
  for (size_t i = 0; i < g.b_ops.size(); ++i) sh_b.push_back(make_buffer("shared_b" + std::to_string(i), Type::kF32, t.bn * row, BufferScope::kShared));

  // acc = init for each of the thread's outputs (clamped: a row past the edge computes, and is never stored).
  std::vector<Stmt> init;
  for (int64_t i = 0; i < t.tm; ++i)
    for (int64_t j = 0; j < t.tn; ++j)
      init.push_back(store(tacc, int_imm(i * t.tn + j), substitute_all(g.init, at(clamp_m(m_of(i)), clamp_n(n_of(j)), nullptr))));

  // Every thread loads its share of each operand's chunk, in the order its global loads are contiguous.
  std::vector<Stmt> loads;
  auto stage_loads = [&](const std::vector<Expr> &ops, const std::vector<Buffer> &sh, const std::vector<bool> &side_major, int64_t side,
                         const Expr &base, int64_t extent, bool is_m) {
    const int64_t total = side * t.bk;
    for (size_t o = 0; o < ops.size(); ++o) {
      Expr e = var("gpu_l") * threads + th;
      // The order in which a warp's loads touch fewer 32-byte sectors of global memory (block 0,
      // chunk 0, the first round); where both touch as many, the one contiguous along the side.
      auto sectors = [&](bool major) {
        Expr p = major ? e % int_imm(side) : e / int_imm(t.bk), kp = major ? e / int_imm(side) : e % int_imm(t.bk);
        Expr v = substitute_all(ops[o], is_m ? at(base + p, nullptr, kc * t.bk + kp) : at(nullptr, base + p, kc * t.bk + kp));
        int64_t n = 0;
        for_each_node(v, [&](const Expr &x) {
          if (x->kind == ExprKind::kLoad) n += warp_sectors(x->args[0], "gpu_thread", {{"gpu_block", 0}, {"gpu_kc", 0}, {"gpu_l", 0}}).first;
        });
        return n;
      };
      int64_t along = sectors(true), across = sectors(false);
      bool major = along == across ? side_major[o] : along < across;
      // The loads with `lanes` consecutive elements per thread and round (a vectorized loop over
      // gpu_lane), or nothing where that would not be one aligned vector load: the lanes must
      // share every guard (the chunk's position along the side or along k, whichever they walk,
      // a multiple of 4 with the edge too), and each load must read the lanes contiguously from
      // an index the emitter proves a multiple of 4 floats, or read one element for all of them.
      // A padded input (a select) stays scalar.
      auto loads_of = [&](int64_t lanes) -> std::optional<Stmt> {
        if (lanes > 1 && (major ? side % lanes || (extent % side && extent % lanes) : t.bk % lanes || (s.k % t.bk && s.k % lanes)))
          return std::nullopt;
        Expr item = var("gpu_l") * threads + th;
        Expr e = lanes == 1 ? item : item * lanes + var("gpu_lane"), e0 = lanes == 1 ? item : item * lanes;
        auto pos_of = [&](const Expr &x) { return major ? x % int_imm(side) : x / int_imm(t.bk); };
        auto kpos_of = [&](const Expr &x) { return major ? x / int_imm(side) : x % int_imm(t.bk); };
        Expr pos = pos_of(e), kpos = kpos_of(e);
        Expr cond;  // the first lane's: the same for every lane (above)
        auto also = [&](Expr c) { cond = cond ? both(cond, c) : c; };
        if (total % (threads * lanes)) also(e0 < int_imm(total));
        if (extent % side) also(base + pos_of(e0) < int_imm(extent));
        if (s.k % t.bk) also(kc * t.bk + kpos_of(e0) < int_imm(s.k));
        Expr value = substitute_all(ops[o], is_m ? at(base + pos, nullptr, kc * t.bk + kpos) : at(nullptr, base + pos, kc * t.bk + kpos));
        Stmt st = store(sh[o], pos * row + kpos, value);
        if (lanes > 1) {
          st = simplify_div_mod(st, {{"gpu_lane", {0, lanes - 1}}});
          bool ok = true, contiguous = false;
          for_each_node(st->value, [&](const Expr &x) {
            if (x->kind == ExprKind::kSelect) ok = false;
            if (x->kind != ExprKind::kLoad) return;
            auto sv = stride_of(x->args[0], "gpu_lane");
            bool aligned = sv && *sv == 1 && known_multiple(substitute(x->args[0], "gpu_lane", int_imm(0))) % lanes == 0;
            ok &= sv && (*sv == 0 || aligned);
            contiguous |= aligned;
          });
          if (!ok || !contiguous) return std::nullopt;
          st = for_loop("gpu_lane", int_imm(0), int_imm(lanes), ForKind::kVectorized, st);
        }
        return for_loop("gpu_l", int_imm(0), int_imm(ceil_div(total, threads * lanes)), ForKind::kSerial, cond ? if_then(cond, st) : st);
      };
      auto vector = loads_of(4);
      loads.push_back(vector ? *vector : *loads_of(1));
    }
  };
  stage_loads(g.a_ops, sh_a, g.a_m_major, t.bm, m0, s.m, true);
  stage_loads(g.b_ops, sh_b, g.b_n_major, t.bn, n0, s.n, false);

  // The tm x tn updates of one k from shared memory.
  std::vector<Stmt> updates;
  for (int64_t i = 0; i < t.tm; ++i)
    for (int64_t j = 0; j < t.tn; ++j) {
      std::map<const ExprNode *, Expr> to;
      Expr r = int_imm(i * t.tn + j);
      for (size_t o = 0; o < g.a_ops.size(); ++o) to[g.a_ops[o].get()] = load(sh_a[o], (tx_m + int_imm(i * rows)) * row + kk);
      for (size_t o = 0; o < g.b_ops.size(); ++o) to[g.b_ops[o].get()] = load(sh_b[o], (tx_n + int_imm(j * cols)) * row + kk);
      Expr update = with_loads(replace_nodes(g.update, to), g.acc.get(), load(tacc, r));
      updates.push_back(store(tacc, r, substitute_all(update, at(clamp_m(m_of(i)), clamp_n(n_of(j)), k))));
    }
  Stmt compute = seq(updates);
  if (s.k % t.bk) compute = if_then(k < int_imm(s.k), compute);
  Stmt chunk = seq({seq(loads), barrier(), for_loop("gpu_kk", int_imm(0), int_imm(t.bk), ForKind::kSerial, compute), barrier()});

  // The epilogue of each output inside the tensor.
  std::vector<Stmt> stores;
  for (int64_t i = 0; i < t.tm; ++i)
    for (int64_t j = 0; j < t.tn; ++j) {
      Expr r = int_imm(i * t.tn + j);
      Stmt e = map_exprs(g.epilogue, [&](const Expr &x) { return with_loads(x, g.acc.get(), load(tacc, r)); });
      for (const auto &[v, x] : at(m_of(i), n_of(j), nullptr)) e = substitute(e, v, x);
      Expr cond;
      if (s.m % t.bm) cond = m_of(i) < int_imm(s.m);
      if (s.n % t.bn) cond = cond ? both(cond, n_of(j) < int_imm(s.n)) : n_of(j) < int_imm(s.n);
      stores.push_back(cond ? if_then(cond, e) : e);
    }

  Stmt body = allocate(tacc, seq({seq(init), for_loop("gpu_kc", int_imm(0), int_imm(ceil_div(s.k, t.bk)), ForKind::kSerial, chunk), seq(stores)}));
  for (size_t i = sh_b.size(); i-- > 0;) body = allocate(sh_b[i], body);
  for (size_t i = sh_a.size(); i-- > 0;) body = allocate(sh_a[i], body);
  return gpu_block_stage(st, s.batch * mt * nt, threads, body);
}

/**
 * A stencil reduction read for a halo tile: the stage's last two output loops (rows, columns), the
 * reduction loop each walks with (ky for y: the stencil load's coefficient of y is s_y times
 * ky's), and the one load that moves with them (a depthwise conv's or a pool's padded input).
 */
struct HaloStage {
  Reduction r;
  Loops outer;                      // the output loops before the rows and columns
  std::string y, x, ky, kx;         // rows, columns and their reduction loops
  int64_t Y = 1, X = 1, KY = 1, KX = 1, sy = 1, sx = 1;
  int64_t ay = 0, ax = 0;           // the load's coefficients of ky and kx (its row pitch and element step)
  Expr stencil;                     // the load (one node; its equal copies are replaced with it)
};

Expected<HaloStage> read_halo(const KernelStage &st) {
  HaloStage h;
  AT_ASSIGN(r, read_reduction(st));
  h.r = r;
  const std::string why = "stage " + st.name + " is no stencil: ";
  if (r.outs.size() < 2) return make_error(why + "fewer than two output loops");
  h.y = r.outs[r.outs.size() - 2].first, h.Y = r.outs[r.outs.size() - 2].second;
  h.x = r.outs.back().first, h.X = r.outs.back().second;
  h.outer.assign(r.outs.begin(), r.outs.end() - 2);
  // The loads that move with the rows or columns: all one load (equal index, one buffer). Under a
  // select (an inlined padding) the untiled kernel reads only where the condition holds, and the
  // window would read the rest: refused.
  std::string index;
  bool mixed = false, selects = false;
  for_each_node(r.update, [&](const Expr &e) {
    selects |= e->kind == ExprKind::kSelect;
    if (e->kind == ExprKind::kLoad && e->buffer.get() != r.acc.get() && (uses_var(e->args[0], h.y) || uses_var(e->args[0], h.x))) {
      std::string i = e->buffer->name + "[" + to_string(e->args[0]) + "]";
      if (!h.stencil) h.stencil = e, index = i;
      else mixed |= i != index;
    }
  });
  if (selects) return make_error(why + "its update selects (an inlined padding)");
  if (!h.stencil) return make_error(why + "no load moves with its rows and columns");
  if (mixed) return make_error(why + "more than one load moves with its rows and columns");
  auto a = affine_form(h.stencil->args[0]);
  if (!a) return make_error(why + "the load's index is not affine");
  auto coeff = [&](const std::string &v) { return a->coeff.count(v) ? a->coeff.at(v) : int64_t{0}; };
  // Each of y and x pairs with the reduction loop whose coefficient divides its own; any other
  // reduction loop that moves the load would add a dimension to the tile.
  auto pair = [&](const std::string &out, std::string &k, int64_t &ext, int64_t &stride, int64_t &ak) {
    int64_t ao = coeff(out);
    for (const auto &[v, e] : r.reds) {
      int64_t c = coeff(v);
      if (e > 1 && c > 0 && ao > 0 && ao % c == 0 && k.empty()) k = v, ext = e, stride = ao / c, ak = c;
    }
    return !k.empty();
  };
  if (!pair(h.y, h.ky, h.KY, h.sy, h.ay) || !pair(h.x, h.kx, h.KX, h.sx, h.ax) || h.ky == h.kx)
    return make_error(why + "its rows and columns do not each walk with a reduction loop");
  for (const auto &[v, e] : r.reds)
    if (v != h.ky && v != h.kx && e > 1 && coeff(v) != 0) return make_error(why + "reduction loop " + v + " moves the load too");
  if (h.KY * h.KX < 2) return make_error(why + "a window of one element (nothing to share)");
  return h;
}

/**
 * The stencil stage `h` as halo tiles: a block per (outer index, tile of th x tw outputs), a
 * thread per output; the block's input window, (th - 1) s_y + KY rows of (tw - 1) s_x + KX
 * elements, loaded once into shared memory by all its threads, then each thread's reduction read
 * from there. One output per thread read every element of its window from global memory, each
 * element up to KY x KX times over a block's threads.
 */
Expected<KernelStage> halo_stage(const KernelStage &st, const HaloStage &h, const GpuTarget &gpu) {
  const int64_t tw = std::min<int64_t>(h.X, gpu.warp_size), th = std::max<int64_t>(1, std::min<int64_t>(h.Y, gpu.threads_per_block / tw));
  const int64_t DY = (th - 1) * h.sy + h.KY, DX = (tw - 1) * h.sx + h.KX, total = DY * DX;
  if (total * 4 > gpu.shared_bytes_per_block) return make_error("stage " + st.name + ": its halo tile exceeds the block's shared memory");
  // Whole warps: the threads past th x tw help load the window and compute nothing.
  const int64_t threads = ceil_div(th * tw, gpu.warp_size) * gpu.warp_size, ty = ceil_div(h.Y, th), tx = ceil_div(h.X, tw), outer = product(h.outer);
  Expr blk = var("gpu_block"), t = var("gpu_thread");
  Expr o = blk / int_imm(ty * tx), y0 = (blk / int_imm(tx)) % int_imm(ty) * th, x0 = blk % int_imm(tx) * tw;
  Expr yl = t / int_imm(tw), xl = t % int_imm(tw), y = y0 + yl, x = x0 + xl;
  std::map<std::string, Expr> at;
  unflatten(h.outer, o, at);
  Buffer sh = make_buffer("halo", h.stencil->buffer->type, total, BufferScope::kShared);

  // The window: element (dy, dx) is the stencil's load at row y0 s_y + dy, column x0 s_x + dx
  // (its index with y, x, ky, kx at 0, plus the rows and columns), within the rows and columns
  // the untiled loops read.
  std::map<std::string, Expr> zero = at;
  for (const std::string &v : {h.y, h.x, h.ky, h.kx}) zero[v] = int_imm(0);
  for (const auto &[v, e] : h.r.reds) zero.emplace(v, int_imm(0));
  Expr base = substitute_all(h.stencil->args[0], zero);
  Expr i = var("gpu_l") * threads + t, dy = i / int_imm(DX), dx = i % int_imm(DX);
  Expr row = y0 * h.sy + dy, col = x0 * h.sx + dx;
  Expr cond = both(row < int_imm((h.Y - 1) * h.sy + h.KY), col < int_imm((h.X - 1) * h.sx + h.KX));
  if (total % threads) cond = both(i < int_imm(total), cond);
  Stmt fill = for_loop("gpu_l", int_imm(0), int_imm(ceil_div(total, threads)), ForKind::kSerial,
                       if_then(cond, store(sh, i, load(h.stencil->buffer, base + row * h.ay + col * h.ax))));

  // Each thread's output from the window: the stencil load at (y l s_y + ky, x l s_x + kx).
  std::map<std::string, Expr> out = at;
  out[h.y] = y, out[h.x] = x;
  Expr from_window = load(sh, (yl * h.sy + var(h.ky)) * DX + xl * h.sx + var(h.kx));
  const std::string stencil_index = to_string(h.stencil->args[0]);
  ExprMemo memo;
  AT_ASSIGN(windowed, map_loads(h.r.update, h.stencil->buffer.get(), [&](const Expr &ld) -> Expected<Expr> {
    return to_string(ld->args[0]) == stencil_index ? from_window : ld;
  }, memo));
  Stmt update = store(h.r.acc, int_imm(0), substitute_all(windowed, out));
  for (size_t k = h.r.reds.size(); k-- > 0;) update = for_loop(h.r.reds[k].first, int_imm(0), int_imm(h.r.reds[k].second), ForKind::kSerial, update);
  Stmt epilogue = h.r.epilogue;
  for (const auto &[v, e] : out) epilogue = substitute(epilogue, v, e);
  Stmt compute = allocate(h.r.acc, seq({store(h.r.acc, int_imm(0), substitute_all(h.r.init, out)), update, epilogue}));
  Expr inside;
  if (threads != th * tw) inside = t < int_imm(th * tw);
  if (h.Y % th) inside = inside ? both(inside, y < int_imm(h.Y)) : y < int_imm(h.Y);
  if (h.X % tw) inside = inside ? both(inside, x < int_imm(h.X)) : x < int_imm(h.X);
  Stmt body = allocate(sh, seq({fill, barrier(), inside ? if_then(inside, compute) : compute}));
  return gpu_block_stage(st, outer * ty * tx, threads, body);
}

/** A reduction's update as combine(acc, term): the combine and the term, or why it is not one. */
struct Combine {
  std::string op;  // add, max, min
  Expr term;
};
Expected<Combine> combine_of(const Reduction &r) {
  const Expr &u = r.update;
  auto is_acc = [&](const Expr &e) { return e->kind == ExprKind::kLoad && e->buffer.get() == r.acc.get(); };
  Combine c;
  if (u->kind == ExprKind::kCall && u->name == "fmuladd" && u->args.size() == 3 && is_acc(u->args[2])) c = {"add", u->args[0] * u->args[1]};
  else if (u->kind == ExprKind::kBinary && (u->op == BinOp::kAdd || u->op == BinOp::kMax || u->op == BinOp::kMin) && (is_acc(u->args[0]) || is_acc(u->args[1])))
    c = {u->op == BinOp::kAdd ? "add" : u->op == BinOp::kMax ? "max" : "min", is_acc(u->args[0]) ? u->args[1] : u->args[0]};
  else return make_error("the update " + to_string(u) + " is not a sum, a max or a min of the accumulator");
  if (loads_from(c.term, r.acc.get())) return make_error("the update reads the accumulator twice: " + to_string(u));
  return c;
}

/** A reduction as a row reduction: its outputs, its terms per output and its combine, or why its update is no combine. */
Expected<RowReduceShape> row_shape(const Reduction &r) {
  AT_ASSIGN(c, combine_of(r));
  return RowReduceShape{product(r.outs), product(r.reds), c.op};
}

Expr combine(const std::string &op, const Expr &a, const Expr &b) { return op == "add" ? a + b : op == "max" ? max(a, b) : min(a, b); }

/**
 * Appends to `body` the lanes of each row combining `term` (written in gpu_j and the lane: term
 * kf = gpu_j * lanes + lane, those with kf < len) into private partials, then the partials halved
 * in `red` (one per thread) between barriers: in each step a thread reads a partial that nobody
 * writes in it. red[row * lanes] ends with the row's total.
 */
void combine_across_lanes(std::vector<Stmt> &body, const std::string &op, const Expr &term, const Expr &kf, int64_t len, int64_t lanes,
                          const Buffer &red) {
  Expr th = var("gpu_thread"), lane = th % int_imm(lanes);
  Buffer part = make_buffer("partial", Type::kF32, 1, BufferScope::kLocal);
  Expr identity = op == "add" ? float_imm(0) : float_imm(op == "max" ? -INFINITY : INFINITY);
  Stmt update = store(part, int_imm(0), combine(op, load(part, int_imm(0)), term));
  if (len % lanes) update = if_then(kf < int_imm(len), update);
  body.push_back(allocate(part, seq({store(part, int_imm(0), identity),
                                     for_loop("gpu_j", int_imm(0), int_imm(ceil_div(len, lanes)), ForKind::kSerial, update),
                                     store(red, th, load(part, int_imm(0)))})));
  body.push_back(barrier());
  for (int64_t half = lanes / 2; half >= 1; half /= 2) {
    body.push_back(if_then(lane < int_imm(half), store(red, th, combine(op, load(red, th), load(red, th + int_imm(half))))));
    body.push_back(barrier());
  }
}

/** The reduction stage `r` as a row reduction `g` (GpuReduce's comment). */
Expected<KernelStage> row_reduce_stage(const KernelStage &st, const Reduction &r, const GpuReduce &g, const GpuTarget &gpu) {
  AT_TRY(check_gpu_reduce(g, gpu));
  AT_ASSIGN(c, combine_of(r));
  const int64_t k = product(r.reds);
  Rows rw = rows_of(r.outs, g);
  const auto &at = rw.at;
  Expr kf = var("gpu_j") * g.lanes + rw.lane;
  std::map<std::string, Expr> at_k = at;
  unflatten(r.reds, kf, at_k);
  Buffer red = make_buffer("shared_partials", Type::kF32, g.threads, BufferScope::kShared);
  std::vector<Stmt> body;
  combine_across_lanes(body, c.op, substitute_all(c.term, at_k), kf, k, g.lanes, red);
  // The output's first thread: acc = init combined with the row's total, then the epilogue.
  Expr total = combine(c.op, substitute_all(r.init, at), load(red, rw.th));
  Stmt epi = map_exprs(r.epilogue, [&](const Expr &x) { return with_loads(x, r.acc.get(), total); });
  for (const auto &[v, x] : at) epi = substitute(epi, v, x);
  Expr cond = rw.lane == int_imm(0);
  if (rw.inside) cond = both(cond, rw.inside);
  body.push_back(if_then(cond, epi));
  return gpu_block_stage(st, rw.blocks, g.threads, allocate(red, seq(body)));
}

/**
 * A row program: output loops around scalars (size-1 private buffers) and passes over a row: a
 * scalar set from scalars (mean = sum / n), a loop combining terms into a scalar (a sum, max or
 * min), a loop storing each element of the row (softmax's exponentials, LayerNorm's outputs), or
 * one store per row. Softmax and LayerNorm are such programs.
 */
struct RowProgram {
  Loops outs;
  std::vector<Buffer> scalars;
  std::vector<Stmt> passes;
  std::vector<std::optional<Combine>> combines;  // per pass: the combine of a pass that reduces into a scalar
  int64_t longest = 0;  // the longest pass over the row
  bool is_scalar(const Buffer &b) const { return std::find(scalars.begin(), scalars.end(), b) != scalars.end(); }
  RowReduceShape shape() const { return RowReduceShape{product(outs), longest, ""}; }
};

Expected<RowProgram> read_row_program(const KernelStage &st) {
  RowProgram p;
  Stmt cur = leading_loops(st.body, p.outs);
  for (; cur && cur->kind == StmtKind::kAllocate && cur->buffer->scope == BufferScope::kLocal && cur->buffer->size == 1; cur = cur->body[0])
    p.scalars.push_back(cur->buffer);
  if (p.outs.empty() || p.scalars.empty() || !cur) return make_error("stage " + st.name + " is no row program (output loops around scalars)");
  p.passes = cur->kind == StmtKind::kSeq ? cur->body : std::vector<Stmt>{cur};
  p.combines.resize(p.passes.size());
  for (size_t i = 0; i < p.passes.size(); ++i) {
    const Stmt &x = p.passes[i];
    if (x->kind == StmtKind::kStore) continue;  // a scalar from scalars, or one store per row
    auto mn = as_int(x->min), ex = as_int(x->extent);
    if (x->kind != StmtKind::kFor || !mn || *mn != 0 || !ex) return make_error("stage " + st.name + ": a pass that is no loop over the row");
    p.longest = std::max(p.longest, *ex);
    const Stmt &b = x->body[0];
    if (b->kind == StmtKind::kStore && p.is_scalar(b->buffer)) {
      Reduction r;
      r.acc = b->buffer, r.update = b->value;
      AT_ASSIGN(c, combine_of(r));
      p.combines[i] = c;
      continue;
    }
    for (const Stmt &y : stores_of(b))
      if (p.is_scalar(y->buffer)) return make_error("stage " + st.name + ": a pass stores a scalar among other stores");
    std::function<bool(const Stmt &)> flat = [&](const Stmt &y) {
      if (!y) return true;
      if (y->kind == StmtKind::kFor || y->kind == StmtKind::kAllocate || y->kind == StmtKind::kBarrier) return false;
      return std::all_of(y->body.begin(), y->body.end(), flat);
    };
    if (!flat(b)) return make_error("stage " + st.name + ": a pass over the row with loops inside");
  }
  return p;
}

/** The row program `p` with `g.lanes` threads per row (GpuReduce's comment; each pass strided over the lanes). */
Expected<KernelStage> row_program_stage(const KernelStage &st, const RowProgram &p, const GpuReduce &g, const GpuTarget &gpu) {
  AT_TRY(check_gpu_reduce(g, gpu));
  Rows rw = rows_of(p.outs, g);
  const auto &at = rw.at;
  const Expr &row = rw.row, &lane = rw.lane, &inside = rw.inside;  // a row past the tensor computes (clamped) and stores nothing
  auto place = [&](Stmt x) {
    for (const auto &[v, e] : at) x = substitute(x, v, e);
    return x;
  };
  Buffer red = make_buffer("shared_partials", Type::kF32, g.threads, BufferScope::kShared);
  std::vector<Stmt> body;
  for (size_t i = 0; i < p.passes.size(); ++i) {
    const Stmt &x = p.passes[i];
    if (x->kind == StmtKind::kStore) {
      // A scalar: every lane computes its own copy. A row's store: its first lane.
      if (p.is_scalar(x->buffer)) body.push_back(place(x));
      else body.push_back(if_then(inside ? both(lane == int_imm(0), inside) : lane == int_imm(0), place(x)));
      continue;
    }
    const int64_t len = *as_int(x->extent);
    Expr j = var("gpu_j") * g.lanes + lane;
    Expr in_row = len % g.lanes ? j < int_imm(len) : nullptr;
    const Stmt &b = x->body[0];
    if (const std::optional<Combine> &c = p.combines[i]) {
      // A combine: strided partials, halved in shared memory, the total combined into every lane's scalar.
      combine_across_lanes(body, c->op, substitute_all(loop::substitute(c->term, x->var, j), at), j, len, g.lanes, red);
      body.push_back(store(b->buffer, int_imm(0), combine(c->op, load(b->buffer, int_imm(0)), load(red, row * g.lanes))));
      body.push_back(barrier());  // every lane has read the total before the next combine overwrites the partials
      continue;
    }
    // Each element of the row: lane l takes l, l + lanes, ... in every pass, so an element a pass
    // writes is read back by the same thread; a barrier after the pass all the same.
    Stmt each = substitute(b, x->var, j);
    Expr cond = in_row;
    if (inside) cond = cond ? both(cond, inside) : inside;
    if (cond) each = if_then(cond, each);
    body.push_back(for_loop("gpu_j", int_imm(0), int_imm(ceil_div(len, g.lanes)), ForKind::kSerial, place(each)));
    body.push_back(barrier());
  }
  Stmt all = seq(body);
  for (size_t i = p.scalars.size(); i-- > 0;) all = allocate(p.scalars[i], all);
  return gpu_block_stage(st, rw.blocks, g.threads, allocate(red, all));
}

bool has_barrier(const Stmt &s) {
  if (!s) return false;
  if (s->kind == StmtKind::kBarrier) return true;
  return std::any_of(s->body.begin(), s->body.end(), [](const Stmt &b) { return has_barrier(b); });
}

/** `s` with every access to `from` made an access to `to` at offset + index. */
Stmt rebase(const Stmt &s, const BufferNode *from, const Buffer &to, const Expr &offset) {
  std::function<Expr(const Expr &)> ex = [&](const Expr &e) -> Expr {
    std::vector<Expr> args;
    bool changed = false;
    for (const Expr &a : e->args) args.push_back(ex(a)), changed |= args.back().get() != a.get();
    if (e->kind == ExprKind::kLoad && e->buffer.get() == from) return load(to, offset + args[0]);
    return changed ? with_args(e, std::move(args)) : e;
  };
  std::function<Stmt(const Stmt &)> go = [&](const Stmt &st) -> Stmt {
    if (!st) return st;
    auto n = std::make_shared<StmtNode>(*st);
    for (Expr *e : {&n->min, &n->extent, &n->index, &n->value})
      if (*e) *e = ex(*e);
    if (n->kind == StmtKind::kStore && n->buffer.get() == from) n->buffer = to, n->index = offset + n->index;
    for (Stmt &b : n->body) b = go(b);
    return n;
  };
  return go(s);
}

/** serialize_threads for one stage: the thread loop `t` of `threads` around `s`. */
struct Serializer {
  std::string t;
  int64_t threads;
  std::set<const BufferNode *> per_thread;  // copies of thread-private buffers, read at the thread's offset

  bool varies(const Expr &e) const {
    if (uses_var(e, t)) return true;
    bool found = false;
    for_each_node(e, [&](const Expr &x) { found |= x->kind == ExprKind::kLoad && per_thread.count(x->buffer.get()) > 0; });
    return found;
  }

  Expected<Stmt> go(const Stmt &s) {
    if (!has_barrier(s)) return for_loop(t, int_imm(0), int_imm(threads), ForKind::kSerial, s);
    switch (s->kind) {
      case StmtKind::kBarrier: return seq({});
      case StmtKind::kSeq: {
        std::vector<Stmt> out, run;
        auto flush = [&] {
          if (!run.empty()) out.push_back(for_loop(t, int_imm(0), int_imm(threads), ForKind::kSerial, seq(run)));
          run.clear();
        };
        for (const Stmt &b : s->body) {
          if (!has_barrier(b)) {
            run.push_back(b);
            continue;
          }
          flush();
          AT_ASSIGN(x, go(b));
          out.push_back(x);
        }
        flush();
        return seq(std::move(out));
      }
      case StmtKind::kFor: {
        if (varies(s->min) || varies(s->extent))
          return make_error("a barrier inside loop " + s->var + ", whose bounds differ between threads");
        if (s->for_kind == ForKind::kParallel || s->for_kind == ForKind::kVectorized)
          return make_error("a barrier inside the " + std::string(for_kind_name(s->for_kind)) + " loop " + s->var);
        AT_ASSIGN(body, go(s->body[0]));
        return for_loop(s->var, s->min, s->extent, ForKind::kSerial, body);
      }
      case StmtKind::kIf: {
        if (varies(s->index)) return make_error("a barrier under the condition " + to_string(s->index) + ", which differs between threads");
        AT_ASSIGN(then_case, go(s->body[0]));
        Stmt else_case;
        if (s->body.size() > 1 && s->body[1]) {
          AT_ASSIGN(e, go(s->body[1]));
          else_case = e;
        }
        return if_then(s->index, then_case, else_case);
      }
      case StmtKind::kLet: {
        if (varies(s->value)) return go(substitute(s->body[0], s->var, s->value));  // a thread's own value, recomputed in each region
        AT_ASSIGN(body, go(s->body[0]));
        return let(s->var, s->value, body);
      }
      case StmtKind::kAllocate: {
        if (s->buffer->scope == BufferScope::kShared) {
          AT_ASSIGN(body, go(s->body[0]));
          return allocate(s->buffer, body);
        }
        // A thread's private buffer that lives across a barrier: one copy per thread.
        Buffer copies = make_buffer(s->buffer->name, s->buffer->type, s->buffer->size * threads, s->buffer->scope);
        per_thread.insert(copies.get());
        AT_ASSIGN(body, go(rebase(s->body[0], s->buffer.get(), copies, var(t) * s->buffer->size)));
        return allocate(copies, body);
      }
      case StmtKind::kStore:
      case StmtKind::kPrefetch: break;
    }
    return make_error("bad statement around a barrier");
  }
};

/**
 * `k` with each B operand of stage `si` that is a conv (OIHW) or dense ([N][K]) weight argument
 * packed as [O / B][...][B] (Transform's pack, the first of B = 32, 16, 8 it takes), splitting the stage's
 * output-channel loop by B first where the read needs it: consecutive threads then read
 * consecutive output channels of one k, contiguous in memory, where OIHW put them a whole filter
 * apart. The runtime packs the argument (WeightPacking), as on the CPU. `k` as it is where pack refuses.
 */
LoweredKernel pack_b_weights(const LoweredKernel &k, size_t si, const GemmStage &g, const Graph &body) {
  LoweredKernel out = k;
  for (const Expr &op : g.b_ops) {
    if (op->kind != ExprKind::kLoad || op->buffer->scope != BufferScope::kParam) continue;
    auto it = std::find(out.buffers.begin(), out.buffers.begin() + out.num_params, op->buffer);
    if (it == out.buffers.begin() + out.num_params) continue;
    size_t p = static_cast<size_t>(it - out.buffers.begin());
    if (p >= body.inputs.size()) continue;
    const Shape &shape = body.inputs[p].type.shape;
    if (shape.size() != 2 && shape.size() != 4) continue;
    std::vector<int64_t> dims(shape.begin(), shape.end());
    for (int64_t block : {32, 16, 8}) {
      if (shape[0] % block) continue;
      auto packed = pack(out, op->buffer->name, dims, block);
      for (const auto &[v, e] : g.n) {
        if (packed || e != shape[0]) continue;
        auto split_body = split(out.stages[si].body, v, block, v + "_o", v + "_i");
        if (!split_body) continue;
        LoweredKernel tried = out;
        tried.stages[si].body = *split_body;
        packed = pack(tried, op->buffer->name, dims, block);
      }
      if (!packed) continue;
      out = packed.take();
      break;
    }
  }
  return out;
}

}  // namespace

std::string GpuTarget::to_json() const {
  nlohmann::json j{{"name", name},
                   {"kind", "gpu"},
                   {"sm", sm},
                   {"ptx", ptx},
                   {"sm_count", sm_count},
                   {"warp_size", warp_size},
                   {"max_threads_per_block", max_threads_per_block},
                   {"threads_per_block", threads_per_block},
                   {"shared_bytes_per_block", shared_bytes_per_block},
                   {"shared_bytes_per_sm", shared_bytes_per_sm},
                   {"registers_per_thread", registers_per_thread},
                   {"registers_per_sm", registers_per_sm},
                   {"max_threads_per_sm", max_threads_per_sm},
                   {"max_blocks_per_sm", max_blocks_per_sm}};
  return j.dump(2);
}

Expected<GpuTarget> resolve_gpu_target(const std::string &name_or_file) {
  for (const auto &[name, json] : builtin_target_descriptions())
    if (name == name_or_file) return parse_gpu(json, "target " + name);
  if (!std::filesystem::is_regular_file(name_or_file)) {
    std::string names;
    for (const auto &[name, json] : builtin_target_descriptions())
      if (is_gpu_description(json)) names += (names.empty() ? "" : ", ") + name;
    return make_error("unknown GPU target '" + name_or_file + "' (" + names + ", or a JSON file with \"kind\": \"gpu\")");
  }
  AT_ASSIGN(text, read_file(name_or_file));
  return parse_gpu(text, name_or_file);
}

bool is_gpu_target(const std::string &name_or_file) {
  for (const auto &[name, json] : builtin_target_descriptions())
    if (name == name_or_file) return is_gpu_description(json);
  if (!std::filesystem::is_regular_file(name_or_file)) return false;
  auto text = read_file(name_or_file);
  return text && is_gpu_description(*text);
}

namespace {
/** A GEMM worth tiling: both sides at least 16. */
bool tiles_gemm(const GemmShape &s) { return s.m >= 16 && s.n >= 16; }
/** A reduction worth lanes per output: at least 32 terms. */
bool by_rows(const RowReduceShape &r) { return r.k >= 32; }
}  // namespace

std::optional<GpuStageSpace> gpu_stage_space(const KernelStage &st, const GpuTarget &gpu) {
  GpuStageSpace out;
  if (auto g = gemm_shape(st); g && tiles_gemm(*g)) {
    out.tile = true;
    out.fallback.tile = default_gpu_tile(*g, gpu);
    for (const GpuTile &x : gpu_tile_space(*g, gpu)) out.space.push_back({x, std::nullopt});
    return out;
  }
  auto rows = row_reduce_shape(st);
  if (!rows || !by_rows(*rows)) rows = row_program_shape(st);
  if (!rows || !by_rows(*rows)) return std::nullopt;
  out.fallback.reduce = default_gpu_reduce(*rows, gpu);
  for (const GpuReduce &x : gpu_reduce_space(*rows, gpu)) out.space.push_back({std::nullopt, x});
  return out;
}

Expected<LoweredKernel> lower_gpu(const Graph &body, const std::string &name, const GpuTarget &gpu, const GpuSchedule &schedule) {
  AT_ASSIGN(k, lower_naive(body, name, KernelSchedule{}));
  std::string tiled;
  for (size_t i = 0; i < k.stages.size(); ++i) {
    auto g = read_gemm(k.stages[i]);
    if (g && tiles_gemm(g->shape)) {
      GpuTile t = schedule.tile ? *schedule.tile : default_gpu_tile(g->shape, gpu);
      if (t.pack && schedule.pack_weights) {
        k = pack_b_weights(k, i, *g, body);
        g = read_gemm(k.stages[i]);
        if (!g) return make_error(name + " stage " + k.stages[i].name + " after packing its weights: " + g.error().message);
      }
      auto s = tiled_stage(k.stages[i], *g, t, gpu);
      if (!s) return make_error(name + " stage " + k.stages[i].name + ": " + s.error().message);
      k.stages[i] = s.take();
      tiled = ", stage " + k.stages[i].name + " tiled " + t.to_json();
      continue;
    }
    auto red = read_reduction(k.stages[i]);
    if (auto rs = red ? row_shape(*red) : Expected<RowReduceShape>(red.error()); rs && (by_rows(*rs) || schedule.reduce)) {
      GpuReduce rd = schedule.reduce ? *schedule.reduce : default_gpu_reduce(*rs, gpu);
      auto s = row_reduce_stage(k.stages[i], *red, rd, gpu);
      if (!s) return make_error(name + " stage " + k.stages[i].name + ": " + s.error().message);
      k.stages[i] = s.take();
      tiled = ", stage " + k.stages[i].name + " row-reduced " + rd.to_json();
      continue;
    }
    if (auto rp = read_row_program(k.stages[i]); rp && (by_rows(rp->shape()) || schedule.reduce)) {
      GpuReduce rd = schedule.reduce ? *schedule.reduce : default_gpu_reduce(rp->shape(), gpu);
      auto s = row_program_stage(k.stages[i], *rp, rd, gpu);
      if (!s) return make_error(name + " stage " + k.stages[i].name + ": " + s.error().message);
      k.stages[i] = s.take();
      tiled = ", stage " + k.stages[i].name + " by rows " + rd.to_json();
      continue;
    }
    if (schedule.halo_tiles)
      if (auto h = read_halo(k.stages[i]))
        if (auto s = halo_stage(k.stages[i], *h, gpu)) {  // else (a window past shared memory) one output per thread
          k.stages[i] = s.take();
          tiled = ", stage " + k.stages[i].name + " in halo tiles";
          continue;
        }
    auto s = gpu_stage(k.stages[i], gpu);
    if (!s) return make_error(name + " stage " + k.stages[i].name + ": " + s.error().message);
    k.stages[i] = s.take();
  }
  k.schedule = "gpu: one output element per thread, " + std::to_string(gpu.threads_per_block) + " threads per block at most" + tiled;
  return k;
}

Expected<LoweredKernel> lower_gpu_or_default(const Graph &body, const std::string &name, const GpuTarget &gpu, const GpuSchedule &chosen,
                                             std::string &note) {
  note.clear();
  auto k = lower_gpu(body, name, gpu, chosen);
  if (k || (!chosen.tile && !chosen.reduce)) return k;
  GpuSchedule defaults;
  defaults.pack_weights = chosen.pack_weights;
  auto d = lower_gpu(body, name, gpu, defaults);
  if (d) note = "its tuned schedule " + gpu_schedule_to_json(chosen) + " does not lower on " + gpu.sm + " (" + k.error().message + "); the default runs";
  return d;
}

std::pair<int64_t, int64_t> warp_sectors(const Expr &index, const std::string &thread_var, const std::map<std::string, int64_t> &at,
                                         const std::string &vector_var, int64_t vector_lanes) {
  std::set<int64_t> sectors, addresses;
  std::map<std::string, int64_t> vars = at;
  const bool vector = !vector_var.empty() && vector_lanes > 1;
  for (int64_t lane = 0; lane < 32; ++lane) {
    vars[thread_var] = lane;
    for (int64_t v = 0; v < (vector ? vector_lanes : 1); ++v) {
      if (vector) vars[vector_var] = v;
      auto i = evaluate(index, vars);
      if (!i) return {32 * (vector ? vector_lanes : 1), 128 * (vector ? vector_lanes : 1)};  // an index read from memory (a gather): one sector per element
      addresses.insert(*i);
      sectors.insert(floor_div(*i * 4, 32));
    }
  }
  return {static_cast<int64_t>(sectors.size()), static_cast<int64_t>(addresses.size()) * 4};
}

Expected<GemmShape> gemm_shape(const KernelStage &st) {
  AT_ASSIGN(g, read_gemm(st));
  return g.shape;
}

std::string GpuTile::to_json() const {
  return nlohmann::json{{"bm", bm}, {"bn", bn}, {"bk", bk}, {"tm", tm}, {"tn", tn}, {"m_fastest", m_fastest}, {"pad", pad}, {"pack", pack}}.dump();
}

Expected<GpuTile> gpu_tile_from_json(const std::string &json) {
  GpuTile t;
  try {
    nlohmann::json j = nlohmann::json::parse(json);
    for (auto &[k, v] : j.items()) {
      if (k == "bm") t.bm = v.get<int64_t>();
      else if (k == "bn") t.bn = v.get<int64_t>();
      else if (k == "bk") t.bk = v.get<int64_t>();
      else if (k == "tm") t.tm = v.get<int64_t>();
      else if (k == "tn") t.tn = v.get<int64_t>();
      else if (k == "m_fastest") t.m_fastest = v.get<bool>();
      else if (k == "pad") t.pad = v.get<bool>();
      else if (k == "pack") t.pack = v.get<bool>();
      else return make_error("GPU tile: unknown field '" + k + "'");
    }
  } catch (const std::exception &e) {
    return make_error(std::string("GPU tile: ") + e.what());
  }
  return t;
}

std::string gpu_schedule_to_json(const GpuSchedule &s) {
  nlohmann::json j{{"version", 1}};
  if (s.tile) j["gpu_tile"] = nlohmann::json::parse(s.tile->to_json());
  if (s.reduce) j["gpu_reduce"] = nlohmann::json::parse(s.reduce->to_json());
  return j.dump();
}

std::string GpuReduce::to_json() const { return nlohmann::json{{"lanes", lanes}, {"threads", threads}}.dump(); }

Expected<GpuSchedule> gpu_schedule_from_json(const std::string &json) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(json);
  } catch (const std::exception &e) {
    return make_error(std::string("GPU schedule: ") + e.what());
  }
  if (!j.is_object() || (!j.contains("gpu_tile") && !j.contains("gpu_reduce"))) return make_error("not a GPU schedule (no \"gpu_tile\" or \"gpu_reduce\"): " + json.substr(0, 80));
  if (j.value("version", 0) != 1) return make_error("GPU schedule: version " + j.value("version", nlohmann::json(0)).dump() + " is not 1");
  GpuSchedule s;
  if (j.contains("gpu_tile")) {
    AT_ASSIGN(t, gpu_tile_from_json(j["gpu_tile"].dump()));
    s.tile = t;
  }
  if (j.contains("gpu_reduce")) {
    try {
      GpuReduce r;
      for (auto &[k, v] : j["gpu_reduce"].items()) {
        if (k == "lanes") r.lanes = v.get<int64_t>();
        else if (k == "threads") r.threads = v.get<int64_t>();
        else return make_error("GPU reduce: unknown field '" + k + "'");
      }
      s.reduce = r;
    } catch (const std::exception &e) {
      return make_error(std::string("GPU reduce: ") + e.what());
    }
  }
  return s;
}

Status check_gpu_reduce(const GpuReduce &r, const GpuTarget &gpu) {
  auto pow2 = [](int64_t v) { return v > 0 && (v & (v - 1)) == 0; };
  if (!pow2(r.lanes) || r.threads < r.lanes || r.threads % r.lanes || r.threads > gpu.max_threads_per_block)
    return make_error("GPU reduce " + r.to_json() + ": lanes must be a power of two dividing threads, threads at most " + std::to_string(gpu.max_threads_per_block));
  return Status::ok();
}

Expected<RowReduceShape> row_reduce_shape(const KernelStage &st) {
  AT_ASSIGN(r, read_reduction(st));
  return row_shape(r);
}

Expected<RowReduceShape> row_program_shape(const KernelStage &st) {
  AT_ASSIGN(p, read_row_program(st));
  return p.shape();
}

GpuReduce default_gpu_reduce(const RowReduceShape &r, const GpuTarget &gpu) {
  GpuReduce g;
  g.lanes = 32;
  while (g.lanes * 2 <= r.k && g.lanes < 256) g.lanes *= 2;
  g.threads = std::max<int64_t>(g.lanes, std::min<int64_t>(256, gpu.max_threads_per_block));
  return g;
}

std::vector<GpuReduce> gpu_reduce_space(const RowReduceShape &r, const GpuTarget &gpu) {
  std::vector<GpuReduce> out;
  for (int64_t lanes : {32, 64, 128, 256})
    for (int64_t threads : {128, 256, 512}) {
      GpuReduce g{lanes, threads};
      if (lanes / 2 >= r.k || !check_gpu_reduce(g, gpu)) continue;
      out.push_back(g);
    }
  return out;
}

Status check_gpu_tile(const GpuTile &t, const GpuTarget &gpu) {
  if (t.bm < 1 || t.bn < 1 || t.bk < 1 || t.tm < 1 || t.tn < 1) return make_error("GPU tile " + t.to_json() + ": every side must be positive");
  if (t.bm % t.tm || t.bn % t.tn) return make_error("GPU tile " + t.to_json() + ": tm must divide bm and tn divide bn");
  if (t.threads() > gpu.max_threads_per_block)
    return make_error("GPU tile " + t.to_json() + ": " + std::to_string(t.threads()) + " threads per block, more than " + gpu.name + "'s " +
                      std::to_string(gpu.max_threads_per_block));
  // Each thread keeps its tm x tn accumulators and a row and column of operands in registers, beside about 24 for addresses.
  // One block must fit an SM's register file: ptxas caps each thread at registers_per_sm / threads and spills beyond.
  int64_t regs = t.tm * t.tn + t.tm + t.tn + 24;
  if (regs > gpu.registers_per_thread || regs * t.threads() > gpu.registers_per_sm)
    return make_error("GPU tile " + t.to_json() + ": its register tile needs about " + std::to_string(regs) + " registers per thread, more than " +
                      std::to_string(std::min<int64_t>(gpu.registers_per_thread, gpu.registers_per_sm / t.threads())) + " for " +
                      std::to_string(t.threads()) + " threads");
  return Status::ok();
}

GpuTile default_gpu_tile(const GemmShape &g, const GpuTarget &gpu) {
  GpuTile t;
  auto side = [](int64_t extent) -> int64_t { return extent >= 64 ? 64 : extent >= 32 ? 32 : 16; };
  t.bm = side(g.m), t.bn = side(g.n);
  // Narrower blocks until there is one per SM: a 56 x 56 x 64 conv in 64 x 64 tiles is 49 blocks, half an A100 idle.
  auto blocks = [&] { return g.batch * ((g.m + t.bm - 1) / t.bm) * ((g.n + t.bn - 1) / t.bn); };
  while (blocks() < gpu.sm_count && (t.bm > 16 || t.bn > 16)) (t.bm >= t.bn && t.bm > 16 ? t.bm : t.bn) /= 2;
  t.tm = t.bm / 16, t.tn = t.bn / 16;  // 16 x 16 = 256 threads
  t.bk = g.k >= 16 ? 16 : 8;
  t.m_fastest = g.m_contiguous;
  if (t.threads() > gpu.max_threads_per_block) t.tm *= 2, t.tn *= 2;
  return t;
}

std::vector<GpuTile> gpu_tile_space(const GemmShape &g, const GpuTarget &gpu) {
  std::vector<GpuTile> out;
  auto cap = [](int64_t extent) { int64_t c = 16; while (c < extent && c < 128) c *= 2; return c; };
  for (int64_t bm : {16, 32, 64, 128})
    for (int64_t bn : {16, 32, 64, 128})
      for (int64_t tm : {1, 2, 4, 8})
        for (int64_t tn : {1, 2, 4, 8})
          for (int64_t bk : {8, 16, 32})
            for (bool m_fastest : {false, true})
              for (bool pad : {false, true})
                for (bool pack : {true, false}) {
                  GpuTile t{bm, bn, bk, tm, tn, m_fastest, pad, pack};
                  if (bm > cap(g.m) || bn > cap(g.n) || (bk > 8 && bk / 2 >= g.k) || bm % tm || bn % tn) continue;
                  if (t.threads() < gpu.warp_size || t.threads() % gpu.warp_size || !check_gpu_tile(t, gpu)) continue;
                  out.push_back(t);
                }
  return out;
}

Expected<LoweredKernel> serialize_threads(const LoweredKernel &k) {
  LoweredKernel out = k;
  for (KernelStage &st : out.stages) {
    if (st.body->kind != StmtKind::kFor || !as_int(st.body->extent)) return make_error(k.name + " stage " + st.name + " is not GPU-scheduled");
    Serializer s{st.body->var, *as_int(st.body->extent), {}};
    auto body = s.go(st.body->body[0]);
    if (!body) return make_error(k.name + " stage " + st.name + ": " + body.error().message);
    st.body = body.take();
  }
  return out;
}

Expected<PtxKernel> emit_ptx(const LoweredKernel &k, const GpuTarget &gpu, const std::string &cache_dir) {
  static std::once_flag init;
  std::call_once(init, [] {
    LLVMInitializeNVPTXTargetInfo();
    LLVMInitializeNVPTXTarget();
    LLVMInitializeNVPTXTargetMC();
    LLVMInitializeNVPTXAsmPrinter();
  });
  const std::string triple = "nvptx64-nvidia-cuda", features = "+" + gpu.ptx;
  std::string err;
  const llvm::Target *t = llvm::TargetRegistry::lookupTarget(triple, err);
  if (!t) return make_error("LLVM has no NVPTX backend: " + err);
  std::unique_ptr<llvm::TargetMachine> tm(
      t->createTargetMachine(triple, gpu.sm, features, llvm::TargetOptions(), std::nullopt, std::nullopt, llvm::CodeGenOptLevel::Aggressive));
  if (!tm) return make_error("LLVM: no NVPTX target machine for " + gpu.sm + " " + features);
  llvm::LLVMContext ctx;
  AT_ASSIGN(m, emit_llvm_gpu(k, ctx, gpu.sm, features));
  PtxKernel out;
  std::string path, seal;
  if (!cache_dir.empty()) {
    std::string ir;
    llvm::raw_string_ostream os(ir);
    m->print(os, nullptr);
    path = cache_dir + "/" + k.name + "_" + fnv1a_hex(os.str() + gpu.sm + features + LLVM_VERSION_STRING) + ".ptx";
    if (auto entry = read_file(path)) {
      size_t last = entry->rfind("// autotune-ptx ");
      if (last != std::string::npos && entry->substr(last) == "// autotune-ptx " + fnv1a_hex(entry->substr(0, last)) + "\n")
        out.ptx = entry->substr(0, last), out.from_cache = true;  // a damaged entry fails the check: rebuilt below
    }
  }
  if (!out.from_cache) {
    m->setDataLayout(tm->createDataLayout());
    optimize_module(*m, *tm);
    AT_ASSIGN(ptx, emit_module_file(*m, *tm, true));
    out.ptx = ptx;
    if (!path.empty()) {
      std::error_code ec;
      std::filesystem::create_directories(cache_dir, ec);
      (void)write_file_atomic(path, ptx + "// autotune-ptx " + fnv1a_hex(ptx) + "\n");  // a cache that cannot be written only costs time
    }
  }
  for (size_t i = 0; i < k.stages.size(); ++i)
    out.launches.push_back({stage_symbol(k, i), k.stages[i].parallel_extent, *as_int(k.stages[i].body->extent)});
  return out;
}

std::string find_ptxas() {
  if (const char *env = std::getenv("AUTOTUNE_PTXAS"); env && *env) return std::filesystem::exists(env) ? env : "";
  if (const char *path = std::getenv("PATH")) {
    std::string p = path;
    for (size_t at = 0; at <= p.size();) {
      size_t colon = p.find(':', at);
      std::string dir = p.substr(at, colon == std::string::npos ? std::string::npos : colon - at);
      if (!dir.empty() && access((dir + "/ptxas").c_str(), X_OK) == 0) return dir + "/ptxas";
      if (colon == std::string::npos) break;
      at = colon + 1;
    }
  }
  return access("/usr/local/cuda/bin/ptxas", X_OK) == 0 ? "/usr/local/cuda/bin/ptxas" : "";
}

namespace {

/** Runs ptxas on `ptx` for gpu.sm (with -v when `verbose`); `log` gets what it printed. Ok when it accepted the PTX. */
Status run_ptxas(const std::string &ptx, const GpuTarget &gpu, const std::string &ptxas, bool verbose, std::string &log) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("autotune_ptxas_" + std::to_string(getpid()) + "_" + std::to_string(std::hash<std::string>{}(ptx)));
  fs::create_directories(dir);
  fs::path in = dir / "k.ptx", out = dir / "log.txt";
  std::ofstream(in) << ptx;
  pid_t pid = fork();
  if (pid < 0) {
    fs::remove_all(dir);
    return make_error("ptxas: cannot fork");
  }
  if (pid == 0) {
    int fd = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd >= 0) dup2(fd, 1), dup2(fd, 2);
    std::string arch = "-arch=" + gpu.sm;
    if (verbose) execl(ptxas.c_str(), ptxas.c_str(), "-v", arch.c_str(), "-o", "/dev/null", in.c_str(), static_cast<char *>(nullptr));
    else execl(ptxas.c_str(), ptxas.c_str(), arch.c_str(), "-o", "/dev/null", in.c_str(), static_cast<char *>(nullptr));
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  {
    std::ifstream f(out);
    log.assign(std::istreambuf_iterator<char>(f), {});
  }
  fs::remove_all(dir);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return Status::ok();
  std::string said = log.substr(0, log.find('\n'));
  return make_error("ptxas -arch=" + gpu.sm + " refused the PTX: " + (said.empty() ? "exit status " + std::to_string(WEXITSTATUS(status)) : said));
}

/** The number before `what` in `line` ("38 registers" -> 38), or -1. */
int64_t number_before(const std::string &line, const std::string &what) {
  size_t at = line.find(" " + what);
  if (at == std::string::npos) return -1;
  size_t start = line.find_last_not_of("0123456789", at - 1);
  start = start == std::string::npos ? 0 : start + 1;
  return start < at ? std::stoll(line.substr(start, at - start)) : -1;
}

}  // namespace

Status ptxas_check(const std::string &ptx, const GpuTarget &gpu, const std::string &ptxas) {
  std::string log;
  return run_ptxas(ptx, gpu, ptxas, false, log);
}

Expected<std::vector<PtxasEntry>> ptxas_resources(const std::string &ptx, const GpuTarget &gpu, const std::string &ptxas) {
  std::string log;
  AT_TRY(run_ptxas(ptx, gpu, ptxas, true, log));
  std::vector<PtxasEntry> out;
  std::istringstream lines(log);
  for (std::string line; std::getline(lines, line);) {
    if (size_t at = line.find("Compiling entry function '"); at != std::string::npos) {
      size_t from = at + 26;
      out.push_back({line.substr(from, line.find('\'', from) - from)});
      continue;
    }
    if (out.empty()) continue;
    PtxasEntry &e = out.back();
    if (line.find("stack frame") != std::string::npos) {
      e.stack_bytes = number_before(line, "bytes stack frame");
      e.spill_store_bytes = number_before(line, "bytes spill stores");
      e.spill_load_bytes = number_before(line, "bytes spill loads");
    } else if (line.find("Used ") != std::string::npos) {
      e.registers = number_before(line, "registers");
      e.shared_bytes = std::max<int64_t>(0, number_before(line, "bytes smem"));
    }
  }
  for (const PtxasEntry &e : out)
    if (e.registers < 0 || e.stack_bytes < 0) return make_error("ptxas -v: no resource usage for entry " + e.entry + " in its report");
  return out;
}

}  // namespace autotune
