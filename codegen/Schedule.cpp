#include "codegen/Schedule.h"

#include <algorithm>
#include <functional>
#include <optional>

#include <nlohmann/json.hpp>

#include "codegen/Lower.h"
#include "codegen/Lowerer.h"
#include "codegen/Sketch.h"
#include "ir/JsonText.h"
#include "ir/Ops.h"

namespace autotune {

namespace {
/**
 * Gives `s` the step list `sketch` makes for the group's naive nest (lowered with `s`), when it
 * makes one and it replays there; says whether it did.
 */
bool take_sketch(const Graph &body, KernelSchedule &s, const std::function<Expected<std::vector<Step>>(const LoweredKernel &)> &sketch) {
  auto naive = lower_naive(body, "k", s);
  if (!naive) return false;
  auto steps = sketch(*naive);
  if (!steps || !replay(*naive, *steps)) return false;
  s.steps = steps.take();
  return true;
}

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
  if (!segments.empty()) {
    std::string out = "chain of " + std::to_string(segments.size()) + ":";
    for (size_t j = 0; j < segments.size(); ++j) out += (j ? " | " : " ") + segments[j].to_string();
    return out;
  }
  if (!steps.empty()) {
    std::string out = (winograd ? "winograd F(" + std::to_string(winograd) + "x" + std::to_string(winograd) + ", 3x3), " : std::string()) +
                      "vector " + std::to_string(vector_width) + ", " + std::to_string(steps.size()) + " steps:";
    for (const Step &st : steps) out += " " + st.op + (st.loop.empty() ? "" : " " + st.loop) + (st.factor ? "/" + std::to_string(st.factor) : "") + ";";
    out.pop_back();
    return out;
  }
  return "vector " + std::to_string(vector_width) + ", oc_block " + std::to_string(oc_block) + ", px_block " +
         std::to_string(px_block) + ", parallel " + parallel_name(parallel) + (unroll_kx ? ", unroll kx" : "") +
         (pad_at_root ? ", pad at root" : oc_block ? ", pad inline" : ", pad per plane") + (ic_block ? ", ic_block " + std::to_string(ic_block) : "") +
         (pixel_epilogue ? ", pixel epilogue" : "") + (pixel_vectors ? ", pixel vectors" : "") + (winograd ? ", winograd F(" + std::to_string(winograd) + "x" + std::to_string(winograd) + ", 3x3)" : "");
}

bool KernelSchedule::operator==(const KernelSchedule &o) const {
  return vector_width == o.vector_width && oc_block == o.oc_block && px_block == o.px_block && parallel == o.parallel &&
         unroll_kx == o.unroll_kx && pad_at_root == o.pad_at_root && ic_block == o.ic_block && pixel_epilogue == o.pixel_epilogue && winograd == o.winograd &&
         pixel_vectors == o.pixel_vectors && steps == o.steps && segments == o.segments;
}

constexpr int kScheduleVersion = 1;

std::string schedule_to_json(const KernelSchedule &s) {
  if (!s.segments.empty()) {
    // A chain's schedule is its segments' (only when set: every other schedule keeps its JSON).
    std::vector<std::string> segs;
    for (const KernelSchedule &g : s.segments) segs.push_back(schedule_to_json(g));
    return json::Object().num("version", kScheduleVersion).raw("segments", json::array_of(segs)).text();
  }
  json::Object j;
  j.num("version", kScheduleVersion).num("vector_width", s.vector_width).num("oc_block", s.oc_block).num("px_block", s.px_block);
  j.str("parallel", parallel_name(s.parallel)).boolean("unroll_kx", s.unroll_kx).boolean("pad_at_root", s.pad_at_root).num("ic_block", s.ic_block);
  if (s.pixel_epilogue) j.boolean("pixel_epilogue", true);
  if (s.winograd) j.num("winograd", s.winograd);  // only when set: schedules from before it keep their JSON (their identity)
  if (s.pixel_vectors) j.boolean("pixel_vectors", true);
  if (!s.steps.empty()) j.raw("steps", steps_to_json(s.steps));  // the step list with its own version
  return j.text();
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
    if (key == "vector_width" || key == "oc_block" || key == "px_block" || key == "ic_block" || key == "winograd") {
      ok = value.is_number_integer();
      if (ok)
        (key == "vector_width" ? s.vector_width : key == "oc_block" ? s.oc_block : key == "px_block" ? s.px_block
                                                  : key == "ic_block" ? s.ic_block : s.winograd) = value.get<int>();
    } else if (key == "unroll_kx" || key == "pad_at_root" || key == "pixel_epilogue" || key == "pixel_vectors") {
      ok = value.is_boolean();
      if (ok)
        (key == "unroll_kx" ? s.unroll_kx : key == "pad_at_root" ? s.pad_at_root : key == "pixel_epilogue" ? s.pixel_epilogue
                                                                                                         : s.pixel_vectors) = value.get<bool>();
    } else if (key == "segments") {
      ok = value.is_array() && !value.empty();
      for (size_t k = 0; ok && k < value.size(); ++k) {
        auto g = schedule_from_json(value[k].dump());
        if (!g) return make_error("schedule field 'segments' [" + std::to_string(k) + "]: " + g.error().message);
        s.segments.push_back(g.take());
      }
    } else if (key == "steps") {
      auto steps = steps_from_json(value.dump());
      if (!steps) return make_error("schedule field 'steps': " + steps.error().message);
      s.steps = steps.take();
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
/** Nodes [from, to) of `g` are elementwise or broadcast ops of shape `os` whose arguments have `os`'s spatial dims or none. */
bool pixelwise_nodes(const Graph &g, size_t from, size_t to, const Shape &os) {
  if (os.size() != 4) return false;
  for (size_t i = from; i < to; ++i) {
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
}  // namespace

bool pointwise_eligible(const Graph &body, const Node &n) {
  if (n.op != "nn.conv2d" || n.inputs[1].kind != ValueId::Kind::kInput) return false;
  // The input is an argument, or a prologue of pixelwise ops (every node before the conv) computes it.
  if (n.inputs[0].kind != ValueId::Kind::kInput &&
      !(n.inputs[0].kind == ValueId::Kind::kNode && pixelwise_nodes(body, 0, &n - body.nodes.data(), body.type_of(n.inputs[0]).shape)))
    return false;
  const Shape &w = body.type_of(n.inputs[1]).shape;
  const auto &p = n.attrs.ints("padding");
  return w[2] == 1 && w[3] == 1 && n.attrs.i("groups") == 1 && p == std::vector<int64_t>{0, 0, 0, 0};
}

bool patches_eligible(const Graph &body, const Node &n) {
  if (n.op != "nn.conv2d" || n.inputs[0].kind != ValueId::Kind::kInput || n.inputs[1].kind != ValueId::Kind::kInput) return false;
  const Shape &w = body.type_of(n.inputs[1]).shape;
  const auto &p = n.attrs.ints("padding");
  bool pointwise = w[2] == 1 && w[3] == 1 && p == std::vector<int64_t>{0, 0, 0, 0};
  return !pointwise && n.attrs.i("groups") == 1 && w[1] < 8;
}

bool pixel_vectors_eligible(const Graph &body, const Node &n) { return pointwise_eligible(body, n) || patches_eligible(body, n); }

/**
 * Whether a conv's epilogue can be stored one output channel at a time with the pixels of a
 * block as the vector (a contiguous run in NCHW), instead of one pixel at a time with channels
 * as the vector (one lane per channel plane: a scatter). True when every op after the anchor is
 * elementwise or broadcast over the output's shape and every argument it reads has the output's
 * spatial dims or none: then the flat pixel index p addresses each of them as (.., 0, p).
 */
bool epilogue_is_pixelwise(const Graph &g, int anchor) {
  return anchor >= 0 && pixelwise_nodes(g, anchor + 1, g.nodes.size(), g.type_of(g.outputs[0]).shape);
}

bool rows_eligible(const Node &n, const KernelSchedule &s) {
  if (!is_conv_op(n.op) || s.pad_at_root || s.oc_block == 0 || s.ic_block || s.winograd || s.pixel_vectors) return false;
  if (n.attrs.i("groups") != 1 || n.inputs[0].kind != ValueId::Kind::kInput) return false;
  return conv_block(n) > 0 || s.pixel_epilogue;
}

bool winograd_eligible(const Graph &body, const Node &n) {
  if (!is_conv_op(n.op) || n.inputs[1].kind != ValueId::Kind::kInput) return false;
  const Shape &w = body.type_of(n.inputs[1]).shape;
  auto ones = [](const std::vector<int64_t> &v) { return v == std::vector<int64_t>{1, 1}; };
  return w[2] == 3 && w[3] == 3 && n.attrs.i("groups") == 1 && ones(n.attrs.ints("strides")) && ones(n.attrs.ints("dilation"));
}

Status validate_schedule(const Graph &body, const KernelSchedule &s) {
  if ((is_chain(body) && s.steps.empty()) || !s.segments.empty()) {
    AT_ASSIGN(segs, split_segments(body));
    if (segs.size() != s.segments.size())
      return make_error("the group has " + std::to_string(segs.size()) + " segments, the schedule " + std::to_string(s.segments.size()));
    for (size_t j = 0; j < segs.size(); ++j)
      if (auto st = validate_schedule(segs[j].body, s.segments[j]); !st) return make_error("segment " + std::to_string(j) + ": " + st.error().message);
    return Status::ok();
  }
  if (!s.steps.empty()) {
    // A step list is legal where it replays on the group's naive nests.
    auto k = lower_group(body, "validate", s);
    if (!k) return make_error("illegal schedule: " + k.error().message);
    return Status::ok();
  }
  auto bad = [](const std::string &why) { return Status(make_error("illegal schedule: " + why)); };
  if (s.vector_width != 1 && s.vector_width != 2 && s.vector_width != 4 && s.vector_width != 8 && s.vector_width != 16)
    return bad("vector_width " + std::to_string(s.vector_width) + " is not 1, 2, 4, 8 or 16");
  if (s.px_block < 1 || s.px_block > 32) return bad("px_block " + std::to_string(s.px_block) + " is not in [1, 32]");
  if (s.oc_block < 0 || s.oc_block > 64) return bad("oc_block " + std::to_string(s.oc_block) + " is not in [0, 64]");
  if (s.oc_block > 0 && s.oc_block % s.vector_width != 0 && !s.pixel_vectors)
    return bad("oc_block " + std::to_string(s.oc_block) + " is not a multiple of vector_width " + std::to_string(s.vector_width));
  if (s.ic_block < 0) return bad("ic_block " + std::to_string(s.ic_block) + " is negative");
  if (s.ic_block > 0 && s.oc_block == 0) return bad("ic_block needs the blocked template (oc_block > 0)");
  bool has_conv = false;
  for (const Node &n : body.nodes) has_conv |= n.op == "nn.conv2d";  // conv2d_nchwc stores whole channel vectors: no pixel epilogue
  if (s.pixel_epilogue && !has_conv) return bad("pixel_epilogue is a conv knob");
  if (s.winograd != 0 && s.winograd != 2 && s.winograd != 4) return bad("winograd " + std::to_string(s.winograd) + " is not 0, 2 or 4");
  if (s.winograd) {
    bool eligible = false;
    for (const Node &n : body.nodes) eligible |= winograd_eligible(body, n);
    if (!eligible) return bad("winograd needs a 3x3 conv of stride 1, dilation 1, one group and an argument weight");
    if (s.oc_block == 0) return bad("winograd needs the blocked template (oc_block > 0)");
    if (s.ic_block) return bad("winograd has no reduction tiles (ic_block 0)");
  }
  if (s.pixel_vectors) {
    bool eligible = false;
    for (const Node &n : body.nodes) eligible |= pixel_vectors_eligible(body, n);
    if (!eligible)
      return bad("pixel_vectors needs a 1x1 conv without padding or a stem (fewer than 8 input channels), one group, and an argument input and weight");
    if (s.oc_block == 0) return bad("pixel_vectors needs oc_block > 0 (output channels per block)");
    if (s.winograd || s.ic_block || s.pixel_epilogue) return bad("pixel_vectors has no winograd, reduction tiles or pixel_epilogue");
  }
  for (const Node &n : body.nodes) {
    if (is_conv_op(n.op) && s.ic_block > 0) {
      int64_t cg = body.type_of(n.inputs[1]).shape[1];
      if (cg % s.ic_block != 0)
        return bad("ic_block " + std::to_string(s.ic_block) + " does not divide " + std::to_string(cg) + " input channels per group");
    }
    if (n.op == "nn.conv2d" && s.pixel_epilogue) {
      if (s.oc_block == 0) return bad("pixel_epilogue needs the blocked template (oc_block > 0)");
      if (!epilogue_is_pixelwise(body, static_cast<int>(&n - body.nodes.data())))
        return bad("pixel_epilogue needs an epilogue that is elementwise over the conv's output");
    }
    if (n.op == "nn.conv2d_nchwc" && n.attrs.i("groups") > 1) {
      int64_t b = conv_block(n);
      if (s.oc_block || s.winograd || s.pixel_vectors) return bad("a depthwise conv2d_nchwc takes the direct template (oc_block 0)");
      if (s.vector_width > b)
        return bad("conv2d_nchwc takes vectors of at most its channel block " + std::to_string(b) + ", not " + std::to_string(s.vector_width));
    } else if (n.op == "nn.conv2d_nchwc") {
      int64_t b = conv_block(n);
      if (s.oc_block == 0 || s.oc_block % b != 0)
        return bad("conv2d_nchwc needs the blocked template with oc_block a multiple of its channel block " + std::to_string(b));
      if (!s.pad_at_root && n.inputs[0].kind != ValueId::Kind::kInput)
        return bad("conv2d_nchwc with its padding in the tiles reads its input as an argument of the group");
      if (!s.pad_at_root && s.ic_block) return bad("conv2d_nchwc with its padding in the tiles has no reduction tiles (ic_block 0)");
      if (s.vector_width > b)
        return bad("conv2d_nchwc takes vectors of at most its channel block " + std::to_string(b) + ", not " + std::to_string(s.vector_width));
    }
    if (is_conv_op(n.op) && s.oc_block > 0) {
      int64_t og = conv_out_channels(n) / n.attrs.i("groups");
      if (og % s.oc_block != 0)
        return bad("oc_block " + std::to_string(s.oc_block) + " does not divide " + std::to_string(og) + " output channels per group");
      if (n.inputs[1].kind != ValueId::Kind::kInput) return bad("the conv weight is computed inside the group");
      const auto &p = n.attrs.ints("padding");
      if (!s.pad_at_root && (p[0] || p[1] || p[2] || p[3]) && n.inputs[0].kind != ValueId::Kind::kInput)
        return bad("inline padding needs the conv input to be an argument of the group");
    }
    if (n.op == "nn.dense" && s.oc_block > 0) {
      int64_t units = n.type.shape.back();
      if (units % s.oc_block != 0)
        return bad("oc_block " + std::to_string(s.oc_block) + " does not divide " + std::to_string(units) + " dense units");
      if (n.inputs[1].kind != ValueId::Kind::kInput) return bad("the dense weight is computed inside the group");
    }
  }
  return Status::ok();
}

namespace {
/** The anchor node of a chain's segment (nullptr without one). */
const Node *segment_anchor(const Segment &seg) {
  const Node *a = nullptr;
  for (const Node &n : seg.body.nodes)
    if (is_anchor_op(n.op)) a = &n;
  return a;
}

/**
 * The argument of the chain's kernel that is `anchor`'s weight (input 1 of the anchor of segment
 * `seg`) as the joined nests name it ("p" and its index) and its shape; nullopt where the weight
 * is computed in the group, not an argument.
 */
std::optional<std::pair<std::string, std::vector<int64_t>>> segment_weight(const Graph &body, const Segment &seg, const Node &anchor) {
  if (anchor.inputs[1].kind != ValueId::Kind::kInput || seg.args[anchor.inputs[1].index] < 0) return std::nullopt;
  int w = seg.args[anchor.inputs[1].index];
  return std::make_pair("p" + std::to_string(w), body.inputs[w].type.shape);
}

/** `steps` where they replay on the chain's joined naive nests, else nothing. */
std::optional<std::vector<Step>> replayable(const LoweredKernel &naive, Expected<std::vector<Step>> steps) {
  if (!steps || !replay(naive, *steps)) return std::nullopt;
  return *steps;
}

/**
 * A 1x1 conv then a depthwise conv of stride 1 (an inverted residual's expansion): the expand
 * tile sketch over blocks of 8 channels x every row (no halo to compute twice; the boxes of the
 * expanded channels and their padded copy stay in L2: 98 and 105 KiB at 56x56). Measured in the
 * partition search on MobileNetV2 (Zen 5, AVX-512, 2 threads, cores near, ratio to the two
 * kernels apart): 0.93-0.99 at 56x56, 28x28 and 14x14; at 7x7 1.12-1.14 (49 pixels, a tile and a
 * one-vector rest per channel block), and blocks of rows with the halo computed twice were
 * 1.28-1.77 (4 and 8 rows); stride 2 lost too (112x112 -> 56x56: 1.13-1.36 over rows and channels
 * per block), so neither is a default.
 */
std::optional<std::vector<Step>> expand_tile_default(const Graph &body, const std::vector<Segment> &segs, const Target &target) {
  const Node *pw = segment_anchor(segs[0]), *dw = segment_anchor(segs[1]);
  if (!pw || !dw || pw->op != "nn.conv2d" || dw->op != "nn.conv2d" || pw->attrs.i("groups") != 1) return std::nullopt;
  const Shape &pk = segs[0].body.type_of(pw->inputs[1]).shape, &dk = segs[1].body.type_of(dw->inputs[1]).shape;
  const auto &strides = dw->attrs.ints("strides");
  if (pk[2] != 1 || pk[3] != 1 || dw->attrs.i("groups") != dw->type.shape[1] || dk[1] != 1 || strides[0] != 1 || strides[1] != 1)
    return std::nullopt;
  int64_t C = dw->type.shape[1], H = dw->type.shape[2], W = dw->type.shape[3];
  if (H < 14 || W < 14 || C % 8) return std::nullopt;
  ExpandTileSketch knobs;
  knobs.lanes = target.lanes;
  knobs.accumulators = target.vector_registers - 4;
  knobs.rows = H, knobs.channels = 8;
  auto naive = lower_naive(body, "k", KernelSchedule{});
  if (!naive) return std::nullopt;
  auto weight = segment_weight(body, segs[0], *pw).value_or(std::make_pair(std::string(), std::vector<int64_t>{}));
  return replayable(*naive, expand_tile_sketch(*naive, weight.first, weight.second, knobs));
}

/**
 * The expand tile in NCHW16c (blocked_expand_tile_sketch) for a 1x1 conv2d_nchwc and the stride-1
 * depthwise conv2d_nchwc after it: units of the 1x1 conv's default register tile's channel blocks,
 * its pixels, and the depthwise conv's default columns. Measured alone (MobileNetV2, Zen 4,
 * AVX-512) 0.92-1.15 of the two kernels apart, in the model 0.99-1.03: the partition search
 * measures it and, so far, keeps the kernels apart (docs/architecture.md, issue 11).
 */
std::optional<std::vector<Step>> blocked_expand_tile_default(const Graph &body, const std::vector<Segment> &segs, const std::vector<KernelSchedule> &defaults) {
  const Node *pw = segment_anchor(segs[0]), *dw = segment_anchor(segs[1]);
  if (!pw || !dw || pw->op != "nn.conv2d_nchwc" || dw->op != "nn.conv2d_nchwc" || pw->attrs.i("groups") != 1 || dw->attrs.i("groups") == 1)
    return std::nullopt;
  const Shape &pk = segs[0].body.type_of(pw->inputs[1]).shape;
  if (pk[2] != 1 || pk[3] != 1 || dw->attrs.ints("strides") != std::vector<int64_t>{1, 1}) return std::nullopt;
  int64_t b = dw->type.shape[4], CB = dw->type.shape[1];
  BlockedExpandTileSketch knobs;
  // The most blocks, up to the 1x1 conv's register tile's, dividing the channels into an even
  // number of units or 8 and more (192 channels: 4 blocks would make 3 units, one thread idle a
  // third of the time; 3 blocks make 4).
  knobs.blocks = 1;
  for (int64_t k = 1; k <= std::max<int64_t>(1, defaults[0].oc_block / b); ++k)
    if (CB % k == 0 && ((CB / k) % 2 == 0 || CB / k >= 8)) knobs.blocks = k;
  knobs.pixels = std::max(1, defaults[0].px_block);
  knobs.columns = std::max(1, defaults[1].px_block);
  auto naive = lower_naive(body, "k", KernelSchedule{});
  if (!naive) return std::nullopt;
  auto weight = segment_weight(body, segs[0], *pw);
  if (!weight) return std::nullopt;
  return replayable(*naive, blocked_expand_tile_sketch(*naive, weight->first, weight->second, knobs));
}

/** The anchors and weights of a chain of a depthwise conv2d_nchwc and the 1x1 conv2d_nchwc after it (the blocked chain tile's). */
struct Projection {
  const Node *dw = nullptr, *pw = nullptr;
  std::pair<std::string, std::vector<int64_t>> weight, depthwise_weight;  // the depthwise one "" where it is computed
};

std::optional<Projection> blocked_projection(const Graph &body, const std::vector<Segment> &segs) {
  if (segs.size() != 2) return std::nullopt;
  const Node *dw = segment_anchor(segs[0]), *pw = segment_anchor(segs[1]);
  if (!pw || !dw || pw->op != "nn.conv2d_nchwc" || dw->op != "nn.conv2d_nchwc" || pw->attrs.i("groups") != 1 || dw->attrs.i("groups") == 1)
    return std::nullopt;
  const Shape &pk = segs[1].body.type_of(pw->inputs[1]).shape, &dk = segs[0].body.type_of(dw->inputs[1]).shape;
  if (pk[2] != 1 || pk[3] != 1 || dk[1] != 1 || pw->attrs.ints("strides") != std::vector<int64_t>{1, 1}) return std::nullopt;
  auto weight = segment_weight(body, segs[1], *pw);
  if (!weight) return std::nullopt;
  return Projection{dw, pw, *weight, segment_weight(body, segs[0], *dw).value_or(std::make_pair(std::string(), std::vector<int64_t>{}))};
}

/**
 * The chain tile in NCHW16c (blocked_chain_tile_sketch) for a depthwise conv2d_nchwc and the 1x1
 * conv2d_nchwc after it (an inverted residual's projection): blocks of one output row (so the
 * box of every channel block stays small: 576 channels x 14 columns, 32 KiB), the 1x1 conv's
 * default register tile (its channel blocks, at most the row's pixels), the depthwise conv's
 * default columns, its padded input inline as in its own kernel.
 */
BlockedChainTileSketch blocked_chain_tile_knobs(const Projection &pr, const std::vector<KernelSchedule> &defaults) {
  int64_t b = pr.pw->type.shape[4], OB = pr.pw->type.shape[1], W = pr.pw->type.shape[3];
  BlockedChainTileSketch knobs;
  knobs.rows = 1;
  knobs.blocks = 1;
  for (int64_t k = 1; k <= std::max<int64_t>(1, defaults[1].oc_block / b); ++k)
    if (OB % k == 0) knobs.blocks = k;
  knobs.pixels = std::min<int64_t>(std::max(1, defaults[1].px_block), knobs.rows * W);
  knobs.columns = std::max(1, defaults[0].px_block);
  return knobs;
}

std::optional<std::vector<Step>> blocked_chain_tile_default(const Graph &body, const std::vector<Segment> &segs, const std::vector<KernelSchedule> &defaults) {
  auto pr = blocked_projection(body, segs);
  if (!pr) return std::nullopt;
  auto naive = lower_naive(body, "k", KernelSchedule{});
  if (!naive) return std::nullopt;
  return replayable(*naive, blocked_chain_tile_sketch(*naive, pr->weight.first, pr->weight.second, pr->depthwise_weight.first,
                                                      pr->depthwise_weight.second, blocked_chain_tile_knobs(*pr, defaults)));
}

/**
 * A chain's step list: in NCHW16c, an expansion's blocked expand tile or a projection's blocked
 * chain tile (above); an NCHW expansion's expand tile; else, for a conv and a 1x1 conv on
 * pixel lanes, the chain tile sketch's (issue 11's anchors at a tile); or nothing where neither
 * fits. The chain tile takes the 1x1 conv's default
 * register tile (its channels, vectors and lanes); blocks of rows as below; the padded input per
 * channel of the block's box. Measured on MobileNetV2's first depthwise + 1x1 pair (112x112, 32
 * channels to 16; scratch program, both timed alternating, AVX-512, 2 threads): 1, 2, 4, 7, 8,
 * 14 and 56 rows 1.46, 1.03, 0.90, 0.88, 0.88, 1.09 and 1.14 of the pair apart; on the pairs at
 * 56x56 and 28x28, 7 rows 0.86-1.04 where 8 rows (56x56) gave 0.96-1.07 and 4 rows 0.87-1.22.
 */
std::optional<std::vector<Step>> chain_tile_default(const Graph &body, const std::vector<Segment> &segs, const std::vector<KernelSchedule> &defaults,
                                                    const Target &target) {
  if (segs.size() != 2) return std::nullopt;
  if (auto steps = blocked_expand_tile_default(body, segs, defaults)) return steps;
  if (auto steps = blocked_chain_tile_default(body, segs, defaults)) return steps;
  if (auto steps = expand_tile_default(body, segs, target)) return steps;
  if (!defaults[1].pixel_vectors) return std::nullopt;
  // A depthwise conv first: its box is cheap to compute per block (a 1x1 conv's, with every input
  // channel per element, ran 3.3-3.9x slower than apart on MobileNetV2's project-expand pairs).
  bool depthwise = false;
  for (const Node &n : segs[0].body.nodes)
    if (n.op == "nn.conv2d") depthwise = n.attrs.i("groups") > 1 && segs[0].body.type_of(n.inputs[1]).shape[1] == 1;
  if (!depthwise) return std::nullopt;
  const Node *pw = segment_anchor(segs[1]);
  if (!pw || pw->op != "nn.conv2d") return std::nullopt;
  auto weight = segment_weight(body, segs[1], *pw);
  if (!weight) return std::nullopt;
  int64_t H = pw->type.shape[2];
  ChainTileSketch knobs;
  knobs.oc_block = defaults[1].oc_block, knobs.pixel_vectors = std::max(1, defaults[1].px_block), knobs.lanes = defaults[1].vector_width;
  // The most rows up to 7 (the depthwise conv's register tile: rows whose windows overlap share
  // their loads) that divide the height into two blocks or more.
  knobs.rows = 1;
  for (int64_t r = 1; r <= std::min<int64_t>(7, H / 2); ++r)
    if (H % r == 0) knobs.rows = r;
  auto naive = lower_naive(body, "k", KernelSchedule{});
  if (!naive) return std::nullopt;
  return replayable(*naive, chain_tile_sketch(*naive, weight->first, weight->second, knobs));
}
}  // namespace

std::vector<SketchPoint> chain_tile_points(const Graph &body, const Target &target) {
  auto segs = split_segments(body);
  if (!segs) return {};
  auto pr = blocked_projection(body, *segs);
  if (!pr) return {};
  auto naive = lower_naive(body, "k", KernelSchedule{});
  if (!naive) return {};
  std::vector<KernelSchedule> defaults;
  for (const Segment &g : *segs) defaults.push_back(default_schedule(g.body, target));
  return blocked_chain_tile_sketches(*naive, pr->weight.first, pr->weight.second, pr->depthwise_weight.first, pr->depthwise_weight.second,
                                     blocked_chain_tile_knobs(*pr, defaults), target.lanes, target.vector_registers);
}

int64_t default_winograd_tile(const Node &n) {
  // NCHW16c from 14x14 outputs up, NCHW from 28x28 (default_schedule says why).
  int64_t pixels = n.type.shape[2] * n.type.shape[3];
  return pixels >= (conv_block(n) > 0 ? 14 * 14 : 28 * 28) ? 4 : 2;
}

bool can_split_rows(const Graph &body, int parts) {
  const Shape &out = body.type_of(body.outputs[0]).shape;
  if (parts < 2 || (out.size() != 4 && out.size() != 5) || out[2] % parts != 0 || is_chain(body)) return false;
  for (const Node &n : body.nodes) {
    if (!is_anchor_op(n.op)) continue;
    bool pool = n.op == "nn.max_pool2d" || n.op == "nn.avg_pool2d";
    // An NCHW 1x1 conv over enough pixels for the pixel lanes of every target (default_schedule).
    bool pixel_lanes = is_conv_op(n.op) && conv_block(n) == 0 && pointwise_eligible(body, n) && n.type.shape[2] * n.type.shape[3] >= 4 * 3 * 16;
    // A conv2d_nchwc on Winograd F(m x m) (the default's m): runs of whole rows of m x m tiles.
    int64_t m = default_winograd_tile(n), rows = n.type.shape[2];
    bool winograd = is_conv_op(n.op) && conv_block(n) > 0 && winograd_eligible(body, n);
    bool tile_rows = winograd && rows % m == 0 && (rows / m) % parts == 0;
    bool conv = is_conv_op(n.op) && (n.attrs.i("groups") > 1 || (conv_block(n) > 0 && !winograd) || pixel_lanes || tile_rows);
    if (!pool && !conv) return false;
  }
  return true;
}

bool splits_rows(const Graph &body, const KernelSchedule &s) {
  if (has_rows_across_threads(s.steps) || has_row_blocks_parallel(s.steps)) return true;
  if (!s.segments.empty() || s.winograd || s.parallel != KernelSchedule::Parallel::kPx) return false;
  return std::any_of(body.nodes.begin(), body.nodes.end(), [](const Node &n) { return is_conv_op(n.op) && n.attrs.i("groups") == 1; });
}

KernelSchedule default_schedule(const Graph &body, const Target &target, int row_parts) {
  KernelSchedule s;
  if (is_chain(body))
    if (auto segs = split_segments(body)) {
      for (const Segment &g : *segs) s.segments.push_back(default_schedule(g.body, target));
      if (auto steps = chain_tile_default(body, *segs, s.segments, target)) {
        // The knobs beside the steps are unused; the 1x1 conv's vector width, as its tiles have, is what they print.
        s.vector_width = s.segments[1].vector_width;
        s.steps = *steps, s.segments.clear();
      }
      return s;
    }
  s.vector_width = target.lanes;
  s.oc_block = 0;  // only conv and dense have channel blocks; set below
  bool rows = row_parts > 1 && can_split_rows(body, row_parts);
  // The widest vector that divides the channels (down to 8 lanes), two of them per block where
  // they divide too; the accumulators take what is left of the registers after the weight
  // vectors and the broadcast input value.
  auto block = [&](int64_t channels) {
    for (int v = target.lanes; v >= 8; v /= 2) {
      if (channels % (2 * v) == 0) return std::make_pair(v, 2 * v);
      // Three 8-lane vectors where two do not divide (24, 72, 120 channels): each broadcast input
      // feeds three FMAs instead of one (1x1 conv 144->24 at 56x56: 0.11 against 0.18 ms on AVX2).
      if (v == 8 && channels % (3 * v) == 0) return std::make_pair(v, 3 * v);
      if (channels % v == 0) return std::make_pair(v, v);
    }
    return std::make_pair(target.lanes, 0);
  };
  for (const Node &n : body.nodes) {
    bool conv = is_conv_op(n.op);
    if (!conv && n.op != "nn.dense") continue;
    auto [v, ob] = block(conv ? conv_out_channels(n) / n.attrs.i("groups") : n.type.shape.back());
    if (n.inputs[1].kind != ValueId::Kind::kInput) ob = 0;  // a computed weight cannot be packed at load time
    // conv2d_nchwc: whole channel blocks per register block.
    if (int64_t b = conv_block(n); b > 0) {
      v = std::min<int>(v, static_cast<int>(b));  // a vector within one channel block
      if (ob % b != 0) ob = static_cast<int>(b);
    }
    if (ob == 0 && conv && n.attrs.i("groups") > 1) {
      // Depthwise and other narrow groups: the loop sketch's row tile (direct_steps in Lower.cpp:
      // px_block rows x the vector, the window unrolled so rows whose windows overlap share
      // loads); 8 rows where they divide a plane wider than 28, else 7; on 16 registers 2 rows
      // where a row takes several vectors. The padded input is copied per channel plane (written
      // and reread while in L1/L2; a strided conv's copy split by phase), but stays at root at
      // 7x7 (the 7x7 default before: 0.72 of the template's share in the model) and at 14x14
      // under a 5x5 window (EfficientNet-B0's three such groups 0.84-0.88 of the per-plane copy
      // in the model on AVX-512, level on AVX2; 3x3 windows at 14x14 lost 1.19-1.27 at root,
      // though 0.79-0.96 alone; 2 rows there lost 1.2-1.6).
      // Against the template this replaced (Zen 5, 2 threads, `bench --json`, 6 rounds ABBA, the
      // depthwise groups' time over the others' in each run), before the 5x5 rule: MobileNetV2
      // 0.984 on AVX-512 and 0.909 on its AVX2 kernels, EfficientNet-B0 1.020 and 1.002 (end to
      // end 0.994, 0.986); the 5x5 rule then took 0.970 and 0.987 of EfficientNet-B0's share. By
      // group on AVX-512 the stride-2 convs to 56x56 and 28x28 gain (0.83-0.93), the stride-2
      // convs to 14x14 and 7x7 lose (1.14, 1.19), and EfficientNet-B0's 3x3 14x14 planes lose
      // 1.05-1.12 (a 14-lane vector is not a native width).
      int64_t oh = n.type.shape[2], ow = n.type.shape[3];
      if (int64_t b = conv_block(n); b == 0) {
        bool wide = ow > target.lanes;
        s.vector_width = target.lanes;
        s.pad_at_root = ow <= 7 || (ow <= 14 && body.type_of(n.inputs[1]).shape[3] >= 5);
        s.px_block = target.vector_registers < 32 && wide ? 2 : oh % 8 == 0 && ow > 28 ? 8 : 7;
      } else {
        // In NCHW16c (nchwc-layout) a tile is px_block columns of an output row x one block's
        // lanes, the padding recomputed at the reads: a 14-column row whole with 32 registers, else
        // 7 columns (MobileNetV2, AVX-512, 2 threads, `bench --json`, 7 rounds near, the groups'
        // medians in ms, 7 / 14 columns: 384 channels at 14x14 0.0628 / 0.0525 for four convs,
        // 576 at 14x14 0.0586 / 0.0506 for two, 192 at 28x28 0.0545 / 0.0629 for two, 960 at 7x7
        // 0.0341 / 0.0357 for three, the same kernel; stored at root, the padded copy cost more than
        // the padding at the reads).
        s.vector_width = static_cast<int>(std::min<int64_t>(b, target.lanes));
        s.pad_at_root = false;
        s.px_block = ow == 14 && target.vector_registers >= 32 ? 14 : 7;
      }
    }
    int regs = target.vector_registers;
    bool pointwise = conv && body.type_of(n.inputs[1]).shape[2] * body.type_of(n.inputs[1]).shape[3] == 1;
    // A 1x1 conv reads each input value for one FMA per channel vector: with 32 registers one
    // vector of channels by 28 pixels beats two by 14 (measured: 64->256 at 56x56 with a residual,
    // 0.50 vs 0.84 ms); with 16 registers two vectors by 6 pixels stay best.
    // In NCHW16c a pixel's channels are contiguous, so four channel vectors by 6 pixels (MLAS's
    // NCHWc pointwise shape) take fewer loads per FMA, where there are pixels enough. Measured
    // alone, AVX-512, 2 threads (ms, 1 x 28 / 4 x 6 / NCHW pixel vectors): 64->256 at 56x56 with a
    // residual 0.51/0.31/0.39, 128->512 at 28x28 with a residual 0.41/0.27/0.32. Where four do not
    // divide the channels, three by 9 or two by 14 (as MLAS takes fewer filter blocks); on planes
    // of fewer pixels (7x7: four by 6 streams the weight once per 6 pixels) two by 14 where the core
    // issues two 512-bit FMAs a cycle (Target::wide_fma_pipes): there 1 x 28 (29 loads for 28 FMAs)
    // waits on its loads, while a Zen 4 core (one 512-bit FMA a cycle) keeps up with them and ran
    // MobileNetV2's 7x7 convs to 960 channels 0.220 ms with 1 x 28 against 0.243 with 2 x 14.
    // One by 28, the rule before, lost on every such conv on Sapphire Rapids: in one process
    // (`bench --against`, the default schedules with each rule, 2 threads, 8 rounds of 20 runs),
    // MobileNetV2's 1x1 convs to 96, 32 and 160-1280 channels 1.16-1.29 of the new time and the
    // model 1.057 (1.098 in a second run), EfficientNet-B0 1.082, ResNet-50's 7x7 ones (2048 and 512
    // channels) 1.22-1.28, ResNet-18's 7x7 downsample 1.17-1.22; 2000-trial tunings there had
    // picked 3 x 8-9 and 2 x 11-14.
    int64_t pixels = conv ? n.type.shape[2] * n.type.shape[3] : 0;
    bool blocked = regs >= 32 && conv_block(n) > 0 && ob > 0;  // a conv2d_nchwc with a packed weight, 32 registers
    bool blocked_pointwise = blocked && pointwise;
    bool big_plane = pixels >= 4 * 3 * v;
    bool strided = conv && n.attrs.ints("strides")[0] >= 2;
    int64_t out_channels = conv ? conv_out_channels(n) : 0;
    int nchwc_vecs = 0;  // channel vectors of a blocked 1x1 conv's register tile (0: the rules for the rest)
    // But where the weight a thread streams (all of it where threads split the pixels, below: more
    // input than output channels; its share where they split the channels) is half the L2 or more,
    // it comes from the L3 once per pixel tile: two vectors by 14 stream it 14 / 6 times less often.
    // In one process (`bench --against`, Sapphire Rapids, L2 2 MiB, 2 threads, 8 rounds, a scratch
    // switch) ResNet-50's 1024 -> 512 at 14x14 (2 MiB, split by pixels) 0.85-0.86 of the time with
    // four by 6, its 1024 -> 256 0.95-0.97, the stride-2 512 -> 1024 0.97 (split by channels); its
    // 256 -> 1024 (1 MiB split by channels, 512 KiB a thread) was 1.04 with two by 14, and keeps four.
    // 2000-trial tunings had chosen two by 14 for the 1024 -> 512 (0.76 of four by 6 alone).
    int64_t in_channels = conv ? body.type_of(n.inputs[1]).shape[1] : 0;
    bool streamed = pointwise && static_cast<int64_t>(body.type_of(n.inputs[1]).nbytes()) / (in_channels > out_channels ? 1 : target.threads) >= target.l2_bytes / 2;
    for (int k : {4, 3, 2})
      if (blocked_pointwise && !nchwc_vecs && (big_plane || (k == 2 && target.wide_fma_pipes >= 2)) && out_channels % (k * v) == 0 &&
          (k == 2 || !streamed))
        nchwc_vecs = k;
    if (nchwc_vecs) ob = nchwc_vecs * v;
    else if (pointwise && regs >= 32 && ob == 2 * v) ob = v;
    // A strided direct conv2d_nchwc (ResNet's 3x3 stride 2; stride 1 takes Winograd) on a plane of
    // 192 pixels or more: four channel vectors by 6 pixels as well, each input value loaded for four
    // FMAs instead of two. Against two by 14 in one process (`bench --against`, Sapphire Rapids,
    // 2 threads, 8 rounds, a scratch switch): to 28x28 1.24 (ResNet-18) and 1.37 (ResNet-50) of the
    // new time, to 14x14 1.03-1.04, to 7x7 0.89-0.90 (the weight, streamed once per pixel block,
    // dominates there: left at two by 14). Unrolling the window's columns too was within the
    // host's noise (0.97-1.10 by group).
    if (blocked && !pointwise && n.attrs.i("groups") == 1 && big_plane && strided && out_channels % (4 * v) == 0)
      ob = 4 * v;
    // A 1x1 conv over enough pixels takes pixel vectors (why: below, where it applies).
    auto pixel_lanes = [&] {
      int64_t out = n.type.shape[1], in = body.type_of(n.inputs[0]).shape[1];
      // Four vectors of pixels where they divide the plane and three do not (56x56: 196 vectors, 49
      // tiles of 4 against 65 of 3 and a tail), with as many channels as fit beside them (6 on
      // AVX-512): in one process against 8 x 3 (`bench --against`, Sapphire Rapids, 2 threads, 8
      // rounds, a scratch switch), MobileNetV2's NCHW 1x1 convs at 56x56 1.06-1.11 of the new time,
      // its stem's patches 1.04, EfficientNet-B0's 1.03-1.13; MobileNetV2 end to end 1.016. Not
      // measured with 16 registers, which keep 4 x 3.
      int pxb = regs >= 32 && pixels % (4 * target.lanes) == 0 && pixels % (3 * target.lanes) != 0 ? 4 : 3;
      int pob = std::min(8, (regs - 4) / pxb);
      while (pob > 1 && out % pob != 0) --pob;
      s.pixel_vectors = true, s.pixel_epilogue = false, s.winograd = 0, s.unroll_kx = false;
      s.oc_block = pob, s.px_block = pxb, s.vector_width = target.lanes;
      s.parallel = in > out ? KernelSchedule::Parallel::kPx : KernelSchedule::Parallel::kOc;
    };
    s.oc_block = ob;
    if (ob == 0) {
      // Channels that no vector divides (ShuffleNetV2's 58, 116, 232): a 1x1 conv still takes
      // pixel lanes, its channel tile a divisor of them (alone, AVX-512, 2 threads: 58->58 at
      // 28x28 0.070 ms on the loop sketch).
      if (conv && pointwise_eligible(body, n) && pixels >= 4 * 3 * target.lanes) pixel_lanes();
      continue;
    }
    s.vector_width = v;
    int vecs = ob / v;
    int px = vecs > 1 ? (regs - 1 - vecs) / vecs : std::min(regs - 4, 28);
    if (conv) px = static_cast<int>(std::min<int64_t>(px, n.type.shape[2] * n.type.shape[3]));  // no block wider than the image
    // A dense layer's tile is px_block rows x ob units (a GEMM micro-kernel: each weight vector
    // loaded once for px_block rows); with one row (batch-1 classifiers) the template's 1 x ob.
    if (!conv) px = static_cast<int>(std::min<int64_t>(px, n.type.numel() / n.type.shape.back()));
    s.px_block = px;
    // Channel blocks that do not split evenly over the threads (3 blocks on 2 threads: one idles a
    // third of the time) are worse than splitting the pixels: 0.27 against 0.16 ms for that 1x1 conv.
    int64_t units = conv ? n.type.shape[0] * conv_out_channels(n) / ob : n.type.shape.back() / ob;
    if (conv && units % target.threads != 0 && units < 8 * target.threads) s.parallel = KernelSchedule::Parallel::kPx;
    // As for NCHW's pixel vectors below, threads split the larger side: with more input channels
    // than output channels each thread then reads half the input, just written by the kernel
    // before (alone, input rewritten and weights evicted before each run, ms, channel blocks /
    // pixel blocks): 256->128 at 56x56 0.78/0.56, 512->128 at 28x28 0.35/0.28. In ResNet-50 at
    // 14x14, 1024->256 gains too (0.36 -> 0.27 ms), 1024->512 loses (0.60 -> 0.74); the sum gains.
    // Not on 7x7 planes: four pixel blocks of 14, 14, 14 and 7 split unevenly (ResNet-50's 2048 -> 512
    // at 7x7: 0.89 ms over the pixels against 0.67 over the channels, in the model).
    // So does a strided 1x1 conv (ResNet's downsample shortcuts), which reads every other pixel of
    // every other row: split by channels, each thread reads all of them. In one process (`bench
    // --against`, Sapphire Rapids, 2 threads, 8 rounds, a scratch switch, two runs, against the
    // median of every group's ratio in the same run: 0.985-0.996) ResNet-18's 128 -> 256 to 14x14
    // 0.82-0.87, its 64 -> 128 to 28x28 0.98, ResNet-50's 256 -> 512 0.93-0.95 and 512 -> 1024
    // 0.90-0.94 (2000-trial searches chose the pixel split for it: 0.83 of the default alone).
    if (nchwc_vecs && big_plane && (in_channels > out_channels || strided)) s.parallel = KernelSchedule::Parallel::kPx;
    // With 16 registers (two channel vectors by 6 pixels) the strided ones gain the same way: on a Zen 3
    // host (AVX2, 2 threads, `bench --db D --against untuned`, D holding this point for each strided
    // conv2d_nchwc, 8 rounds in one process) ResNet-50's 512 -> 1024 to 14x14 1.23x and 256 -> 512
    // to 28x28 1.12x, ResNet-18's 128 -> 256 to 14x14 1.20x, its 64 -> 128 to 28x28 level.
    if (!blocked && conv_block(n) && pointwise && strided && pixels >= 192) s.parallel = KernelSchedule::Parallel::kPx;
    // And the unstrided ones with more input than output channels whose input is larger than the L2
    // but whose half of it is not (ResNet-50's 1024-channel convs at 14x14 on a 512 KiB L2): split by
    // pixels each thread's input stays in its L2. Zen 3, AVX2, the same comparison (one record per
    // such conv): ResNet-50's five 1024 -> 256 convs 1.12-1.18x, its 1024 -> 512 1.12x, end to end
    // 1.016. Not where all the input fits (MobileNetV2's 384 and 576 channels at 14x14, level) nor
    // where half of it does not (ResNet-50's 512 channels at 28x28: 1.04-1.09x with the defaults
    // around it, 0.79x in a tuned plan whose neighbours split pixels).
    int64_t in_bytes = conv ? static_cast<int64_t>(body.type_of(n.inputs[0]).nbytes()) : 0;
    if (!blocked && conv_block(n) && pointwise && !strided && in_channels > out_channels && in_bytes > target.l2_bytes &&
        in_bytes <= target.l2_bytes * target.threads)
      s.parallel = KernelSchedule::Parallel::kPx;
    // Unrolling the kernel columns pays with 16 registers (measured: 3x3 conv at 28x28, 1.19 vs
    // 1.32 ms on AVX2); with 32 the unrolled body's scheduling spills accumulators (1.25 vs 0.76 ms).
    if (conv && body.type_of(n.inputs[1]).shape[3] > 1) s.unroll_kx = regs <= 16;
    // Storing the epilogue one channel at a time, pixels as the vector, is contiguous in NCHW
    // (measured on both ISAs: equal or faster, up to 1.7x on a 1x1 conv with a residual add).
    if (conv) s.pixel_epilogue = epilogue_is_pixelwise(body, static_cast<int>(&n - body.nodes.data()));
    // Winograd against the direct kernel, ResNet's 3x3 stride-1 convs, 2 threads (measured alone
    // with the measurer, ms, direct / F(2x2) / F(4x4)):
    //   AVX-512  56x56x64 0.78/0.97/0.53  28x28x128 0.72/0.50/0.37  14x14x256 0.68/0.45/0.47  7x7x512 0.82/0.61/0.89
    //   AVX2     56x56x64 1.19/0.98/0.58  28x28x128 1.18/0.65/0.46  14x14x256 1.13/0.62/0.59  7x7x512 1.33/0.89/0.99
    // Winograd is the default where F(2x2) beats the direct kernel (on AVX-512 from 128 input
    // channels up, and in NCHW16c). Where the output has 28x28 pixels or more it is F(4x4): there
    // its transformed activations are smaller than F(2x2)'s (36 values per 16 outputs against 16
    // per 4: 3.6 against 6.4 MB at 56x56x64) and its transformed weights (2.25x F(2x2)'s) are
    // read by 49 tiles or more. At 7x7 the weights dominate: F(4x4) loses there alone; at 14x14
    // it gains in NCHW16c (below) and stays F(2x2) in NCHW, where the template lost alone. End to
    // end, 3 rounds alternating, medians (ms, Zen 5, 2 threads; F(2x2) everywhere / F(4x4) from
    // 28x28): ResNet-18 5.67/4.77, its AVX2 kernels 9.99/8.66, in NCHW (no nchwc-layout)
    // 7.18/6.90; ResNet-50 15.93/15.17. F(4x4) at 14x14 too had lost on ResNet-50 then
    // (15.89 against 15.57), before Winograd in NCHW16c became a step list; since, it gains
    // in NCHW16c (Zen 4, 2 threads, both plans in one process, alternating, F(4x4) from 14x14 /
    // from 28x28): ResNet-18 0.973-0.986 second and 1.021-1.025 first (its AVX2 kernels
    // 0.982-0.990 and 1.010-1.014), ResNet-50 0.982-0.986 near (its 14x14 3x3 convs 0.86-0.91,
    // the 1x1 convs after them 1.04-1.06). F(4x4) everywhere had lost end to end (ResNet-50 on a Rocket Lake
    // Xeon, 24.3-25.0 against 22.7-23.2 ms), with the 7x7 convs.
    if (winograd_eligible(body, n) && ob > 0 && (regs <= 16 || body.type_of(n.inputs[1]).shape[1] >= 128 || conv_block(n)))
      s.winograd = static_cast<int>(default_winograd_tile(n));
    // A 1x1 conv over enough pixels takes pixel vectors: ob channels x 3 vectors of pixels, as
    // many channels as the registers hold next to the 3 input vectors and a broadcast weight
    // (8 on AVX-512, 4 on AVX2). Measured alone, AVX-512, 2 threads (ms, channel vectors with
    // the pixel epilogue / pixel vectors): ResNet-50's 64->256 at 56x56 with a residual
    // 0.55/0.34, 256->64 at 56x56 0.63/0.34, 512->128 at 28x28 0.45/0.32, 1024->256 at 14x14
    // 0.36/0.30, EfficientNet's 16->96 at 112x112 with SiLU 0.61/0.36; but 2048->512 at 7x7
    // 0.35/0.44: 49 pixels make one block and a tail that reads every weight again. Threads
    // split the larger side: pixel blocks when there are more input channels than output
    // channels (each pixel block's input then stays in cache), else channel blocks.
    if (pointwise_eligible(body, n) && pixels >= 4 * 3 * v) pixel_lanes();
    // A stem whose windows are short (MobileNetV2's and EfficientNet's 3x3 stride 2 on 3 channels:
    // 27 values) takes its patches on pixel vectors (im2col, then the 1x1 conv's tiles over them),
    // computed per output row into a local box, never stored (pad_at_root off: each row block a
    // parallel unit). On channel lanes each tile's 27 steps feed a transposing epilogue: 30% of
    // peak. In the model (`autotune bench --json`, binaries alternating, the stem's time per
    // round, Zen 4, 2 threads): AVX-512 kernels, the patches stored 0.87 of the row tiles (8
    // rounds), per row 0.80 (MobileNetV2) and 0.85 (EfficientNet-B0) of stored (8 rounds); AVX2
    // kernels, per row 0.70 and 0.62 of the row tiles (6 rounds). ResNet's 7x7 stem (147 values,
    // its row tiles at 87% of peak) keeps them: per row 1.04-1.05 of them.
    if (patches_eligible(body, n) && pixels >= 4 * 3 * v) {
      const Shape &w = body.type_of(n.inputs[1]).shape;
      if (w[1] * w[2] * w[3] < 64) pixel_lanes(), s.pad_at_root = false;
    }
    // Rows over the threads (rows_by_thread): a conv2d_nchwc's or an NCHW 1x1 conv's pixel blocks
    // are runs of rows.
    if (rows && (conv_block(n) || s.pixel_vectors)) s.parallel = KernelSchedule::Parallel::kPx;
    // A padded conv reads its input in place with the padding in its tiles (row_tile_sketch: no
    // copy stage, no barrier) where a row has interior tiles between its two edge tiles and its
    // input has few channels (a stem); else it copies. Measured alone, ResNet-50's 3x3 convs,
    // AVX-512, 2 threads, 32 x 14 tiles, alternating (ms, copy / in the tiles): NCHW 56x56x64
    // 0.696/0.665, 28x28x128 0.634/0.624, 14x14x256 0.605/0.651, 7x7x512 0.644/0.825; NCHW16c
    // 56x56x64 0.675/0.632, 28x28x128 0.608/0.618, 14x14x256 0.612/0.674, 7x7x512 0.644/0.833.
    // But in the model, their input just written by the kernel before, ResNet-50's three NCHW
    // 56x56x64 convs were slower in the tiles (6 rounds alternating, ms: 0.741/0.916,
    // 0.712/0.742, 0.717/0.748), while the stems gained
    // (ResNet's 7x7 stride 2 on 3 channels 0.851 -> 0.744 ms; alone MobileNetV2's 3x3 stride 2
    // on 3 channels 0.145 -> 0.104 ms): the copy of a 3-channel image is cheap, its stage and
    // barrier are not. A strided conv2d_nchwc with 16 registers keeps the copy: its tiles read every
    // other column, and on a Zen 3 host (AVX2, 2 threads, the same in-process comparison as the
    // strided 1x1 convs' pixel split above, 8 rounds) the copy ran ResNet-50's 3x3 stride-2 conv to
    // 28x28 1.10x and ResNet-18's 1.18x faster than the padding in the tiles (end to end, with the
    // pixel split: ResNet-50 1.028, ResNet-18 1.008, 1.017 over the rounds with the cores near).
    if (conv) {
      const auto &pads = n.attrs.ints("padding");
      bool padded_stem = (pads[0] || pads[1] || pads[2] || pads[3]) && body.type_of(n.inputs[1]).shape[1] < 8;
      KernelSchedule rows = s;
      rows.pad_at_root = false;
      // A stem's row tiles (NCHW: the tile sketch's row tiles as steps) do not unroll the kernel
      // columns: unrolled, AVX2 kernels on this host ran (ms, alone, 5 rounds) ResNet-50's 7x7 stem
      // 1.56 against 0.97, GoogLeNet's 1.60/0.96, EfficientNet-B0's 3x3 0.279/0.233, MobileNetV2's
      // 0.112/0.110; not unrolled they match the NCHW rows template that unrolled them.
      if (!conv_block(n)) rows.unroll_kx = false;
      // A stem with a long window (ResNet's 7x7 on 3 channels: 147 values; the short ones take
      // patches above) on 32 registers: two channel vectors by 6 pixels, the window's columns
      // unrolled, threads over channel and pixel blocks, the padding recomputed at its reads (no
      // row tiles). Both of ResNet-18's 2000-trial searches chose it (0.82-0.89 of the row tiles
      // alone); in one process against them (`bench --against`, Sapphire Rapids, 2 threads, 8
      // rounds, a scratch switch) ResNet-18's stem 0.870, ResNet-50's 0.864 (end to end 0.993 and
      // 0.983); 7, 8 and 9 pixels 0.83-0.91, 14 and 16 1.18-1.20, 4 0.96. On AVX2's 16 registers the
      // same point by 6 pixels ran 1.23x the row tiles (12 accumulators, the two weight vectors and a
      // broadcast leave no register for the unrolled window); by 4 pixels it is the fastest there. A
      // 500-trial search on a Zen 3 host (AVX2) found it at 0.66 of the row tiles alone; in one
      // process against them (`bench --db --against untuned`, 2 threads, a database holding that one
      // record, 4-6 rounds): ResNet-18's stem 1.45-1.57x, ResNet-50's 1.18x (end to end 1.036-1.061
      // and 1.005); against it the same way, by 2, 3, 5 and 7 pixels 1.40-1.92x, one vector by 7
      // 1.34x, four by 2 1.29x.
      if (padded_stem && !conv_block(n) && !s.pixel_vectors && regs >= 16 && s.oc_block == 2 * v) {
        s.px_block = regs >= 32 ? 6 : 4, s.unroll_kx = true, s.parallel = KernelSchedule::Parallel::kOcPx, s.pad_at_root = false;
      } else if ((conv_block(n) || padded_stem) && n.type.shape[3] >= 4 * s.px_block && rows_eligible(n, rows) &&
                 !(conv_block(n) && strided && regs < 32)) {
        s = rows;
      }
    }
    // Winograd in NCHW16c as steps on its naive nests (the template's algorithm and F(m) rule; its
    // GEMM a register tile of two channel vectors by 14 tiles, 16 channels by 6 with 16 registers;
    // the padded input recomputed at its reads, so no copy stage and no barrier before the input
    // transform). In the model (Zen 5, 2 threads, 6 rounds ABBA, the Winograd groups' time over the
    // others' in each run): AVX-512 ResNet-50 0.932, ResNet-18 0.929, GoogLeNet 0.972 (its convs with
    // one channel vector per tile, 208 and 48 channels, take 28 tiles: 0.92 each, 1.08 with 16),
    // DenseNet-121 0.86-0.93 by round; AVX2 kernels ResNet-50 0.993, ResNet-18 1.010.
    // 32 x 8 tiles (as fast alone) lost in the model on the 14x14 convs, the copy at root on the
    // 56x56 ones.
    if (s.winograd && conv_block(n)) {
      // The template's knobs ride along, unused by the steps. Without the steps they are lowered as
      // the sketch's list for them (winograd_steps_of_knobs: the padded input at root), not this one.
      KernelSchedule w = s;
      int64_t b = conv_block(n), ob = std::max<int64_t>(b, (2 * target.lanes + b - 1) / b * b);
      if (conv_out_channels(n) % ob) ob = b;
      // As many tiles as the registers hold next to the channel vectors and a broadcast (32 x 14 on
      // AVX-512, 16 x 6 on AVX2), at most the tiles there are, rounded down to a width the sketch has.
      int64_t m = s.winograd, tiles = ((n.type.shape[2] + m - 1) / m) * ((n.type.shape[3] + m - 1) / m);
      // Four channel vectors by 6 tiles where the plane has 192 tiles or more (ResNet's 56x56 convs
      // on F(4x4): 196) and four vectors divide the channels, with 32 registers: the GEMM's 24
      // accumulators take 4 loads and 6 broadcasts a step, not 2 and 14. In the model (Sapphire
      // Rapids, AVX-512, 2 threads, both defaults compiled in one process by `bench --against`,
      // 8 rounds alternating): the 56x56 convs 0.93-0.96 of the old time on ResNet-18, 0.86-0.93 on
      // ResNet-50 (end to end 0.986 and 0.991); at 28x28 (49 tiles) 1.06, at 14x14 and 7x7 (16)
      // 1.12-1.15, so smaller planes keep two vectors.
      if (regs >= 32 && tiles >= 192 && conv_out_channels(n) % (4 * target.lanes) == 0) ob = 4 * target.lanes;
      int64_t vecs = ob / target.lanes;
      // Rows over the threads (rows_by_thread): each stage's runs of whole tile rows.
      int parts = rows && conv_block(n) ? row_parts : 0;
      int64_t fit = std::min<int64_t>(vecs > 1 ? (regs - 1 - vecs) / vecs : regs - 4, parts ? tiles / parts : tiles), px = 1;
      for (int64_t width : kWinogradTiles)
        if (width <= fit) px = width;
      WinogradSketch knobs{.oc_block = ob, .px_block = px, .lanes = target.lanes, .pad = "inline", .row_parts = parts};
      if (take_sketch(body, w, [&](const LoweredKernel &naive) { return winograd_sketch(naive, knobs); })) return w;
    }
  }
  // Every group is its naive nest with the steps its knobs stand for (steps_of_knobs).
  if (auto steps = steps_of_knobs(body, s)) s.steps = steps.take();
  if (rows)
    if (auto split = with_rows_split(body, s, row_parts)) s = *split;
  return s;
}

std::optional<KernelSchedule> with_rows_split(const Graph &body, const KernelSchedule &s, int parts) {
  if (s.winograd || !can_split_rows(body, parts)) return std::nullopt;
  auto split = rows_across_threads(s.steps, body.type_of(body.outputs[0]).shape[2], parts);
  if (!split) return std::nullopt;
  auto naive = lower_naive(body, "k", s);
  if (!naive || !replay(*naive, *split)) return std::nullopt;
  KernelSchedule out = s;
  out.steps = *split;
  return out;
}

}  // namespace autotune
