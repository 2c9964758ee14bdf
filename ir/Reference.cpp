#include "ir/Reference.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace autotune {
namespace {

using Ints = std::vector<int64_t>;

/** Row-major strides of a shape. */
Ints strides_of(const Shape &s) {
  Ints st(s.size(), 1);
  for (int i = static_cast<int>(s.size()) - 2; i >= 0; --i) st[i] = st[i + 1] * s[i + 1];
  return st;
}

/** Strides of `in` when broadcast to `out` (0 along broadcast dims), aligned to out's rank. */
Ints broadcast_strides(const Shape &in, const Shape &out) {
  Ints st = strides_of(in), r(out.size(), 0);
  size_t off = out.size() - in.size();
  for (size_t i = 0; i < in.size(); ++i) r[off + i] = in[i] == 1 ? 0 : st[i];
  return r;
}

/** Calls f(out_index, offsets) for every element of `out`, odometer-style: each input's offset by its strides (0 where it broadcasts). */
template <typename F>
void for_each_broadcast_n(const Shape &out, const std::vector<Ints> &st, F f) {
  int64_t n = TensorType{DType::kFloat32, out}.numel();
  int r = static_cast<int>(out.size());
  Ints idx(r, 0), off(st.size(), 0);
  for (int64_t i = 0; i < n; ++i) {
    f(i, off);
    for (int d = r - 1; d >= 0; --d) {
      ++idx[d];
      for (size_t k = 0; k < st.size(); ++k) off[k] += st[k][d];
      if (idx[d] < out[d]) break;
      for (size_t k = 0; k < st.size(); ++k) off[k] -= st[k][d] * out[d];
      idx[d] = 0;
    }
  }
}

template <typename F>
void for_each_broadcast(const Shape &out, const Ints &sa, const Ints &sb, F f) {
  for_each_broadcast_n(out, {sa, sb}, [&](int64_t i, const Ints &o) { f(i, o[0], o[1]); });
}

template <typename T, typename Op>
void binary_loop(const T *a, const T *b, T *o, const Shape &sa, const Shape &sb, const Shape &so, Op op) {
  for_each_broadcast(so, broadcast_strides(sa, so), broadcast_strides(sb, so),
                     [&](int64_t i, int64_t ia, int64_t ib) { o[i] = op(a[ia], b[ib]); });
}

Expected<Tensor> eval_binary(const Node &n, const Tensor &a, const Tensor &b) {
  Tensor out(n.type);
  const Shape &so = n.type.shape;
  const std::string &op = n.op;
  if (n.type.dtype == DType::kFloat32) {
    const float *pa = a.f32(), *pb = b.f32();
    float *po = out.f32();
    if (op == "add") binary_loop(pa, pb, po, a.shape(), b.shape(), so, [](float x, float y) { return x + y; });
    else if (op == "subtract") binary_loop(pa, pb, po, a.shape(), b.shape(), so, [](float x, float y) { return x - y; });
    else if (op == "multiply") binary_loop(pa, pb, po, a.shape(), b.shape(), so, [](float x, float y) { return x * y; });
    else binary_loop(pa, pb, po, a.shape(), b.shape(), so, [](float x, float y) { return x / y; });
    return out;
  }
  const int64_t *pa = a.i64(), *pb = b.i64();
  int64_t *po = out.i64();
  if (op == "divide") {
    for (int64_t i = 0; i < b.numel(); ++i)
      if (pb[i] == 0) return make_error("integer division by zero");
  }
  // Wrapping arithmetic through unsigned: shape math on hostile input must not be UB.
  auto u = [](int64_t x) { return static_cast<uint64_t>(x); };
  if (op == "add") binary_loop(pa, pb, po, a.shape(), b.shape(), so, [&](int64_t x, int64_t y) { return static_cast<int64_t>(u(x) + u(y)); });
  else if (op == "subtract") binary_loop(pa, pb, po, a.shape(), b.shape(), so, [&](int64_t x, int64_t y) { return static_cast<int64_t>(u(x) - u(y)); });
  else if (op == "multiply") binary_loop(pa, pb, po, a.shape(), b.shape(), so, [&](int64_t x, int64_t y) { return static_cast<int64_t>(u(x) * u(y)); });
  else binary_loop(pa, pb, po, a.shape(), b.shape(), so, [](int64_t x, int64_t y) { return (x == std::numeric_limits<int64_t>::min() && y == -1) ? x : x / y; });
  return out;
}

/** Element i of a float32 or int64 tensor, exactly (int64 compared as int64, not through double). */
struct Element {
  const Tensor &t;
  bool is_f32() const { return t.dtype() == DType::kFloat32; }
  float f(int64_t i) const { return t.f32()[i]; }
  int64_t i(int64_t k) const { return t.i64()[k]; }
  bool truth(int64_t k) const { return is_f32() ? t.f32()[k] != 0 : t.i64()[k] != 0; }
};

/** float -> int64 as the compiled code computes it: truncated toward zero, clamped to int64's range, NaN 0. */
int64_t float_to_i64(float v) {
  if (std::isnan(v)) return 0;
  constexpr float kLimit = 9.2233715e18f;  // the largest float below 2^63
  return static_cast<int64_t>(std::clamp(v, -kLimit, kLimit));
}

/** equal, less, greater, logical_and/or/not, where and cast: booleans are int64 0/1. */
Tensor eval_mask_op(const Node &n, const std::vector<Tensor> &in) {
  Tensor out(n.type);
  const std::string &op = n.op;
  Element a{in[0]};
  std::vector<Ints> strides;
  for (const Tensor &t : in) strides.push_back(broadcast_strides(t.shape(), n.type.shape));
  for_each_broadcast_n(n.type.shape, strides, [&](int64_t i, const Ints &o) {
    if (op == "cast") {
      const std::string &to = n.attrs.s("dtype");
      if (to == "bool") out.i64()[i] = a.truth(o[0]);
      else if (to == "float32") out.f32()[i] = a.is_f32() ? a.f(o[0]) : static_cast<float>(a.i(o[0]));
      else out.i64()[i] = a.is_f32() ? float_to_i64(a.f(o[0])) : a.i(o[0]);
      return;
    }
    if (op == "where") {
      bool c = a.truth(o[0]);
      const Tensor &pick = c ? in[1] : in[2];
      int64_t at = c ? o[1] : o[2];
      if (n.type.dtype == DType::kFloat32) out.f32()[i] = pick.f32()[at];
      else out.i64()[i] = pick.i64()[at];
      return;
    }
    if (op == "logical_not") {
      out.i64()[i] = !a.truth(o[0]);
      return;
    }
    Element b{in[1]};
    bool r;
    if (op == "logical_and") r = a.truth(o[0]) && b.truth(o[1]);
    else if (op == "logical_or") r = a.truth(o[0]) || b.truth(o[1]);
    else if (a.is_f32()) r = op == "equal" ? a.f(o[0]) == b.f(o[1]) : op == "less" ? a.f(o[0]) < b.f(o[1]) : a.f(o[0]) > b.f(o[1]);
    else r = op == "equal" ? a.i(o[0]) == b.i(o[1]) : op == "less" ? a.i(o[0]) < b.i(o[1]) : a.i(o[0]) > b.i(o[1]);
    out.i64()[i] = r;
  });
  return out;
}

template <typename F>
Tensor map_f32(const Node &n, const Tensor &x, F f) {
  Tensor out(n.type);
  const float *p = x.f32();
  float *o = out.f32();
  for (int64_t i = 0; i < x.numel(); ++i) o[i] = f(p[i]);
  return out;
}

/** The ox range [lo, hi) for which ox * stride + offset lies in [0, in). */
std::pair<int64_t, int64_t> valid_range(int64_t offset, int64_t stride, int64_t in, int64_t out) {
  int64_t lo = offset >= 0 ? 0 : (-offset + stride - 1) / stride;
  int64_t hi = in - 1 - offset < 0 ? 0 : (in - 1 - offset) / stride + 1;
  return {std::min(lo, out), std::clamp(hi, std::min(lo, out), out)};
}

Tensor eval_conv2d(const Node &n, const std::vector<Tensor> &in) {
  const Tensor &x = in[0], &w = in[1];
  const Shape &xs = x.shape(), &ws = w.shape(), &os = n.type.shape;
  const Ints &s = n.attrs.ints("strides"), &d = n.attrs.ints("dilation"), &p = n.attrs.ints("padding");
  int64_t groups = n.attrs.i("groups");
  int64_t N = xs[0], C = xs[1], H = xs[2], W = xs[3], O = ws[0], CG = ws[1], KH = ws[2], KW = ws[3];
  int64_t OH = os[2], OW = os[3], OG = O / groups;
  (void)C;
  Tensor out(n.type);
  std::vector<double> acc(OH * OW);
  for (int64_t b = 0; b < N; ++b)
    for (int64_t o = 0; o < O; ++o) {
      int64_t g = o / OG;
      std::fill(acc.begin(), acc.end(), in.size() == 3 ? in[2].f32()[o] : 0.0);
      for (int64_t c = 0; c < CG; ++c) {
        const float *plane = x.f32() + ((b * xs[1] + g * CG + c) * H) * W;
        for (int64_t ky = 0; ky < KH; ++ky)
          for (int64_t kx = 0; kx < KW; ++kx) {
            double wv = w.f32()[((o * CG + c) * KH + ky) * KW + kx];
            auto [y0, y1] = valid_range(ky * d[0] - p[0], s[0], H, OH);
            auto [x0, x1] = valid_range(kx * d[1] - p[1], s[1], W, OW);
            for (int64_t oy = y0; oy < y1; ++oy) {
              const float *row = plane + (oy * s[0] + ky * d[0] - p[0]) * W;
              double *arow = acc.data() + oy * OW;
              for (int64_t ox = x0; ox < x1; ++ox) arow[ox] += wv * row[ox * s[1] + kx * d[1] - p[1]];
            }
          }
      }
      float *dst = out.f32() + (b * O + o) * OH * OW;
      for (int64_t i = 0; i < OH * OW; ++i) dst[i] = static_cast<float>(acc[i]);
    }
  return out;
}

/** conv2d_nchwc: the NCHW conv of the unblocked input, blocked again. */
Tensor eval_conv2d_nchwc(const Node &n, std::vector<Tensor> in) {
  int64_t b = n.type.shape[4];
  in[0] = convert_nchwc(in[0], b, true);
  Node plain = n;
  plain.op = "nn.conv2d";
  plain.type.shape = {n.type.shape[0], n.type.shape[1] * b, n.type.shape[2], n.type.shape[3]};
  return convert_nchwc(eval_conv2d(plain, in), b, false);
}

Tensor eval_pool2d(const Node &n, const Tensor &x, bool is_max) {
  const Shape &xs = x.shape(), &os = n.type.shape;
  const Ints &k = n.attrs.ints("pool_size"), &s = n.attrs.ints("strides"), &d = n.attrs.ints("dilation"),
             &p = n.attrs.ints("padding");
  bool include_pad = !is_max && n.attrs.i("count_include_pad") != 0;
  int64_t H = xs[2], W = xs[3];
  Tensor out(n.type);
  float *o = out.f32();
  for (int64_t bc = 0; bc < xs[0] * xs[1]; ++bc) {
    const float *plane = x.f32() + bc * H * W;
    for (int64_t oy = 0; oy < os[2]; ++oy)
      for (int64_t ox = 0; ox < os[3]; ++ox) {
        double m = -std::numeric_limits<double>::infinity(), sum = 0;
        int64_t count = 0, padded_count = 0;
        for (int64_t ky = 0; ky < k[0]; ++ky)
          for (int64_t kx = 0; kx < k[1]; ++kx) {
            int64_t iy = oy * s[0] + ky * d[0] - p[0], ix = ox * s[1] + kx * d[1] - p[1];
            // Positions in the explicit padding count for count_include_pad; those beyond it
            // (only reachable in ceil_mode) never do.
            if (iy >= -p[0] && iy < H + p[2] && ix >= -p[1] && ix < W + p[3]) ++padded_count;
            if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
            double v = plane[iy * W + ix];
            m = std::max(m, v);
            sum += v;
            ++count;
          }
        double r = is_max ? m : sum / static_cast<double>(include_pad ? padded_count : std::max<int64_t>(count, 1));
        *o++ = static_cast<float>(r);
      }
  }
  return out;
}

Tensor eval_global_pool(const Node &n, const Tensor &x) {
  int64_t nc = x.shape()[0] * x.shape()[1], spatial = x.numel() / std::max<int64_t>(nc, 1);
  Tensor out(n.type);
  for (int64_t i = 0; i < nc; ++i) {
    double sum = 0;
    for (int64_t j = 0; j < spatial; ++j) sum += x.f32()[i * spatial + j];
    out.f32()[i] = static_cast<float>(sum / static_cast<double>(spatial));
  }
  return out;
}

Tensor eval_batch_norm(const Node &n, const std::vector<Tensor> &in) {
  const Tensor &x = in[0];
  double eps = n.attrs.f("epsilon");
  int64_t N = x.shape()[0], C = x.shape()[1], inner = x.numel() / std::max<int64_t>(N * C, 1);
  Tensor out(n.type);
  for (int64_t b = 0; b < N; ++b)
    for (int64_t c = 0; c < C; ++c) {
      double scale = in[1].f32()[c] / std::sqrt(static_cast<double>(in[4].f32()[c]) + eps);
      double mean = in[3].f32()[c], shift = in[2].f32()[c];
      const float *src = x.f32() + (b * C + c) * inner;
      float *dst = out.f32() + (b * C + c) * inner;
      for (int64_t i = 0; i < inner; ++i) dst[i] = static_cast<float>((src[i] - mean) * scale + shift);
    }
  return out;
}

Tensor eval_dense(const Node &n, const Tensor &a, const Tensor &w) {
  int64_t K = a.shape().back(), M = a.numel() / std::max<int64_t>(K, 1), N = w.shape()[0];
  Tensor out(n.type);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t j = 0; j < N; ++j) {
      double sum = 0;
      for (int64_t k = 0; k < K; ++k) sum += static_cast<double>(a.f32()[m * K + k]) * w.f32()[j * K + k];
      out.f32()[m * N + j] = static_cast<float>(sum);
    }
  return out;
}

