#include "codegen/Lower.h"

#include <cmath>
#include <functional>
#include <limits>

#include <nlohmann/json.hpp>

#include "ir/Printer.h"

namespace autotune {

using namespace loop;

namespace {
const char *parallel_name(KernelSchedule::Parallel p) {
  switch (p) {
    case KernelSchedule::Parallel::kOc: return "oc";
    case KernelSchedule::Parallel::kPx: return "px";
    case KernelSchedule::Parallel::kOcPx: return "oc_px";
  }
  return "?";
}
}  // namespace

std::string KernelSchedule::to_string() const {
  return "vector " + std::to_string(vector_width) + ", oc_block " + std::to_string(oc_block) + ", px_block " +
         std::to_string(px_block) + ", parallel " + parallel_name(parallel) + (unroll_kx ? ", unroll kx" : "") +
         (pad_at_root ? ", pad at root" : ", pad inline") + (ic_block ? ", ic_block " + std::to_string(ic_block) : "") +
         (pixel_epilogue ? ", pixel epilogue" : "");
}

bool KernelSchedule::operator==(const KernelSchedule &o) const {
  return vector_width == o.vector_width && oc_block == o.oc_block && px_block == o.px_block && parallel == o.parallel &&
         unroll_kx == o.unroll_kx && pad_at_root == o.pad_at_root && ic_block == o.ic_block && pixel_epilogue == o.pixel_epilogue;
}

constexpr int kScheduleVersion = 1;

std::string schedule_to_json(const KernelSchedule &s) {
  nlohmann::json j{{"version", kScheduleVersion}, {"vector_width", s.vector_width}, {"oc_block", s.oc_block},
                   {"px_block", s.px_block}, {"parallel", parallel_name(s.parallel)}, {"unroll_kx", s.unroll_kx},
                   {"pad_at_root", s.pad_at_root}, {"ic_block", s.ic_block}};
  if (s.pixel_epilogue) j["pixel_epilogue"] = true;  // only when set: schedules from before it keep their JSON (their identity)
  return j.dump();
}

Expected<KernelSchedule> schedule_from_json(const std::string &text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return make_error("schedule is not a JSON object");
  if (!j.contains("version") || !j["version"].is_number_integer()) return make_error("schedule has no version");
  if (j["version"] != kScheduleVersion)
    return make_error("schedule version " + j["version"].dump() + " is not supported (this autotune reads version " +
                      std::to_string(kScheduleVersion) + ")");
  KernelSchedule s;
  for (auto &[key, value] : j.items()) {
    if (key == "version") continue;
    bool ok = true;
    if (key == "vector_width" || key == "oc_block" || key == "px_block" || key == "ic_block") {
      ok = value.is_number_integer();
      if (ok)
        (key == "vector_width" ? s.vector_width : key == "oc_block" ? s.oc_block : key == "px_block" ? s.px_block : s.ic_block) =
            value.get<int>();
    } else if (key == "unroll_kx" || key == "pad_at_root" || key == "pixel_epilogue") {
      ok = value.is_boolean();
      if (ok) (key == "unroll_kx" ? s.unroll_kx : key == "pad_at_root" ? s.pad_at_root : s.pixel_epilogue) = value.get<bool>();
    } else if (key == "parallel") {
      ok = value.is_string();
      std::string v = ok ? value.get<std::string>() : "";
      if (v == "oc") s.parallel = KernelSchedule::Parallel::kOc;
      else if (v == "px") s.parallel = KernelSchedule::Parallel::kPx;
      else if (v == "oc_px") s.parallel = KernelSchedule::Parallel::kOcPx;
      else ok = false;
    } else {
      return make_error("schedule has unknown field '" + key + "'");
    }
    if (!ok) return make_error("schedule field '" + key + "' has a bad value " + value.dump());
  }
  return s;
}

namespace {

using Index = std::vector<Expr>;
constexpr double kInf = std::numeric_limits<double>::infinity();

bool is_anchor_op(const std::string &op) {
  return op == "nn.conv2d" || op == "nn.dense" || op == "nn.matmul" || op == "nn.max_pool2d" || op == "nn.avg_pool2d" ||
         op == "nn.global_avg_pool2d" || op == "mean" || op == "nn.softmax";
}

Expr ravel(const Index &idx, const Shape &s) {
  Expr r = int_imm(0);
  int64_t stride = 1;
  for (int d = static_cast<int>(s.size()) - 1; d >= 0; --d) {
    r = idx[d] * stride + r;
    stride *= s[d];
  }
  return r;
}

Index unravel(const Expr &flat, const Shape &s) {
  Index idx(s.size());
  int64_t stride = 1;
  for (int d = static_cast<int>(s.size()) - 1; d >= 0; --d) {
    Expr q = stride == 1 ? flat : flat / int_imm(stride);
    idx[d] = d == 0 ? q : q % int_imm(s[d]);
    stride *= s[d];
  }
  return idx;
}

int64_t product(const Shape &s) {
  int64_t p = 1;
  for (int64_t d : s) p *= d;
  return p;
}

Expr clamp(const Expr &e, int64_t lo, int64_t hi) { return min(max(e, int_imm(lo)), int_imm(hi)); }
Expr in_range(const Expr &e, int64_t lo, int64_t hi) { return both(int_imm(lo) <= e, e < int_imm(hi)); }
/** ceil(a / d) for d > 0, with floor division. */
Expr ceil_div(const Expr &a, int64_t d) { return int_imm(0) - ((int_imm(0) - a) / int_imm(d)); }

class Lowerer {
 public:
  Lowerer(const Graph &g, const std::string &name, const KernelSchedule &s) : g_(g), s_(s) { k_.name = name; }

