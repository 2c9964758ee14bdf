#include "search/ScheduleSpace.h"

#include <algorithm>
#include <set>

#include "codegen/Lower.h"
#include "codegen/Sketch.h"
#include "ir/Hash.h"
#include "search/Task.h"

namespace autotune {

uint64_t Rng::next() { return splitmix64(state_); }

ScheduleSpace ScheduleSpace::of(const Graph &body, const Target &target, bool steps) {
  ScheduleSpace sp;
  // A chain (a partition move's group of several anchors): the points of its tile sketch where it
  // has one (a projection's blocked chain tile), no template knobs; else an empty space, so the
  // tuner measures its default and spends no trial on it.
  if (is_chain(body) && split_segments(body)) {
    if (steps) sp.sketches = chain_tile_points(body, target);
    if (!sp.sketches.empty()) {  // the knobs its points carry: the default's (an empty space has none to carry)
      sp.sketch_knobs = default_schedule(body, target);
      sp.sketch_knobs.steps.clear();
    }
    return sp;
  }
  sp.register_budget = target.vector_registers - 1;
  const Node *anchor = schedule_anchor(body);
  KernelSchedule base = default_schedule(body, target);
  std::vector<int> widths;  // the target's vector width and the narrower ones the templates accept
  for (int v = target.lanes; v >= 4; v /= 2) widths.push_back(v);
  sp.parallel = {base.parallel};
  sp.unroll_kx = {false};
  sp.pad_at_root = {true};
  sp.pixel_epilogue = {base.pixel_epilogue};
  sp.winograd = {base.winograd};
  sp.pixel_vectors = {false};
  sp.px_block = {base.px_block};
  sp.ic_block = {0};
  KernelSchedule direct = base;
  // The direct nests, as a sketch point's knobs (sketch_knobs) make them: without Winograd's
  // (below) or a pixel-vector default's gathering stage (a strided 1x1 conv's subsample, a stem's patches).
  direct.winograd = 0, direct.pixel_vectors = false;
  if (auto naive = steps ? lower_naive(body, "naive", direct) : Expected<LoweredKernel>(make_error("knobs only"))) {
    std::vector<SketchPoint> points;
    if (!anchor || (anchor->op == "nn.conv2d" && anchor->attrs.i("groups") > 1)) {
      points = loop_sketches(*naive, target.lanes);  // elementwise, reductions, grouped and depthwise convs
      // A batched matmul's register tiles; a softmax's row as vectors (their own families of points).
      for (SketchPoint &p : matmul_tile_sketches(*naive, target.lanes, target.vector_registers)) points.push_back(std::move(p));
      if (auto steps = row_sketch(*naive, target.lanes); steps && replay(*naive, *steps)) points.push_back({steps.take(), {2000}});
      if (auto change = layout_change(body))
        if (auto steps = layout_change_sketch(*naive, "p" + std::to_string(change->input), change->block); steps && replay(*naive, *steps))
          points.push_back({steps.take(), {3000}});
    } else if (anchor->inputs[1].kind == ValueId::Kind::kInput && (anchor->op == "nn.dense" || anchor->attrs.i("groups") == 1)) {
      bool pixel_lanes = pointwise_eligible(body, *anchor) && anchor->attrs.ints("strides") == std::vector<int64_t>{1, 1};
      points = tile_sketches(*naive, "p" + std::to_string(anchor->inputs[1].index), body.type_of(anchor->inputs[1]).shape,
                             target.lanes, target.vector_registers, pixel_lanes);
    }
    // Winograd F(2x2) and F(4x4) as naive nests of their own (input transform, GEMMs, output transform).
    if (anchor && winograd_eligible(body, *anchor))
      for (int m : {2, 4}) {
        KernelSchedule w;
        w.winograd = m;
        if (auto wn = lower_naive(body, "naive", w))
          for (SketchPoint &p : winograd_sketches(*wn, m, target.lanes, target.vector_registers)) points.push_back(std::move(p));
      }
    sp.sketches = std::move(points);
  }
  sp.sketch_knobs = KernelSchedule{};  // the template's knobs do not apply to a step list
  sp.sketch_knobs.vector_width = target.lanes;
  if (!anchor) {
    sp.vector_width = widths;
    sp.vector_width.push_back(1);
    sp.oc_block = {0};
  } else {
    bool conv = is_conv_op(anchor->op);
    int64_t channels = conv ? conv_out_channels(*anchor) / anchor->attrs.i("groups") : anchor->type.shape[1];
    int64_t cblock = conv ? conv_block(*anchor) : 0;
    sp.vector_width.clear();  // blocked templates: vectors of 8 lanes or more (conv2d_nchwc: within a channel block)
    for (int v : widths)
      if (v >= 8 && (!cblock || v <= cblock)) sp.vector_width.push_back(v);
    sp.oc_block.clear();  // conv2d_nchwc: register blocks of whole channel blocks (a depthwise one has none)
    bool depthwise_nchwc = cblock && anchor->attrs.i("groups") > 1;
    if (!cblock || depthwise_nchwc) sp.oc_block.push_back(0);
    for (int ob : {8, 16, 24, 32, 48, 64})
      if (channels % ob == 0 && ob % std::max<int64_t>(1, cblock) == 0) sp.oc_block.push_back(ob);
    if (conv) {
      sp.px_block.clear();
      for (int p = 1; p <= std::min(32, target.vector_registers - 3); ++p) sp.px_block.push_back(p);
      sp.parallel = {KernelSchedule::Parallel::kOc, KernelSchedule::Parallel::kPx, KernelSchedule::Parallel::kOcPx};
      sp.unroll_kx = {false, true};
      int64_t cg = anchor->inputs.size() > 1 ? body.type_of(anchor->inputs[1]).shape[1] : 0;
      for (int ib : {16, 32, 64, 128, 256})
        if (ib < cg && cg % ib == 0 && !cblock) sp.ic_block.push_back(ib);  // conv2d_nchwc: none yet (its row tiles have none)
      const auto &p = anchor->attrs.ints("padding");
      // conv2d_nchwc: padding in the tiles reads its input in place, padded or not.
      if ((p[0] || p[1] || p[2] || p[3] || cblock) && anchor->inputs[0].kind == ValueId::Kind::kInput) sp.pad_at_root = {true, false};
      if (epilogue_is_pixelwise(body, static_cast<int>(anchor - body.nodes.data()))) sp.pixel_epilogue = {false, true};
      if (winograd_eligible(body, *anchor)) sp.winograd = {0, 2, 4};
      if (pixel_vectors_eligible(body, *anchor)) {
        sp.pixel_vectors = {false, true};
        for (int ob : {1, 2, 3, 4, 6, 8, 12, 16})
          if (anchor->type.shape[1] % ob == 0) sp.pv_oc_block.push_back(ob);
        sp.pv_px_block = {1, 2, 3, 4, 6};
      }
      if (sp.oc_block == std::vector<int>{0}) {
        sp.vector_width = widths;  // only the direct template: its vector width
        // Depthwise: rows per block (NCHW16c: columns of a row) and where the padded plane is
        // stored (NCHW16c: at root or recomputed at its reads); other direct convs have neither.
        bool depthwise = anchor->inputs.size() > 1 && cg == 1;
        sp.px_block = depthwise ? std::vector<int>{1, 2, 3, 4, 5, 6, 8} : std::vector<int>{base.px_block};
        if (depthwise_nchwc) {
          sp.px_block = {1, 2, 4, 7, 8, 14};
          std::erase_if(sp.vector_width, [&](int v) { return v > cblock; });  // within a channel block
        }
        sp.pad_at_root = depthwise ? std::vector<bool>{false, true} : std::vector<bool>{base.pad_at_root};
        sp.unroll_kx = {false};
        sp.parallel = {base.parallel};
      }
    }
  }
  // A group without a conv, or a conv without channel blocks (depthwise, narrow groups), has no
  // template: each of its knob points stands for a point of its sketch (steps_of_knobs). With the
  // sketches in the space, the knobs keep the default's alone, so no kernel is in the space twice
  // (twice measured, and two labels for one set of features).
  bool no_template = anchor && anchor->op == "nn.conv2d" && sp.oc_block == std::vector<int>{0};
  if (steps && !sp.sketches.empty() && (!anchor || !is_conv_op(anchor->op) || no_template)) {
    sp.vector_width = {base.vector_width}, sp.oc_block = {base.oc_block}, sp.px_block = {base.px_block};
    sp.pad_at_root = {base.pad_at_root};
  }
  return sp;
}

int64_t ScheduleSpace::size() const {
  auto n = static_cast<int64_t>(vector_width.size() * oc_block.size() * px_block.size() * parallel.size() *
                                unroll_kx.size() * pad_at_root.size() * ic_block.size() * pixel_epilogue.size() * winograd.size());
  return n + static_cast<int64_t>(vector_width.size() * pv_oc_block.size() * pv_px_block.size() * parallel.size() + sketches.size());
}

KernelSchedule ScheduleSpace::sketch(size_t i) const {
  KernelSchedule s = sketch_knobs;
  s.steps = sketches[i].steps;
  s.winograd = sketches[i].winograd;
  return s;
}

bool ScheduleSpace::within_budget(const KernelSchedule &s) const {
  if (!s.steps.empty()) return true;
  if (s.pixel_vectors) return s.oc_block * s.px_block + s.px_block + 1 <= register_budget + 1;
  if (s.oc_block == 0) return true;
  int vecs = s.oc_block / s.vector_width;
  return vecs * s.px_block + vecs + 1 <= register_budget + 1;
}

namespace {
int step_list_family(const std::vector<Step> &steps, int winograd) {
  int pad = 0;  // the padded input stored at root (or no padding stage)
  for (const Step &st : steps)
    if (st.producer == "pad") pad = st.op == "compute_inline" ? 1 : 2;  // inline, or at a tile
  return 100 + 10 * winograd + pad;
}
}  // namespace

int ScheduleSpace::family(const KernelSchedule &s) {
  if (!s.steps.empty()) return step_list_family(s.steps, s.winograd);
  if (s.pixel_vectors) return 200;
  if (s.winograd) return 300 + s.winograd;
  return (s.oc_block ? 400 : 500) + (s.pad_at_root ? 0 : 1);
}

std::vector<int> ScheduleSpace::families() const {
  std::set<int> out;
  for (const SketchPoint &p : sketches) out.insert(step_list_family(p.steps, p.winograd));
  if (oc_block.empty() || vector_width.empty()) return {out.begin(), out.end()};
  // The template's: each algorithm, pixel vectors and padding choice, with the narrowest and widest block.
  for (int w : winograd)
    for (bool pv : pixel_vectors)
      for (bool pad : pad_at_root)
        for (int ob : {oc_block.front(), oc_block.back()}) {
          KernelSchedule s;
          s.winograd = w, s.pixel_vectors = pv, s.pad_at_root = pad, s.oc_block = ob, s.vector_width = vector_width.back();
          if (legalize(s)) out.insert(family(s));
        }
  return {out.begin(), out.end()};
}

std::optional<KernelSchedule> ScheduleSpace::sample_family(int f, Rng &rng, int tries) const {
  for (int i = 0; i < tries; ++i)
    if (KernelSchedule s = sample(rng); family(s) == f) return s;
  return std::nullopt;
}

bool ScheduleSpace::legalize(KernelSchedule &s) {
  // Knobs that belong to one template are cleared under the others.
  if (s.pixel_vectors) s.ic_block = 0, s.pixel_epilogue = false, s.winograd = 0, s.unroll_kx = false;
  if (s.oc_block == 0) s.ic_block = 0, s.pixel_epilogue = false, s.winograd = 0;
  if (s.winograd) s.ic_block = 0;  // Winograd has no reduction tiles
  return s.pixel_vectors || s.oc_block % s.vector_width == 0;
}

KernelSchedule ScheduleSpace::sample(Rng &rng) const {
  // Step lists are a family of their own (Ansor samples a sketch, then its knobs): a quarter of the
  // samples at least, whatever the size of the template's knob space.
  double share = sketches.empty() ? 0.0 : std::clamp(static_cast<double>(sketches.size()) / static_cast<double>(size()), 0.25, 0.75);
  if (vector_width.empty()) share = 1;  // no template knobs (a chain's space): its step lists only
  if (sketches.empty() && vector_width.empty()) return sketch_knobs;
  if (rng.unit() < share)
    return sketch(static_cast<size_t>(rng.uniform(static_cast<int>(sketches.size()))));
  return sample_knobs(rng);
}

KernelSchedule ScheduleSpace::sample_knobs(Rng &rng) const {
  for (int attempt = 0;; ++attempt) {
    KernelSchedule s;
    s.vector_width = vector_width[rng.uniform(static_cast<int>(vector_width.size()))];
    s.oc_block = oc_block[rng.uniform(static_cast<int>(oc_block.size()))];
    s.px_block = px_block[rng.uniform(static_cast<int>(px_block.size()))];
    s.parallel = parallel[rng.uniform(static_cast<int>(parallel.size()))];
    s.unroll_kx = unroll_kx[rng.uniform(static_cast<int>(unroll_kx.size()))];
    s.pad_at_root = pad_at_root[rng.uniform(static_cast<int>(pad_at_root.size()))];
    s.pixel_epilogue = pixel_epilogue[rng.uniform(static_cast<int>(pixel_epilogue.size()))];
    s.winograd = winograd[rng.uniform(static_cast<int>(winograd.size()))];
    s.ic_block = ic_block[rng.uniform(static_cast<int>(ic_block.size()))];
    s.pixel_vectors = pixel_vectors[rng.uniform(static_cast<int>(pixel_vectors.size()))];
    if (s.pixel_vectors) {
      s.oc_block = pv_oc_block[rng.uniform(static_cast<int>(pv_oc_block.size()))];
      s.px_block = pv_px_block[rng.uniform(static_cast<int>(pv_px_block.size()))];
    }
    if (!legalize(s)) continue;
    if (within_budget(s) || attempt > 100) return s;
  }
}

KernelSchedule ScheduleSpace::mutate(const KernelSchedule &base, Rng &rng) const {
  // A sketch point moves to another sketch point or to a template point; a template point
  // sometimes to a sketch point (one more knob: which of the two).
  bool knobs = !vector_width.empty();  // a chain's space has its step lists only
  if (sketches.empty() && !knobs) return base;
  if (!base.steps.empty() || !knobs || (!sketches.empty() && rng.uniform(6) == 0)) {
    if (!base.steps.empty() && rng.uniform(4) != 0) {
      // A neighbour: the list whose sketch knobs differ from this one's in exactly one.
      auto at = std::find_if(sketches.begin(), sketches.end(), [&](const SketchPoint &p) { return p.steps == base.steps; });
      if (at != sketches.end()) {
        const std::vector<int> &c = at->coords;
        std::vector<size_t> near;
        for (size_t i = 0; i < sketches.size(); ++i) {
          int diff = 0;
          for (size_t d = 0; d < c.size() && d < sketches[i].coords.size(); ++d) diff += sketches[i].coords[d] != c[d];
          if (diff == 1) near.push_back(i);
        }
        if (!near.empty()) return sketch(near[static_cast<size_t>(rng.uniform(static_cast<int>(near.size())))]);
      }
    }
    if (sketches.size() > 1 && rng.uniform(2) == 0) {
      for (int attempt = 0; attempt < 10; ++attempt) {
        auto i = static_cast<size_t>(rng.uniform(static_cast<int>(sketches.size())));
        if (sketches[i].steps != base.steps) return sketch(i);
      }
    }
    if (!base.steps.empty() && knobs) return sample_knobs(rng);  // a step list's knobs are not the templates': any template point
    return sketch(static_cast<size_t>(rng.uniform(static_cast<int>(sketches.size()))));
  }
  for (int attempt = 0; attempt < 100; ++attempt) {
    KernelSchedule s = base;
    switch (rng.uniform(10)) {
      case 0: s.vector_width = vector_width[rng.uniform(static_cast<int>(vector_width.size()))]; break;
      case 1: s.oc_block = oc_block[rng.uniform(static_cast<int>(oc_block.size()))]; break;
      case 2: s.px_block = px_block[rng.uniform(static_cast<int>(px_block.size()))]; break;
      case 3: s.parallel = parallel[rng.uniform(static_cast<int>(parallel.size()))]; break;
      case 4: s.unroll_kx = unroll_kx[rng.uniform(static_cast<int>(unroll_kx.size()))]; break;
      case 5: s.pad_at_root = pad_at_root[rng.uniform(static_cast<int>(pad_at_root.size()))]; break;
      case 7: s.pixel_epilogue = pixel_epilogue[rng.uniform(static_cast<int>(pixel_epilogue.size()))]; break;
      case 8: s.winograd = winograd[rng.uniform(static_cast<int>(winograd.size()))]; break;
      case 6: s.ic_block = ic_block[rng.uniform(static_cast<int>(ic_block.size()))]; break;
      case 9: s.pixel_vectors = pixel_vectors[rng.uniform(static_cast<int>(pixel_vectors.size()))]; break;
    }
    if (s.pixel_vectors) {
      // The blocks of the pixel-vector template come from its own domains.
      auto in = [](const std::vector<int> &v, int x) { return std::find(v.begin(), v.end(), x) != v.end(); };
      if (!in(pv_oc_block, s.oc_block)) s.oc_block = pv_oc_block[rng.uniform(static_cast<int>(pv_oc_block.size()))];
      if (!in(pv_px_block, s.px_block)) s.px_block = pv_px_block[rng.uniform(static_cast<int>(pv_px_block.size()))];
    } else if (base.pixel_vectors) {
      s.oc_block = oc_block[rng.uniform(static_cast<int>(oc_block.size()))];
      s.px_block = px_block[rng.uniform(static_cast<int>(px_block.size()))];
    }
    if (legalize(s) && !(s == base) && within_budget(s)) return s;
  }
  return sample(rng);
}

KernelSchedule ScheduleSpace::crossover(const KernelSchedule &a, const KernelSchedule &b, Rng &rng) const {
  if (!a.steps.empty() || !b.steps.empty()) return rng.uniform(2) ? a : b;  // step lists are not mixed
  KernelSchedule c = rng.uniform(2) ? a : b;  // the block: pixel_vectors, vector width, oc/px blocks, winograd
  const KernelSchedule &x = rng.uniform(2) ? a : b, &y = rng.uniform(2) ? a : b, &z = rng.uniform(2) ? a : b;
  c.parallel = x.parallel, c.unroll_kx = y.unroll_kx, c.pad_at_root = z.pad_at_root;
  c.ic_block = (rng.uniform(2) ? a : b).ic_block, c.pixel_epilogue = (rng.uniform(2) ? a : b).pixel_epilogue;
  if (!legalize(c) || !within_budget(c)) return a;
  return c;
}

}  // namespace autotune