Tensor eval_matmul(const Node &n, const Tensor &a, const Tensor &b) {
  // numpy semantics: 1-D operands are promoted to matrices, leading dims broadcast.
  Shape as = a.shape(), bs = b.shape();
  if (as.size() == 1) as.insert(as.begin(), 1);
  if (bs.size() == 1) bs.push_back(1);
  int64_t M = as[as.size() - 2], K = as.back(), N = bs.back();
  Shape ab(as.begin(), as.end() - 2), bb(bs.begin(), bs.end() - 2);
  Shape batch = *broadcast_shapes(ab, bb);
  Tensor out(n.type);
  float *o = out.f32();
  for_each_broadcast(batch, broadcast_strides(ab, batch), broadcast_strides(bb, batch),
                     [&](int64_t i, int64_t ia, int64_t ib) {
                       const float *pa = a.f32() + ia * M * K, *pb = b.f32() + ib * K * N;
                       float *po = o + i * M * N;
                       for (int64_t m = 0; m < M; ++m)
                         for (int64_t j = 0; j < N; ++j) {
                           double sum = 0;
                           for (int64_t k = 0; k < K; ++k) sum += static_cast<double>(pa[m * K + k]) * pb[k * N + j];
                           po[m * N + j] = static_cast<float>(sum);
                         }
                     });
  return out;
}