  Expected<LoweredKernel> run() {
    if (g_.outputs.size() != 1 || g_.outputs[0].kind != ValueId::Kind::kNode)
      return make_error("a kernel needs one output computed by a node");
    for (size_t i = 0; i < g_.inputs.size(); ++i) {
      const TensorType &t = g_.inputs[i].type;
      params_.push_back(make_buffer("p" + std::to_string(i), t.dtype == DType::kFloat32 ? Type::kF32 : Type::kI64,
                                    std::max<int64_t>(t.numel(), 1), BufferScope::kParam));
    }
    const TensorType &ot = g_.type_of(g_.outputs[0]);
    if (ot.dtype != DType::kFloat32) return make_error("integer-valued kernels are not compiled");
    out_ = make_buffer("out", Type::kF32, std::max<int64_t>(ot.numel(), 1), BufferScope::kParam);
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
    AT_TRY(validate_schedule(g_, s_));
    k_.schedule = s_.to_string();
    if (anchor_ < 0) {
      AT_TRY(lower_elementwise());
      return k_;
    }
    const std::string &op = g_.nodes[anchor_].op;
    if (op == "nn.conv2d") AT_TRY(lower_conv2d());
    else if (op == "nn.dense") AT_TRY(lower_dense());
    else if (op == "nn.softmax") AT_TRY(lower_softmax());
    else AT_TRY(lower_reduction_op());
    return k_;
  }

 private:
  // ---- expressions: the value of any graph value at an index, producers inlined ----

