#include "ir/Ops.h"

#include <algorithm>
#include <limits>
#include <numeric>

namespace autotune {

const char *pattern_name(OpPattern p) {
  switch (p) {
    case OpPattern::kElemWise: return "ElemWise";
    case OpPattern::kBroadcast: return "Broadcast";
    case OpPattern::kInjective: return "Injective";
    case OpPattern::kCommReduce: return "CommReduce";
    case OpPattern::kOutEWiseFusable: return "OutEWiseFusable";
    case OpPattern::kOpaque: return "Opaque";
  }
  return "?";
}

Expected<Shape> broadcast_shapes(const Shape &a, const Shape &b) {
  size_t r = std::max(a.size(), b.size());
  Shape out(r);
  for (size_t i = 0; i < r; ++i) {
    int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (da != db && da != 1 && db != 1)
      return make_error("shapes " + shape_str(a) + " and " + shape_str(b) + " do not broadcast");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

int64_t window_out_extent(int64_t in, int64_t pad_begin, int64_t pad_end, int64_t kernel, int64_t stride,
                          int64_t dilation, bool ceil_mode) {
  int64_t span = in + pad_begin + pad_end - ((kernel - 1) * dilation + 1);
  if (span < 0) return 0;
  int64_t steps = ceil_mode ? (span + stride - 1) / stride : span / stride;
  return steps + 1;
}

Expected<int> normalize_axis(int64_t axis, int rank) {
  if (axis < -rank || axis >= rank)  // a scalar has no axis at all
    return make_error("axis " + std::to_string(axis) + " out of range for rank " + std::to_string(rank));
  return static_cast<int>(axis < 0 ? axis + rank : axis);
}

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
using Ints = std::vector<int64_t>;

Status need_f32(const OpCall &c, size_t i) {
  if (c.inputs[i].dtype != DType::kFloat32)
    return make_error("input " + std::to_string(i) + " must be float32, got " + dtype_name(c.inputs[i].dtype));
  return Status::ok();
}

Status need_rank(const OpCall &c, size_t i, int rank) {
  if (c.inputs[i].rank() != rank)
    return make_error("input " + std::to_string(i) + " must have rank " + std::to_string(rank) + ", got " +
                      type_str(c.inputs[i]));
  return Status::ok();
}

Status need_len(const OpCall &c, const std::string &attr, size_t n) {
  if (c.attrs.ints(attr).size() != n)
    return make_error("attribute '" + attr + "' must have " + std::to_string(n) + " values");
  return Status::ok();
}

Status need_positive(const OpCall &c, const std::string &attr) {
  for (int64_t v : c.attrs.ints(attr))
    if (v < 1 || v > (int64_t{1} << 20)) return make_error("attribute '" + attr + "' values must be in [1, 2^20]");
  return Status::ok();
}

Status need_pads(const OpCall &c, const std::string &attr, size_t n) {
  AT_TRY(need_len(c, attr, n));
  for (int64_t v : c.attrs.ints(attr))
    if (v < 0 || v > (int64_t{1} << 20)) return make_error("attribute '" + attr + "' values must be in [0, 2^20]");
  return Status::ok();
}

Expected<TensorType> unary_f32(const OpCall &c) {
  AT_TRY(need_f32(c, 0));
  return c.inputs[0];
}

Expected<TensorType> same_as_input(const OpCall &c) { return c.inputs[0]; }

Expected<TensorType> binary(const OpCall &c) {
  if (c.inputs[0].dtype != c.inputs[1].dtype)
    return make_error(std::string("input dtypes differ: ") + dtype_name(c.inputs[0].dtype) + " and " +
                      dtype_name(c.inputs[1].dtype));
  AT_ASSIGN(shape, broadcast_shapes(c.inputs[0].shape, c.inputs[1].shape));
  return make_type(c.inputs[0].dtype, shape);
}

/** Shared by conv2d and the pools: the 2-D sliding window's output extents. */
Expected<std::pair<int64_t, int64_t>> window_2d(const OpCall &c, int64_t kh, int64_t kw, bool ceil_mode) {
  AT_TRY(need_len(c, "strides", 2));
  AT_TRY(need_positive(c, "strides"));
  AT_TRY(need_len(c, "dilation", 2));
  AT_TRY(need_positive(c, "dilation"));
  AT_TRY(need_pads(c, "padding", 4));
  const Ints &s = c.attrs.ints("strides"), &d = c.attrs.ints("dilation"), &p = c.attrs.ints("padding");
  const Shape &x = c.inputs[0].shape;
  int64_t oh = window_out_extent(x[2], p[0], p[2], kh, s[0], d[0], ceil_mode);
  int64_t ow = window_out_extent(x[3], p[1], p[3], kw, s[1], d[1], ceil_mode);
  if (oh < 1 || ow < 1)
    return make_error("window " + std::to_string(kh) + "x" + std::to_string(kw) + " does not fit input " +
                      shape_str(x) + " with this padding");
  return std::make_pair(oh, ow);
}

/** What conv2d and conv2d_nchwc share: a kernel, a bias of one value per output channel, and the output's height and width. */
Expected<std::pair<int64_t, int64_t>> conv_window(const OpCall &c, const Shape &w) {
  if (w[2] < 1 || w[3] < 1) return make_error("empty kernel " + shape_str(w));
  if (c.inputs.size() == 3) {
    AT_TRY(need_f32(c, 2));
    if (c.inputs[2].shape != Shape{w[0]})
      return make_error("bias must have shape (" + std::to_string(w[0]) + "), got " + shape_str(c.inputs[2].shape));
  }
  return window_2d(c, w[2], w[3], false);
}

Expected<TensorType> infer_conv2d(const OpCall &c) {
  AT_TRY(need_f32(c, 0));
  AT_TRY(need_f32(c, 1));
  AT_TRY(need_rank(c, 0, 4));
  AT_TRY(need_rank(c, 1, 4));
  const Shape &x = c.inputs[0].shape, &w = c.inputs[1].shape;
  int64_t groups = c.attrs.i("groups");
  if (groups < 1 || x[1] % groups != 0 || w[0] % groups != 0)
    return make_error("groups=" + std::to_string(groups) + " must divide input channels " + std::to_string(x[1]) +
                      " and output channels " + std::to_string(w[0]));
  if (w[1] * groups != x[1])
    return make_error("weight " + shape_str(w) + " expects " + std::to_string(w[1] * groups) +
                      " input channels, data has " + std::to_string(x[1]));
  AT_ASSIGN(hw, conv_window(c, w));
  return make_type(DType::kFloat32, {x[0], w[0], hw.first, hw.second});
}

/**
 * nn.conv2d_nchwc: conv2d on activations in NCHW[b]c, x[N][C/b][H][W][b] -> y[N][O/b][OH][OW][b]
 * (b = the input's last dim), weight [O][C][KH][KW] and bias as for conv2d, one group; or depthwise
 * (groups = channels, weight [C][1][KH][KW]: each channel its own window).
 */
Expected<TensorType> infer_conv2d_nchwc(const OpCall &c) {
  AT_TRY(need_f32(c, 0));
  AT_TRY(need_f32(c, 1));
  AT_TRY(need_rank(c, 0, 5));
  AT_TRY(need_rank(c, 1, 4));
  const Shape &x = c.inputs[0].shape, &w = c.inputs[1].shape;
  int64_t b = x[4];
  if (b < 1) return make_error("the channel block (the input's last dim) must be positive");
  int64_t groups = c.attrs.i("groups");
  if (groups != 1 && (groups != x[1] * b || w[0] != groups || w[1] != 1))
    return make_error("conv2d_nchwc takes one group or is depthwise (one group per channel, one output channel each), not " +
                      std::to_string(groups) + " groups of weight " + shape_str(w));
  if (groups == 1 && w[1] != x[1] * b)
    return make_error("weight " + shape_str(w) + " expects " + std::to_string(w[1]) + " input channels, data has " +
                      std::to_string(x[1] * b));
  if (w[0] % b != 0) return make_error("the channel block " + std::to_string(b) + " must divide " + std::to_string(w[0]) + " output channels");
  AT_ASSIGN(hw, conv_window(c, w));
  return make_type(DType::kFloat32, {x[0], w[0] / b, hw.first, hw.second, b});
}

/** nn.to_nchwc: x[N][C][H][W] -> [N][C/b][H][W][b], channel c in block c / b at lane c % b. */
Expected<TensorType> infer_to_nchwc(const OpCall &c) {
  AT_TRY(need_f32(c, 0));
  AT_TRY(need_rank(c, 0, 4));
  const Shape &x = c.inputs[0].shape;
  int64_t b = c.attrs.i("block");
  if (b < 1 || x[1] % b != 0)
    return make_error("the channel block " + std::to_string(b) + " must be positive and divide " + std::to_string(x[1]) + " channels");
  return make_type(DType::kFloat32, {x[0], x[1] / b, x[2], x[3], b});
}

/** nn.from_nchwc: x[N][C/b][H][W][b] -> [N][C][H][W] (b = the input's last dim). */
Expected<TensorType> infer_from_nchwc(const OpCall &c) {
  AT_TRY(need_f32(c, 0));
  AT_TRY(need_rank(c, 0, 5));
  const Shape &x = c.inputs[0].shape;
  return make_type(DType::kFloat32, {x[0], x[1] * x[4], x[2], x[3]});
}

Expected<TensorType> infer_pool2d(const OpCall &c) {
  AT_TRY(need_f32(c, 0));
  AT_TRY(need_rank(c, 0, 4));
  AT_TRY(need_len(c, "pool_size", 2));
  AT_TRY(need_positive(c, "pool_size"));
  const Ints &k = c.attrs.ints("pool_size");
  const Ints &p = c.attrs.ints("padding");
  if (p.size() == 4 && (p[0] >= k[0] || p[2] >= k[0] || p[1] >= k[1] || p[3] >= k[1]))
    return make_error("padding must be smaller than the pool size");
  AT_ASSIGN(hw, window_2d(c, k[0], k[1], c.attrs.i("ceil_mode") != 0));
  const Shape &x = c.inputs[0].shape;
  return make_type(DType::kFloat32, {x[0], x[1], hw.first, hw.second});
}

Expected<TensorType> infer_global_pool(const OpCall &c) {
  AT_TRY(need_f32(c, 0));
  if (c.inputs[0].rank() < 3) return make_error("input must have rank >= 3, got " + type_str(c.inputs[0]));
  Shape s = c.inputs[0].shape;
  for (size_t i = 2; i < s.size(); ++i) s[i] = 1;
  return make_type(DType::kFloat32, s);
}

Expected<TensorType> infer_batch_norm(const OpCall &c) {
  for (size_t i = 0; i < 5; ++i) AT_TRY(need_f32(c, i));
  if (c.inputs[0].rank() < 2) return make_error("input must have rank >= 2");
  int64_t ch = c.inputs[0].shape[1];
  for (size_t i = 1; i < 5; ++i)
    if (c.inputs[i].shape != Shape{ch})
      return make_error("parameter " + std::to_string(i) + " must have shape (" + std::to_string(ch) + ")");
  return c.inputs[0];
}

Expected<TensorType> infer_reshape(const OpCall &c) {
  const Ints &ns = c.attrs.ints("newshape");
  AT_ASSIGN(t, make_type(c.inputs[0].dtype, ns));
  if (t.numel() != c.inputs[0].numel())
    return make_error("cannot reshape " + shape_str(c.inputs[0].shape) + " to " + shape_str(ns));
  return t;
}

/** A comparison: inputs of one dtype, an int64 0/1 result of their broadcast shape (booleans are int64). */
Expected<TensorType> infer_compare(const OpCall &c) {
  AT_ASSIGN(t, binary(c));
  return make_type(DType::kInt64, t.shape);
}

Status need_i64(const OpCall &c, size_t i) {
  if (c.inputs[i].dtype != DType::kInt64) return make_error("input " + std::to_string(i) + " must be a boolean (int64 0/1), got " + dtype_name(c.inputs[i].dtype));
  return Status::ok();
}

Expected<TensorType> infer_logical(const OpCall &c) {
  for (size_t i = 0; i < c.inputs.size(); ++i) AT_TRY(need_i64(c, i));
  if (c.inputs.size() == 1) return c.inputs[0];
  return infer_compare(c);
}

/** where(cond, x, y): an int64 condition, x and y of one dtype, the three shapes broadcast. */
Expected<TensorType> infer_where(const OpCall &c) {
  AT_TRY(need_i64(c, 0));
  if (c.inputs[1].dtype != c.inputs[2].dtype)
    return make_error(std::string("x and y dtypes differ: ") + dtype_name(c.inputs[1].dtype) + " and " + dtype_name(c.inputs[2].dtype));
  AT_ASSIGN(s, broadcast_shapes(c.inputs[0].shape, c.inputs[1].shape));
  AT_ASSIGN(shape, broadcast_shapes(s, c.inputs[2].shape));
  return make_type(c.inputs[1].dtype, shape);
}

/** cast to dtype "float32", "int64" or "bool" (int64 0/1: nonzero is 1). */
Expected<TensorType> infer_cast(const OpCall &c) {
  const std::string &to = c.attrs.s("dtype");
  if (to != "float32" && to != "int64" && to != "bool") return make_error("cast to '" + to + "' (float32, int64 and bool are supported)");
  return make_type(to == "float32" ? DType::kFloat32 : DType::kInt64, c.inputs[0].shape);
}

Expected<TensorType> binary_f32(const OpCall &c) {
  AT_TRY(need_f32(c, 0));
  AT_TRY(need_f32(c, 1));
  return binary(c);
}

/**
 * strided_slice: per dimension, out[i] reads in[begin + i * stride]; begin, end and strides are
 * given for every dimension, already clamped by the importer (ONNX's rules), so end may be -1 for
 * a negative stride that runs down to index 0. The extent is ceil((end - begin) / stride), at least 0.
 */
Expected<TensorType> infer_strided_slice(const OpCall &c) {
  const Shape &in = c.inputs[0].shape;
  const Ints &b = c.attrs.ints("begin"), &e = c.attrs.ints("end"), &st = c.attrs.ints("strides");
  size_t r = in.size();
  if (b.size() != r || e.size() != r || st.size() != r)
    return make_error("begin, end and strides need " + std::to_string(r) + " values each (the input's rank)");
  Shape s(r);
  for (size_t d = 0; d < r; ++d) {
    if (st[d] == 0) return make_error("stride 0 in dimension " + std::to_string(d));
    if (b[d] < 0 || b[d] >= std::max<int64_t>(in[d], 1) || e[d] < -1 || e[d] > in[d])
      return make_error("begin " + std::to_string(b[d]) + " or end " + std::to_string(e[d]) + " outside dimension " + std::to_string(d) +
                        " of extent " + std::to_string(in[d]));
    int64_t span = st[d] > 0 ? e[d] - b[d] : b[d] - e[d], step = std::abs(st[d]);
    s[d] = in[d] == 0 ? 0 : std::max<int64_t>(0, (span + step - 1) / step);
  }
  return make_type(c.inputs[0].dtype, s);
}

/** tile: the input repeated reps[d] times along each dimension d. */
Expected<TensorType> infer_tile(const OpCall &c) {
  const Ints &reps = c.attrs.ints("reps");
  Shape s = c.inputs[0].shape;
  if (reps.size() != s.size()) return make_error("reps needs " + std::to_string(s.size()) + " values (the input's rank)");
  for (size_t d = 0; d < s.size(); ++d) {
    if (reps[d] < 0 || reps[d] > (int64_t{1} << 30)) return make_error("reps " + std::to_string(reps[d]) + " out of range");
    s[d] *= reps[d];
  }
  return make_type(c.inputs[0].dtype, s);
}

/** broadcast_to: the input broadcast (numpy rules) to `shape`, which it must broadcast to exactly. */
Expected<TensorType> infer_broadcast_to(const OpCall &c) {
  const Ints &want = c.attrs.ints("shape");
  AT_ASSIGN(s, broadcast_shapes(c.inputs[0].shape, want));
  return make_type(c.inputs[0].dtype, s);
}

Expected<TensorType> infer_transpose(const OpCall &c) {
  const Ints &axes = c.attrs.ints("axes");
  int r = c.inputs[0].rank();
  if (static_cast<int>(axes.size()) != r) return make_error("axes must have " + std::to_string(r) + " values");
  std::vector<bool> seen(r, false);
  Shape s(r);
  for (int i = 0; i < r; ++i) {
    if (axes[i] < 0 || axes[i] >= r || seen[axes[i]]) return make_error("axes is not a permutation");
    seen[axes[i]] = true;
    s[i] = c.inputs[0].shape[axes[i]];
  }
  return make_type(c.inputs[0].dtype, s);
}

Expected<TensorType> infer_dense(const OpCall &c) {
  AT_TRY(need_f32(c, 0));
  AT_TRY(need_f32(c, 1));
  // Data [..., K] (the leading dims rows of one matrix: a transformer's [batch, tokens, K]), weight [N, K].
  if (c.inputs[0].rank() < 2) return make_error("input 0 must have rank 2 or more, got " + std::to_string(c.inputs[0].rank()));
  AT_TRY(need_rank(c, 1, 2));
  const Shape &a = c.inputs[0].shape, &w = c.inputs[1].shape;
  if (a.back() != w[1]) return make_error("data " + shape_str(a) + " and weight " + shape_str(w) + " disagree on K");
  Shape out = a;
  out.back() = w[0];
  return make_type(DType::kFloat32, out);
}

Expected<TensorType> infer_matmul(const OpCall &c) {
  AT_TRY(need_f32(c, 0));
  AT_TRY(need_f32(c, 1));
  Shape a = c.inputs[0].shape, b = c.inputs[1].shape;
  if (a.empty() || b.empty()) return make_error("matmul of a scalar");
  bool a1 = a.size() == 1, b1 = b.size() == 1;
  if (a1) a.insert(a.begin(), 1);
  if (b1) b.push_back(1);
  int64_t m = a[a.size() - 2], k = a.back(), k2 = b[b.size() - 2], n = b.back();
  if (k != k2) return make_error("shapes " + shape_str(c.inputs[0].shape) + " and " + shape_str(c.inputs[1].shape) + " disagree on K");
  AT_ASSIGN(batch, broadcast_shapes(Shape(a.begin(), a.end() - 2), Shape(b.begin(), b.end() - 2)));
  Shape out = batch;
  if (!a1) out.push_back(m);
  if (!b1) out.push_back(n);
  return make_type(DType::kFloat32, out);
}

Expected<TensorType> infer_concat(const OpCall &c) {
  const TensorType &t0 = c.inputs[0];
  AT_ASSIGN(axis, normalize_axis(c.attrs.i("axis"), t0.rank()));
  if (t0.rank() == 0) return make_error("cannot concatenate scalars");
  Shape s = t0.shape;
  for (size_t i = 1; i < c.inputs.size(); ++i) {
    const TensorType &t = c.inputs[i];
    if (t.dtype != t0.dtype || t.rank() != t0.rank()) return make_error("inputs differ in dtype or rank");
    for (int d = 0; d < t.rank(); ++d)
      if (d != axis && t.shape[d] != t0.shape[d])
        return make_error("input shapes " + shape_str(t0.shape) + " and " + shape_str(t.shape) + " differ off the axis");
    s[axis] += t.shape[axis];
  }
  return make_type(t0.dtype, s);
}

Expected<TensorType> infer_pad(const OpCall &c) {
  const Ints &p = c.attrs.ints("pad_width");
  int r = c.inputs[0].rank();
  if (static_cast<int>(p.size()) != 2 * r) return make_error("pad_width must have " + std::to_string(2 * r) + " values");
  Shape s = c.inputs[0].shape;
  for (int i = 0; i < r; ++i) {
    if (std::abs(p[i]) > (int64_t{1} << 30) || std::abs(p[i + r]) > (int64_t{1} << 30)) return make_error("pad_width too large");
    s[i] += p[i] + p[i + r];
    if (s[i] < 0) return make_error("pad_width crops dimension " + std::to_string(i) + " below zero");
  }
  return make_type(c.inputs[0].dtype, s);
}

Expected<TensorType> infer_softmax(const OpCall &c) {
  AT_TRY(need_f32(c, 0));
  AT_TRY(normalize_axis(c.attrs.i("axis"), c.inputs[0].rank()));
  return c.inputs[0];
}

Expected<TensorType> infer_layer_norm(const OpCall &c) {
  for (size_t i = 0; i < 3; ++i) AT_TRY(need_f32(c, i));
  int r = c.inputs[0].rank();
  AT_ASSIGN(axis, normalize_axis(c.attrs.i("axis"), r));
  const Shape &x = c.inputs[0].shape;
  // The scale and bias broadcast over the normalized axes alone: a value per normalized element, or one.
  for (size_t i = 1; i < 3; ++i) {
    const Shape &p = c.inputs[i].shape;
    if (static_cast<int>(p.size()) > r - axis) return make_error("the layer norm's " + std::string(i == 1 ? "scale" : "bias") + " has more dimensions than the normalized axes");
    for (size_t d = 0; d < p.size(); ++d)
      if (p[d] != 1 && p[d] != x[r - p.size() + d])
        return make_error("the layer norm's " + std::string(i == 1 ? "scale" : "bias") + " does not broadcast to the normalized axes");
  }
  if (c.attrs.f("epsilon") < 0) return make_error("epsilon is negative");
  return c.inputs[0];
}

Expected<TensorType> infer_mean(const OpCall &c) {
  AT_TRY(need_f32(c, 0));
  int r = c.inputs[0].rank();
  std::vector<bool> reduce(r, c.attrs.ints("axis").empty());
  for (int64_t a : c.attrs.ints("axis")) {
    AT_ASSIGN(ax, normalize_axis(a, r));
    reduce[ax] = true;
  }
  Shape s;
  for (int i = 0; i < r; ++i) {
    if (!reduce[i]) s.push_back(c.inputs[0].shape[i]);
    else if (c.attrs.i("keepdims")) s.push_back(1);
  }
  return make_type(DType::kFloat32, s);
}

Expected<TensorType> infer_shape_of(const OpCall &c) {
  return make_type(DType::kInt64, {c.inputs[0].rank()});
}

Expected<TensorType> infer_take(const OpCall &c) {
  if (c.inputs[1].dtype != DType::kInt64) return make_error("indices must be int64");
  const TensorType &d = c.inputs[0];
  if (d.rank() == 0) return make_error("cannot index a scalar");
  AT_ASSIGN(axis, normalize_axis(c.attrs.i("axis"), d.rank()));
  if (const Tensor *idx = c.constants[1]) {
    for (int64_t i = 0; i < idx->numel(); ++i) {
      int64_t v = idx->i64()[i];
      if (v < -d.shape[axis] || v >= d.shape[axis]) return make_error("index " + std::to_string(v) + " out of range");
    }
  }
  Shape s(d.shape.begin(), d.shape.begin() + axis);
  s.insert(s.end(), c.inputs[1].shape.begin(), c.inputs[1].shape.end());
  s.insert(s.end(), d.shape.begin() + axis + 1, d.shape.end());
  return make_type(d.dtype, s);
}

Expected<TensorType> infer_clip(const OpCall &c) {
  AT_TRY(need_f32(c, 0));
  if (c.attrs.f("a_min") > c.attrs.f("a_max")) return make_error("a_min > a_max");
  return c.inputs[0];
}

std::vector<AttrSpec> window_attrs(bool pool) {
  std::vector<AttrSpec> a;
  if (pool) a.push_back({"pool_size", AttrKind::kInts, std::nullopt});
  a.push_back({"strides", AttrKind::kInts, Ints{1, 1}});
  a.push_back({"padding", AttrKind::kInts, Ints{0, 0, 0, 0}});
  a.push_back({"dilation", AttrKind::kInts, Ints{1, 1}});
  return a;
}

std::vector<OpDef> make_ops() {
  using P = OpPattern;
  std::vector<OpDef> ops;
  auto conv_attrs = window_attrs(false);
  conv_attrs.push_back({"groups", AttrKind::kInt, int64_t{1}});
  ops.push_back({"nn.conv2d", P::kOutEWiseFusable, 2, 3, conv_attrs, infer_conv2d});
  ops.push_back({"nn.conv2d_nchwc", P::kOutEWiseFusable, 2, 3, conv_attrs, infer_conv2d_nchwc});
  ops.push_back({"nn.dense", P::kOutEWiseFusable, 2, 2, {}, infer_dense});
  ops.push_back({"nn.matmul", P::kOutEWiseFusable, 2, 2, {}, infer_matmul});
  ops.push_back({"nn.batch_norm", P::kBroadcast, 5, 5, {{"epsilon", AttrKind::kFloat, 1e-5}}, infer_batch_norm});

  ops.push_back({"nn.relu", P::kElemWise, 1, 1, {}, unary_f32});
  ops.push_back({"sigmoid", P::kElemWise, 1, 1, {}, unary_f32});
  ops.push_back({"nn.hard_swish", P::kElemWise, 1, 1, {}, unary_f32});
  ops.push_back({"nn.leaky_relu", P::kElemWise, 1, 1, {{"alpha", AttrKind::kFloat, 0.01}}, unary_f32});
  ops.push_back({"nn.hard_sigmoid", P::kElemWise, 1, 1,
                 {{"alpha", AttrKind::kFloat, 0.2}, {"beta", AttrKind::kFloat, 0.5}}, unary_f32});
  ops.push_back({"clip", P::kElemWise, 1, 1,
                 {{"a_min", AttrKind::kFloat, -kInf}, {"a_max", AttrKind::kFloat, kInf}}, infer_clip});
  // Transcendental and arithmetic unary ops (transformers' LayerNorm, GELU, attention).
  for (const char *name : {"sqrt", "erf", "tanh", "exp", "log", "negative", "abs", "reciprocal"})
    ops.push_back({name, P::kElemWise, 1, 1, {}, unary_f32});
  ops.push_back({"identity", P::kElemWise, 1, 1, {}, same_as_input});
  ops.push_back({"nn.dropout", P::kElemWise, 1, 1, {{"rate", AttrKind::kFloat, 0.5}}, same_as_input});

  for (const char *name : {"add", "subtract", "multiply", "divide"})
    ops.push_back({name, P::kBroadcast, 2, 2, {}, binary});
  ops.push_back({"power", P::kBroadcast, 2, 2, {}, binary_f32});
  // Comparisons and masks computed at run time (attention masks): booleans are int64 0/1.
  for (const char *name : {"equal", "less", "greater"}) ops.push_back({name, P::kBroadcast, 2, 2, {}, infer_compare});
  for (const char *name : {"logical_and", "logical_or"}) ops.push_back({name, P::kBroadcast, 2, 2, {}, infer_logical});
  ops.push_back({"logical_not", P::kElemWise, 1, 1, {}, infer_logical});
  ops.push_back({"where", P::kBroadcast, 3, 3, {}, infer_where});
  ops.push_back({"cast", P::kElemWise, 1, 1, {{"dtype", AttrKind::kString, std::nullopt}}, infer_cast});
  ops.push_back({"broadcast_to", P::kBroadcast, 1, 1, {{"shape", AttrKind::kInts, std::nullopt}}, infer_broadcast_to});

  auto pool_attrs = window_attrs(true);
  pool_attrs.push_back({"ceil_mode", AttrKind::kInt, int64_t{0}});
  ops.push_back({"nn.max_pool2d", P::kOutEWiseFusable, 1, 1, pool_attrs, infer_pool2d});
  pool_attrs.push_back({"count_include_pad", AttrKind::kInt, int64_t{0}});
  ops.push_back({"nn.avg_pool2d", P::kOutEWiseFusable, 1, 1, pool_attrs, infer_pool2d});
  ops.push_back({"nn.global_avg_pool2d", P::kOutEWiseFusable, 1, 1, {}, infer_global_pool});
  for (const char *name : {"mean", "sum", "max", "min", "prod"})  // reductions over `axis` (all axes when empty)
    ops.push_back({name, P::kCommReduce, 1, 1, {{"axis", AttrKind::kInts, Ints{}}, {"keepdims", AttrKind::kInt, int64_t{1}}}, infer_mean});
  ops.push_back({"nn.softmax", P::kOpaque, 1, 1, {{"axis", AttrKind::kInt, int64_t{-1}}}, infer_softmax});
  // (x - mean) / sqrt(var + epsilon) * scale + bias over the axes from `axis` on (fuse-layer-norm
  // makes it of the decomposed form); elementwise consumers fuse after it.
  ops.push_back({"nn.layer_norm", P::kOutEWiseFusable, 3, 3, {{"axis", AttrKind::kInt, int64_t{-1}}, {"epsilon", AttrKind::kFloat, 1e-5}}, infer_layer_norm});

  ops.push_back({"reshape", P::kInjective, 1, 1, {{"newshape", AttrKind::kInts, std::nullopt}}, infer_reshape});
  ops.push_back({"transpose", P::kInjective, 1, 1, {{"axes", AttrKind::kInts, std::nullopt}}, infer_transpose});
  ops.push_back({"concatenate", P::kInjective, 1, -1, {{"axis", AttrKind::kInt, std::nullopt}}, infer_concat});
  ops.push_back({"nn.pad", P::kInjective, 1, 1,
                 {{"pad_width", AttrKind::kInts, std::nullopt}, {"pad_value", AttrKind::kFloat, 0.0}}, infer_pad});
  ops.push_back({"tile", P::kInjective, 1, 1, {{"reps", AttrKind::kInts, std::nullopt}}, infer_tile});
  ops.push_back({"strided_slice", P::kInjective, 1, 1,
                 {{"begin", AttrKind::kInts, std::nullopt}, {"end", AttrKind::kInts, std::nullopt}, {"strides", AttrKind::kInts, std::nullopt}},
                 infer_strided_slice});
  ops.push_back({"take", P::kInjective, 2, 2, {{"axis", AttrKind::kInt, int64_t{0}}}, infer_take});
  ops.push_back({"nn.to_nchwc", P::kInjective, 1, 1, {{"block", AttrKind::kInt, int64_t{16}}}, infer_to_nchwc});
  ops.push_back({"nn.from_nchwc", P::kInjective, 1, 1, {}, infer_from_nchwc});
  ops.push_back({"shape_of", P::kOpaque, 1, 1, {}, infer_shape_of});
  return ops;
}

}  // namespace

const std::vector<OpDef> &all_ops() {
  static const std::vector<OpDef> ops = make_ops();
  return ops;
}

const OpDef *find_op(const std::string &name) {
  for (const OpDef &op : all_ops())
    if (op.name == name) return &op;
  return nullptr;
}

bool is_anchor_op(const std::string &op) {
  const OpDef *def = find_op(op);
  if (!def || op == "shape_of") return false;
  return def->pattern == OpPattern::kOutEWiseFusable || def->pattern == OpPattern::kCommReduce || def->pattern == OpPattern::kOpaque;
}

Expected<TensorType> infer_node_type(const OpDef &op, const std::vector<TensorType> &inputs, Attrs &attrs,
                                     const std::vector<const Tensor *> &constants) {
  int n = static_cast<int>(inputs.size());
  if (n < op.min_inputs || (op.max_inputs >= 0 && n > op.max_inputs)) {
    std::string want = op.min_inputs == op.max_inputs ? std::to_string(op.min_inputs)
                       : op.max_inputs < 0 ? "at least " + std::to_string(op.min_inputs)
                                           : std::to_string(op.min_inputs) + " to " + std::to_string(op.max_inputs);
    return make_error("expected " + want + " inputs, got " + std::to_string(n));
  }
  AT_ASSIGN(normalized, normalize_attrs(op.attrs, attrs));
  attrs = std::move(normalized);
  return op.infer(OpCall{inputs, attrs, constants});
}

}  // namespace autotune