Tensor eval_softmax(const Node &n, const Tensor &x) {
  int axis = *normalize_axis(n.attrs.i("axis"), x.type().rank());
  const Shape &s = x.shape();
  int64_t outer = 1, inner = 1, len = s.empty() ? 1 : s[axis];
  for (int i = 0; i < axis; ++i) outer *= s[i];
  for (size_t i = axis + 1; i < s.size(); ++i) inner *= s[i];
  Tensor out(n.type);
  for (int64_t a = 0; a < outer; ++a)
    for (int64_t b = 0; b < inner; ++b) {
      const float *src = x.f32() + a * len * inner + b;
      float *dst = out.f32() + a * len * inner + b;
      double m = -std::numeric_limits<double>::infinity(), sum = 0;
      for (int64_t i = 0; i < len; ++i) m = std::max(m, static_cast<double>(src[i * inner]));
      for (int64_t i = 0; i < len; ++i) sum += std::exp(src[i * inner] - m);
      for (int64_t i = 0; i < len; ++i) dst[i * inner] = static_cast<float>(std::exp(src[i * inner] - m) / sum);
    }
  return out;
}

/** The layer norm over the axes from `axis` on, statistics in double (two passes: mean, then variance). */
Tensor eval_layer_norm(const Node &n, const Tensor &x, const Tensor &scale, const Tensor &bias) {
  const Shape &s = x.shape();
  int r = x.type().rank(), axis = *normalize_axis(n.attrs.i("axis"), r);
  Shape tail(s.begin() + axis, s.end());
  int64_t len = 1;
  for (int64_t d : tail) len *= d;
  int64_t rows = len ? x.numel() / len : 0;
  // Offsets of the scale and bias at each normalized element (numpy broadcasting over the tail).
  auto offsets = [&](const Tensor &p) {
    std::vector<int64_t> out(len);
    const Shape &ps = p.shape();
    for (int64_t j = 0; j < len; ++j) {
      int64_t rest = j, off = 0, stride = 1;
      for (int d = static_cast<int>(tail.size()) - 1, q = static_cast<int>(ps.size()) - 1; d >= 0; --d, --q) {
        int64_t at = rest % tail[d];
        rest /= tail[d];
        if (q >= 0) {
          if (ps[q] != 1) off += at * stride;
          stride *= ps[q];
        }
      }
      out[j] = off;
    }
    return out;
  };
  std::vector<int64_t> so = offsets(scale), bo = offsets(bias);
  double eps = n.attrs.f("epsilon");
  Tensor out(n.type);
  for (int64_t i = 0; i < rows; ++i) {
    const float *src = x.f32() + i * len;
    float *dst = out.f32() + i * len;
    double mean = 0, var = 0;
    for (int64_t j = 0; j < len; ++j) mean += src[j];
    mean /= static_cast<double>(len);
    for (int64_t j = 0; j < len; ++j) var += (src[j] - mean) * (src[j] - mean);
    double inv = 1.0 / std::sqrt(var / static_cast<double>(len) + eps);
    for (int64_t j = 0; j < len; ++j) dst[j] = static_cast<float>((src[j] - mean) * inv * scale.f32()[so[j]] + bias.f32()[bo[j]]);
  }
  return out;
}