  Expr value_at(ValueId v, const Index &idx) {
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
    if (op == "sigmoid") return float_imm(1) / (float_imm(1) + call("exp", {float_imm(0) - x()}));
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
    if (op == "add" || op == "subtract" || op == "multiply" || op == "divide") {
      Expr a = in(0, broadcast_index(idx, g_.type_of(n.inputs[0]).shape));
      Expr b = in(1, broadcast_index(idx, g_.type_of(n.inputs[1]).shape));
      if (op == "add") return a + b;
      if (op == "subtract") return a - b;
      if (op == "multiply") return a * b;
      return a / b;
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
      int axis = static_cast<int>(n.attrs.i("axis"));
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
      int axis = static_cast<int>(n.attrs.i("axis"));
      const Shape &ds = g_.type_of(n.inputs[0]).shape;
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
  static Index broadcast_index(const Index &idx, const Shape &in) {
    Index r;
    size_t off = idx.size() - in.size();
    for (size_t d = 0; d < in.size(); ++d) r.push_back(in[d] == 1 ? int_imm(0) : idx[off + d]);
    return r;
  }

  /** Stores the group's output at idx; the anchor reads as `anchor` there. */
  Stmt store_output(const Index &idx, const Expr &anchor) {
    anchor_value_ = [anchor](const Index &) { return anchor; };
    Expr v = value_at(g_.outputs[0], idx);
    anchor_value_ = nullptr;
    return store(out_, ravel(idx, g_.type_of(g_.outputs[0]).shape), v);
  }

  std::string fresh(const std::string &base) { return base + std::to_string(counter_++); }

  Status check_inlinable() {
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      const std::string &op = g_.nodes[i].op;
      if (static_cast<int>(i) == anchor_) continue;
      if (is_anchor_op(op) || op == "shape_of" || g_.nodes[i].type.dtype != DType::kFloat32)
        return make_error("op " + op + " cannot be inlined");
    }
    return Status::ok();
  }

  /**
   * for xo in [0, L / V): vectorized xi in [0, V): body(x = xo * V + xi)
   * for xt in [L / V * V, L): body(x = xt)
   * `body(x, lanes, lane)` builds the statement for one position (or V positions).
   */
  Stmt row_loops(int64_t len, const std::function<Stmt(Expr x, int lanes, Expr lane)> &body, int64_t start = 0) {
    int v = s_.vector_width;
    std::vector<Stmt> parts;
    int64_t full = v > 1 ? len / v : 0;
    if (full > 0) {
      std::string xo = fresh("xo"), xi = fresh("xi");
      parts.push_back(for_loop(xo, int_imm(0), int_imm(full), ForKind::kSerial, body(var(xo) * v + var(xi) + start, v, var(xi))));
    }
    // The rest in halving vectors (a 56-wide row: 3 x 16 + 8), then scalars: a scalar tail of up
    // to 15 lanes cost as much as the vectors before it.
    int64_t at = full * v;
    for (int w = v / 2; w >= 2; w /= 2) {
      if (len - at < w) continue;
      std::string xi = fresh("xi");
      parts.push_back(body(var(xi) + (start + at), w, var(xi)));
      at += w;
    }
    if (at < len) {
      std::string xt = fresh("xt");
      parts.push_back(for_loop(xt, int_imm(start + at), int_imm(len - at), ForKind::kSerial, body(var(xt), 1, int_imm(0))));
    }
    return seq(parts);
  }

  /** Wraps `s` in the vectorized lane loop of row_loops (named after the lane variable). */
  static Stmt lanes_of(int lanes, const Expr &lane, const Stmt &s) {
    if (lanes == 1) return s;
    return for_loop(lane->name, int_imm(0), int_imm(lanes), ForKind::kVectorized, s);
  }

  void add_stage(const std::string &name, const std::string &pvar, int64_t extent, Stmt body) {
    k_.stages.push_back({name, pvar, std::max<int64_t>(extent, 1), std::move(body)});
  }

  // ---- templates ----

  /** No anchor: one loop over the output, rows in parallel, the last dimension vectorized. */
  Status lower_elementwise() {
    AT_TRY(check_inlinable());
    const Shape &s = g_.type_of(g_.outputs[0]).shape;
    if (s.empty()) {
      add_stage("elementwise", "r", 1, store_output({}, nullptr));
      return Status::ok();
    }
    Shape prefix(s.begin(), s.end() - 1);
    int64_t len = s.back(), rows = product(prefix);
    Index pidx = unravel(var("r"), prefix);
    Stmt body = row_loops(len, [&](Expr x, int lanes, Expr lane) {
      Index idx = pidx;
      idx.push_back(x);
      return lanes_of(lanes, lane, store_output(idx, nullptr));
    });
    add_stage("elementwise", "r", rows, body);
    return Status::ok();
  }

  enum class Combine { kSum, kMax };

  /**
   * Generic reduction: for every output element, acc = init; acc = combine(acc, term(idx, r)) over
   * the reduction domain; then the epilogue stores finalize(acc). Rows of the output run in
   * parallel, its last dimension vectorized; the reduction loops are serial and innermost.
   */
  Status lower_reduction(const Shape &out_shape, const std::vector<int64_t> &domain, Combine combine,
                         const std::function<Expr(const Index &)> &init,
                         const std::function<Expr(const Index &, const Index &)> &term,
                         const std::function<Expr(const Expr &, const Index &)> &finalize, const std::string &stage_name) {
    int64_t len = out_shape.empty() ? 1 : out_shape.back();
    Shape prefix = out_shape.empty() ? Shape{} : Shape(out_shape.begin(), out_shape.end() - 1);
    Index pidx = unravel(var("r"), prefix);
    Stmt body = row_loops(len, [&](Expr x, int lanes, Expr lane) {
      Index idx = pidx;
      if (!out_shape.empty()) idx.push_back(x);
      Buffer acc = make_buffer(fresh("acc"), Type::kF32, lanes, BufferScope::kLocal);
      Expr a = load(acc, lane);
      Index r;
      std::vector<std::string> rvars;
      for (size_t i = 0; i < domain.size(); ++i) {
        rvars.push_back(fresh("k"));
        r.push_back(var(rvars.back()));
      }
      Expr t = term(idx, r);
      Expr next;
      if (combine == Combine::kMax) next = max(a, t);
      else if (t->kind == ExprKind::kBinary && t->op == BinOp::kMul && t->type == Type::kF32) next = call("fmuladd", {t->args[0], t->args[1], a});
      else next = a + t;
      Stmt reduce = lanes_of(lanes, lane, store(acc, lane, next));
      for (int i = static_cast<int>(domain.size()) - 1; i >= 0; --i)
        reduce = for_loop(rvars[i], int_imm(0), int_imm(domain[i]), ForKind::kSerial, reduce);
      return allocate(acc, seq({lanes_of(lanes, lane, store(acc, lane, init(idx))), reduce,
                                lanes_of(lanes, lane, store_output(idx, finalize(a, idx)))}));
    });
    add_stage(stage_name, "r", product(prefix), body);
    return Status::ok();
  }

  /**
   * The conv's input as a plain buffer: the argument itself, or a copy made by a first stage,
   * padded, and with `phases` > 1 each row's columns split by phase (column x at
   * (x % phases) * wq + x / phases): a conv of column stride `phases` then reads consecutive
   * output columns from consecutive addresses instead of every other one.
   */
  struct Source {
    Buffer buf;
    int64_t h, w;         // its extents (the padded ones for a copy; w = phases * wq)
    int64_t phases = 1, wq = 0;
    /** The address of column `x0 + ox * phases` of a row (x0 not a multiple of phases is fine), linear in ox. */
    Expr column(const Expr &ox, const Expr &x0) const {
      if (phases == 1) return ox * phases + x0;
      return (x0 % int_imm(phases)) * wq + ox + x0 / int_imm(phases);
    }
  };
  Source conv_source(const Node &conv, bool padding_inline, int64_t phases = 1) {
    const Shape &xs = g_.type_of(conv.inputs[0]).shape;
    const auto &p = conv.attrs.ints("padding");
    bool padded = (p[0] || p[1] || p[2] || p[3]) && !padding_inline;
    if (!padded && phases == 1 && conv.inputs[0].kind == ValueId::Kind::kInput) return {params_[conv.inputs[0].index], xs[2], xs[3]};
    int64_t hp = xs[2] + p[0] + p[2], wp = xs[3] + p[1] + p[3], wq = (wp + phases - 1) / phases;
    Buffer buf = make_buffer(phases > 1 ? "phased" : "padded", Type::kF32, xs[0] * xs[1] * hp * phases * wq, BufferScope::kTemp);
    k_.buffers.push_back(buf);
    Index pidx = unravel(var("r"), {xs[0], xs[1], hp});
    Expr row = ravel(pidx, {xs[0], xs[1], hp}) * (phases * wq);
    Expr y = pidx[2] - int_imm(p[0]);
    Expr row_valid = in_range(y, 0, xs[2]);
    Expr yc = clamp(y, 0, xs[2] - 1);
    auto zeros = [&](int64_t from, int64_t count) {
      return row_loops(count, [&](Expr x, int lanes, Expr lane) { return lanes_of(lanes, lane, store(buf, row + x, float_imm(0))); }, from);
    };
    Stmt body;
    if (phases == 1) {
      // Rows of zeros above and below; inside, the zero columns either side and a contiguous copy
      // of the input row between them (no clamped, per-lane reads).
      Stmt inside = seq({zeros(0, p[1]),
                         row_loops(xs[3], [&](Expr x, int lanes, Expr lane) {
                           return lanes_of(lanes, lane, store(buf, row + x, value_at(conv.inputs[0], {pidx[0], pidx[1], yc, x - int_imm(p[1])})));
                         }, p[1]),
                         zeros(p[1] + xs[3], wp - p[1] - xs[3])});
      body = if_then(row_valid, inside, zeros(0, wp));
    } else {
      // Each phase's columns are written contiguously; reading them takes every phases-th column.
      std::vector<Stmt> parts;
      for (int64_t ph = 0; ph < phases; ++ph) {
        int64_t count = (wp - ph + phases - 1) / phases;
        parts.push_back(row_loops(count, [&, ph](Expr q, int lanes, Expr lane) {
          Expr xx = q * phases + int_imm(ph - p[1]);
          Expr valid = both(row_valid, in_range(xx, 0, xs[3]));
          Expr v = value_at(conv.inputs[0], {pidx[0], pidx[1], yc, clamp(xx, 0, xs[3] - 1)});
          return lanes_of(lanes, lane, store(buf, row + int_imm(ph * wq) + q, select(valid, v, float_imm(0))));
        }));
      }
      body = seq(parts);
    }
    add_stage(phases > 1 ? "pad_phases" : "pad", "r", xs[0] * xs[1] * hp, body);
    Source src{buf, hp, phases * wq};
    src.phases = phases, src.wq = wq;
    return src;
  }

  Status lower_conv2d() {
    AT_TRY(check_inlinable());
    const Node &conv = g_.nodes[anchor_];
    const Shape &xs = g_.type_of(conv.inputs[0]).shape, &ws = g_.type_of(conv.inputs[1]).shape, &os = conv.type.shape;
    const auto &st = conv.attrs.ints("strides"), &dl = conv.attrs.ints("dilation"), &pd = conv.attrs.ints("padding");
    int64_t N = xs[0], C = xs[1], O = ws[0], CG = ws[1], KH = ws[2], KW = ws[3], OH = os[2], OW = os[3];
    int64_t G = conv.attrs.i("groups"), OG = O / G;
    if (conv.inputs[1].kind != ValueId::Kind::kInput) return make_error("conv2d weight must be an argument");
    int V = s_.vector_width, OB = s_.oc_block;
    bool blocked = OB > 0;
    // The direct template vectorizes over output columns: with a column stride, split the copy's
    // columns by phase so those reads are contiguous (stride-2 depthwise convs ran at 5 GFLOP/s on
    // per-lane loads).
    Source src = conv_source(conv, blocked && !s_.pad_at_root, blocked ? 1 : st[1]);
    auto bias = [&](const Expr &o) -> Expr { return conv.inputs.size() == 3 ? value_at(conv.inputs[2], {o}) : float_imm(0); };
    if (!blocked) {
      // Direct template (depthwise and other narrow groups): vectorized over output columns.
      Buffer w = params_[conv.inputs[1].index];
      k_.schedule = "direct conv, " + k_.schedule;
      return lower_reduction(
          os, {CG, KH, KW}, Combine::kSum, [&](const Index &i) { return bias(i[1]); },
          [&](const Index &i, const Index &r) {
            Expr g = i[1] / int_imm(OG);
            Expr xin = load(src.buf, ((i[0] * C + g * CG + r[0]) * src.h + i[2] * st[0] + r[1] * dl[0]) * src.w +
                                         src.column(i[3], r[2] * dl[1]));
            Expr wv = load(w, ((i[1] * CG + r[0]) * KH + r[1]) * KW + r[2]);
            return xin * wv;
          },
          [](const Expr &a, const Index &) { return a; }, "conv2d");
    }
    // Register-blocked template: OB output channels (OB / V vectors) x PB output pixels held in
    // registers; the reduction over (c, ky, kx) innermost, reading packed weights
    // wp[O/OB][CG][KH][KW][OB] as vectors and broadcasting each input value. Full pixel blocks
    // run in the main stage, split across threads by the schedule's parallel axis; a remainder
    // of P % PB pixels gets a stage of its own.
    k_.packings.push_back({conv.inputs[1].index, WeightPacking::kOIHWToOIHWo, OB});
    Buffer wp = params_[conv.inputs[1].index];
    int64_t OBN = O / OB, P = OH * OW;
    int64_t PB = std::max(1, s_.px_block), PBF = P / PB;
    bool inline_pad = !s_.pad_at_root && (pd[0] || pd[1] || pd[2] || pd[3]);
    int64_t H = xs[2], W = xs[3];
    // Reduction tiles: IB input channels each; tile `cb` starts from the bias (first tile) or the
    // partial sums in the output, and only the last tile applies the epilogue.
    int64_t IB = s_.ic_block > 0 ? s_.ic_block : CG, CBN = CG / IB;
    bool pixel_epilogue = s_.pixel_epilogue;
    Expr cb = CBN > 1 ? var("cb") : int_imm(0);
    const Shape &out_shape = g_.type_of(g_.outputs[0]).shape;
    auto block = [&](const Expr &n, const Expr &ob, const Expr &p0, int64_t np) -> Stmt {
      Expr g = (ob * OB) / int_imm(OG);
      Buffer acc = make_buffer(fresh("acc"), Type::kF32, np * OB, BufferScope::kLocal);
      std::string v = fresh("v");
      Expr lane = var(v);
      auto vec = [&](Stmt s) { return for_loop(v, int_imm(0), int_imm(V), ForKind::kVectorized, s); };
      std::vector<Stmt> init, fma, epilogue, partial;
      std::vector<std::pair<std::string, Expr>> lets;  // per-pixel values computed once per block
      for (int64_t p = 0; p < np; ++p) {
        Expr pix = p0 + int_imm(p), oy = pix / int_imm(OW), ox = pix % int_imm(OW);
        Expr xin;
        if (!inline_pad) {
          std::string base = fresh("ib");
          lets.emplace_back(base, ((n * C + g * CG) * src.h + oy * st[0]) * src.w + ox * st[1]);
          xin = load(src.buf, var(base) + var("off"));
        } else {
          // Recompute the padding at every read: clamped index, then select.
          std::string iy = fresh("iy"), ix = fresh("ix");
          lets.emplace_back(iy, oy * st[0] - int_imm(pd[0]));
          lets.emplace_back(ix, ox * st[1] - int_imm(pd[1]));
          Expr y = var(iy) + var("ky") * dl[0], x = var(ix) + var("kx") * dl[1];
          Expr valid = both(in_range(y, 0, H), in_range(x, 0, W));
          xin = select(valid, load(src.buf, ((n * C + g * CG + var("c")) * H + clamp(y, 0, H - 1)) * W + clamp(x, 0, W - 1)),
                       float_imm(0));
        }
        for (int64_t o = 0; o < OB / V; ++o) {
          Expr ai = int_imm(p * OB + o * V) + lane;
          Expr oc = ob * OB + int_imm(o * V) + lane;
          Expr start = CBN > 1 ? select(cb == int_imm(0), bias(oc), load(out_, ravel({n, oc, oy, ox}, out_shape))) : bias(oc);
          init.push_back(vec(store(acc, ai, start)));
          Expr wv = load(wp, var("wb") + int_imm(o * V) + lane);
          fma.push_back(vec(store(acc, ai, call("fmuladd", {xin, wv, load(acc, ai)}))));
          if (!pixel_epilogue) epilogue.push_back(vec(store_output({n, oc, oy, ox}, load(acc, ai))));
          partial.push_back(vec(store(out_, ravel({n, oc, oy, ox}, out_shape), load(acc, ai))));
        }
      }
      if (pixel_epilogue) {
        // One output channel at a time, the block's pixels as the vector: a contiguous store (and
        // contiguous reads of a residual) instead of one lane per channel plane.
        for (int64_t c = 0; c < OB; ++c) {
          std::string q = fresh("q");
          Expr oc = ob * OB + int_imm(c);
          epilogue.push_back(for_loop(q, int_imm(0), int_imm(np), ForKind::kVectorized,
                                      store_output({n, oc, int_imm(0), p0 + var(q)}, load(acc, var(q) * OB + int_imm(c)))));
        }
      }
      Stmt reduce = let("wb", (((ob * CG + var("c")) * KH + var("ky")) * KW + var("kx")) * OB,
                        let("off", (var("c") * src.h + var("ky") * dl[0]) * src.w + var("kx") * dl[1], seq(fma)));
      reduce = for_loop("kx", int_imm(0), int_imm(KW), s_.unroll_kx ? ForKind::kUnrolled : ForKind::kSerial, reduce);
      reduce = for_loop("ky", int_imm(0), int_imm(KH), ForKind::kSerial, reduce);
      reduce = for_loop("c", cb * IB, int_imm(IB), ForKind::kSerial, reduce);
      Stmt finish = CBN > 1 ? if_then(cb == int_imm(CBN - 1), seq(epilogue), seq(partial)) : seq(epilogue);
      Stmt body = seq({seq(init), reduce, finish});
      for (auto it = lets.rbegin(); it != lets.rend(); ++it) body = let(it->first, it->second, body);
      return allocate(acc, body);
    };
    Expr u = var("u");
    auto tiles = [&](Stmt s) { return CBN > 1 ? for_loop("cb", int_imm(0), int_imm(CBN), ForKind::kSerial, s) : s; };
    if (PBF > 0) {
      Stmt main;
      int64_t units = 0;
      switch (s_.parallel) {
        case KernelSchedule::Parallel::kOc:  // a thread owns whole output-channel blocks
          units = N * OBN;
          main = for_loop("pb", int_imm(0), int_imm(PBF), ForKind::kSerial, block(u / int_imm(OBN), u % int_imm(OBN), var("pb") * PB, PB));
          break;
        case KernelSchedule::Parallel::kPx:  // a thread owns pixel blocks, all channels
          units = N * PBF;
          main = for_loop("ob", int_imm(0), int_imm(OBN), ForKind::kSerial, block(u / int_imm(PBF), var("ob"), (u % int_imm(PBF)) * PB, PB));
          break;
        case KernelSchedule::Parallel::kOcPx:  // every (channel block, pixel block) is a unit
          units = N * OBN * PBF;
          main = block(u / int_imm(OBN * PBF), (u / int_imm(PBF)) % int_imm(OBN), (u % int_imm(PBF)) * PB, PB);
          break;
      }
      add_stage("conv2d", "u", units, tiles(main));
    }
    if (P % PB) add_stage("conv2d_tail", "u", N * OBN, tiles(block(u / int_imm(OBN), u % int_imm(OBN), int_imm(PBF * PB), P % PB)));
    return Status::ok();
  }

  Status lower_dense() {
    AT_TRY(check_inlinable());
    const Node &d = g_.nodes[anchor_];
    const Shape &as = g_.type_of(d.inputs[0]).shape, &ws = g_.type_of(d.inputs[1]).shape;
    int64_t M = as[0], K = as[1], N = ws[0];
    int V = s_.vector_width;
    int64_t NB = s_.oc_block;
    if (d.inputs[1].kind != ValueId::Kind::kInput || NB <= 0) {
      k_.schedule = "direct dense, " + k_.schedule;
      return lower_reduction(
          d.type.shape, {K}, Combine::kSum, [](const Index &) { return float_imm(0); },
          [&](const Index &i, const Index &r) { return value_at(d.inputs[0], {i[0], r[0]}) * value_at(d.inputs[1], {i[1], r[0]}); },
          [](const Expr &a, const Index &) { return a; }, "dense");
    }
    // Blocked: NB output columns in registers per row, weights packed wp[N/NB][K][NB].
    k_.packings.push_back({d.inputs[1].index, WeightPacking::kNKToNKn, NB});
    Buffer wp = params_[d.inputs[1].index];
    Expr nb = var("u"), m = var("m"), k = var("k");
    Buffer acc = make_buffer("acc", Type::kF32, NB, BufferScope::kLocal);
    Expr lane = var("v");
    auto vec = [&](Stmt s) { return for_loop("v", int_imm(0), int_imm(V), ForKind::kVectorized, s); };
    std::vector<Stmt> init, fma, epilogue;
    for (int64_t o = 0; o < NB / V; ++o) {
      Expr ai = int_imm(o * V) + lane;
      init.push_back(vec(store(acc, ai, float_imm(0))));
      fma.push_back(vec(store(acc, ai, call("fmuladd", {value_at(d.inputs[0], {m, k}), load(wp, (nb * K + k) * NB + int_imm(o * V) + lane), load(acc, ai)}))));
      epilogue.push_back(vec(store_output({m, nb * NB + int_imm(o * V) + lane}, load(acc, ai))));
    }
    Stmt row = allocate(acc, seq({seq(init), for_loop("k", int_imm(0), int_imm(K), ForKind::kSerial, seq(fma)), seq(epilogue)}));
    add_stage("dense", "u", N / NB, for_loop("m", int_imm(0), int_imm(M), ForKind::kSerial, row));
    return Status::ok();
  }

  Status lower_softmax() {
    AT_TRY(check_inlinable());
    const Node &sm = g_.nodes[anchor_];
    const Shape &s = sm.type.shape;
    int axis = *normalize_axis(sm.attrs.i("axis"), static_cast<int>(s.size()));
    Shape before(s.begin(), s.begin() + axis), after(s.begin() + axis + 1, s.end());
    int64_t inner = product(after), len = s[axis];
    Index bi = unravel(var("r") / int_imm(inner), before), ai = unravel(var("r") % int_imm(inner), after);
    auto at = [&](const Expr &j) {
      Index idx = bi;
      idx.push_back(j);
      idx.insert(idx.end(), ai.begin(), ai.end());
      return idx;
    };
    Buffer m = make_buffer("max", Type::kF32, 1, BufferScope::kLocal), sum = make_buffer("sum", Type::kF32, 1, BufferScope::kLocal);
    Expr zero = int_imm(0), x1 = value_at(sm.inputs[0], at(var("j1"))), x2 = value_at(sm.inputs[0], at(var("j2"))),
         x3 = value_at(sm.inputs[0], at(var("j3")));
    Stmt body = seq({
        store(m, zero, float_imm(-kInf)),
        for_loop("j1", zero, int_imm(len), ForKind::kSerial, store(m, zero, max(load(m, zero), x1))),
        store(sum, zero, float_imm(0)),
        for_loop("j2", zero, int_imm(len), ForKind::kSerial, store(sum, zero, load(sum, zero) + call("exp", {x2 - load(m, zero)}))),
        for_loop("j3", zero, int_imm(len), ForKind::kSerial,
                 store_output(at(var("j3")), call("exp", {x3 - load(m, zero)}) / load(sum, zero))),
    });
    add_stage("softmax", "r", product(before) * inner, allocate(m, allocate(sum, body)));
    return Status::ok();
  }

  Status lower_reduction_op() {
    AT_TRY(check_inlinable());
    const Node &n = g_.nodes[anchor_];
    const std::string &op = n.op;
    const Shape &os = n.type.shape;
    ValueId x = n.inputs[0];
    const Shape &xs = g_.type_of(x).shape;
    auto identity = [](const Expr &a, const Index &) { return a; };
    if (op == "nn.max_pool2d" || op == "nn.avg_pool2d") {
      const auto &k = n.attrs.ints("pool_size"), &st = n.attrs.ints("strides"), &dl = n.attrs.ints("dilation"),
                 &p = n.attrs.ints("padding");
      bool is_max = op == "nn.max_pool2d";
      bool include_pad = !is_max && n.attrs.i("count_include_pad");
      auto term = [&, is_max](const Index &i, const Index &r) {
        Expr y = i[2] * st[0] - int_imm(p[0]) + r[0] * dl[0], xx = i[3] * st[1] - int_imm(p[1]) + r[1] * dl[1];
        Expr valid = both(in_range(y, 0, xs[2]), in_range(xx, 0, xs[3]));
        Expr v = value_at(x, {i[0], i[1], clamp(y, 0, xs[2] - 1), clamp(xx, 0, xs[3] - 1)});
        return select(valid, v, float_imm(is_max ? -kInf : 0.0));
      };
      auto count_1d = [](const Expr &start, int64_t lo, int64_t hi, int64_t k, int64_t d) {
        // window positions start + j * d (0 <= j < k) inside [lo, hi)
        return max(int_imm(0), min(int_imm(k), ceil_div(int_imm(hi) - start, d)) - max(int_imm(0), ceil_div(int_imm(lo) - start, d)));
      };
      auto finalize = [&, is_max, include_pad](const Expr &a, const Index &i) -> Expr {
        if (is_max) return a;
        Expr ys = i[2] * st[0] - int_imm(p[0]), xst = i[3] * st[1] - int_imm(p[1]);
        Expr cy = include_pad ? count_1d(ys, -p[0], xs[2] + p[2], k[0], dl[0]) : count_1d(ys, 0, xs[2], k[0], dl[0]);
        Expr cx = include_pad ? count_1d(xst, -p[1], xs[3] + p[3], k[1], dl[1]) : count_1d(xst, 0, xs[3], k[1], dl[1]);
        return a / cast(Type::kF32, max(cy * cx, int_imm(1)));
      };
      return lower_reduction(os, {k[0], k[1]}, is_max ? Combine::kMax : Combine::kSum,
                             [is_max](const Index &) { return float_imm(is_max ? -kInf : 0.0); }, term, finalize, "pool2d");
    }
    if (op == "nn.global_avg_pool2d") {
      Shape spatial(xs.begin() + 2, xs.end());
      double count = static_cast<double>(product(spatial));
      return lower_reduction(
          os, spatial, Combine::kSum, [](const Index &) { return float_imm(0); },
          [&](const Index &i, const Index &r) {
            Index src{i[0], i[1]};
            src.insert(src.end(), r.begin(), r.end());
            return value_at(x, src);
          },
          [count](const Expr &a, const Index &) { return a * float_imm(1.0 / count); }, "global_pool");
    }
    if (op == "mean") {
      int r = static_cast<int>(xs.size());
      std::vector<bool> reduced(r, n.attrs.ints("axis").empty());
      for (int64_t a : n.attrs.ints("axis")) reduced[*normalize_axis(a, r)] = true;
      bool keep = n.attrs.i("keepdims");
      std::vector<int64_t> domain;
      int64_t count = 1;
      for (int d = 0; d < r; ++d)
        if (reduced[d]) domain.push_back(xs[d]), count *= xs[d];
      return lower_reduction(
          os, domain, Combine::kSum, [](const Index &) { return float_imm(0); },
          [&, r, keep](const Index &i, const Index &red) {
            Index src;
            size_t oi = 0, ri = 0;
            for (int d = 0; d < r; ++d) {
              if (reduced[d]) {
                src.push_back(red[ri++]);
                if (keep) ++oi;
              } else {
                src.push_back(i[oi++]);
              }
            }
            return value_at(x, src);
          },
          [count](const Expr &a, const Index &) { return a * float_imm(1.0 / static_cast<double>(count)); }, "mean");
    }
    if (op == "nn.matmul") {
      Shape as = xs, bs = g_.type_of(n.inputs[1]).shape;
      bool a1 = as.size() == 1, b1 = bs.size() == 1;
      int64_t K = as.back();
      return lower_reduction(
          os, {K}, Combine::kSum, [](const Index &) { return float_imm(0); },
          [&, a1, b1](const Index &i, const Index &r) {
            // The output index is (batch..., m, n) without the dims of promoted 1-D operands.
            Index full = i;
            if (a1) full.insert(full.end() - (b1 ? 0 : 1), int_imm(0));
            if (b1) full.push_back(int_imm(0));
            Index batch(full.begin(), full.end() - 2);
            Index ai, bi;
            if (a1) ai = {r[0]};
            else {
              Shape ab(as.begin(), as.end() - 2);
              ai = broadcast_index(batch, ab);
              ai.push_back(full[full.size() - 2]);
              ai.push_back(r[0]);
            }
            if (b1) bi = {r[0]};
            else {
              Shape bb(bs.begin(), bs.end() - 2);
              bi = broadcast_index(batch, bb);
              bi.push_back(r[0]);
              bi.push_back(full.back());
            }
            return value_at(n.inputs[0], ai) * value_at(n.inputs[1], bi);
          },
          identity, "matmul");
    }
    return make_error("no template for op " + op);
  }

  const Graph &g_;
  KernelSchedule s_;
  LoweredKernel k_;
  std::vector<Buffer> params_;
  Buffer out_;
  int anchor_ = -1;
  std::function<Expr(const Index &)> anchor_value_;
  int counter_ = 0;
};

}  // namespace

/**
 * Whether a conv's epilogue can be stored one output channel at a time with the pixels of a
 * block as the vector (a contiguous run in NCHW), instead of one pixel at a time with channels
 * as the vector (one lane per channel plane: a scatter). True when every op after the anchor is
 * elementwise or broadcast over the output's shape and every argument it reads has the output's
 * spatial dims or none: then the flat pixel index p addresses each of them as (.., 0, p).
 */
bool epilogue_is_pixelwise(const Graph &g, int anchor) {
  const Shape &os = g.type_of(g.outputs[0]).shape;
  if (os.size() != 4 || anchor < 0) return false;
  for (size_t i = anchor + 1; i < g.nodes.size(); ++i) {
    const Node &n = g.nodes[i];
    const OpDef *def = find_op(n.op);
    if (!def || static_cast<int>(def->pattern) > static_cast<int>(OpPattern::kBroadcast) || n.type.shape != os) return false;
    for (ValueId v : n.inputs) {
      if (v.kind == ValueId::Kind::kNode) continue;
      const Shape &s = g.type_of(v).shape;
      Shape spatial(2, 1);
      for (size_t d = 0; d < std::min<size_t>(2, s.size()); ++d) spatial[1 - d] = s[s.size() - 1 - d];
      if (!(spatial == Shape{1, 1} || spatial == Shape{os[2], os[3]})) return false;
    }
  }
  return true;
}

Status validate_schedule(const Graph &body, const KernelSchedule &s) {
  auto bad = [](const std::string &why) { return Status(make_error("illegal schedule: " + why)); };
  if (s.vector_width != 1 && s.vector_width != 2 && s.vector_width != 4 && s.vector_width != 8 && s.vector_width != 16)
    return bad("vector_width " + std::to_string(s.vector_width) + " is not 1, 2, 4, 8 or 16");
  if (s.px_block < 1 || s.px_block > 32) return bad("px_block " + std::to_string(s.px_block) + " is not in [1, 32]");
  if (s.oc_block < 0 || s.oc_block > 64) return bad("oc_block " + std::to_string(s.oc_block) + " is not in [0, 64]");
  if (s.oc_block > 0 && s.oc_block % s.vector_width != 0)
    return bad("oc_block " + std::to_string(s.oc_block) + " is not a multiple of vector_width " + std::to_string(s.vector_width));
  if (s.ic_block < 0) return bad("ic_block " + std::to_string(s.ic_block) + " is negative");
  if (s.ic_block > 0 && s.oc_block == 0) return bad("ic_block needs the blocked template (oc_block > 0)");
  bool has_conv = false;
  for (const Node &n : body.nodes) has_conv |= n.op == "nn.conv2d";
  if (s.pixel_epilogue && !has_conv) return bad("pixel_epilogue is a conv knob");
  for (const Node &n : body.nodes) {
    if (n.op == "nn.conv2d" && s.ic_block > 0) {
      int64_t cg = body.type_of(n.inputs[1]).shape[1];
      if (cg % s.ic_block != 0)
        return bad("ic_block " + std::to_string(s.ic_block) + " does not divide " + std::to_string(cg) + " input channels per group");
    }
    if (n.op == "nn.conv2d" && s.pixel_epilogue) {
      if (s.oc_block == 0) return bad("pixel_epilogue needs the blocked template (oc_block > 0)");
      if (!epilogue_is_pixelwise(body, static_cast<int>(&n - body.nodes.data())))
        return bad("pixel_epilogue needs an epilogue that is elementwise over the conv's output");
    }
    if (n.op == "nn.conv2d" && s.oc_block > 0) {
      int64_t og = n.type.shape[1] / n.attrs.i("groups");
      if (og % s.oc_block != 0)
        return bad("oc_block " + std::to_string(s.oc_block) + " does not divide " + std::to_string(og) + " output channels per group");
      if (n.inputs[1].kind != ValueId::Kind::kInput) return bad("the conv weight is computed inside the group");
      const auto &p = n.attrs.ints("padding");
      if (!s.pad_at_root && (p[0] || p[1] || p[2] || p[3]) && n.inputs[0].kind != ValueId::Kind::kInput)
        return bad("inline padding needs the conv input to be an argument of the group");
    }
    if (n.op == "nn.dense" && s.oc_block > 0) {
      int64_t units = n.type.shape[1];
      if (units % s.oc_block != 0)
        return bad("oc_block " + std::to_string(s.oc_block) + " does not divide " + std::to_string(units) + " dense units");
      if (n.inputs[1].kind != ValueId::Kind::kInput) return bad("the dense weight is computed inside the group");
    }
  }
  return Status::ok();
}

KernelSchedule default_schedule(const Graph &body, const Target &target) {
  KernelSchedule s;
  s.vector_width = target.lanes;
  s.oc_block = 0;  // only conv and dense have channel blocks; set below
  // The widest vector that divides the channels (down to 8 lanes), two of them per block where
  // they divide too; the accumulators take what is left of the registers after the weight
  // vectors and the broadcast input value.
  auto block = [&](int64_t channels) {
    for (int v = target.lanes; v >= 8; v /= 2) {
      if (channels % (2 * v) == 0) return std::make_pair(v, 2 * v);
      if (channels % v == 0) return std::make_pair(v, v);
    }
    return std::make_pair(target.lanes, 0);
  };
  for (const Node &n : body.nodes) {
    bool conv = n.op == "nn.conv2d";
    if (!conv && n.op != "nn.dense") continue;
    auto [v, ob] = block(conv ? n.type.shape[1] / n.attrs.i("groups") : n.type.shape[1]);
    if (n.inputs[1].kind != ValueId::Kind::kInput) ob = 0;  // a computed weight cannot be packed at load time
    int regs = target.vector_registers;
    bool pointwise = conv && body.type_of(n.inputs[1]).shape[2] * body.type_of(n.inputs[1]).shape[3] == 1;
    // A 1x1 conv reads each input value for one FMA per channel vector: with 32 registers one
    // vector of channels by 28 pixels beats two by 14 (measured: 64->256 at 56x56 with a residual,
    // 0.50 vs 0.84 ms); with 16 registers two vectors by 6 pixels stay best.
    if (pointwise && regs >= 32 && ob == 2 * v) ob = v;
    s.oc_block = ob;
    if (ob == 0) continue;
    s.vector_width = v;
    int vecs = ob / v;
    int px = vecs == 2 ? (regs - 1 - vecs) / vecs : std::min(regs - 4, 28);
    if (conv) px = static_cast<int>(std::min<int64_t>(px, n.type.shape[2] * n.type.shape[3]));  // no block wider than the image
    s.px_block = px;
    // Unrolling the kernel columns pays with 16 registers (measured: 3x3 conv at 28x28, 1.19 vs
    // 1.32 ms on AVX2); with 32 the unrolled body's scheduling spills accumulators (1.25 vs 0.76 ms).
    if (conv && body.type_of(n.inputs[1]).shape[3] > 1) s.unroll_kx = regs <= 16;
    // Storing the epilogue one channel at a time, pixels as the vector, is contiguous in NCHW
    // (measured on both ISAs: equal or faster, up to 1.7x on a 1x1 conv with a residual add).
    if (conv) s.pixel_epilogue = epilogue_is_pixelwise(body, static_cast<int>(&n - body.nodes.data()));
  }
  return s;
}

std::string kernel_name(const Graph &body) {
  std::string s;
  for (const Node &n : body.nodes) {
    std::string op = n.op.substr(n.op.rfind('.') + 1);
    if (!s.empty()) s += "_";
    s += op;
  }
  return s.size() > 40 ? s.substr(0, 40) : s;
}

Expected<LoweredKernel> lower_group(const Graph &body, const std::string &name, const KernelSchedule &s) {
  return Lowerer(body, name, s).run();
}

Tensor pack_weight(const Tensor &w, const WeightPacking &p) {
  Tensor out(w.type());
  const float *src = w.f32();
  float *dst = out.f32();
  const Shape &s = w.shape();
  int64_t B = p.block;
  if (p.kind == WeightPacking::kOIHWToOIHWo) {
    // w[O][CG][KH][KW] -> wp[O/B][CG][KH][KW][B]
    int64_t O = s[0], inner = s[1] * s[2] * s[3];
    for (int64_t o = 0; o < O; ++o)
      for (int64_t i = 0; i < inner; ++i) dst[((o / B) * inner + i) * B + o % B] = src[o * inner + i];
  } else {
    // w[N][K] -> wp[N/B][K][B]
    int64_t N = s[0], K = s[1];
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k) dst[((n / B) * K + k) * B + n % B] = src[n * K + k];
  }
  return out;
}

}  // namespace autotune
