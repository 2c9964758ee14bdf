#include "codegen/Lower.h"

#include <algorithm>
#include <map>
#include <set>

#include "codegen/Lowerer.h"
#include "codegen/Math.h"
#include "codegen/Sketch.h"
#include "codegen/Steps.h"
#include "codegen/Winograd.h"
#include "ir/Printer.h"

namespace autotune {
namespace lowering {

Expected<LoweredKernel> Lowerer::run() {
  if (g_.outputs.size() != 1 || g_.outputs[0].kind != ValueId::Kind::kNode)
    return make_error("a kernel needs one output computed by a node");
  for (size_t i = 0; i < g_.inputs.size(); ++i) params_.push_back(param_buffer("p" + std::to_string(i), g_.inputs[i].type));
  const TensorType &ot = g_.type_of(g_.outputs[0]);
  if (ot.dtype != DType::kFloat32) return make_error("integer-valued kernels are not compiled");
  out_ = param_buffer("out", ot);
  k_.buffers = params_;
  k_.buffers.push_back(out_);
  k_.num_params = static_cast<int>(params_.size());
  for (size_t i = 0; i < g_.nodes.size(); ++i) {
    const Node &n = g_.nodes[i];
    if (n.is_function()) return make_error("nested function");
    if (!is_anchor_op(n.op)) continue;
    if (anchor_ >= 0) return make_error("two reductions in one group (" + g_.nodes[anchor_].op + ", " + n.op + ")");
    anchor_ = static_cast<int>(i);
  }
  k_.schedule = s_.to_string();
  if (anchor_ < 0) {
    // A loop per output dimension around the output's store.
    AT_TRY(check_inlinable());
    const Shape &s = g_.type_of(g_.outputs[0]).shape;
    std::vector<std::string> i = numbered("i", s.size());
    Index idx;
    for (const std::string &v : i) idx.push_back(var(v));
    k_.schedule = "naive nest";
    add_stage("elementwise", "u", 1, loop_nest(i, s, store_output(idx, nullptr)));
    return k_;
  }
  const std::string &op = g_.nodes[anchor_].op;
  if (op == "nn.softmax") AT_TRY(lower_softmax());
  else if (op == "nn.layer_norm") AT_TRY(lower_layer_norm());
  else if (is_conv_op(op)) AT_TRY(naive_conv2d());
  else if (op == "nn.dense") AT_TRY(lower_dense());
  else AT_TRY(lower_reduction_op());
  return k_;
}

Expr Lowerer::value_at(ValueId v, const Index &idx) {
  if (v.kind == ValueId::Kind::kInput) return load(params_[v.index], ravel(idx, g_.inputs[v.index].type.shape));
  AT_CHECK(v.kind == ValueId::Kind::kNode, "function bodies hold no constants");
  if (v.index == anchor_) {
    AT_CHECK(anchor_value_ != nullptr, "the anchor's value is read outside its epilogue");
    return anchor_value_(idx);
  }
  const Node &n = g_.nodes[v.index];
  auto in = [&](int i, const Index &at) { return value_at(n.inputs[i], at); };
  auto x = [&]() { return in(0, idx); };
  const std::string &op = n.op;
  if (op == "nn.relu") return max(x(), float_imm(0));
  if (op == "identity" || op == "nn.dropout") return x();
  // One intrinsic (LLVMEmitter's emit_sigmoid), not 1 / (1 + exp(-x)): it needs none of exp's
  // edge cases, which cost a SiLU conv a third of its epilogue.
  if (op == "sigmoid") return call("sigmoid", {x()});
  if (op == "nn.hard_swish") {
    Expr v0 = x();
    return v0 * min(max(v0 * float_imm(1.0 / 6.0) + float_imm(0.5), float_imm(0)), float_imm(1));
  }
  if (op == "nn.leaky_relu") {
    Expr v0 = x();
    return select(v0 < float_imm(0), v0 * float_imm(n.attrs.f("alpha")), v0);
  }
  if (op == "nn.hard_sigmoid")
    return min(max(x() * float_imm(n.attrs.f("alpha")) + float_imm(n.attrs.f("beta")), float_imm(0)), float_imm(1));
  if (op == "clip") return min(max(x(), float_imm(n.attrs.f("a_min"))), float_imm(n.attrs.f("a_max")));
  if (op == "add" || op == "subtract" || op == "multiply" || op == "divide" || op == "power") {
    Expr a = in(0, broadcast_index(idx, g_.type_of(n.inputs[0]).shape));
    Expr b = in(1, broadcast_index(idx, g_.type_of(n.inputs[1]).shape));
    if (op == "add") return a + b;
    if (op == "subtract") return a - b;
    if (op == "multiply") return a * b;
    if (op == "power") return math::power(a, b);
    return a / b;
  }
  // Booleans are int64 0/1: comparisons and logic select 1 or 0 (LLVM folds a select of a select away).
  auto boolean = [](const Expr &c) { return select(c, int_imm(1), int_imm(0)); };
  auto truth = [](const Expr &v) { return binary(BinOp::kNE, v, v->type == Type::kF32 ? float_imm(0) : int_imm(0)); };
  auto operand = [&](int i) { return in(i, broadcast_index(idx, g_.type_of(n.inputs[i]).shape)); };
  if (op == "equal") return boolean(operand(0) == operand(1));
  if (op == "less") return boolean(operand(0) < operand(1));
  if (op == "greater") return boolean(operand(1) < operand(0));
  if (op == "logical_and") return boolean(both(truth(operand(0)), truth(operand(1))));
  if (op == "logical_or") return boolean(binary(BinOp::kOr, truth(operand(0)), truth(operand(1))));
  if (op == "logical_not") return boolean(x() == int_imm(0));
  if (op == "where") return select(truth(operand(0)), operand(1), operand(2));
  if (op == "cast") {
    const std::string &to = n.attrs.s("dtype");
    Expr v = x();
    if (to == "bool") return boolean(truth(v));
    if (to == "float32" || v->type == Type::kI64) return cast(to == "float32" ? Type::kF32 : Type::kI64, v);
    // float -> int64 as the reference computes it: NaN 0, clamped to int64's range, truncated.
    Expr limit = float_imm(9.2233715e18);
    return select(v == v, cast(Type::kI64, min(max(v, float_imm(0) - limit), limit)), int_imm(0));
  }
  if (op == "sqrt") return call("sqrt", {x()});
  if (op == "exp") return call("exp", {x()});
  if (op == "log") return call("log", {x()});
  if (op == "erf") return math::erf(x());
  if (op == "tanh") return math::tanh(x());
  if (op == "negative") return float_imm(0) - x();
  if (op == "abs") return math::abs(x());
  if (op == "reciprocal") return float_imm(1) / x();
  if (op == "broadcast_to") return in(0, broadcast_index(idx, g_.type_of(n.inputs[0]).shape));
  if (op == "tile") {
    const Shape &s = g_.type_of(n.inputs[0]).shape;
    Index src(idx.size());
    for (size_t d = 0; d < idx.size(); ++d) src[d] = s[d] == 1 ? int_imm(0) : idx[d] % int_imm(s[d]);
    return in(0, src);
  }
  if (op == "strided_slice") {
    const auto &b = n.attrs.ints("begin"), &st = n.attrs.ints("strides");
    Index src(idx.size());
    for (size_t d = 0; d < idx.size(); ++d) src[d] = int_imm(b[d]) + idx[d] * st[d];
    return in(0, src);
  }
  if (op == "nn.batch_norm") {
    Index c{idx[1]};
    Expr scale = in(1, c) / call("sqrt", {in(4, c) + float_imm(n.attrs.f("epsilon"))});
    return (x() - in(3, c)) * scale + in(2, c);
  }
  if (op == "reshape") return in(0, unravel(ravel(idx, n.type.shape), g_.type_of(n.inputs[0]).shape));
  if (op == "transpose") {
    const auto &axes = n.attrs.ints("axes");
    Index src(idx.size());
    for (size_t d = 0; d < idx.size(); ++d) src[axes[d]] = idx[d];
    return in(0, src);
  }
  if (op == "nn.to_nchwc") {
    int64_t b = n.attrs.i("block");
    return in(0, Index{idx[0], idx[1] * int_imm(b) + idx[4], idx[2], idx[3]});
  }
  if (op == "nn.from_nchwc") {
    Expr b = int_imm(g_.type_of(n.inputs[0]).shape[4]);
    return in(0, Index{idx[0], idx[1] / b, idx[2], idx[3], idx[1] % b});
  }
  if (op == "nn.pad") {
    const auto &pw = n.attrs.ints("pad_width");
    const Shape &s = g_.type_of(n.inputs[0]).shape;
    size_t r = s.size();
    Index src(r);
    Expr valid;
    for (size_t d = 0; d < r; ++d) {
      Expr j = idx[d] - int_imm(pw[d]);
      Expr ok = in_range(j, 0, s[d]);
      valid = valid ? both(valid, ok) : ok;
      src[d] = clamp(j, 0, std::max<int64_t>(s[d] - 1, 0));
    }
    Expr v0 = in(0, src);
    return valid ? select(valid, v0, float_imm(n.attrs.f("pad_value"))) : v0;
  }
  if (op == "concatenate") {
    int axis = *normalize_axis(n.attrs.i("axis"), n.type.rank());  // checked by type inference; may be negative
    std::vector<int64_t> offsets{0};
    for (ValueId a : n.inputs) offsets.push_back(offsets.back() + g_.type_of(a).shape[axis]);
    Expr result;
    for (int j = static_cast<int>(n.inputs.size()) - 1; j >= 0; --j) {
      Index src = idx;
      src[axis] = clamp(idx[axis] - int_imm(offsets[j]), 0, g_.type_of(n.inputs[j]).shape[axis] - 1);
      Expr v0 = in(j, src);
      result = result ? select(idx[axis] < int_imm(offsets[j + 1]), v0, result) : v0;
    }
    return result;
  }
  if (op == "take") {
    const Shape &ds = g_.type_of(n.inputs[0]).shape;
    int axis = *normalize_axis(n.attrs.i("axis"), static_cast<int>(ds.size()));  // a negative axis counts from the end
    int ri = g_.type_of(n.inputs[1]).rank();
    Index iidx(idx.begin() + axis, idx.begin() + axis + ri);
    ValueId indices = n.inputs[1];
    // Only float values are computed inside a kernel, so int64 indices are always an argument.
    AT_CHECK(indices.kind == ValueId::Kind::kInput, "take's indices must be a kernel argument");
    IndexCheck check{indices.index, ds[axis], "take" + (n.origin.empty() ? std::string() : " '" + n.origin + "'")};
    bool known = false;
    for (const IndexCheck &c : k_.index_checks) known |= c.param == check.param && c.extent == check.extent;
    if (!known) k_.index_checks.push_back(check);
    Expr j = in(1, iidx);
    j = select(j < int_imm(0), j + int_imm(ds[axis]), j);
    Index src(idx.begin(), idx.begin() + axis);
    src.push_back(clamp(j, 0, ds[axis] - 1));
    src.insert(src.end(), idx.begin() + axis + ri, idx.end());
    return in(0, src);
  }
  AT_CHECK(false, "no inline expression for op " + op);
}

/** The index into `in` read when broadcasting to an output indexed by `idx` (numpy alignment). */
Index Lowerer::broadcast_index(const Index &idx, const Shape &in) {
  Index r;
  size_t off = idx.size() - in.size();
  for (size_t d = 0; d < in.size(); ++d) r.push_back(in[d] == 1 ? int_imm(0) : idx[off + d]);
  return r;
}

/** Stores the group's output at idx; the anchor reads as `anchor` there. */
Stmt Lowerer::store_output(const Index &idx, const Expr &anchor) {
  anchor_value_ = [anchor](const Index &) { return anchor; };
  Expr v = value_at(g_.outputs[0], idx);
  anchor_value_ = nullptr;
  return store(out_, ravel(idx, g_.type_of(g_.outputs[0]).shape), v);
}

Status Lowerer::check_inlinable() {
  for (size_t i = 0; i < g_.nodes.size(); ++i) {
    const std::string &op = g_.nodes[i].op;
    if (static_cast<int>(i) == anchor_) continue;
    // Booleans and their index-only moves are inlined (an attention mask computed into a kernel's select).
    static const std::set<std::string> int_ops{"equal",   "less",      "greater",       "logical_and",   "logical_or", "logical_not", "where",
                                               "cast",    "reshape",   "transpose",     "broadcast_to",  "strided_slice", "identity", "tile"};
    if (is_anchor_op(op) || op == "shape_of" || (g_.nodes[i].type.dtype != DType::kFloat32 && !int_ops.count(op)))
      return make_error("op " + op + " cannot be inlined");
  }
  return Status::ok();
}

std::vector<std::string> Lowerer::numbered(const std::string &prefix, size_t n) {
  std::vector<std::string> out;
  for (size_t d = 0; d < n; ++d) out.push_back(prefix + std::to_string(d));
  return out;
}

}  // namespace lowering

using lowering::Lowerer;

std::string kernel_name(const Graph &body) {
  std::string s;
  for (const Node &n : body.nodes) {
    std::string op = n.op.substr(n.op.rfind('.') + 1);
    if (!s.empty()) s += "_";
    s += op;
  }
  return s.size() > 40 ? s.substr(0, 40) : s;
}

namespace {
/** The knobs of `s` that the naive nests read (Lowerer): the algorithm and the pointwise layout, nothing else. */
KernelSchedule naive_knobs(const KernelSchedule &s) {
  KernelSchedule n;
  n.winograd = s.winograd, n.pixel_vectors = s.pixel_vectors;
  return n;
}

Expected<LoweredKernel> join_segments(const Graph &body, const std::vector<Segment> &segs, const std::string &name,
                                      const std::function<Expected<LoweredKernel>(size_t, const std::string &)> &lower);
}  // namespace

Expected<LoweredKernel> lower_naive(const Graph &body, const std::string &name, const KernelSchedule &s) {
  if (is_chain(body)) {
    AT_ASSIGN(segs, split_segments(body));
    return join_segments(body, segs, name, [&](size_t j, const std::string &n) { return Lowerer(segs[j].body, n, KernelSchedule{}).run(); });
  }
  return Lowerer(body, name, naive_knobs(s)).run();
}

namespace {
/**
 * The kernel a sketch's steps made when it replayed them to check them: lower_group takes it
 * instead of replaying the same steps on the same naive nests again (a knob point was lowered
 * twice: the search's batches took 67 ms, now 57).
 */
struct Replayed {
  std::vector<Step> steps;
  std::optional<LoweredKernel> kernel;
  void keep(const std::vector<Step> &st, LoweredKernel k) { steps = st, kernel = std::move(k); }
};

/** The conv a Winograd schedule `s` transforms, or why it has none. */
Expected<const Node *> winograd_conv(const Graph &body, const KernelSchedule &s) {
  const Node *conv = nullptr;
  for (const Node &n : body.nodes)
    if (winograd_eligible(body, n)) conv = &n;
  if (!conv || !s.winograd) return make_error("winograd needs a 3x3 conv of stride 1, dilation 1, one group and an argument weight");
  return conv;
}

/** winograd_steps_of_knobs for `conv` (winograd_conv) on the group's naive nests `naive` (lower_naive with s). */
Expected<std::vector<Step>> winograd_knob_steps(const Node &conv, const KernelSchedule &s, const LoweredKernel &naive) {
  int64_t m = s.winograd, tiles = ((conv.type.shape[2] + m - 1) / m) * ((conv.type.shape[3] + m - 1) / m);
  WinogradSketch knobs;
  knobs.oc_block = s.oc_block, knobs.px_block = std::min<int64_t>(s.px_block, tiles), knobs.lanes = s.vector_width;
  knobs.pad = s.pad_at_root ? "root" : "inline", knobs.channel_lanes = conv_block(conv) == 0;
  return winograd_sketch(naive, knobs);
}
}  // namespace

Expected<std::vector<Step>> winograd_steps_of_knobs(const Graph &body, const KernelSchedule &s) {
  AT_ASSIGN(conv, winograd_conv(body, s));
  AT_ASSIGN(naive, lower_naive(body, "k", s));
  return winograd_knob_steps(*conv, s, naive);
}

namespace {
/**
 * The first of `options` whose loop sketch replays on `naive`, else why the last did not; the
 * replayed kernel is kept in `replayed` when given.
 */
Expected<std::vector<Step>> first_loop_sketch(const LoweredKernel &naive, const std::vector<LoopSketch> &options, Replayed *replayed = nullptr) {
  std::string why = "no loop sketch";
  for (const LoopSketch &k : options) {
    auto steps = loop_sketch(naive, k);
    if (!steps) {
      why = steps.error().message;
      continue;
    }
    auto r = replay(naive, *steps);
    if (r) {
      if (replayed) replayed->keep(*steps, r.take());
      return steps;
    }
    why = r.error().message;
  }
  return make_error(why);
}

/**
 * A pool's loop sketch at `lanes`: a strided window cuts its columns into the borders and the
 * inside (partition: the inside reads plain) and vectorizes the inside by the widest lanes that
 * divide the row; a row that fits one vector takes the row tile (up to 7 rows x the row around
 * the window, unrolled, so rows whose windows overlap share loads; stride 1 tries it first);
 * else the cut columns, else the plain vector. Measured alone with the tuner's protocol (Zen 5,
 * 2 threads, the template's default against this, the template's time over this list's, AVX-512
 * / AVX2 kernels): ResNet-50's max pool 3x3/2 at 56x56 1.15/1.22, GoogLeNet's nine max pools
 * 1.06-4.03/1.14-3.85, DenseNet-121's 2x2/2 average pools 1.22-2.86/3.03-4.18, SqueezeNet's
 * three max pools 1.10-1.64/1.17-1.59. The template kept the clamps in its rows and read a stride
 * as gathers.
 */
Expected<std::vector<Step>> pool_steps(const LoweredKernel &naive, const Node &pool, int lanes, Replayed *replayed) {
  int64_t H = pool.type.shape[2], W = pool.type.shape[3];
  LoopSketch cut, tile, plain;
  cut.unroll_reduction = tile.unroll_reduction = plain.unroll_reduction = true;
  cut.partition = true;
  cut.lanes = widest_dividing_lanes(W, lanes);
  if (!cut.lanes) cut.lanes = lanes;
  plain.lanes = cut.lanes;
  tile.lanes = static_cast<int>(W);
  for (int r : {7, 6, 4, 3, 2})
    if (H % r == 0 && !tile.rows) tile.rows = r;
  std::vector<LoopSketch> options;
  bool strided = pool.attrs.ints("strides")[1] > 1, tiles = W <= lanes && W >= 2 && tile.rows;
  if (strided) options.push_back(cut);
  if (tiles) options.push_back(tile);
  if (!strided) options.push_back(cut);
  options.push_back(plain);
  return first_loop_sketch(naive, options, replayed);
}

/**
 * A conv without channel blocks (depthwise, other narrow groups, output channels no vector
 * divides): the direct template's knobs, which stand for the loop sketch (direct_steps).
 */
bool direct_conv(const Node &conv, const KernelSchedule &s) {
  return (conv.op == "nn.conv2d" || conv.attrs.i("groups") > 1) && s.oc_block == 0;
}

/**
 * A direct conv's loop sketch for its knobs: the row tile of px_block rows
 * (the largest that divides the output's height) x the schedule's vector (the whole row where
 * it is narrower, else vectors and a tail), the window unrolled, the padded input at root
 * (pad_at_root) or copied per channel plane (at root where that is refused); (image, channel)
 * parallel, and the row tiles too
 * where the rows are one loop (input at root, no column tail). Without a row tile (one row, or
 * lanes 1), the vector alone.
 */
Expected<std::vector<Step>> direct_steps(const Graph &body, const LoweredKernel &naive, const Node &conv, const KernelSchedule &s,
                                         Replayed *replayed) {
  if (int64_t b = conv_block(conv); b > 0) {
    // A depthwise conv2d_nchwc: the tile is px_block output columns of a row (the largest that
    // divides the row) x the vector of a block's lanes, the window unrolled, so columns whose
    // windows overlap share their loads; the weight packed by the block; the padded input
    // recomputed at its reads (no copy: the unrolled window's column conditions fold, a row's are
    // a mask) or stored at root (pad_at_root); (image, channel block, row) parallel.
    int64_t W = conv.type.shape[3], cols = s.px_block;
    while (cols > 1 && W % cols) --cols;
    LoopSketch tile;
    tile.lanes = static_cast<int>(std::min<int64_t>(s.vector_width, b));
    tile.unroll_reduction = true;
    tile.pad = s.pad_at_root ? "root" : "inline";
    tile.parallel_loops = 3;
    tile.rows = cols > 1 ? static_cast<int>(cols) : 0;
    const ValueId &w = conv.inputs[1];
    tile.weight = "p" + std::to_string(w.index), tile.dims = body.type_of(w).shape, tile.pack = b;
    return first_loop_sketch(naive, {tile}, replayed);
  }
  int64_t H = conv.type.shape[2], W = conv.type.shape[3], rows = s.px_block;
  while (rows > 1 && H % rows) --rows;
  LoopSketch tile;
  tile.lanes = static_cast<int>(std::min<int64_t>(s.vector_width, W));
  tile.unroll_reduction = true;
  tile.pad = s.pad_at_root ? "root" : "i1";
  tile.parallel_loops = s.pad_at_root && W % tile.lanes == 0 ? -1 : 2;
  tile.rows = rows > 1 ? static_cast<int>(rows) : 0;
  LoopSketch plain = tile;
  plain.rows = 0, plain.parallel_loops = 2;
  // A plane copy that compute_at refuses (a channel multiplier's input channel i1 / m is not
  // affine in the plane loop) leaves the copy at root.
  LoopSketch tile_root = tile, plain_root = plain;
  tile_root.pad = plain_root.pad = "root";
  return first_loop_sketch(naive, {tile, plain, tile_root, plain_root}, replayed);
}

/**
 * The register-blocked conv's knobs as the tile sketch with flat pixels (flat_tile_sketch), or
 * with its padding in the tiles (rows_eligible) the row tiles (row_tile_sketch), or with
 * pixel_vectors the pixel lanes (pixel_tile_sketch): the templates' kernels as steps. oc_block channels x px_block pixels of the flattened output (the
 * pixels left over a tile of their own), the reduction in the packed weight's order (c, ky, kx),
 * kx unrolled with unroll_kx, reduction tiles of ic_block channels, the weight prefetched 8 KiB
 * ahead, the padded input at root
 * (pad_at_root) or recomputed at every read, the threads over the channel tiles, the pixel tiles
 * or both (`parallel`), the epilogue a channel at a time in NCHW with pixel_epilogue.
 */
Expected<std::vector<Step>> blocked_steps(const Graph &body, const LoweredKernel &naive, const Node &conv, const KernelSchedule &s,
                                          std::optional<LoweredKernel> *made = nullptr) {
  int64_t P = conv.type.shape[2] * conv.type.shape[3];
  TileSketch t;
  t.oc_block = s.oc_block;
  if (s.pixel_vectors) {
    // oc_block channels x px_block vectors of vector_width pixels (fewer where the pixels are
    // fewer: then one tile of them, the channel tiles the parallel units).
    t.lanes = static_cast<int>(std::min<int64_t>(s.vector_width, P));
    t.pixel_vectors = static_cast<int>(std::min<int64_t>(std::max(1, s.px_block), P / t.lanes));
    t.parallel = int64_t{t.pixel_vectors} * t.lanes < int64_t{std::max(1, s.px_block)} * s.vector_width ? 0 : static_cast<int>(s.parallel);
    // A stem's patches, not stored (pad_at_root off): computed per block of the fewest output rows
    // that hold a pixel tile (the sketch reads it only where the naive nests gather patches).
    if (!s.pad_at_root) {
      int64_t H = conv.type.shape[2], W = conv.type.shape[3], R = 1;
      while (R < H && (H % R || R * W < int64_t{t.pixel_vectors} * t.lanes)) ++R;
      t.patch_rows = R;
    }
  } else {
    t.flat_pixels = !rows_eligible(conv, s), t.row_tiles = !t.flat_pixels, t.lanes_outer = true;
    t.px_block = std::min<int64_t>(std::max(1, s.px_block), t.row_tiles ? conv.type.shape[3] : P);
    t.parallel = t.flat_pixels && s.px_block >= P ? 0 : static_cast<int>(s.parallel);  // one tile of every pixel: the channel tiles are the units
    t.pad = s.pad_at_root ? "root" : "inline", t.unroll_kx = s.unroll_kx, t.pixel_epilogue = s.pixel_epilogue;
    t.ic_block = s.ic_block, t.lanes = s.vector_width;
  }
  const ValueId &w = conv.inputs[1];
  return tile_sketch(naive, "p" + std::to_string(w.index), body.type_of(w).shape, t, made);
}

/**
 * steps_of_knobs for knobs validate_schedule accepted, on the group's naive nests `naive`
 * (lower_naive with s); a kernel it replayed to check its steps is kept in `replayed`.
 */
Expected<std::vector<Step>> knob_steps(const Graph &body, const KernelSchedule &s, const LoweredKernel &naive, Replayed *replayed) {
  const Node *anchor = nullptr;
  for (const Node &n : body.nodes)
    if (is_anchor_op(n.op)) anchor = &n;
  if (anchor && is_conv_op(anchor->op) && s.winograd) {
    AT_ASSIGN(conv, winograd_conv(body, s));
    return winograd_knob_steps(*conv, s, naive);
  }
  if (anchor && is_conv_op(anchor->op)) {
    if (direct_conv(*anchor, s)) return direct_steps(body, naive, *anchor, s, replayed);
    std::optional<LoweredKernel> made;  // the kernel, where the sketch replayed its steps anyway
    AT_ASSIGN(steps, blocked_steps(body, naive, *anchor, s, &made));
    if (!made) {
      AT_ASSIGN(k, replay(naive, steps));
      made = std::move(k);
    }
    replayed->keep(steps, std::move(*made));
    return steps;
  }
  int lanes = s.vector_width;
  if (!anchor) {
    // Every outer output loop fused into the parallel loop and the innermost a vector with its
    // remainder masked. In the model (Zen 5, 2 threads, `bench --json`, 8 rounds ABBA, these
    // groups' time over the other groups' in each run) against the template (rows in parallel,
    // each row's index unravelled): EfficientNet-B0's 17 squeeze-excitation multiplies and
    // reshapes 0.82 on AVX-512 and 0.66 on its AVX2 kernels; ResNet-50's and MobileNetV2's final
    // reshapes level. A layout conversion alone is the same loop sketch with image and channel
    // (block) parallel, where the layout change sketch below does not fit.
    bool conversion = body.nodes.size() == 1 && (body.nodes[0].op == "nn.to_nchwc" || body.nodes[0].op == "nn.from_nchwc");
    // So does an elementwise group in NCHW16c (EfficientNet-B0's squeeze-excitation multiply
    // with its scale's change): every outer loop fused, each parallel unit was one vector behind
    // its index's divisions (in the model, Zen 4, AVX-512, 2 threads, `bench --json`, 6 near rounds
    // of 10 ABBA: 480 x 14 x 14 0.059 -> 0.016 ms, 1152 x 7 x 7 0.048 -> 0.016; end to end 0.954).
    bool blocked = body.type_of(body.outputs[0]).rank() == 5;
    // A layout change (alone, or with elementwise ops around it) by tiles of a block of channels x
    // columns, copied in and read across: as the loop sketch, one of its two layouts is read or
    // written a lane per H x W floats, an access per lane. In the model (Zen 4, AVX-512, 2 threads,
    // both models timed alternately): ResNet-18's to NCHW16c (64 x 56 x 56, cores apart) 0.057 ->
    // 0.042 ms, MobileNetV2's (144 x 28 x 28) 0.026 -> 0.019, EfficientNet-B0's multiply by its
    // scale and change (240 x 14 x 14) 0.0095 -> 0.0058; alone
    // (`bench` of a one-block model), 16 x 112 x 112 to it 0.070 -> 0.011, 96 x 56 x 56 from it
    // 0.093 -> 0.015.
    if (auto change = layout_change(body)) {
      if (auto steps = layout_change_sketch(naive, "p" + std::to_string(change->input), change->block)) {
        if (auto k = replay(naive, *steps)) {
          replayed->keep(*steps, k.take());
          return steps;
        }
      }
    }
    // An output of 4096 floats or fewer (a squeeze-excitation scale's layout change: 32-1152
    // channels of one pixel) is less work than handing it to another thread: only the image loop
    // is parallel (one image: the calling thread alone). In one process (`bench --against`, Sapphire
    // Rapids, AVX-512, 2 threads, 8 rounds, a scratch switch) EfficientNet-B0's 13 such changes
    // took 0.43-0.72 of their time split (1.5 -> 0.9 us each; hand-off 0.5-0.8 us).
    bool tiny = body.type_of(body.outputs[0]).numel() <= 4096;
    auto steps = first_loop_sketch(naive, {{.lanes = lanes, .parallel_loops = tiny ? 1 : conversion || blocked ? 2 : -1}}, replayed);
    return steps ? steps : std::vector<Step>{};
  }
  const std::string &op = anchor->op;
  if (op == "nn.dense" && s.oc_block > 0 && anchor->inputs[1].kind == ValueId::Kind::kInput) {
    // The register tile: oc_block columns of px_block rows in registers (of one row for a batch-1
    // classifier: the template's shape; alone, ResNet-50's and MobileNetV2's dense layers to 1000
    // classes 1.00-1.01 of it), the weight packed by them, every column tile a parallel unit.
    TileSketch t;
    t.oc_block = s.oc_block;
    t.px_block = std::clamp<int64_t>(s.px_block, 1, anchor->type.numel() / anchor->type.shape.back());
    AT_ASSIGN(steps, tile_sketch(naive, "p" + std::to_string(anchor->inputs[1].index), body.type_of(anchor->inputs[1]).shape, t));
    AT_ASSIGN(k, replay(naive, steps));
    replayed->keep(steps, std::move(k));
    return steps;
  }
  if (op == "nn.max_pool2d" || op == "nn.avg_pool2d") return pool_steps(naive, *anchor, lanes, replayed);
  if (op == "nn.global_avg_pool2d" && lanes > 1) {
    // Each plane summed as vectors of partial sums (rfactor), wider for larger planes so that
    // several independent sums hide the adds' latency: half a vector below 64 pixels, one below
    // 1024, two from there, at least 8. In the model (Zen 5, 2 threads, `bench --json`, 8 rounds
    // ABBA, the pools' time over the other groups' in each run) against the template's plane sum:
    // EfficientNet-B0's 17 pools 0.78 on AVX-512, level on the AVX2 kernels (0.97); ResNet-50's
    // 0.005 -> 0.004 ms.
    const Shape &in = body.type_of(anchor->inputs[0]).shape;
    int64_t plane = in.size() == 4 ? in[2] * in[3] : 0;
    LoopSketch k;
    k.lanes = std::max(8, plane < 64 ? lanes / 2 : plane < 1024 ? lanes : 2 * lanes), k.rfactor = true;
    if (plane >= 2 * k.lanes)
      if (auto steps = first_loop_sketch(naive, {k}, replayed)) return steps;
  }
  if (((op == "nn.softmax" && *normalize_axis(anchor->attrs.i("axis"), anchor->type.rank()) == anchor->type.rank() - 1) || op == "nn.layer_norm") &&
      lanes > 1)
    if (auto steps = row_sketch(naive, lanes); steps && replay(naive, *steps)) return steps;
  bool reduce = op == "mean" || op == "sum" || op == "max" || op == "min";
  if (reduce && lanes > 1) {
    // A mean (sum, max, min) over the innermost axes (LayerNorm's statistics): the reduction as vectors of
    // partial sums (rfactor), as a global pool's plane, where it spans two vectors or more.
    const Shape &in = body.type_of(anchor->inputs[0]).shape;
    std::vector<int64_t> axes = anchor->attrs.ints("axis");
    std::sort(axes.begin(), axes.end());
    int64_t r = static_cast<int64_t>(in.size()), n = static_cast<int64_t>(axes.size()), ext = 1;
    bool trailing = n > 0;
    for (int64_t d = 0; d < n; ++d) trailing &= axes[d] == r - n + d, ext *= in[std::clamp<int64_t>(axes[d], 0, r - 1)];
    LoopSketch k;
    k.lanes = ext >= 1024 ? 2 * lanes : lanes, k.rfactor = true;
    if (trailing && ext >= 2 * lanes)
      if (auto steps = first_loop_sketch(naive, {k}, replayed)) return steps;
  }
  if (op == "nn.matmul") {
    // A batched matmul (attention's Q K^T and A V): the matmul tile, two vectors of columns (one
    // where the row is narrower) by as many rows as the registers hold beside them (14 on
    // AVX-512's 32 registers, 6 on AVX2's 16). Alone, AVX-512, 2 threads, ViT-B/16's
    // [12, 197, 64] x [12, 64, 197]: see docs/architecture.md.
    std::vector<std::pair<std::string, int64_t>> outs, reds;
    naive_loops(naive.stages.back().body, outs, reds);
    if (outs.size() >= 3 && lanes > 1) {
      int regs = lanes >= 16 ? 32 : 16;
      int64_t M = outs[outs.size() - 2].second, N = outs.back().second;
      int64_t vecs = N >= 2 * lanes ? 2 : 1, rows = std::min<int64_t>(M, (regs - 1 - vecs) / vecs);
      for (int64_t cols : {vecs * lanes, int64_t{lanes}})
        if (cols <= N)
          if (auto steps = matmul_tile_sketch(naive, rows, cols); steps && replay(naive, *steps)) return steps;
    }
  }
  // Means, matmuls, softmax, a dense layer whose weight is computed or not blocked: the innermost
  // output loop as the vector, the reduction inside it, the outer loops parallel. A nest the
  // sketch does not fit (a scalar output, no loops) runs as it is: the empty list. A mean (sum,
  // max, min) over axes before the vector's (a global pool in NCHW16c: the plane, each pixel a
  // vector of 16 channels) unrolls its short reduction loops (at most 16 iterations, 64 together),
  // as ResNet-18's and ResNet-50's 2000-trial searches chose (0.80-0.90 of the plain loop alone); in
  // one process (`bench --against`, Sapphire Rapids, AVX-512, 2 threads, 8 rounds, a scratch switch)
  // EfficientNet-B0's 14 squeeze-excitation means 0.955 (median), ResNet-50's and MobileNetV2's final
  // ones 0.895 and 0.888.
  auto steps = first_loop_sketch(naive, {{.lanes = lanes, .unroll_reduction = reduce}}, replayed);
  return steps ? steps : std::vector<Step>{};
}
}  // namespace

Expected<std::vector<Step>> steps_of_knobs(const Graph &body, const KernelSchedule &s) {
  AT_TRY(validate_schedule(body, s));  // before the naive nests: knobs they may not take (winograd on a strided conv)
  AT_ASSIGN(naive, lower_naive(body, "k", s));
  Replayed unused;
  return knob_steps(body, s, naive, &unused);
}

std::optional<LayoutChange> layout_change(const Graph &body) {
  bool changes = false;
  for (const Node &n : body.nodes) {
    if (is_anchor_op(n.op)) return std::nullopt;
    changes = changes || n.op == "nn.to_nchwc" || n.op == "nn.from_nchwc";
  }
  const Shape &out = body.type_of(body.outputs[0]).shape;
  if (!changes || (out.size() != 4 && out.size() != 5)) return std::nullopt;
  for (size_t i = 0; i < body.inputs.size(); ++i) {
    const Shape &in = body.type_of(ValueId::input(static_cast<int>(i))).shape;
    if (in.size() + out.size() != 9 || in[2] != out[2] || in[3] != out[3] || in[2] * in[3] == 1) continue;
    const Shape &blocked = out.size() == 5 ? out : in;
    return LayoutChange{static_cast<int>(i), blocked.back()};
  }
  return std::nullopt;
}

bool is_chain(const Graph &body) {
  return std::count_if(body.nodes.begin(), body.nodes.end(), [](const Node &n) { return is_anchor_op(n.op); }) > 1;
}

Expected<std::vector<Segment>> split_segments(const Graph &body) {
  std::vector<int> anchors;
  for (size_t i = 0; i < body.nodes.size(); ++i)
    if (is_anchor_op(body.nodes[i].op)) anchors.push_back(static_cast<int>(i));
  if (anchors.size() <= 1) {
    Segment one{body, {}};
    for (size_t i = 0; i < body.inputs.size(); ++i) one.args.push_back(static_cast<int>(i));
    return std::vector<Segment>{one};
  }
  // Segment j ends at its cut: the value the next anchor reads as its data input.
  std::vector<int> cut;
  for (size_t j = 1; j < anchors.size(); ++j) {
    ValueId v = body.nodes[anchors[j]].inputs[0];
    if (v.kind != ValueId::Kind::kNode || v.index < anchors[j - 1] || (j > 1 && v.index <= cut.back()))
      return make_error("anchor " + body.nodes[anchors[j]].op + " does not read the previous anchor's result as its data input");
    cut.push_back(v.index);
  }
  cut.push_back(static_cast<int>(body.nodes.size()) - 1);
  if (body.outputs[0] != ValueId::node(cut.back())) return make_error("the group's output is not its last node");
  std::vector<int> seg_of(body.nodes.size());
  for (size_t i = 0, j = 0; i < body.nodes.size(); ++i) {
    seg_of[i] = static_cast<int>(j);
    if (static_cast<int>(i) == cut[j]) ++j;
  }
  std::vector<Segment> out;
  for (size_t j = 0; j < cut.size(); ++j) {
    GraphBuilder b;
    Segment sg;
    std::map<int, ValueId> outer, local;  // group argument -> input; node -> value
    ValueId prev;
    for (size_t i = 0; i < body.nodes.size(); ++i) {
      if (seg_of[i] != static_cast<int>(j)) continue;
      const Node &n = body.nodes[i];
      std::vector<ValueId> in;
      for (ValueId v : n.inputs) {
        if (v.kind == ValueId::Kind::kInput) {
          auto it = outer.find(v.index);
          if (it == outer.end()) {
            it = outer.emplace(v.index, b.add_input("p" + std::to_string(sg.args.size()), body.inputs[v.index].type)).first;
            sg.args.push_back(v.index);
          }
          in.push_back(it->second);
        } else if (seg_of[v.index] == static_cast<int>(j)) {
          in.push_back(local.at(v.index));
        } else if (j > 0 && v.index == cut[j - 1]) {
          if (prev.index < 0) {
            prev = b.add_input("p" + std::to_string(sg.args.size()), body.type_of(v));
            sg.args.push_back(-1);
          }
          in.push_back(prev);
        } else {
          return make_error(n.op + " reads a value of an earlier segment that is not its result");
        }
      }
      AT_ASSIGN(nv, b.add_node(n.op, std::move(in), n.attrs, n.origin));
      local[static_cast<int>(i)] = nv;
    }
    b.add_output(local.at(cut[j]));
    sg.body = b.finish();
    int anchors_in = 0;
    for (const Node &n : sg.body.nodes) anchors_in += is_anchor_op(n.op);
    if (anchors_in != 1) return make_error("a segment of the group holds " + std::to_string(anchors_in) + " anchors");
    out.push_back(std::move(sg));
  }
  return out;
}

namespace {
/**
 * A chain's kernel from each segment's: one after another, the result of each a temporary the
 * next reads (stored at root, where steps on the joined nests can move it). Stages and
 * temporaries take the segment's prefix (s0_, s1_, ...). `lower(j, prefixed name)` gives segment j's kernel.
 */
Expected<LoweredKernel> join_segments(const Graph &body, const std::vector<Segment> &segs, const std::string &name,
                                      const std::function<Expected<LoweredKernel>(size_t, const std::string &)> &lower) {
  LoweredKernel k;
  k.name = name;
  for (size_t i = 0; i < body.inputs.size(); ++i) k.buffers.push_back(lowering::param_buffer("p" + std::to_string(i), body.inputs[i].type));
  k.num_params = static_cast<int>(body.inputs.size());
  loop::Buffer out = lowering::param_buffer("out", body.type_of(body.outputs[0]));
  k.buffers.push_back(out);
  std::vector<loop::Buffer> temps;
  loop::Buffer prev;
  std::string described;
  for (size_t j = 0; j < segs.size(); ++j) {
    std::string pre = "s" + std::to_string(j) + "_";
    AT_ASSIGN(sk, lower(j, name + "_" + pre));
    std::map<const loop::BufferNode *, loop::Buffer> to;
    for (int i = 0; i < sk.num_params; ++i)
      to[sk.buffers[i].get()] = segs[j].args[i] >= 0 ? k.buffers[segs[j].args[i]] : prev;
    loop::Buffer result = sk.buffers[sk.num_params];
    loop::Buffer mine = j + 1 == segs.size() ? out : loop::make_buffer(pre + "result", loop::Type::kF32, result->size, loop::BufferScope::kTemp);
    to[result.get()] = mine;
    for (size_t b = sk.num_params + 1; b < sk.buffers.size(); ++b) {
      const loop::BufferNode &t = *sk.buffers[b];
      loop::Buffer renamed = loop::make_buffer(pre + t.name, t.type, t.size, t.scope);
      to[sk.buffers[b].get()] = renamed;
      temps.push_back(renamed);
    }
    if (mine != out) temps.push_back(mine);
    for (KernelStage st : sk.stages) {
      st.name = pre + st.name;
      st.body = loop::replace_buffers(st.body, to);
      k.stages.push_back(std::move(st));
    }
    auto outer_param = [&](int p) -> Expected<int> {
      if (segs[j].args[p] < 0) return make_error("segment " + std::to_string(j) + " packs or checks the previous segment's result");
      return segs[j].args[p];
    };
    for (WeightPacking pk : sk.packings) {
      AT_ASSIGN(p, outer_param(pk.param));
      pk.param = p;
      k.packings.push_back(pk);
    }
    for (IndexCheck c : sk.index_checks) {
      AT_ASSIGN(p, outer_param(c.param));
      c.param = p;
      k.index_checks.push_back(c);
    }
    prev = mine;
    described += (j ? " | " : "") + sk.schedule;
  }
  for (const loop::Buffer &t : temps) k.buffers.push_back(t);
  k.schedule = "chain of " + std::to_string(segs.size()) + ": " + described;
  return k;
}

/** A chain's kernel: each segment lowered with its own schedule (KernelSchedule::segments). */
Expected<LoweredKernel> lower_chain(const Graph &body, const std::vector<Segment> &segs, const std::string &name, const KernelSchedule &s) {
  if (s.segments.size() != segs.size())
    return make_error("a group of " + std::to_string(segs.size()) + " segments needs a schedule per segment, got " + std::to_string(s.segments.size()));
  return join_segments(body, segs, name, [&](size_t j, const std::string &n) { return lower_group(segs[j].body, n, s.segments[j]); });
}
}  // namespace

Expected<LoweredKernel> lower_group(const Graph &body, const std::string &name, const KernelSchedule &s, ReplayCache *cache) {
  // A chain's schedule is a schedule per segment, or steps on the joined naive nests (lower_naive),
  // where they can place one segment's stages in another's loops.
  if (is_chain(body) && s.steps.empty()) {
    AT_ASSIGN(segs, split_segments(body));
    return lower_chain(body, segs, name, s);
  }
  KernelSchedule plan = s;
  if (s.steps.empty()) AT_TRY(validate_schedule(body, s));  // knobs the naive nests may not take (winograd on a strided conv)
  // The search's points of a task share their naive nests: made once, 17% of a point's lowering.
  auto make_naive = [&] { return lower_naive(body, name, plan); };
  AT_ASSIGN(naive, cache ? cache->made(print_text(body) + '\x1f' + name + '\x1f' + naive_knobs(plan).to_string(), make_naive) : make_naive());
  Replayed replayed;
  if (s.steps.empty()) {
    // Knobs without steps name a point of the anchor's sketch (an empty list: the naive nest as
    // it is), on the same naive nests; where the sketch replayed its steps to check them, that
    // kernel is the result.
    AT_ASSIGN(steps, knob_steps(body, s, naive, &replayed));
    plan.steps = steps;
  }
  LoweredKernel k;
  if (replayed.kernel && replayed.steps == plan.steps) {
    k = std::move(*replayed.kernel);
  } else {
    AT_ASSIGN(r, cache ? cache->replay(naive, plan.steps) : replay(naive, plan.steps));
    k = std::move(r);
  }
  k.schedule = plan.to_string();  // the steps, also where the knobs stand for them
  return k;
}

Shape WeightPacking::packed_shape(const Shape &w) const {
  if (kind == kWinograd) return {(tile + 2) * (tile + 2), w[0] * w[1]};
  return w;
}

Tensor pack_weight(const Tensor &w, const WeightPacking &p) {
  Tensor out(TensorType{DType::kFloat32, p.packed_shape(w.shape())});
  const float *src = w.f32();
  float *dst = out.f32();
  const Shape &s = w.shape();
  int64_t B = p.block;
  // Every loop nest below walks the packed tensor in its own order, writing whole runs of B
  // floats, and reads the weight at a stride: the packings run in the measurer before every
  // candidate (and its baseline), and written in the weight's order (a store every B floats, and
  // for Winograd a std::vector per 3x3 kernel) a 512x512 3x3 weight took 50 ms for F(4x4) and
  // 7.7 ms for the direct layout.
  if (p.kind == WeightPacking::kOIHWToOIHWo || p.kind == WeightPacking::kNKToNKn) {
    // w[O][CG][KH][KW] -> wp[O/B][CG][KH][KW][B]; w[N][K] -> wp[N/B][K][B]: the same reshuffle.
    int64_t O = s[0], inner = w.numel() / O;
    for (int64_t ob = 0; ob < O / B; ++ob)
      for (int64_t i = 0; i < inner; ++i, dst += B)
        for (int64_t b = 0; b < B; ++b) dst[b] = src[(ob * B + b) * inner + i];
  } else if (p.kind == WeightPacking::kWinograd) {
    // U = G g G^T for each 3x3 g = w[o][c], laid out U[xi][o/B][c][o%B]; computed in double.
    const WinogradMatrices &wm = winograd_matrices(p.tile);
    int64_t O = s[0], C = s[1];
    const int a = wm.a;
    const int64_t plane = O * C;  // floats between consecutive xi
    // One (o block, c) at a time, the B output channels as the innermost loop (vectorized): the
    // 9 taps of each, then G g, then (G g) G^T, each written as a run of B floats per xi.
    std::vector<double> g(9 * B), t(static_cast<size_t>(a) * 3 * B);
    for (int64_t ob = 0; ob < O / B; ++ob)
      for (int64_t c = 0; c < C; ++c) {
        for (int k = 0; k < 9; ++k)
          for (int64_t b = 0; b < B; ++b) g[k * B + b] = src[((ob * B + b) * C + c) * 9 + k];
        for (int i = 0; i < a; ++i)
          for (int j = 0; j < 3; ++j) {
            double g0 = wm.g[i][0], g1 = wm.g[i][1], g2 = wm.g[i][2];
            double *tt = &t[(i * 3 + j) * B];
            const double *r0 = &g[j * B], *r1 = &g[(3 + j) * B], *r2 = &g[(6 + j) * B];
            for (int64_t b = 0; b < B; ++b) tt[b] = g0 * r0[b] + g1 * r1[b] + g2 * r2[b];
          }
        float *d = dst + (ob * C + c) * B;
        for (int i = 0; i < a; ++i)
          for (int j = 0; j < a; ++j) {
            double h0 = wm.g[j][0], h1 = wm.g[j][1], h2 = wm.g[j][2];
            const double *t0 = &t[(i * 3) * B], *t1 = &t[(i * 3 + 1) * B], *t2 = &t[(i * 3 + 2) * B];
            float *u = d + (i * a + j) * plane;
            for (int64_t b = 0; b < B; ++b) u[b] = static_cast<float>(t0[b] * h0 + t1[b] * h1 + t2[b] * h2);
          }
      }
  }
  return out;
}

}  // namespace autotune