/** mean, sum, max, min and prod over `axis` (all when empty), in double. */
Tensor eval_mean(const Node &n, const Tensor &x) {
  int r = x.type().rank();
  std::vector<bool> reduce(r, n.attrs.ints("axis").empty());
  for (int64_t a : n.attrs.ints("axis")) reduce[*normalize_axis(a, r)] = true;
  // Index the output through the input's dims with reduced dims given stride 0.
  Shape kept(r);
  for (int i = 0; i < r; ++i) kept[i] = reduce[i] ? 1 : x.shape()[i];
  Ints ost = broadcast_strides(kept, x.shape());
  const std::string &op = n.op;
  double init = op == "prod" ? 1.0 : op == "max" ? -INFINITY : op == "min" ? INFINITY : 0.0;
  std::vector<double> acc(n.type.numel(), init);
  for_each_broadcast(x.shape(), strides_of(x.shape()), ost, [&](int64_t i, int64_t, int64_t io) {
    double v = x.f32()[i];
    if (op == "prod") acc[io] *= v;
    else if (op == "max") acc[io] = std::isnan(v) || v > acc[io] ? v : acc[io];
    else if (op == "min") acc[io] = std::isnan(v) || v < acc[io] ? v : acc[io];
    else acc[io] += v;
  });
  double count = op == "mean" ? static_cast<double>(x.numel()) / static_cast<double>(std::max<int64_t>(n.type.numel(), 1)) : 1.0;
  Tensor out(n.type);
  for (int64_t i = 0; i < n.type.numel(); ++i) out.f32()[i] = static_cast<float>(acc[i] / count);
  return out;
}

/** Copies element by element through an index map, any dtype. */
template <typename F>
Tensor gather_elements(const Node &n, const Tensor &x, F source_offset_or_minus1, double fill = 0) {
  Tensor out(n.type);
  size_t es = dtype_size(n.type.dtype);
  auto *dst = static_cast<uint8_t *>(out.raw());
  const auto *src = static_cast<const uint8_t *>(x.raw());
  int64_t total = n.type.numel();
  for (int64_t i = 0; i < total; ++i) {
    int64_t j = source_offset_or_minus1(i);
    if (j >= 0) std::memcpy(dst + i * es, src + j * es, es);
    else if (n.type.dtype == DType::kFloat32) out.f32()[i] = static_cast<float>(fill);
    else out.i64()[i] = static_cast<int64_t>(fill);
  }
  return out;
}

/** The multi-index of linear index i in shape s. */
Ints unravel(int64_t i, const Shape &s) {
  Ints idx(s.size());
  for (int d = static_cast<int>(s.size()) - 1; d >= 0; --d) {
    idx[d] = s[d] ? i % s[d] : 0;
    i = s[d] ? i / s[d] : 0;
  }
  return idx;
}

/** An injective op whose source offset is a sum over the output's dims: part(d, index along d). */
template <typename F>
Tensor gather_by_dims(const Node &n, const Tensor &x, F part) {
  return gather_elements(n, x, [&](int64_t i) {
    Ints idx = unravel(i, n.type.shape);
    int64_t off = 0;
    for (size_t d = 0; d < idx.size(); ++d) off += part(d, idx[d]);
    return off;
  });
}

Tensor eval_transpose(const Node &n, const Tensor &x) {
  const Ints &axes = n.attrs.ints("axes");
  Ints st = strides_of(x.shape());
  return gather_by_dims(n, x, [&](size_t d, int64_t i) { return i * st[axes[d]]; });
}

Tensor eval_strided_slice(const Node &n, const Tensor &x) {
  const Ints &b = n.attrs.ints("begin"), &st = n.attrs.ints("strides");
  Ints xs = strides_of(x.shape());
  return gather_by_dims(n, x, [&](size_t d, int64_t i) { return (b[d] + i * st[d]) * xs[d]; });
}

Tensor eval_broadcast_to(const Node &n, const Tensor &x) {
  Ints bs = broadcast_strides(x.shape(), n.type.shape);
  return gather_by_dims(n, x, [&](size_t d, int64_t i) { return i * bs[d]; });
}

Tensor eval_tile(const Node &n, const Tensor &x) {
  Ints xs = strides_of(x.shape());
  return gather_by_dims(n, x, [&](size_t d, int64_t i) { return i % x.shape()[d] * xs[d]; });
}

Tensor eval_pad(const Node &n, const Tensor &x) {
  const Ints &pw = n.attrs.ints("pad_width");
  int r = x.type().rank();
  Ints st = strides_of(x.shape());
  return gather_elements(n, x, [&](int64_t i) -> int64_t {
    Ints idx = unravel(i, n.type.shape);
    int64_t off = 0;
    for (int d = 0; d < r; ++d) {
      int64_t j = idx[d] - pw[d];
      if (j < 0 || j >= x.shape()[d]) return -1;
      off += j * st[d];
    }
    return off;
  }, n.attrs.f("pad_value"));
}

Tensor eval_concat(const Node &n, const std::vector<Tensor> &in) {
  int axis = *normalize_axis(n.attrs.i("axis"), n.type.rank());
  int64_t outer = 1;
  for (int i = 0; i < axis; ++i) outer *= n.type.shape[i];
  size_t es = dtype_size(n.type.dtype);
  Tensor out(n.type);
  auto *dst = static_cast<uint8_t *>(out.raw());
  for (int64_t o = 0; o < outer; ++o)
    for (const Tensor &t : in) {
      size_t chunk = static_cast<size_t>(t.numel() / std::max<int64_t>(outer, 1)) * es;
      std::memcpy(dst, static_cast<const uint8_t *>(t.raw()) + o * chunk, chunk);
      dst += chunk;
    }
  return out;
}

Expected<Tensor> eval_take(const Node &n, const Tensor &x, const Tensor &idx) {
  int axis = *normalize_axis(n.attrs.i("axis"), x.type().rank());
  int64_t outer = 1, inner = 1, len = x.shape()[axis];
  for (int i = 0; i < axis; ++i) outer *= x.shape()[i];
  for (int i = axis + 1; i < x.type().rank(); ++i) inner *= x.shape()[i];
  int64_t ni = idx.numel();
  AT_TRY(check_gather_indices(idx.i64(), ni, len));
  return gather_elements(n, x, [&](int64_t i) {
    int64_t b = i % inner, k = (i / inner) % std::max<int64_t>(ni, 1), a = i / inner / std::max<int64_t>(ni, 1);
    int64_t j = idx.i64()[k];
    if (j < 0) j += len;
    return (a * len + j) * inner + b;
  });
}

}  // namespace

Tensor convert_nchwc(const Tensor &t, int64_t b, bool to_nchw) {
  const Shape &s = t.shape();
  Shape nchw = to_nchw ? Shape{s[0], s[1] * b, s[2], s[3]} : s;
  Shape blocked{nchw[0], nchw[1] / b, nchw[2], nchw[3], b};
  Tensor out(TensorType{DType::kFloat32, to_nchw ? nchw : blocked});
  int64_t N = nchw[0], C = nchw[1], P = nchw[2] * nchw[3];
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t p = 0; p < P; ++p) {
        int64_t plain = (n * C + c) * P + p, block = ((n * (C / b) + c / b) * P + p) * b + c % b;
        if (to_nchw) out.f32()[plain] = t.f32()[block];
        else out.f32()[block] = t.f32()[plain];
      }
  return out;
}


Status check_gather_indices(const int64_t *indices, int64_t count, int64_t extent) {
  for (int64_t k = 0; k < count; ++k)
    if (indices[k] < -extent || indices[k] >= extent)
      return make_error("index " + std::to_string(indices[k]) + " is out of range [" + std::to_string(-extent) + ", " +
                        std::to_string(extent) + ")");
  return Status::ok();
}

Expected<Tensor> eval_node(const Node &n, const std::vector<Tensor> &in) {
  if (n.is_function()) {
    AT_ASSIGN(outs, run_reference(*n.body, in));
    return outs[0];
  }
  const std::string &op = n.op;
  if (op == "nn.conv2d") return eval_conv2d(n, in);
  if (op == "nn.conv2d_nchwc") return eval_conv2d_nchwc(n, in);
  if (op == "nn.to_nchwc") return convert_nchwc(in[0], n.attrs.i("block"), false);
  if (op == "nn.from_nchwc") return convert_nchwc(in[0], in[0].shape()[4], true);
  if (op == "nn.dense") return eval_dense(n, in[0], in[1]);
  if (op == "nn.matmul") return eval_matmul(n, in[0], in[1]);
  if (op == "nn.batch_norm") return eval_batch_norm(n, in);
  if (op == "nn.relu") return map_f32(n, in[0], [](float v) { return v > 0 ? v : (std::isnan(v) ? v : 0.0f); });
  if (op == "sigmoid") return map_f32(n, in[0], [](float v) { return static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(v)))); });
  if (op == "nn.hard_swish")
    return map_f32(n, in[0], [](float v) { return static_cast<float>(v * std::clamp(v / 6.0 + 0.5, 0.0, 1.0)); });
  if (op == "nn.leaky_relu") {
    double alpha = n.attrs.f("alpha");
    return map_f32(n, in[0], [alpha](float v) { return v < 0 ? static_cast<float>(alpha * v) : v; });
  }
  if (op == "nn.hard_sigmoid") {
    double alpha = n.attrs.f("alpha"), beta = n.attrs.f("beta");
    return map_f32(n, in[0], [=](float v) { return static_cast<float>(std::clamp(alpha * v + beta, 0.0, 1.0)); });
  }
  if (op == "clip") {
    float lo = static_cast<float>(n.attrs.f("a_min")), hi = static_cast<float>(n.attrs.f("a_max"));
    return map_f32(n, in[0], [=](float v) { return std::isnan(v) ? v : std::min(std::max(v, lo), hi); });
  }
  // Computed in double and rounded once, the reference the kernels' float approximations are held to.
  auto unary_d = [&](double (*f)(double)) { return map_f32(n, in[0], [f](float v) { return static_cast<float>(f(v)); }); };
  if (op == "sqrt") return unary_d([](double v) { return std::sqrt(v); });
  if (op == "erf") return unary_d([](double v) { return std::erf(v); });
  if (op == "tanh") return unary_d([](double v) { return std::tanh(v); });
  if (op == "exp") return unary_d([](double v) { return std::exp(v); });
  if (op == "log") return unary_d([](double v) { return std::log(v); });
  if (op == "negative") return unary_d([](double v) { return -v; });
  if (op == "abs") return unary_d([](double v) { return std::fabs(v); });
  if (op == "reciprocal") return unary_d([](double v) { return 1.0 / v; });
  if (op == "power") {
    Tensor out(n.type);
    binary_loop(in[0].f32(), in[1].f32(), out.f32(), in[0].shape(), in[1].shape(), n.type.shape,
                [](float a, float b) { return static_cast<float>(std::pow(static_cast<double>(a), static_cast<double>(b))); });
    return out;
  }
  if (op == "strided_slice") return eval_strided_slice(n, in[0]);
  if (op == "broadcast_to") return eval_broadcast_to(n, in[0]);
  if (op == "identity" || op == "nn.dropout") return in[0];
  if (op == "add" || op == "subtract" || op == "multiply" || op == "divide") return eval_binary(n, in[0], in[1]);
  if (op == "nn.max_pool2d") return eval_pool2d(n, in[0], true);
  if (op == "nn.avg_pool2d") return eval_pool2d(n, in[0], false);
  if (op == "nn.global_avg_pool2d") return eval_global_pool(n, in[0]);
  if (op == "mean" || op == "sum" || op == "max" || op == "min" || op == "prod") return eval_mean(n, in[0]);
  if (op == "tile") return eval_tile(n, in[0]);
  if (op == "nn.softmax") return eval_softmax(n, in[0]);
  if (op == "equal" || op == "less" || op == "greater" || op == "logical_and" || op == "logical_or" || op == "logical_not" ||
      op == "where" || op == "cast")
    return eval_mask_op(n, in);
  if (op == "nn.layer_norm") return eval_layer_norm(n, in[0], in[1], in[2]);
  if (op == "reshape") return in[0].reshaped(n.type.shape);
  if (op == "transpose") return eval_transpose(n, in[0]);
  if (op == "concatenate") return eval_concat(n, in);
  if (op == "nn.pad") return eval_pad(n, in[0]);
  if (op == "take") return eval_take(n, in[0], in[1]);
  if (op == "shape_of") return tensor_i64({in[0].type().rank()}, in[0].shape());
  return make_error("reference executor has no kernel for op '" + op + "'");
}

Status check_inputs(const Graph &g, const std::vector<Tensor> &inputs) {
  if (inputs.size() != g.inputs.size())
    return make_error("model takes " + std::to_string(g.inputs.size()) + " inputs, got " + std::to_string(inputs.size()));
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].type() != g.inputs[i].type)
      return make_error("input '" + g.inputs[i].name + "' must be " + type_str(g.inputs[i].type) + ", got " +
                        type_str(inputs[i].type()));
  return Status::ok();
}

Expected<std::vector<Tensor>> run_reference(const Graph &g, const std::vector<Tensor> &inputs) {
  AT_TRY(check_inputs(g, inputs));
  // Last use of each node's value, so intermediates are freed as soon as possible.
  std::vector<size_t> last_use(g.nodes.size(), 0);
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (ValueId v : g.nodes[i].inputs)
      if (v.kind == ValueId::Kind::kNode) last_use[v.index] = i;
  for (ValueId v : g.outputs)
    if (v.kind == ValueId::Kind::kNode) last_use[v.index] = g.nodes.size();
  std::vector<Tensor> values(g.nodes.size());
  auto value = [&](ValueId v) -> const Tensor & {
    switch (v.kind) {
      case ValueId::Kind::kInput: return inputs[v.index];
      case ValueId::Kind::kConstant: return g.constants[v.index].value;
      case ValueId::Kind::kNode: return values[v.index];
    }
    AT_CHECK(false, "bad value kind");
  };
  size_t live = 0;  // bytes of intermediate values held
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node &n = g.nodes[i];
    auto where = [&] { return "node %" + std::to_string(i) + (n.origin.empty() ? "" : " '" + n.origin + "'") + " (" + n.op + ")"; };
    // Shapes come from the model file: check the result fits before any kernel allocates it
    // (twice its size: kernels accumulate in double).
    if (auto fits = check_allocation(2 * n.type.nbytes(), "its result " + type_str(n.type), live); !fits)
      return make_error(where() + ": " + fits.error().message);
    std::vector<Tensor> args;
    for (ValueId v : n.inputs) args.push_back(value(v));
    auto r = eval_node(n, args);
    if (!r) return make_error(where() + ": " + r.error().message);
    AT_CHECK(r->type() == n.type, "kernel of " + n.op + " produced " + type_str(r->type()) + ", expected " + type_str(n.type));
    values[i] = r.take();
    live += values[i].nbytes();
    for (ValueId v : n.inputs)
      if (v.kind == ValueId::Kind::kNode && last_use[v.index] == i && values[v.index].defined()) {
        live -= values[v.index].nbytes();
        values[v.index] = Tensor();
      }
  }
  std::vector<Tensor> outs;
  for (ValueId v : g.outputs) outs.push_back(value(v));
  return outs;
}

std::vector<Tensor> random_inputs(const Graph &g, uint64_t seed) {
  std::vector<Tensor> out;
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    const TensorType &t = g.inputs[i].type;
    out.push_back(t.dtype == DType::kFloat32 ? random_tensor(t, seed + i) : random_tensor(t, seed + i, 0, 2));
  }
  return out;
}

}  // namespace autotune
