#include "codegen/Sketch.h"

#include <algorithm>
#include <map>
#include <set>

#include "codegen/Transform.h"

namespace autotune {

using namespace loop;

void naive_loops(const Stmt &s, std::vector<std::pair<std::string, int64_t>> &outs, std::vector<std::pair<std::string, int64_t>> &reds) {
  if (!s) return;
  if (s->kind == StmtKind::kFor) {
    int64_t ex = as_int(s->extent).value_or(0);
    if (s->var.size() > 1 && s->var[0] == 'i' && std::all_of(s->var.begin() + 1, s->var.end(), ::isdigit)) outs.emplace_back(s->var, ex);
    if (s->var.size() > 1 && s->var[0] == 'k' && std::all_of(s->var.begin() + 1, s->var.end(), ::isdigit)) reds.emplace_back(s->var, ex);
  }
  for (const Stmt &b : s->body) naive_loops(b, outs, reds);
}

namespace {

/** Whether every store in loop `name` of `body` updates a one-element local buffer (a row's maximum or sum). */
bool folds_into_local(const loop::Stmt &body, const std::string &name) {
  auto l = find_loop(body, name);
  if (!l) return false;
  std::vector<loop::Stmt> stores = stores_of(*l);
  return !stores.empty() && std::all_of(stores.begin(), stores.end(), [](const loop::Stmt &x) {
    return x->buffer->scope == loop::BufferScope::kLocal && x->buffer->size == 1;
  });
}

/**
 * The reduction loops a sketch unrolls: from the innermost out, each of 2 to 16 iterations,
 * while the iterations unrolled together stay within 64 (a 7x7 window). ViT-B/16's 16x16 patch
 * conv unrolled whole (3 x 16 x 16 around a tile of rows) left LLVM's VectorCombine running for
 * minutes on one candidate, stalling the tuner.
 */
std::vector<std::string> reductions_to_unroll(const std::vector<std::pair<std::string, int64_t>> &reds) {
  std::vector<std::string> out;
  int64_t product = 1;
  for (auto it = reds.rbegin(); it != reds.rend(); ++it) {
    if (it->second <= 1) continue;
    if (it->second > 16 || product * it->second > 64) break;
    product *= it->second;
    out.push_back(it->first);
  }
  std::reverse(out.begin(), out.end());
  return out;
}

/** Where the tile sketch's points place a conv's padded input (a point's pad coordinate indexes this). */
constexpr const char *kTilePads[] = {"root", "inline", "i2"};

/** Appends steps on one stage to a list: step(op, loop) adds one and returns it to fill in. */
struct StageSteps {
  const std::string &stage;
  std::vector<Step> &steps;
  Step *operator()(const std::string &op, const std::string &loop = "") const {
    Step s;
    s.op = op, s.stage = stage, s.loop = loop;
    steps.push_back(s);
    return &steps.back();
  }
};

/** The loops before loop `name` in the sequence that holds it, in order (a partition's parts before its largest). */
std::vector<std::string> loops_before(const Stmt &s, const std::string &name) {
  if (!s) return {};
  if (s->kind == StmtKind::kSeq) {
    std::vector<std::string> before;
    for (const Stmt &c : s->body) {
      if (c->kind != StmtKind::kFor) continue;
      if (c->var == name) return before;
      before.push_back(c->var);
    }
  }
  for (const Stmt &b : s->body)
    if (auto found = loops_before(b, name); !found.empty()) return found;
  return {};
}

/** The extents of the loops of stage `name` of `k` by loop name (empty when `k` has no such stage). */
std::map<std::string, int64_t> stage_loops(const LoweredKernel &k, const std::string &name) {
  std::map<std::string, int64_t> out;
  auto at = stage_index(k, name);
  if (!at) return out;
  std::vector<std::pair<std::string, int64_t>> loops;
  loops_of(k.stages[*at].body, loops);
  for (const auto &[loop, extent] : loops) out[loop] = extent;
  return out;
}

/** Steps fusing `loops` (outermost first, perfectly nested) of stage `stage` into one loop and making it the parallel loop. */
std::vector<Step> parallel_over(const std::string &stage, const std::vector<std::string> &loops) {
  std::vector<Step> out;
  if (loops.empty()) return out;
  std::string top = loops[0];
  for (size_t d = 1; d < loops.size(); ++d) {
    Step f;
    f.op = "fuse", f.stage = stage, f.loop = top, f.names = {loops[d], "f" + std::to_string(d)};
    out.push_back(f);
    top = f.names[1];
  }
  Step p;
  p.op = "parallel", p.stage = stage, p.loop = top;
  out.push_back(p);
  return out;
}

/**
 * Steps making `loops` of stage `stage` (outermost first; each the whole body of the one before,
 * the reduction loops `reduction` inside them) a register tile around the reduction: distribute
 * the tile over its init, update and epilogue (the innermost loop first), move the reduction
 * outside the update's tile, and vectorize the innermost loop of each of the three (unroll it
 * when `vector` is false) and unroll the others, so each accumulator stays in a register.
 */
std::vector<Step> register_tile(const std::string &stage, const std::vector<std::string> &loops, const std::vector<std::string> &reduction,
                                bool vector = true) {
  std::vector<Step> out;
  StageSteps step{stage, out};
  for (auto l = loops.rbegin(); l != loops.rend(); ++l) step("distribute", *l);
  std::vector<std::string> update = reduction;
  for (const std::string &l : loops) update.push_back(l + "_1");
  step("reorder", "")->names = update;
  for (size_t i = 0; i < loops.size(); ++i)
    for (const char *suffix : {"", "_1", "_2"}) step(i + 1 == loops.size() && vector ? "vectorize" : "unroll", loops[i] + suffix);
  return out;
}

/**
 * Steps placing a conv's padded input (the naive nest's stage `pad`) for consumer stage `stage`:
 * "root" keeps its own stage ((n, c) fused and parallel), "inline" recomputes it at every read,
 * any other value is the consumer's loop to compute it at, into a local box. A stored copy's rows
 * and columns are partitioned into the border and the inside, where the reads are plain (no clamp,
 * no select), and every column loop is vectorized (in 16-lane pieces when wider than 64).
 */
void place_pad(const LoweredKernel &naive, const std::string &stage, const std::string &where, std::vector<Step> &steps,
               const std::string &pad = "pad") {
  auto make = [](const std::string &op, const std::string &loop, const std::string &in) {
    Step x;
    x.op = op, x.stage = in, x.loop = loop;
    return x;
  };
  if (where == "inline") {
    Step x = make("compute_inline", "", stage);
    x.producer = pad;
    steps.push_back(x);
    return;
  }
  bool root = where == "root";
  std::string in = root ? pad : stage, suffix = root ? "" : "_" + where;
  // The placement and the partitions tried on the naive nest alone: they touch only the copy's
  // own loops, so the names they give are the names in the full list.
  std::vector<Step> mine;
  if (!root) {
    Step x = make("compute_at", where, stage);
    x.producer = pad;
    mine.push_back(x);
  }
  auto scratch = replay(naive, mine);
  if (!scratch) return steps.push_back(mine[0]);  // refused: the replay of the whole list says why
  Step rows = make("partition", "py" + suffix, in);
  if (auto next = apply_step(*scratch, rows)) scratch = next.take(), mine.push_back(rows);
  // The columns of every part the rows were cut into: a box whose first and last rows are inside
  // the image for some iterations of the loops around it (a block of rows) keeps a row condition
  // there, and its inside columns then read plain vectors under it instead of gathering clamped
  // columns.
  auto at = stage_index(*scratch, in);
  std::vector<std::pair<std::string, int64_t>> columns;
  if (at) loops_of(scratch->stages[*at].body, columns);
  for (const auto &[name, ex] : columns) {
    if (name.rfind("px" + suffix, 0) != 0) continue;
    Step part = make("partition", name, in);
    if (auto next = apply_step(*scratch, part)) scratch = next.take(), mine.push_back(part);
  }
  at = stage_index(*scratch, in);
  std::vector<std::pair<std::string, int64_t>> loops;
  if (at) loops_of(scratch->stages[*at].body, loops);
  // A blocked copy (conv2d_nchwc: loops pn, pc, py, px, pl) has its channel lanes innermost: they are the vector.
  bool blocked = std::any_of(loops.begin(), loops.end(), [&](const auto &l) { return l.first.rfind("pl" + suffix, 0) == 0; });
  for (const auto &[name, ex] : loops) {
    if (blocked) {
      if (name.rfind("pl" + suffix, 0) == 0 && ex >= 2) mine.push_back(make("vectorize", name, in));
      continue;
    }
    if (name.rfind("px" + suffix, 0) != 0) continue;
    if (ex > 64) {  // rows wider than a vector's 64 lanes: vectors of 16, the rest one masked vector
      Step sp = make("split", name, in);
      sp.factor = 16, sp.names = {name + "o", name + "i"};
      mine.push_back(sp);
      mine.push_back(make("vectorize", name + "i", in));
      if (ex % 16 >= 2) mine.push_back(make("vectorize", name + "i_tail", in));
    } else if (ex >= 2) {
      mine.push_back(make("vectorize", name, in));
    }
  }
  if (root) {
    Step f = make("fuse", "pn", in);
    f.names = {"pc", "pnc"};
    mine.push_back(f);
    mine.push_back(make("parallel", "pnc", in));
  }
  steps.insert(steps.end(), mine.begin(), mine.end());
}


/**
 * The register-tile sketch on conv2d_nchwc's naive nest (output loops i0 n, i1 o/b, i2 oy, i3 ox,
 * i4 o%b; reduction k0 c/b, k1 ky, k2 kx, k3 c%b): tiles of oc_block / b channel blocks x
 * px_block columns, each block's b lanes one vector (contiguous in the output and the packed
 * weight), the reduction outside the tile; reduction tiles split the channel blocks.
 */
Expected<std::vector<Step>> blocked_tile_sketch(const LoweredKernel &naive, const std::string &weight, const std::vector<int64_t> &dims,
                                                const TileSketch &knobs) {
  const KernelStage &st = naive.stages.back();
  std::vector<std::pair<std::string, int64_t>> outs, reds;
  naive_loops(st.body, outs, reds);
  if (reds.size() != 4) return make_error("the nest of stage " + st.name + " does not have the loops of a blocked conv");
  int64_t b = outs[4].second, blocks = outs[1].second, CB = reds[0].second;
  if (knobs.pixel_vectors > 0) return make_error("pixel lanes need a conv in NCHW");
  if (knobs.oc_block < b || knobs.oc_block % b || blocks % (knobs.oc_block / b))
    return make_error("oc_block " + std::to_string(knobs.oc_block) + " is not a whole number of " + std::to_string(b) + "-channel blocks dividing " + std::to_string(blocks * b));
  if (knobs.px_block < 1 || outs[3].second % knobs.px_block) return make_error("px_block " + std::to_string(knobs.px_block) + " does not divide the output width " + std::to_string(outs[3].second));
  int64_t ib = knobs.ic_block / b;
  if (knobs.ic_block && (knobs.ic_block % b || ib >= CB || CB % ib || knobs.parallel_rows))
    return make_error("reduction tiles of " + std::to_string(knobs.ic_block) + " channels need whole blocks of " + std::to_string(b) + " dividing " + std::to_string(CB * b) + " channels, rows not parallel");
  std::vector<Step> steps;
  StageSteps step{st.name, steps};
  step("split", "i1")->factor = knobs.oc_block / b, steps.back().names = {"oo", "oi"};
  Step *p = step("pack");
  p->buffer = weight, p->dims = dims, p->factor = knobs.oc_block;
  step("split", "i3")->factor = knobs.px_block, steps.back().names = {"xo", "xp"};
  step("reorder")->names = {"oo", "i2", "xo", "xp", "oi", "i4"};
  for (const char *l : {"i4", "oi", "xp"}) step("distribute", l);
  step("reorder")->names = {"k0", "k1", "k2", "k3", "xp_1", "oi_1", "i4_1"};
  if (ib) {
    for (const char *l : {"xo", "i2"}) step("distribute", l);
    step("split", "k0")->factor = ib, steps.back().names = {"co", "ci"};
    step("reorder")->names = {"co", "i2_1", "xo_1", "ci"};
    step("cache_write", "xo_1")->buffer = "acc";
  }
  Step *pf = step("prefetch", "k3");
  pf->buffer = weight, pf->factor = 2048;
  if (naive.stages.size() > 1) place_pad(naive, st.name, knobs.pad, steps);
  for (const char *sfx : {"", "_1", "_2"}) {
    step("vectorize", std::string("i4") + sfx);
    step("unroll", std::string("oi") + sfx);
    step("unroll", std::string("xp") + sfx);
  }
  std::vector<std::string> par{"i0", "oo"};
  if (knobs.parallel_rows) par.push_back("i2");
  for (Step &x : parallel_over(st.name, par)) steps.push_back(x);
  return steps;
}

/**
 * The channel loop `loop` of a register tile (`extent` channels) as vectors of `lanes`: split and
 * its vectors unrolled where it is wider (each FMA a native vector, as the templates wrote them:
 * a 32-lane vector left for LLVM to split spilled accumulators in a conv's edge tiles), else one vector.
 */
void channel_vectors(const StageSteps &step, const std::string &loop, int64_t extent, int lanes) {
  if (lanes >= 2 && extent > lanes && extent % lanes == 0) {
    step("split", loop)->factor = lanes, step.steps.back().names = {loop + "v", loop + "l"};
    step("unroll", loop + "v"), step("vectorize", loop + "l");
  } else {
    step("vectorize", loop);
  }
}

/**
 * The parallel loop of a conv's tile sketch: n and the channel tiles (`parallel` 0), n and
 * `pixels` (1), or all three (2). With `remainder_stage`, the remainder's tiles (loops `_tail`,
 * after the pixel tiles in i0) become a stage of their own (fission), parallel over n and their
 * channel tiles.
 */
void parallel_units(std::vector<Step> &steps, const std::string &stage, int parallel, const std::string &pixels, bool remainder_stage) {
  StageSteps step{stage, steps};
  std::vector<std::string> par = parallel == 0 ? std::vector<std::string>{"i0", "oo"}
                                 : parallel == 1 ? std::vector<std::string>{"i0", pixels}
                                                 : std::vector<std::string>{"i0", "oo", pixels};
  if (remainder_stage) {
    if (parallel == 2) step("distribute", "oo");
    step("fission", "i0");
    for (Step &x : parallel_over(stage + "_1", {"i0_1", parallel == 2 ? "oo_1" : "oo_tail"})) steps.push_back(x);
  }
  for (Step &x : parallel_over(stage, par)) steps.push_back(x);
}

/** A conv's naive nest as the channel-lane tile sketches read it (NCHW, or conv2d_nchwc with b lanes per block). */
struct ConvNest {
  const KernelStage *stage = nullptr;
  std::vector<std::pair<std::string, int64_t>> outs, reds;
  bool blocked = false;
  int64_t b = 1;
};

/** The nest of `naive`'s conv, its oc_block checked (whole channel blocks; NCHW at most 64); `what` names the sketch in errors. */
Expected<ConvNest> conv_nest(const LoweredKernel &naive, const TileSketch &knobs, const std::string &what) {
  ConvNest n;
  n.stage = &naive.stages.back();
  naive_loops(n.stage->body, n.outs, n.reds);
  n.blocked = n.outs.size() == 5;
  if (n.stage->name != "conv2d" || (n.outs.size() != 4 && !n.blocked) || n.reds.size() != (n.blocked ? 4u : 3u))
    return make_error(what + " need the nest of a conv2d, not of stage " + n.stage->name);
  n.b = n.blocked ? n.outs[4].second : 1;
  int64_t channels = n.outs[1].second * n.b;
  if (knobs.oc_block < n.b || knobs.oc_block % n.b || channels % knobs.oc_block || (!n.blocked && knobs.oc_block > 64))
    return make_error("oc_block " + std::to_string(knobs.oc_block) + " does not tile " + std::to_string(channels) + " channels" +
                      (n.blocked ? " in blocks of " + std::to_string(n.b) : ""));
  if (knobs.parallel < 0 || knobs.parallel > 2) return make_error(what + ": parallel " + std::to_string(knobs.parallel) + " is not 0, 1 or 2");
  return n;
}

/**
 * The register tile of a channel-lane conv sketch: the loops `pixels` + sfx, oi + sfx (and the
 * lanes i4 + sfx) distributed over init, update and epilogue, the reduction moved outside the
 * update (the packed weight's order with lanes_outer), the weight prefetched 8 KiB ahead, kx
 * unrolled with unroll_kx; channels as vectors of the schedule's width, pixels unrolled, an NCHW
 * epilogue with pixel_epilogue a channel at a time with the tile's `px` pixels as the vector.
 */
void channel_tile(const StageSteps &step, const ConvNest &n, const TileSketch &knobs, const std::string &weight, const std::string &pixels,
                  const std::string &sfx, int64_t px) {
  std::vector<std::string> tile{pixels, "oi"};
  if (n.blocked) tile.push_back("i4");
  std::vector<std::string> reduction = !n.blocked ? std::vector<std::string>{"k0", "k1", "k2"}
                                       : knobs.lanes_outer ? std::vector<std::string>{"k0", "k3", "k1", "k2"}
                                                           : std::vector<std::string>{"k0", "k1", "k2", "k3"};
  for (auto l = tile.rbegin(); l != tile.rend(); ++l) step("distribute", *l + sfx);
  std::vector<std::string> update;
  for (const std::string &k : reduction) update.push_back(k + sfx);
  for (const std::string &l : tile) update.push_back(l + sfx + "_1");
  step("reorder")->names = update;
  Step *pf = step("prefetch", reduction.back() + sfx);
  pf->buffer = weight, pf->factor = 2048;
  if (knobs.unroll_kx) step("unroll", "k2" + sfx);
  bool by_pixels = !n.blocked && knobs.pixel_epilogue;
  for (const char *part : {"", "_1", "_2"}) {
    std::string pp = pixels + sfx + part, oi = "oi" + sfx + part;
    if (n.blocked) {
      channel_vectors(step, "i4" + sfx + part, n.b, knobs.lanes), step("unroll", oi), step("unroll", pp);
    } else if (std::string(part) == "_2" && by_pixels && px >= 2) {
      // The epilogue a channel at a time, the tile's pixels as the vector: contiguous in NCHW.
      step("reorder")->names = {oi, pp};
      step("vectorize", pp), step("unroll", oi);
    } else {
      if (knobs.oc_block >= 2) channel_vectors(step, oi, knobs.oc_block, knobs.lanes);
      else step("unroll", oi);
      step("unroll", pp);
    }
  }
}

/** Steps splitting loop `loop` (extent `extent`) of a stage by `lanes` (at most the extent) and vectorizing the pieces of 2 lanes or more. */
void vectorize_by(StageSteps &step, const std::string &loop, int64_t extent, int64_t lanes) {
  lanes = std::min(lanes, extent);
  if (lanes < 2) return;
  if (lanes == extent) {
    step("vectorize", loop);
    return;
  }
  step("split", loop)->factor = lanes, step.steps.back().names = {loop + "o", loop + "i"};
  step("vectorize", loop + "i");
  if (extent % lanes >= 2) step("vectorize", loop + "i_tail");
}

/**
 * The pixel-lane register tiles of a 1x1 conv whose pixel loop p sits inside (or, pixels_outer,
 * outside) its channel tiles oo around oi: p split into tiles of PB pixels, each oi channels x
 * PB / lanes vectors around the reduction (k0, k1, k2), the weight prefetched; the `rest` pixels
 * left over a tile of full vectors and one narrower one (masked on memory). Every loop it takes and
 * makes is named with suffix `sfx` (a box's loops: p_yo, oo_yo, k0_yo); no prefetch without a weight.
 */
void pixel_register_tiles(const StageSteps &step, const std::string &weight, int64_t PB, int64_t lanes, int64_t rest, bool pixels_outer,
                          const std::string &sfx) {
  std::vector<Step> &steps = step.steps;
  auto n = [&](const char *name, const std::string &more = "") { return std::string(name) + sfx + more; };
  step("split", n("p"))->factor = PB, steps.back().names = {n("po"), n("pi")};
  step("split", n("pi"))->factor = lanes, steps.back().names = {n("pv"), n("pl")};
  step("reorder")->names = pixels_outer ? std::vector<std::string>{n("oo"), n("oi"), n("pv"), n("pl")} : std::vector<std::string>{n("oi"), n("pv"), n("pl")};
  // The tile around the reduction: channels unrolled, pixel vectors unrolled, pixel lanes vectorized.
  for (Step &t : register_tile(step.stage, {n("oi"), n("pv"), n("pl")}, {n("k0"), n("k1"), n("k2")})) steps.push_back(t);
  if (!weight.empty()) {
    Step *pf = step("prefetch", n("k2"));
    pf->buffer = weight, pf->factor = 2048;
  }
  if (rest) {
    // The remainder's tile: its pixels as full vectors and one narrower one (masked on memory).
    step("reorder")->names = pixels_outer ? std::vector<std::string>{n("oo", "_tail"), n("oi", "_tail"), n("pi", "_tail")}
                                          : std::vector<std::string>{n("oi", "_tail"), n("pi", "_tail")};
    step("distribute", n("pi", "_tail")), step("distribute", n("oi", "_tail"));
    step("reorder")->names = {n("k0", "_tail"), n("k1", "_tail"), n("k2", "_tail"), n("oi", "_tail_1"), n("pi", "_tail_1")};
    if (!weight.empty()) {
      Step *pt = step("prefetch", n("k2", "_tail"));
      pt->buffer = weight, pt->factor = 2048;
    }
    for (const char *part : {"", "_1", "_2"}) {
      std::string oi = n("oi", "_tail") + part, pi = n("pi", "_tail") + part;
      step("unroll", oi);
      if (rest > lanes) {
        step("split", pi)->factor = lanes, steps.back().names = {pi + "v", pi + "l"};
        step("unroll", pi + "v"), step("vectorize", pi + "l");
        if (rest % lanes >= 2) step("vectorize", pi + "l_tail");
      } else {
        step(rest >= 2 ? "vectorize" : "unroll", pi);
      }
    }
  }
}

/** Whether blocks of R of H rows of W columns divide the rows and each hold a tile of `vectors` vectors of `lanes` pixels. */
Status row_blocks_fit(int64_t R, int64_t H, int64_t W, int64_t vectors, int64_t lanes) {
  if (R < 1 || H % R) return make_error(std::to_string(R) + " rows per block do not divide " + std::to_string(H) + " rows");
  if (lanes < 2 || vectors * lanes > R * W)
    return make_error(std::to_string(vectors) + " vectors of " + std::to_string(lanes) + " pixels do not fit a block of " + std::to_string(R * W));
  return Status::ok();
}

/**
 * Pixel-lane tiles by blocks of R output rows (of W columns): the block loop yo outermost, its
 * pixels one loop p (contiguous in NCHW), oc_block channels split off and the weight packed by
 * them, stage `producer` computed per block into a local box (compute_at yo: its reads are whole
 * rows), then the register tiles of PB pixels over the block. The box's own loops are the
 * caller's to schedule; parallel_blocks makes (image, block) the parallel loop after them.
 */
void pixel_tiles_per_row_block(const StageSteps &step, const std::string &weight, const std::vector<int64_t> &dims, int64_t R, int64_t W,
                               int64_t oc_block, int64_t PB, int64_t lanes, bool pixels_outer, const std::string &producer) {
  step("split", "i2")->factor = R, step.steps.back().names = {"yo", "yi"};
  step("fuse", "yi")->names = {"i3", "p"};
  step("split", "i1")->factor = oc_block, step.steps.back().names = {"oo", "oi"};
  Step *pk = step("pack");
  pk->buffer = weight, pk->dims = dims, pk->factor = oc_block;
  step("reorder")->names = pixels_outer ? std::vector<std::string>{"yo", "p", "oo", "oi"} : std::vector<std::string>{"yo", "oo", "p", "oi"};
  step("compute_at", "yo")->producer = producer;
  pixel_register_tiles(step, weight, PB, lanes, (R * W) % PB, pixels_outer, "");
}

// The parallel loop of parallel_blocks: the image fused with the blocks of rows (has_row_blocks_parallel finds it by this name).
constexpr const char *kRowBlocks = "blk";

/** The parallel loop over (image, block of rows) of pixel_tiles_per_row_block. */
void parallel_blocks(const StageSteps &step) {
  step("fuse", "i0")->names = {"yo", kRowBlocks};
  step("parallel", kRowBlocks);
}

/**
 * The register-tile sketch with pixel lanes for a 1x1 conv in NCHW (the pointwise template's form):
 * rows and columns fused into the pixel loop, whose contiguous pixels are the vector; tiles of
 * oc_block channels x pixel_vectors vectors of `lanes` pixels around the reduction, each weight
 * broadcast to every pixel of the tile, the weight packed by the tile and prefetched; the pixels
 * left over a tile of full vectors and one narrower vector. Threads split n and the channel tiles
 * (0: each thread runs its tiles' pixels, the remainder after them), n and the pixel tiles (1: each
 * runs every channel tile over its pixels, read once) or all three (2); under 1 and 2 the
 * remainder's tiles are a stage of their own over n and the channel tiles. A strided conv reads
 * the subsampled input its naive nest gathers first (stage subsample: rows parallel, vectorized).
 */
Expected<std::vector<Step>> pixel_tile_sketch(const LoweredKernel &naive, const std::string &weight, const std::vector<int64_t> &dims,
                                              const TileSketch &knobs) {
  AT_ASSIGN(n, conv_nest(naive, knobs, "pixel lanes"));
  const KernelStage &st = *n.stage;
  const auto &outs = n.outs, &reds = n.reds;
  std::vector<std::string> names;
  for (const KernelStage &s : naive.stages) names.push_back(s.name);
  using Names = std::vector<std::string>;
  bool subsample = names == Names{"subsample", "conv2d"};
  bool patches = names == Names{"patches", "conv2d"} || names == Names{"pad", "patches", "conv2d"};
  if ((names.size() != 1 && !subsample && !patches) || n.blocked || (!patches && (reds[1].second != 1 || reds[2].second != 1)))
    return make_error("pixel lanes need a 1x1 conv without padding in NCHW, or a stem's patches");
  int64_t lanes = knobs.lanes, PB = int64_t{knobs.pixel_vectors} * lanes, P = outs[2].second * outs[3].second, rest = P % PB;
  if (lanes < 2 || P < PB)
    return make_error(std::to_string(knobs.pixel_vectors) + " vectors of " + std::to_string(lanes) + " pixels do not fit " + std::to_string(P) + " pixels");
  std::vector<Step> steps;
  StageSteps step{st.name, steps};
  if (patches && knobs.patch_rows > 0) {
    // The patches per block of R output rows, computed at the block into a local box (C x KH x
    // KW rows of R x W values: 12 KiB for MobileNetV2's stem at one row), so they never go to
    // memory; the block's pixels one loop p, each pixel tile running every channel tile over its
    // slice of the box. The padded copy at root; images and blocks the parallel loop.
    int64_t R = knobs.patch_rows, H = outs[2].second, W = outs[3].second;
    AT_TRY(row_blocks_fit(R, H, W, knobs.pixel_vectors, lanes));
    pixel_tiles_per_row_block(step, weight, dims, R, W, knobs.oc_block, PB, lanes, /*pixels_outer=*/true, "patches");
    vectorize_by(step, "sx_yo", W, lanes);
    if (names[0] == "pad") place_pad(naive, "patches", "root", steps);
    parallel_blocks(step);
    return steps;
  }
  step("fuse", "i2")->names = {"i3", "p"};
  step("split", "i1")->factor = knobs.oc_block, steps.back().names = {"oo", "oi"};
  Step *pk = step("pack");
  pk->buffer = weight, pk->dims = dims, pk->factor = knobs.oc_block;
  bool pixels_outer = knobs.parallel == 1;
  step("reorder")->names = pixels_outer ? std::vector<std::string>{"p", "oo", "oi"} : std::vector<std::string>{"oo", "p", "oi"};
  pixel_register_tiles(step, weight, PB, lanes, rest, pixels_outer, "");
  if (subsample) {
    StageSteps sub{"subsample", steps};
    sub("fuse", "sn")->names = {"sc", "snc"};
    sub("fuse", "snc")->names = {"sy", "row"};
    if (outs[3].second >= 2) sub("vectorize", "sx");
    sub("parallel", "row");
  }
  if (patches) {
    // The padded copy at root (its border partitioned off, its rows vectorized); the patches'
    // rows (n, c, ky, kx, oy) the parallel loop, each row's columns vectors (a column stride is one
    // wide load and a shuffle).
    if (names[0] == "pad") place_pad(naive, "patches", "root", steps);
    StageSteps gather{"patches", steps};
    for (Step &x : parallel_over("patches", {"sn", "sc", "sky", "skx", "sy"})) steps.push_back(x);
    vectorize_by(gather, "sx", outs[3].second, lanes);
  }
  parallel_units(steps, st.name, knobs.parallel, "po", rest && knobs.parallel);
  return steps;
}

/**
 * Steps making a depthwise conv's `R` rows (loop `rows`) by `W` columns (loop `x`, the innermost)
 * of stage step.stage, around its reduction loops `reduction` (those in `window` unrolled), a
 * register tile. Where the columns are whole vectors and R is at most 8, a tile of the rows x one
 * vector of `lanes` columns around the window (the loop sketch's row tile: rows whose windows
 * overlap share their loads); columns past the whole vectors a tile of their own with a narrower
 * vector. Else each vector alone, 16-lane pieces and a narrower rest. The loops it makes are
 * fx, fl, tyo, ty, ryo and ry.
 */
void depthwise_rows_tile(const StageSteps &step, const std::string &rows_loop, const std::string &x_loop, int64_t R, int64_t W, int64_t lanes,
                         const std::vector<std::string> &reduction, const std::vector<std::string> &window) {
  std::vector<Step> &steps = step.steps;
  const std::string fx = "fx", fl = "fl";
  if (R <= 8 && W >= 2) {
    std::string x = x_loop, rows = rows_loop;
    if (W > lanes) {
      step("split", x)->factor = lanes, steps.back().names = {fx, fl};
      if (W % lanes) {
        // The columns left over (56 = 3 x 16 + 8): the rows distributed over the full vectors and
        // the rest, each a register tile of its own (the rest's vector narrower); each copy of
        // the rows renamed by a split of the whole block, as the tiles' own loops distribute.
        step("distribute", rows_loop);
        step("split", rows_loop + "_1")->factor = R, steps.back().names = {"tyo", "ty"};
        std::vector<std::string> tail;
        for (const std::string &k : reduction) tail.push_back(k + "_tail");
        for (Step &t : register_tile(step.stage, {"ty", fl + "_tail"}, tail)) steps.push_back(t);
        for (const std::string &k : window) step("unroll", k + "_tail");
        step("split", rows_loop)->factor = R, steps.back().names = {"ryo", "ry"};
        rows = "ry";
      }
      step("reorder")->names = {fx, rows, fl};
      x = fl;
    }
    for (Step &t : register_tile(step.stage, {rows, x}, reduction)) steps.push_back(t);
    for (const std::string &k : window) step("unroll", k);
  } else {
    if (W > lanes) {
      step("split", x_loop)->factor = lanes, steps.back().names = {fx, fl};
      step("vectorize", fl);
      if (W % lanes >= 2) step("vectorize", fl + "_tail");
    } else if (W >= 2) {
      step("vectorize", x_loop);
    }
    for (const std::string &k : window) {
      step("unroll", k);
      if (W > lanes && W % lanes) step("unroll", k + "_tail");
    }
  }
}

/**
 * The loops of a chain's joined nests of a conv ([s0_pad,] s0_conv2d) and the conv after it
 * (s1_conv2d): the second's in outs and reds, the first's in pouts and preds, `padded` where the
 * first has its padded input's stage; error `what` for other stages.
 */
Status conv_then_conv(const LoweredKernel &naive, const std::string &what, bool &padded, std::vector<std::pair<std::string, int64_t>> &outs,
                      std::vector<std::pair<std::string, int64_t>> &reds, std::vector<std::pair<std::string, int64_t>> &pouts,
                      std::vector<std::pair<std::string, int64_t>> &preds) {
  std::vector<std::string> names;
  for (const KernelStage &st : naive.stages) names.push_back(st.name);
  padded = !names.empty() && names[0] == "s0_pad";
  if (names != (padded ? std::vector<std::string>{"s0_pad", "s0_conv2d", "s1_conv2d"} : std::vector<std::string>{"s0_conv2d", "s1_conv2d"}))
    return make_error(what);
  naive_loops(naive.stages.back().body, outs, reds);
  naive_loops(naive.stages[padded].body, pouts, preds);
  return Status::ok();
}

}  // namespace

Expected<std::vector<Step>> chain_tile_sketch(const LoweredKernel &naive, const std::string &weight, const std::vector<int64_t> &dims,
                                              const ChainTileSketch &knobs) {
  std::vector<std::pair<std::string, int64_t>> outs, reds, pouts, preds;
  bool padded = false;
  AT_TRY(conv_then_conv(naive, "the chain tile sketch needs a conv's nests followed by a 1x1 conv's (stages s0_conv2d, s1_conv2d)", padded, outs,
                        reds, pouts, preds));
  if (outs.size() != 4 || reds.size() != 3 || reds[1].second != 1 || reds[2].second != 1 || pouts.size() != 4)
    return make_error("the chain tile sketch needs a 1x1 conv in NCHW after the first conv");
  int64_t H = outs[2].second, W = outs[3].second, R = knobs.rows, lanes = knobs.lanes, PB = int64_t{knobs.pixel_vectors} * lanes;
  if (pouts[2].second != H || pouts[3].second != W) return make_error("the first conv's result is not the 1x1 conv's input pixel for pixel");
  AT_TRY(row_blocks_fit(R, H, W, knobs.pixel_vectors, lanes));
  std::vector<Step> steps;
  StageSteps step{"s1_conv2d", steps};
  // The 1x1 conv by blocks of R rows; the first conv's result for the block's rows, every
  // channel, into a local box.
  pixel_tiles_per_row_block(step, weight, dims, R, W, knobs.oc_block, PB, lanes, knobs.pixels_outer, "s0_conv2d");
  // The box's columns as vectors, the window unrolled. Where the columns are whole vectors and
  // the block at most 8 rows, a register tile of the block's rows x one vector around the window
  // (the loop sketch's row tile: rows whose windows overlap share their loads); else each vector
  // alone, 16-lane pieces and a narrower rest.
  std::vector<std::string> window;
  for (const auto &k : reductions_to_unroll(preds)) window.push_back(k + "_yo");
  std::vector<std::string> reduction;
  for (const auto &k : preds) reduction.push_back(k.first + "_yo");
  depthwise_rows_tile(step, "i2_yo", "i3_yo", R, W, lanes, reduction, window);
  if (padded) {
    // At root, inline, or at a loop of the box (i1_yo: per channel, its rows with the halo, every
    // column), partitioned and vectorized; placed where the steps so far have put its reader.
    AT_ASSIGN(so_far, replay(naive, steps));
    place_pad(so_far, "s1_conv2d", knobs.pad, steps, "s0_pad");
  }
  parallel_blocks(step);
  return steps;
}

namespace {
/**
 * The register tiles of a 1x1 conv2d_nchwc over a run of pixels split into tiles (loops pp + sfx
 * inside, its channel blocks `blocks` + sfx and lanes i4 + sfx inside them; with `tail`, the
 * pixels left over in loops with sfx + "_tail" too): each tile distributed over init, update and
 * epilogue, the reduction (k0 to k3 + sfx) outside the update's tile, the weight prefetched,
 * pixels and blocks unrolled, a block's lanes the vector.
 */
void blocked_pixel_tiles(const StageSteps &step, const std::string &weight, const std::string &blocks, const std::string &suffix, bool tail) {
  for (const std::string &sfx : {suffix, suffix + "_tail"}) {
    if (sfx != suffix && !tail) continue;
    std::vector<std::string> tile{"pp" + sfx, blocks + sfx, "i4" + sfx};
    for (auto l = tile.rbegin(); l != tile.rend(); ++l) step("distribute", *l);
    std::vector<std::string> update{"k0" + sfx, "k1" + sfx, "k2" + sfx, "k3" + sfx};
    for (const std::string &l : tile) update.push_back(l + "_1");
    step("reorder")->names = update;
    Step *pf = step("prefetch", "k3" + sfx);
    pf->buffer = weight, pf->factor = 2048;
    for (const char *part : {"", "_1", "_2"}) {
      step("unroll", "pp" + sfx + part), step("unroll", blocks + sfx + part);
      step("vectorize", "i4" + sfx + part);
    }
  }
}

/** The loops of an expansion chain's joined nests (stages s0_conv2d, s1_pad, s1_conv2d): the depthwise conv's, then the 1x1 conv's. */
Status expansion_loops(const LoweredKernel &naive, const std::string &what, std::vector<std::pair<std::string, int64_t>> &outs,
                       std::vector<std::pair<std::string, int64_t>> &reds, std::vector<std::pair<std::string, int64_t>> &pouts,
                       std::vector<std::pair<std::string, int64_t>> &preds) {
  std::vector<std::string> names;
  for (const KernelStage &st : naive.stages) names.push_back(st.name);
  if (names != std::vector<std::string>{"s0_conv2d", "s1_pad", "s1_conv2d"})
    return make_error(what + " needs a 1x1 conv's nest, then a padded conv's (stages s0_conv2d, s1_pad, s1_conv2d)");
  naive_loops(naive.stages[2].body, outs, reds);
  naive_loops(naive.stages[0].body, pouts, preds);
  return Status::ok();
}
}  // namespace

Expected<std::vector<Step>> expand_tile_sketch(const LoweredKernel &naive, const std::string &weight, const std::vector<int64_t> &dims,
                                               const ExpandTileSketch &knobs) {
  std::vector<std::pair<std::string, int64_t>> outs, reds, pouts, preds;
  AT_TRY(expansion_loops(naive, "the expand tile sketch", outs, reds, pouts, preds));
  if (outs.size() != 4 || reds.size() < 3 || reds[0].second != 1 || pouts.size() != 4 || preds.size() != 3 || preds[1].second != 1 || preds[2].second != 1)
    return make_error("the expand tile sketch needs a 1x1 conv in NCHW before a depthwise conv");
  int64_t C = outs[1].second, H = outs[2].second, W = outs[3].second, R = knobs.rows, CB = knobs.channels, lanes = knobs.lanes;
  if (R < 1 || H % R) return make_error(std::to_string(R) + " rows per block do not divide " + std::to_string(H) + " rows");
  if (CB < 1 || C % CB) return make_error(std::to_string(CB) + " channels per block do not divide " + std::to_string(C) + " channels");
  if (lanes < 2) return make_error("vectors of " + std::to_string(lanes) + " lanes");
  std::vector<Step> steps;
  StageSteps step{"s1_conv2d", steps};
  // Blocks of CB channels x R rows of the depthwise conv, channels outermost.
  step("split", "i1")->factor = CB, steps.back().names = {"co", "ci"};
  step("split", "i2")->factor = R, steps.back().names = {"yo", "yi"};
  step("reorder")->names = {"co", "yo", "ci", "yi"};
  // Per block, its padded input (the rows with the halo, partitioned into the border and the
  // inside), then the 1x1 conv's result that this reads, into a box: the halo rows are computed
  // again by the next block, rows past the image's edge clamped to it (read by no output).
  AT_ASSIGN(so_far, replay(naive, steps));
  place_pad(so_far, "s1_conv2d", "yo", steps, "s1_pad");
  step("compute_at", "yo")->producer = "s0_conv2d";
  AT_ASSIGN(boxed, replay(naive, steps));
  std::vector<std::pair<std::string, int64_t>> loops;
  loops_of(boxed.stages.back().body, loops);
  int64_t BC = 0, BH = 0, BW = 0;
  for (const auto &[name, ex] : loops) {
    if (name == "i1_yo") BC = ex;
    if (name == "i2_yo") BH = ex;
    if (name == "i3_yo") BW = ex;
  }
  if (BC != CB || BW < 1) return make_error("the 1x1 conv's box has no loops i1_yo of " + std::to_string(CB) + " channels and i3_yo of columns");
  std::vector<std::string> box_reds;
  for (const auto &k : preds) box_reds.push_back(k.first + "_yo");
  // A register tile's channels: the most that divide the block with `v` vectors each within the accumulators.
  auto tile_channels = [&](int64_t v) {
    int64_t ob = 1;
    for (int64_t d = 1; d <= CB; ++d)
      if (CB % d == 0 && d * v <= knobs.accumulators) ob = d;
    return ob;
  };
  if (R == H && BH * BW >= lanes) {
    // Every row in one block: the box's rows and columns are one run of pixels that its reads
    // take in order, the 1x1 conv's pixel-lane register tiles (channels x vectors of pixels, as
    // its own kernel) with no row left narrow.
    int64_t P = BH * BW, vecs = std::min<int64_t>(3, P / lanes), ob = tile_channels(vecs);
    step("fuse", "i2_yo")->names = {"i3_yo", "p_yo"};
    step("split", "i1_yo")->factor = ob, steps.back().names = {"oo_yo", "oi_yo"};
    // The 1x1 conv's weight packed by the tile's channels and streamed in order, prefetched, as in
    // its own kernel (read unpacked, each tile's broadcasts came from ob rows of the weight).
    if (!weight.empty()) {
      Step *pk = step("pack");
      pk->buffer = weight, pk->dims = dims, pk->factor = ob;
    }
    step("reorder")->names = {"oo_yo", "p_yo", "oi_yo"};
    pixel_register_tiles(step, weight, vecs * lanes, lanes, P % (vecs * lanes), false, "_yo");
  } else {
    // Blocks of rows: each row's columns as whole vectors and a narrower rest, each a register
    // tile of channels x every vector of the row around the 1x1 conv's input channels (each
    // broadcast weight feeds the row's vectors, each input vector the tile's channels); the rows'
    // reads are clamped at the image's edges.
    step("reorder")->names = {"i2_yo", "i1_yo"};
    int64_t vecs = BW > lanes ? BW / lanes : 1, rest = BW > lanes ? BW % lanes : 0;
    std::string x = "i3_yo";
    if (BW > lanes) {
      step("split", "i3_yo")->factor = lanes, steps.back().names = {"bx", "bl"};
      x = "bl";
      if (rest) {
        step("distribute", "i1_yo");
        step("split", "i1_yo_1")->factor = tile_channels(1), steps.back().names = {"bto", "bti"};
        std::vector<std::string> tail;
        for (const std::string &k : box_reds) tail.push_back(k + "_tail");
        for (Step &t : register_tile("s1_conv2d", {"bti", "bl_tail"}, tail, rest >= 2)) steps.push_back(t);
      }
    }
    step("split", "i1_yo")->factor = tile_channels(vecs), steps.back().names = {"bo", "bi"};
    std::vector<std::string> tile{"bi"};
    if (BW > lanes) tile.push_back("bx");
    tile.push_back(x);
    for (Step &t : register_tile("s1_conv2d", tile, box_reds, BW >= 2)) steps.push_back(t);
  }
  // The depthwise conv over the block, reading the box.
  std::vector<std::string> reduction, window = reductions_to_unroll(reds);
  for (const auto &k : reds) reduction.push_back(k.first);
  std::string rows = "yi";
  int64_t tile_rows = R;
  if (R > 8) {
    // A block of more rows than a register tile takes: tiles of the most rows up to 8 dividing it.
    for (int64_t r = 1; r <= 8; ++r)
      if (R % r == 0) tile_rows = r;
    step("split", "yi")->factor = tile_rows, steps.back().names = {"yt", "yr"};
    rows = "yr";
  }
  depthwise_rows_tile(step, rows, "i3", tile_rows, W, lanes, reduction, window);
  step("fuse", "i0")->names = {"co", "nc"};
  step("fuse", "nc")->names = {"yo", "blk"};
  step("parallel", "blk");
  return steps;
}

Expected<std::vector<Step>> blocked_expand_tile_sketch(const LoweredKernel &naive, const std::string &weight, const std::vector<int64_t> &dims,
                                                       const BlockedExpandTileSketch &knobs) {
  std::vector<std::pair<std::string, int64_t>> outs, reds, pouts, preds;
  AT_TRY(expansion_loops(naive, "the blocked expand tile", outs, reds, pouts, preds));
  if (outs.size() != 5 || reds.size() != 2 || pouts.size() != 5 || preds.size() != 4 || preds[1].second != 1 || preds[2].second != 1)
    return make_error("the blocked expand tile needs a 1x1 conv2d_nchwc before a depthwise conv2d_nchwc");
  int64_t CB = outs[1].second, W = outs[3].second, b = outs[4].second, B = knobs.blocks, PB = knobs.pixels, X = knobs.columns;
  if (B < 1 || CB % B) return make_error(std::to_string(B) + " channel blocks per unit do not divide " + std::to_string(CB));
  if (X < 1 || W % X) return make_error(std::to_string(X) + " columns per tile do not divide a row of " + std::to_string(W));
  int64_t P = outs[2].second * W;
  if (PB < 1 || PB > P) return make_error(std::to_string(PB) + " pixels per tile do not fit " + std::to_string(P));
  std::vector<Step> steps;
  StageSteps step{"s1_conv2d", steps};
  // Units of B channel blocks of the depthwise conv, every row.
  step("split", "i1")->factor = B, steps.back().names = {"co", "ci"};
  // Per unit, its padded input's box (its blocks, every row with the halo), then the 1x1 conv's
  // result that box reads, into a box of its own: the expanded tensor never goes to memory.
  AT_ASSIGN(so_far, replay(naive, steps));
  place_pad(so_far, "s1_conv2d", "co", steps, "s1_pad");
  step("compute_at", "co")->producer = "s0_conv2d";
  // The 1x1 conv's register tile over its box, as in its own kernel: the unit's blocks x PB pixels
  // (rows and columns one run) around the input channels, each block's lanes a vector, the weight
  // packed by the unit's channels and prefetched; the pixels left over a tile of their own.
  step("fuse", "i2_co")->names = {"i3_co", "p_co"};
  step("reorder")->names = {"p_co", "i1_co", "i4_co"};
  Step *pk = step("pack");
  pk->buffer = weight, pk->dims = dims, pk->factor = B * b;
  step("split", "p_co")->factor = PB, steps.back().names = {"po_co", "pp_co"};
  blocked_pixel_tiles(step, weight, "i1", "_co", P % PB != 0);
  // The depthwise conv over the unit's blocks: a register tile of X columns x a block's lanes around the window.
  step("split", "i3")->factor = X, steps.back().names = {"xo", "xi"};
  for (Step &t : register_tile("s1_conv2d", {"xi", "i4"}, {"k0", "k1"})) steps.push_back(t);
  step("unroll", "k0"), step("unroll", "k1");
  step("fuse", "i0")->names = {"co", "unit"};
  step("parallel", "unit");
  return steps;
}

Expected<std::vector<Step>> blocked_chain_tile_sketch(const LoweredKernel &naive, const std::string &weight, const std::vector<int64_t> &dims,
                                                      const std::string &depthwise_weight, const std::vector<int64_t> &depthwise_dims,
                                                      const BlockedChainTileSketch &knobs) {
  std::vector<std::pair<std::string, int64_t>> outs, reds, pouts, preds;
  bool padded = false;
  AT_TRY(conv_then_conv(naive, "the blocked chain tile needs a depthwise conv2d_nchwc's nests followed by a 1x1 conv2d_nchwc's (stages s0_conv2d, s1_conv2d)",
                        padded, outs, reds, pouts, preds));
  if (outs.size() != 5 || reds.size() != 4 || reds[1].second != 1 || reds[2].second != 1 || pouts.size() != 5 || preds.size() != 2)
    return make_error("the blocked chain tile needs a depthwise conv2d_nchwc before a 1x1 conv2d_nchwc");
  int64_t OB = outs[1].second, H = outs[2].second, W = outs[3].second, b = outs[4].second, R = knobs.rows, B = knobs.blocks, PB = knobs.pixels,
          X = knobs.columns;
  if (pouts[2].second != H || pouts[3].second != W) return make_error("the depthwise conv's result is not the 1x1 conv's input pixel for pixel");
  if (R < 1 || H % R) return make_error(std::to_string(R) + " rows per block do not divide " + std::to_string(H) + " rows");
  if (B < 1 || OB % B) return make_error(std::to_string(B) + " channel blocks per tile do not divide " + std::to_string(OB));
  if (PB < 1 || PB > R * W) return make_error(std::to_string(PB) + " pixels per tile do not fit a block of " + std::to_string(R * W));
  if (X < 1 || W % X) return make_error(std::to_string(X) + " columns per tile do not divide a row of " + std::to_string(W));
  std::vector<Step> steps;
  StageSteps step{"s1_conv2d", steps};
  // Blocks of R rows of the 1x1 conv; per block, the depthwise conv's result for those rows, every
  // channel block, into a local box (a 1x1 conv reads its pixel only: no halo).
  step("split", "i2")->factor = R, steps.back().names = {"yo", "yi"};
  step("reorder")->names = {"yo", "i1"};
  step("compute_at", "yo")->producer = "s0_conv2d";
  // The 1x1 conv's register tiles over the box, as in its own kernel: B blocks x PB pixels (the
  // block's rows and columns one run) around the input channels, the weight packed by the tile's
  // channels and prefetched; the pixels left over a tile of their own.
  step("split", "i1")->factor = B, steps.back().names = {"oo", "oi"};
  Step *pk = step("pack");
  pk->buffer = weight, pk->dims = dims, pk->factor = B * b;
  step("fuse", "yi")->names = {"i3", "p"};
  step("reorder")->names = {"oo", "p", "oi", "i4"};
  step("split", "p")->factor = PB, steps.back().names = {"po", "pp"};
  blocked_pixel_tiles(step, weight, "oi", "", (R * W) % PB != 0);
  // The depthwise conv over the box: a register tile of X columns x a block's lanes around the
  // window, unrolled, its weight packed by the block (one vector a tap).
  std::string x = "i3_yo";
  if (X < W) step("split", "i3_yo")->factor = X, steps.back().names = {"bxo", "bxi"}, x = "bxi";
  for (Step &t : register_tile("s1_conv2d", {x, "i4_yo"}, {"k0_yo", "k1_yo"})) steps.push_back(t);
  step("unroll", "k0_yo"), step("unroll", "k1_yo");
  if (!depthwise_weight.empty()) {
    Step *dp = step("pack");
    dp->buffer = depthwise_weight, dp->dims = depthwise_dims, dp->factor = b;
  }
  if (padded) {
    AT_ASSIGN(so_far, replay(naive, steps));
    place_pad(so_far, "s1_conv2d", knobs.pad, steps, "s0_pad");
  }
  parallel_blocks(step);
  return steps;
}

std::vector<SketchPoint> blocked_chain_tile_sketches(const LoweredKernel &naive, const std::string &weight, const std::vector<int64_t> &dims,
                                                     const std::string &depthwise_weight, const std::vector<int64_t> &depthwise_dims,
                                                     const BlockedChainTileSketch &base, int lanes, int registers) {
  std::vector<SketchPoint> out;
  std::vector<std::pair<std::string, int64_t>> outs, reds;
  naive_loops(naive.stages.back().body, outs, reds);
  if (outs.size() != 5) return out;
  int64_t OB = outs[1].second, H = outs[2].second, W = outs[3].second, b = outs[4].second;
  int64_t vectors = (b + lanes - 1) / lanes;  // registers per pixel of a channel block (AVX2: two per 16-lane block)
  std::set<int64_t> rows_set{base.rows}, blocks_set{base.blocks}, pixels_set{base.pixels, 7, 14, 28}, columns_set{base.columns, W};
  for (int64_t r = 1; r <= std::min<int64_t>(H, 8); ++r)
    if (H % r == 0 && H / r >= 2) rows_set.insert(r);  // two blocks at least, for the threads
  for (int64_t k = 1; k <= std::min<int64_t>(OB, 4); ++k)
    if (OB % k == 0) blocks_set.insert(k);
  for (int64_t x = 7; x <= std::min<int64_t>(W, 14); ++x)
    if (W % x == 0) columns_set.insert(x);
  for (int64_t rows : rows_set)
    for (int64_t blocks : blocks_set)
      for (int64_t pixels : pixels_set) {
        pixels = std::min(pixels, rows * W);
        // The 1x1 conv's tile within the registers (its accumulators, a weight vector per block, the
        // input broadcast), or the default's own.
        bool fits = blocks * vectors * pixels + blocks * vectors + 1 <= registers || (blocks == base.blocks && pixels == base.pixels);
        if (!fits) continue;
        for (int64_t columns : columns_set)
          for (int pad = 0; pad < 2; ++pad) {
            BlockedChainTileSketch k;
            k.rows = rows, k.blocks = blocks, k.pixels = pixels, k.columns = columns, k.pad = pad ? "i1_yo" : "inline";
            auto steps = blocked_chain_tile_sketch(naive, weight, dims, depthwise_weight, depthwise_dims, k);
            if (!steps || !replay(naive, *steps)) continue;
            SketchPoint p{steps.take(), {static_cast<int>(rows), static_cast<int>(blocks), static_cast<int>(pixels), static_cast<int>(columns), pad}};
            if (std::none_of(out.begin(), out.end(), [&](const SketchPoint &q) { return q.steps == p.steps; })) out.push_back(std::move(p));
          }
      }
  return out;
}

namespace {

/**
 * The register-tile sketch with flat pixels (the register-blocked conv template's shape): the
 * output rows and columns fused into one pixel loop split into tiles of px_block pixels (a tile
 * may cross rows; the pixels left over take a tile of their own after the full ones), each tile
 * oc_block channels (conv2d_nchwc: whole blocks, each block's lanes a vector; NCHW: the channels
 * one vector, split into registers by the target) around the reduction, the weight packed by the
 * tile and streamed in order (NCHW16c with lanes_outer: c, ky, kx) and prefetched, the padded
 * input at root or recomputed at every read. Threads split n and the channel tiles, n and the
 * pixel tiles, or all three; in the last two, the remainder's tiles are a stage of their own.
 */
Expected<std::vector<Step>> flat_tile_sketch(const LoweredKernel &naive, const std::string &weight, const std::vector<int64_t> &dims,
                                             const TileSketch &knobs) {
  AT_ASSIGN(n, conv_nest(naive, knobs, "flat pixels"));
  const KernelStage &st = *n.stage;
  int64_t b = n.b, P = n.outs[2].second * n.outs[3].second, PB = knobs.px_block, CB = n.reds[0].second;
  if (PB < 1 || PB > P) return make_error("px_block " + std::to_string(PB) + " is not 1 to the " + std::to_string(P) + " output pixels");
  if (knobs.pixel_vectors) return make_error("flat pixels take channel lanes");
  int64_t ib = knobs.ic_block / b;
  if (knobs.ic_block && (knobs.ic_block % b || ib >= CB || CB % ib))
    return make_error("reduction tiles of " + std::to_string(knobs.ic_block) + " channels need whole blocks of " + std::to_string(b) + " dividing " + std::to_string(CB * b) + " channels");
  if (knobs.pad != "root" && knobs.pad != "inline") return make_error("flat pixels place the padded input at root or inline, not at " + knobs.pad);
  int64_t rest = P % PB;
  std::vector<Step> steps;
  StageSteps step{st.name, steps};
  step("split", "i1")->factor = knobs.oc_block / b, steps.back().names = {"oo", "oi"};
  Step *pk = step("pack");
  pk->buffer = weight, pk->dims = dims, pk->factor = knobs.oc_block;
  // The padded input placed first: its reads are affine in the rows and columns until they are fused.
  if (naive.stages.size() > 1) place_pad(naive, st.name, knobs.pad, steps);
  step("fuse", "i2")->names = {"i3", "p"};
  std::vector<std::string> order = knobs.parallel == 1 ? std::vector<std::string>{"p", "oo", "oi"} : std::vector<std::string>{"oo", "p", "oi"};
  if (n.blocked) order.push_back("i4");
  step("reorder")->names = order;
  step("split", "p")->factor = PB, steps.back().names = {"po", "pp"};
  // The register tile of the full tiles (sfx "") and of the remainder ("_tail", `rest` pixels).
  for (const auto &[sfx, px] : {std::pair<std::string, int64_t>{"", PB}, {"_tail", rest}}) {
    if (!px) continue;
    if (knobs.parallel == 1) step("reorder")->names = {"oo" + sfx, "pp" + sfx};
    channel_tile(step, n, knobs, weight, "pp", sfx, px);
  }
  if (ib) {
    // Reduction tiles (the template's ic_block): the input channels split into tiles, the tile
    // loop outside the unit's loop over register tiles (its pixel tiles, or with pixel tiles as the
    // units its channel tiles), whose partial sums become a local buffer of the unit's whole output,
    // each register tile reading its partial sums in and writing them back (cache_write). A unit of
    // one register tile (and the remainder's tile) keeps its sums in registers across the tiles.
    std::string around = knobs.parallel == 0 ? "po" : knobs.parallel == 1 ? "oo" : "";
    if (!around.empty()) step("distribute", around);
    step("split", "k0")->factor = ib, steps.back().names = {"co", "ci"};
    if (!around.empty()) {
      step("reorder")->names = {around + "_1", "co"};
      step("cache_write", around + "_1")->buffer = "acc";
    }
    if (rest) step("split", "k0_tail")->factor = ib, steps.back().names = {"co_tail", "ci_tail"};
  }
  parallel_units(steps, st.name, knobs.parallel, "po", rest && knobs.parallel);
  return steps;
}

/**
 * The register-tile sketch along output rows (the conv template with its padding in the tiles):
 * tiles of oc_block channels x px_block columns of one row, the row's last tile narrower where
 * px_block does not divide it, around the reduction in the packed weight's order; the input read
 * in place, its padding recomputed at every read, then the tile loop partitioned into the edge
 * tiles (some kernel columns outside: they select 0) and the inside ones (plain reads), and each
 * kernel-row loop trimmed to the rows inside the input. Threads split n and the channel tiles,
 * n and the rows, or all three.
 */
Expected<std::vector<Step>> row_tile_sketch(const LoweredKernel &naive, const std::string &weight, const std::vector<int64_t> &dims,
                                            const TileSketch &knobs, std::optional<LoweredKernel> *made) {
  AT_ASSIGN(n, conv_nest(naive, knobs, "row tiles"));
  const KernelStage &st = *n.stage;
  int64_t OW = n.outs[3].second, PB = knobs.px_block;
  if (PB < 1 || PB > OW) return make_error("px_block " + std::to_string(PB) + " is not 1 to the " + std::to_string(OW) + " output columns");
  if (knobs.pixel_vectors || knobs.ic_block) return make_error("row tiles take channel lanes and no reduction tiles");
  int64_t rest = OW % PB;
  std::vector<Step> steps;
  StageSteps step{st.name, steps};
  step("split", "i1")->factor = knobs.oc_block / n.b, steps.back().names = {"oo", "oi"};
  Step *pk = step("pack");
  pk->buffer = weight, pk->dims = dims, pk->factor = knobs.oc_block;
  bool padded = naive.stages.size() > 1;
  if (padded) place_pad(naive, st.name, "inline", steps);
  std::vector<std::string> order = knobs.parallel == 1 ? std::vector<std::string>{"i2", "oo", "i3", "oi"} : std::vector<std::string>{"oo", "i2", "i3", "oi"};
  if (n.blocked) order.push_back("i4");
  step("reorder")->names = order;
  step("split", "i3")->factor = PB, steps.back().names = {"xo", "xp"};
  channel_tile(step, n, knobs, weight, "xp", "", PB);
  if (rest) channel_tile(step, n, knobs, weight, "xp", "_tail", rest);
  Expected<LoweredKernel> scratch = make_error("not replayed");
  if (padded) {
    // The edge tiles cut from the inside ones, then every kernel-row loop (one per part, and the
    // narrower last tile's) trimmed to the input's rows. The names the partition gives are read
    // off the replayed nest.
    scratch = replay(naive, steps);
    if (!scratch) return scratch.error();
    Step part;
    part.op = "partition", part.stage = st.name, part.loop = "xo";
    if (auto cut = apply_step(*scratch, part)) scratch = cut.take(), steps.push_back(part);
    // In the edge tiles (and the narrower last tile) the update's unrolled pixels are cut too:
    // only the pixels some of whose kernel columns fall outside keep their select. A row's first
    // tile then starts with those pixels; they are moved after the inside ones. In that order
    // LLVM's scheduler keeps the accumulators in registers: with them first it loaded every
    // pixel's input up front and spilled (the NCHW stems: 121 instructions per kernel column
    // against 77, 34 of them stack accesses).
    for (const auto &[loop, extent] : stage_loops(*scratch, st.name)) {
      (void)extent;
      bool edge_pixels = loop.rfind("xp_1_xob", 0) == 0 || loop == "xp_tail_1";
      if (loop.rfind("k1", 0) != 0 && !edge_pixels) continue;
      Step t;
      t.op = edge_pixels ? "partition" : "trim", t.stage = st.name, t.loop = loop;
      auto next = apply_step(*scratch, t);
      if (!next) continue;
      scratch = next.take(), steps.push_back(t);
      if (!edge_pixels) continue;
      // The parts before the largest (the left edge; those after it are right edges) go last.
      for (const std::string &part : loops_before(scratch->stages[*stage_index(*scratch, st.name)].body, loop)) {
        Step later;
        later.op = "sink", later.stage = st.name, later.loop = part;
        auto moved = apply_step(*scratch, later);
        if (!moved) break;
        scratch = moved.take(), steps.push_back(later);
      }
    }
  }
  size_t replayed = steps.size();
  parallel_units(steps, st.name, knobs.parallel, "i2", false);
  if (scratch && made) {
    // The scratch nest is the list so far replayed: the parallel steps on it give the kernel.
    for (size_t i = replayed; i < steps.size() && scratch; ++i) scratch = apply_step(*scratch, steps[i]);
    if (scratch) *made = scratch.take();  // else the caller's replay names the failing step
  }
  return steps;
}

}  // namespace

Expected<std::vector<Step>> loop_sketch(const LoweredKernel &naive, const LoopSketch &knobs) {
  bool padded = naive.stages.size() == 2 && naive.stages[0].name == "pad";
  if (naive.stages.size() != 1 && !padded)
    return make_error("the loop sketch needs a one-stage naive nest or a conv's padded one, not " + std::to_string(naive.stages.size()) + " stages");
  const KernelStage &st = naive.stages.back();
  std::vector<std::pair<std::string, int64_t>> outs, reds;
  naive_loops(st.body, outs, reds);
  if (outs.empty()) return make_error("the nest of stage " + st.name + " has no output loops");
  std::vector<Step> steps;
  if (knobs.pack > 0) {
    Step p;
    p.op = "pack", p.stage = st.name, p.buffer = knobs.weight, p.dims = knobs.dims, p.factor = knobs.pack;
    steps.push_back(p);
  }
  // The padded input is placed first, while the conv's reads of it are still affine in its loops.
  if (padded) place_pad(naive, st.name, knobs.pad, steps);
  auto step = [&](const std::string &op, const std::string &loop) {
    Step s;
    s.op = op, s.stage = st.name, s.loop = loop;
    return s;
  };
  if (knobs.rfactor) {
    // The reduction as vectors: its loops fused into one (a global pool's plane), split by the
    // lanes, each lane accumulating a partial result of its own; the partials are summed once
    // per output element, the remainder of the reduction after them.
    if (reds.empty() || padded || knobs.rows) return make_error("rfactor needs a one-stage nest with a reduction, stage " + st.name);
    std::string k = reds[0].first;
    int64_t ext = reds[0].second;
    for (size_t d = 1; d < reds.size(); ++d) {
      Step f = step("fuse", k);
      f.names = {reds[d].first, "kf" + std::to_string(d)};
      steps.push_back(f);
      k = f.names[1], ext *= reds[d].second;
    }
    int64_t v = std::min<int64_t>(knobs.lanes, ext);
    if (v < 2) return make_error("rfactor needs 2 lanes or more of reduction in stage " + st.name);
    Step sp = step("split", k);
    sp.factor = v, sp.names = {"ko", "ki"};
    steps.push_back(sp);
    Step rf = step("rfactor", "ko");
    rf.names = {"ki"};
    steps.push_back(rf);
    steps.push_back(step("vectorize", "ki"));
    int fused = knobs.parallel_loops < 0 ? static_cast<int>(outs.size()) : std::min<int>(knobs.parallel_loops, static_cast<int>(outs.size()));
    std::vector<std::string> par;
    for (int d = 0; d < fused; ++d) par.push_back(outs[d].first);
    for (Step &p : parallel_over(st.name, par)) steps.push_back(p);
    return steps;
  }
  auto [last, len] = outs.back();
  if (knobs.partition) {
    // The columns cut into the borders and the inside (the largest part keeps the loop's name and
    // takes the sketch's steps; the borders stay scalar loops of their own).
    if (padded || knobs.rows) return make_error("partition needs a one-stage nest without a row tile, stage " + st.name);
    Step part = step("partition", last);
    auto cut = apply_step(naive, part);
    if (!cut) return cut.error();
    steps.push_back(part);
    len = stage_loops(*cut, st.name)[last];
  }
  int64_t lanes = std::min<int64_t>(knobs.lanes, len);
  if (knobs.rows > 0) {
    // A tile of `rows` rows x `lanes` columns (the last two output loops) around the reduction
    // (S-S-R-S): the rows unrolled and the columns vectorized, so each row's accumulator vector
    // stays in a register and rows whose windows overlap share their loads.
    if (outs.size() < 2) return make_error("a tile of rows needs two output loops in the nest of stage " + st.name);
    const auto &[row, height] = outs[outs.size() - 2];
    if (reds.empty() || lanes < 2 || height % knobs.rows || knobs.rows > height)
      return make_error("a tile of " + std::to_string(knobs.rows) + " rows x " + std::to_string(lanes) + " columns does not tile the nest of stage " + st.name);
    std::vector<std::string> reduction;
    for (const auto &k : reds) reduction.push_back(k.first);
    if (len % lanes) {
      // Columns left over (56 = 3 x 16 + 8): the columns split first, so the leftover is a tail
      // loop in the row's body; the rows distributed over the full tiles and the tail, each split
      // into tiles of `rows` and register-tiled the same way (the tail's vector narrower). The
      // rows then stay out of the parallel loop (they are two loops).
      if (knobs.parallel_loops < 0 || knobs.parallel_loops > static_cast<int>(outs.size()) - 2)
        return make_error("a tile of rows with a column tail keeps the rows out of the parallel loop, stage " + st.name);
      Step sx = step("split", last);
      sx.factor = lanes, sx.names = {"xo", "xi"};
      steps.push_back(sx);
      steps.push_back(step("distribute", row));
      Step sy = step("split", row);
      sy.factor = knobs.rows, sy.names = {"yo", "yi"};
      steps.push_back(sy);
      Step ty = step("split", row + "_1");
      ty.factor = knobs.rows, ty.names = {"to", "ti"};
      steps.push_back(ty);
      Step r = step("reorder", "");
      r.names = {"yo", "xo", "yi", "xi"};
      steps.push_back(r);
      std::vector<std::string> tail_reduction;
      for (const std::string &k : reduction) tail_reduction.push_back(k + "_tail");
      for (Step &t : register_tile(st.name, {"yi", "xi"}, reduction)) steps.push_back(t);
      for (Step &t : register_tile(st.name, {"ti", "xi_tail"}, tail_reduction)) steps.push_back(t);
      if (knobs.unroll_reduction)
        for (const std::string &k : reductions_to_unroll(reds)) steps.push_back(step("unroll", k)), steps.push_back(step("unroll", k + "_tail"));
      std::vector<std::string> par;
      for (int d = 0; d < knobs.parallel_loops; ++d) par.push_back(outs[d].first);
      for (Step &p : parallel_over(st.name, par)) steps.push_back(p);
      return steps;
    }
    Step sy = step("split", row);
    sy.factor = knobs.rows, sy.names = {"yo", "yi"};
    steps.push_back(sy);
    std::string x = last;
    if (lanes < len) {
      Step sx = step("split", last);
      sx.factor = lanes, sx.names = {"xo", "xi"};
      steps.push_back(sx);
      x = "xi";
    }
    Step r = step("reorder", "");
    r.names = x == "xi" ? std::vector<std::string>{"yo", "xo", "yi", "xi"} : std::vector<std::string>{"yo", "yi", x};
    steps.push_back(r);
    for (Step &t : register_tile(st.name, {"yi", x}, reduction)) steps.push_back(t);
    if (knobs.unroll_reduction)
      for (const std::string &k : reductions_to_unroll(reds)) steps.push_back(step("unroll", k));
    std::vector<std::string> par;
    for (size_t d = 0; d + 2 < outs.size(); ++d) par.push_back(outs[d].first);
    if (knobs.parallel_loops < 0) par.push_back("yo");
    for (Step &p : parallel_over(st.name, par)) steps.push_back(p);
    return steps;
  }
  if (lanes >= 2) {
    Step split = step("split", last);
    split.factor = lanes;
    split.names = {"xo", "xi"};
    steps.push_back(split);
    steps.push_back(step("vectorize", "xi"));
    if (len % lanes >= 2) steps.push_back(step("vectorize", "xi_tail"));
  }
  if (knobs.unroll_reduction)
    for (const std::string &k : reductions_to_unroll(reds)) {
      steps.push_back(step("unroll", k));
      if (lanes >= 2 && len % lanes) steps.push_back(step("unroll", k + "_tail"));
    }
  int fused = knobs.parallel_loops < 0 ? static_cast<int>(outs.size()) - 1 : std::min<int>(knobs.parallel_loops, static_cast<int>(outs.size()) - 1);
  std::vector<std::string> par;
  for (int d = 0; d < fused; ++d) par.push_back(outs[d].first);
  for (Step &p : parallel_over(st.name, par)) steps.push_back(p);
  return steps;
}

Expected<std::vector<Step>> matmul_tile_sketch(const LoweredKernel &naive, int64_t rows, int64_t cols) {
  const KernelStage &st = naive.stages.back();
  if (st.name != "matmul" || naive.stages.size() != 1) return make_error("the matmul tile needs a matmul nest");
  std::vector<std::pair<std::string, int64_t>> outs, reds;
  naive_loops(st.body, outs, reds);
  if (outs.size() < 3 || reds.size() != 1) return make_error("the matmul tile needs batch loops, rows and columns");
  const auto &[row, M] = outs[outs.size() - 2];
  const auto &[col, N] = outs.back();
  if (rows < 1 || rows > M || cols < 2 || cols > N || cols > 64) return make_error("a tile of " + std::to_string(rows) + " x " + std::to_string(cols) + " does not fit " + std::to_string(M) + " x " + std::to_string(N));
  const std::string k = reds[0].first;
  std::vector<Step> steps;
  StageSteps step{st.name, steps};
  bool col_tail = N % cols != 0, row_tail = M % rows != 0;
  // Columns first: the tiles and, left over, ni_tail, in each row.
  Step *sc = step("split", col);
  sc->factor = cols, sc->names = {"no", "ni"};
  std::vector<std::string> row_loops{row};
  if (col_tail) step("distribute", row), row_loops.push_back(row + "_1");
  // Then the rows of each, the rows left over (_rt) after the tiles.
  struct Tile {
    std::string rows, cols, red;
  };
  std::vector<Tile> tiles;
  for (size_t r = 0; r < row_loops.size(); ++r) {
    bool full_cols = r == 0;
    std::string ro = full_cols ? "mo" : "to", rp = full_cols ? "mp" : "tp";
    Step *sr = step("split", row_loops[r]);
    sr->factor = rows, sr->names = {ro, rp, "_rt"};
    std::string c = full_cols ? "ni" : "ni_tail", kk = full_cols ? k : k + "_tail";
    // The row tile inside the column tiles: (mo, no, mp, ni).
    if (full_cols) step("reorder")->names = {"no", rp};
    tiles.push_back({rp, c, kk});
    if (row_tail) {
      if (full_cols) step("reorder")->names = {"no_rt", rp + "_rt"};
      tiles.push_back({rp + "_rt", c + "_rt", kk + "_rt"});
    }
  }
  for (const Tile &t : tiles)
    for (Step &x : register_tile(st.name, {t.rows, t.cols}, {t.red})) steps.push_back(x);
  std::vector<std::string> par;
  for (size_t d = 0; d + 2 < outs.size(); ++d) par.push_back(outs[d].first);
  for (Step &p : parallel_over(st.name, par)) steps.push_back(p);
  return steps;
}

Expected<std::vector<Step>> row_sketch(const LoweredKernel &naive, int lanes) {
  const KernelStage &st = naive.stages.back();
  if (naive.stages.size() != 1) return make_error("the row sketch needs a one-stage nest");
  std::vector<std::pair<std::string, int64_t>> outs, reds;
  naive_loops(st.body, outs, reds);
  auto loops = stage_loops(naive, st.name);
  std::vector<std::string> passes;
  for (int p = 1; loops.count("j" + std::to_string(p)); ++p) passes.push_back("j" + std::to_string(p));
  if (passes.empty()) return make_error("the row sketch needs passes j1, j2, ... over a row");
  for (const std::string &j : passes)
    if (loops[j] < 2 * lanes || lanes < 2) return make_error("the row's pass " + j + " is shorter than two vectors");
  std::vector<Step> steps;
  StageSteps step{st.name, steps};
  for (const std::string &j : passes) {
    std::string o = j + "o", i = j + "i";
    Step *sp = step("split", j);
    sp->factor = lanes, sp->names = {o, i};
    // A pass that only folds into a row's local value (a maximum, a sum): each lane its own
    // partial (rfactor), combined once per row, the row's rest after the tiles. A pass that
    // stores elements: vectors, and the rest as one narrower vector.
    if (folds_into_local(st.body, j)) {
      step("rfactor", o)->names = {i};
      step("vectorize", i);
    } else {
      step("vectorize", i);
      if (loops[j] % lanes >= 2) step("vectorize", i + "_tail");
    }
  }
  std::vector<std::string> par;
  for (const auto &o : outs) par.push_back(o.first);
  for (Step &p : parallel_over(st.name, par)) steps.push_back(p);
  return steps;
}

namespace {
// The loop of rows_across_threads' runs (parallel_over_row_runs: the row loop's name + "p").
constexpr const char *kRowRuns = "i2p";

/**
 * Steps making `loops` of stage `stage` (outermost first, perfectly nested, loops[2] a row loop of
 * `rows` rows) the parallel loop with the rows split into `parts` runs taken outermost after
 * loops[0]: loops[0], the runs, loops[1], then the rows of a run and the rest fused.
 */
std::vector<Step> parallel_over_row_runs(const std::string &stage, const std::vector<std::string> &loops, int64_t rows, int parts) {
  std::vector<Step> out;
  StageSteps step{stage, out};
  const std::string &row = loops[2], runs = row + "p", run = row + "r";
  step("split", row)->factor = rows / parts, out.back().names = {runs, run};
  step("reorder")->names = {loops[0], runs, loops[1], run};
  std::vector<std::string> order{loops[0], runs, loops[1]};
  if (loops.size() > 3) order.push_back(run);
  order.insert(order.end(), loops.begin() + 3, loops.end());
  for (Step &p : parallel_over(stage, order)) out.push_back(p);
  return out;
}
}  // namespace

bool has_row_blocks_parallel(const std::vector<Step> &steps) {
  return std::any_of(steps.begin(), steps.end(), [](const Step &st) {
    return st.op == "fuse" && st.loop == "i0" && st.names == std::vector<std::string>{"yo", kRowBlocks};
  });
}

bool has_rows_across_threads(const std::vector<Step> &steps) {
  return std::any_of(steps.begin(), steps.end(), [](const Step &st) { return st.op == "split" && st.loop == "i2" && !st.names.empty() && st.names[0] == kRowRuns; });
}

std::optional<std::vector<Step>> rows_across_threads(const std::vector<Step> &steps, int64_t rows, int parts) {
  if (parts < 2 || rows % parts != 0 || steps.empty() || steps.back().op != "parallel") return std::nullopt;
  const std::string &stage = steps.back().stage;
  // The fuse steps parallel_over put before the parallel step, walked back to the outermost loop.
  size_t first = steps.size() - 1;
  std::string top = steps.back().loop;
  std::vector<std::string> inner;
  while (first > 0) {
    const Step &f = steps[first - 1];
    if (f.op != "fuse" || f.stage != stage || f.names.size() != 2 || f.names[1] != top) break;
    inner.push_back(f.names[0]);
    top = f.loop;
    --first;
  }
  std::vector<std::string> loops{top};
  loops.insert(loops.end(), inner.rbegin(), inner.rend());
  // Image, channels (or their blocks), then the output's rows (the naive nest's i2).
  if (loops.size() < 3 || loops[2] != "i2") return std::nullopt;
  std::vector<Step> out(steps.begin(), steps.begin() + static_cast<std::ptrdiff_t>(first));
  for (Step &p : parallel_over_row_runs(stage, loops, rows, parts)) out.push_back(p);
  return out;
}

Expected<std::vector<Step>> layout_change_sketch(const LoweredKernel &naive, const std::string &input, int64_t block) {
  if (naive.stages.size() != 1) return make_error("the layout change sketch needs a one-stage nest");
  const KernelStage &st = naive.stages.back();
  std::vector<std::pair<std::string, int64_t>> outs, reds;
  naive_loops(st.body, outs, reds);
  bool to_blocked = outs.size() == 5 && outs[4].second == block;
  if (!reds.empty() || (!to_blocked && outs.size() != 4) || block < 2)
    return make_error("the layout change sketch needs the loops of an NCHW or NCHW" + std::to_string(block) + "c output");
  // Columns per tile: the most, up to a block's, that divide the row (56: 14), so no tile is partial.
  int64_t cols = widest_dividing_lanes(outs[3].second, static_cast<int>(block));
  if (cols == 0) return make_error("no tile of 5 to " + std::to_string(block) + " columns divides a row of " + std::to_string(outs[3].second));
  std::vector<Step> steps;
  StageSteps step{st.name, steps};
  if (!to_blocked) {
    if (outs[1].second % block) return make_error("the channels are not whole blocks of " + std::to_string(block));
    step("split", "i1")->factor = block, steps.back().names = {"co", "ci"};
  }
  step("split", "i3")->factor = cols, steps.back().names = {"xo", "xi"};
  if (!to_blocked) step("reorder")->names = {"i0", "co", "i2", "xo", "ci", "xi"};
  // The tile of channels x columns copied with each channel's columns contiguous (to NCHWc) or
  // each column's channels contiguous (from it), then read across: the other layout's vectors.
  step("cache_read", "xo")->buffer = input;
  step("unroll", input + "_r0");
  step("unroll", to_blocked ? "xi" : "ci");
  step("vectorize", to_blocked ? "i4" : "xi");
  for (Step &p : parallel_over(st.name, {"i0", to_blocked ? "i1" : "co", "i2"})) steps.push_back(p);
  return steps;
}

std::vector<SketchPoint> matmul_tile_sketches(const LoweredKernel &naive, int lanes, int registers) {
  std::vector<SketchPoint> out;
  for (int vecs : {1, 2, 3, 4})
    for (int rows : {1, 2, 3, 4, 6, 8, 12, 14}) {
      if (vecs * rows + vecs + 1 > registers) continue;
      auto steps = matmul_tile_sketch(naive, rows, int64_t{vecs} * lanes);
      if (steps && replay(naive, *steps)) out.push_back({steps.take(), {1000 + vecs, rows}});  // 1000+: apart from the loop sketch's coordinates
    }
  return out;
}

int widest_dividing_lanes(int64_t width, int lanes) {
  for (int d = lanes; d >= 5; --d)
    if (width % d == 0) return d;
  return 0;
}

std::vector<SketchPoint> loop_sketches(const LoweredKernel &naive, int lanes) {
  std::vector<SketchPoint> out;
  std::vector<int> widths;
  for (int v = lanes; v >= 4; v /= 2) widths.push_back(v);
  widths.push_back(1);
  // A conv's padded input at root, inline, per channel plane (i1) or per output row (i2).
  std::vector<std::string> pads = naive.stages.size() == 2 ? std::vector<std::string>{"root", "inline", "i1", "i2"} : std::vector<std::string>{"root"};
  // Row tiles for nests with a reduction (convs, pools): 2 to 8 rows; lanes that do not divide
  // the row leave a tail tile (a row narrower than a vector is one vector).
  std::vector<int> rows{0};
  std::vector<std::pair<std::string, int64_t>> outs, reds;
  naive_loops(naive.stages.back().body, outs, reds);
  if (outs.size() >= 2 && !reds.empty()) {
    for (int r : {2, 3, 4, 6, 7, 8}) rows.push_back(r);
    // The widest lanes that divide the row (28 columns: 14 lanes; 7: 7), if not a width already.
    int d = widest_dividing_lanes(outs.back().second, lanes);
    if (d && std::find(widths.begin(), widths.end(), d) == widths.end()) widths.insert(widths.begin(), d);
  }
  // A new point of the knobs, if the sketch makes one that the nest takes (a point the nest refuses is not in the space).
  auto add = [&](const LoopSketch &k, std::vector<int> coords) {
    auto steps = loop_sketch(naive, k);
    if (!steps || std::any_of(out.begin(), out.end(), [&](const SketchPoint &p) { return p.steps == *steps; })) return;
    if (replay(naive, *steps)) out.push_back({steps.take(), std::move(coords)});
  };
  for (int v : widths)
    for (bool unroll : {false, true})
      for (int par : {-1, 2})
        for (size_t pad = 0; pad < pads.size(); ++pad)
          for (int r : rows)
            if (!r || unroll) add({v, unroll, par, pads[pad], r}, {v, unroll, par, static_cast<int>(pad), r, 0, 0});  // rows share loads only across an unrolled window
  // The columns partitioned into borders and inside, where a nest's reads have bounds conditions
  // (pools with padding: the inside columns then read without clamps, as the old pool template's did).
  Step cut;
  cut.op = "partition", cut.stage = naive.stages[0].name, cut.loop = outs.empty() ? "" : outs.back().first;
  if (naive.stages.size() == 1 && !outs.empty() && apply_step(naive, cut))
    for (int v : widths)
      for (bool unroll : {false, true})
        for (int par : {-1, 2}) add({.lanes = v, .unroll_reduction = unroll, .parallel_loops = par, .partition = true}, {v, unroll, par, 0, 0, 0, 1});
  // The reduction factored into vector lanes, for one-stage nests with a reduction: one vector,
  // or 2 or 4 of them (independent sums, so a long reduction is not one chain of dependent adds).
  if (naive.stages.size() == 1 && !reds.empty())
    for (int v : {lanes / 2, lanes, 2 * lanes, 4 * lanes})
      for (int par : {-1, 2})
        if (v >= 4 && v <= 64) add({.lanes = v, .parallel_loops = par, .rfactor = true}, {v, 0, par, 0, 0, 1, 0});
  return out;
}

Expected<std::vector<Step>> tile_sketch(const LoweredKernel &naive, const std::string &weight, const std::vector<int64_t> &dims,
                                        const TileSketch &knobs, std::optional<LoweredKernel> *made) {
  const KernelStage &st = naive.stages.back();
  bool conv = st.name == "conv2d";
  if (!conv && st.name != "dense") return make_error("the tile sketch needs a conv2d or dense nest, not stage " + st.name);
  std::vector<std::pair<std::string, int64_t>> outs, reds;
  naive_loops(st.body, outs, reds);
  if (conv && knobs.flat_pixels) return flat_tile_sketch(naive, weight, dims, knobs);
  if (conv && knobs.row_tiles) return row_tile_sketch(naive, weight, dims, knobs, made);
  if (conv && outs.size() == 5) return blocked_tile_sketch(naive, weight, dims, knobs);
  if (knobs.ic_block) return make_error("reduction tiles need a conv2d_nchwc nest");
  if (outs.size() != (conv ? 4u : 2u)) return make_error("the nest of stage " + st.name + " does not have the loops of a " + st.name);
  int64_t OC = outs[1].second;
  if (knobs.oc_block < 1 || knobs.oc_block > 64 || OC % knobs.oc_block) return make_error("oc_block " + std::to_string(knobs.oc_block) + " does not tile " + std::to_string(OC) + " channels");
  if (conv && knobs.pixel_vectors <= 0 && (knobs.px_block < 1 || outs[3].second % knobs.px_block)) return make_error("px_block " + std::to_string(knobs.px_block) + " does not divide the output width " + std::to_string(outs[3].second));
  std::vector<Step> steps;
  StageSteps step{st.name, steps};
  // The channel tiles, and the weight packed by them: its first index is then oo * oc_block + oi.
  auto channel_tiles = [&] {
    Step *so = step("split", "i1");
    so->factor = knobs.oc_block, so->names = {"oo", "oi"};
    Step *p = step("pack");
    p->buffer = weight, p->dims = dims, p->factor = knobs.oc_block;
  };
  if (knobs.pixel_vectors > 0) {
    if (!conv) return make_error("pixel lanes need a conv");
    return pixel_tile_sketch(naive, weight, dims, knobs);
  }
  channel_tiles();
  if (!conv && knobs.px_block > 1) {
    // Rows x units: px_block rows of the oc_block-unit tile in registers, so each packed weight
    // vector feeds px_block FMAs and each row's value oc_block / lanes of them; the rows left
    // over (M % px_block) take a tile of their own inside the same column tile, so the column
    // tiles stay the parallel loop.
    int64_t M = outs[0].second;
    if (knobs.px_block > M) return make_error("px_block " + std::to_string(knobs.px_block) + " is more than the " + std::to_string(M) + " rows");
    step("reorder")->names = {"oo", "i0"};
    Step *sr = step("split", "i0");
    sr->factor = knobs.px_block, sr->names = {"mo", "mp"};
    for (std::string sfx : {"", "_tail"}) {
      if (!sfx.empty() && M % knobs.px_block == 0) break;
      for (Step &t : register_tile(st.name, {"mp" + sfx, "oi" + sfx}, {"k0" + sfx})) steps.push_back(t);
      Step *pf = step("prefetch", "k0" + sfx);
      pf->buffer = weight, pf->factor = 2048;
    }
    for (Step &p : parallel_over(st.name, {"oo"})) steps.push_back(p);
    return steps;
  }
  if (conv) {
    Step *sx = step("split", "i3");
    sx->factor = knobs.px_block, sx->names = {"xo", "xp"};
    step("reorder")->names = {"oo", "i2", "xo", "xp", "oi"};
  } else {
    step("reorder")->names = {"oo", "i0"};
  }
  step("distribute", "oi");
  if (conv) step("distribute", "xp");
  std::vector<std::string> update = conv ? std::vector<std::string>{"k0", "k1", "k2", "xp_1", "oi_1"} : std::vector<std::string>{"k0", "oi_1"};
  step("reorder")->names = update;
  // The weight stream prefetched 2048 elements (8 KiB) ahead, as the templates do: the innermost reduction loop around the tile.
  Step *pf = step("prefetch", conv ? "k2" : "k0");
  pf->buffer = weight, pf->factor = 2048;
  // The padded input: its own stage (root), recomputed at every read (inline), or computed per
  // row or per tile into a local box (its rows vectorized), before loops are fused: the reads must stay affine.
  if (conv && naive.stages.size() > 1) place_pad(naive, st.name, knobs.pad, steps);
  bool by_pixels = conv && knobs.pixel_epilogue && knobs.px_block >= 2;
  for (const char *v : {"oi", "oi_1", "oi_2"})
    if (!(by_pixels && std::string(v) == "oi_2")) step("vectorize", v);
  if (conv)
    for (const char *v : {"xp", "xp_1", "xp_2"})
      if (!(by_pixels && std::string(v) == "xp_2")) step("unroll", v);
  if (by_pixels) {
    // The epilogue a channel at a time: its columns are contiguous in the output (the template's pixel epilogue).
    step("reorder")->names = {"oi_2", "xp_2"};
    step("vectorize", "xp_2");
    step("unroll", "oi_2");
  }
  // The parallel loop: n and the channel tiles (and the rows), fused.
  std::vector<std::string> par = conv ? std::vector<std::string>{"i0", "oo"} : std::vector<std::string>{"oo"};
  if (conv && knobs.parallel_rows) par.push_back("i2");
  for (Step &p : parallel_over(st.name, par)) steps.push_back(p);
  return steps;
}

std::vector<SketchPoint> tile_sketches(const LoweredKernel &naive, const std::string &weight, const std::vector<int64_t> &dims,
                                       int lanes, int registers, bool pointwise) {
  std::vector<SketchPoint> out;
  const KernelStage &st = naive.stages.back();
  std::vector<std::pair<std::string, int64_t>> outs, reds;
  naive_loops(st.body, outs, reds);
  bool conv = st.name == "conv2d";
  if (conv && outs.size() == 5 && reds.size() == 4) {
    // conv2d_nchwc: tiles of whole channel blocks; reduction tiles (the padded input at root,
    // rows not parallel) of 32 to 128 channels.
    int64_t b = outs[4].second, width = outs[3].second, C = reds[0].second * b;
    for (int64_t ob = b; ob <= 64; ob += b) {
      int64_t vecs = ob / b * ((b + lanes - 1) / lanes);  // registers per column of the tile (AVX2: two per 16-lane block)
      if (outs[1].second % (ob / b)) continue;
      for (int64_t px = 1; px <= width; ++px) {
        if (width % px || vecs * px + vecs + 1 > registers) continue;
        for (int pad = 0; pad < 3; ++pad)
          for (bool rows : {false, true})
            for (int64_t ic : {0, 32, 64, 128}) {
              if ((naive.stages.size() == 1 && pad) || (ic && (pad || rows || ic >= C || C % ic))) continue;
              TileSketch t;
              t.oc_block = ob, t.px_block = px, t.pad = kTilePads[pad], t.parallel_rows = rows, t.ic_block = ic;
              auto steps = tile_sketch(naive, weight, dims, t);
              if (steps && replay(naive, *steps)) out.push_back({*steps, {static_cast<int>(ob), static_cast<int>(px), pad, rows, 1, 0, static_cast<int>(ic)}});
            }
      }
    }
    return out;
  }
  if (outs.size() != (conv ? 4u : 2u)) return out;
  int64_t width = conv ? outs[3].second : 1;
  // Channel tiles of whole vectors up to 64 channels, and of half a vector where that is 8 lanes
  // or more (a dense layer to 1000 classes divides by 8, not 16).
  std::vector<int64_t> blocks;
  if (lanes / 2 >= 8) blocks.push_back(lanes / 2);
  for (int64_t ob = lanes; ob <= 64; ob += lanes) blocks.push_back(ob);
  for (int64_t ob : blocks) {
    if (outs[1].second % ob) continue;
    int64_t vecs = (ob + lanes - 1) / lanes;
    int64_t dense_rows = conv ? 0 : std::min<int64_t>(outs[0].second, 16);  // a dense layer's row tiles
    for (int64_t px = 1; px <= (conv ? width : dense_rows); ++px) {
      if ((conv && width % px) || vecs * px + vecs + 1 > registers) continue;
      for (int pad = 0; pad < 3; ++pad)
        for (bool rows : {false, true})
          for (bool by_pixels : {true, false}) {
            const char *where = kTilePads[pad];
            if (!conv && (pad || rows || !by_pixels)) continue;
            if (conv && naive.stages.size() == 1 && pad) continue;
            auto steps = tile_sketch(naive, weight, dims, {ob, px, where, rows, by_pixels});
            if (steps && replay(naive, *steps)) out.push_back({*steps, {static_cast<int>(ob), static_cast<int>(px), pad, rows, by_pixels, 0}});
          }
    }
  }
  if (pointwise && conv)
    for (int ob : {1, 2, 3, 4, 6, 8, 12, 16})
      for (int pv : {1, 2, 3, 4, 6, 7}) {
        if (outs[1].second % ob || ob * pv + pv + 1 > registers) continue;
        for (bool outer : {true, false}) {
          TileSketch t;
          t.oc_block = ob, t.pixel_vectors = pv, t.lanes = lanes, t.parallel = outer ? 1 : 0;
          auto steps = tile_sketch(naive, weight, dims, t);
          if (steps && replay(naive, *steps)) out.push_back({*steps, {ob, pv, 0, outer, 1, 1}});
        }
      }
  return out;
}

namespace {

/**
 * The Winograd sketch's steps before the GEMM's: the padded input placed by `pad`, and the input
 * and output transforms vectorized (channel lanes, or `lanes` tiles of a row in NCHW) with their
 * outer loops parallel. They depend on `pad` alone, so the points with one placement share them.
 */
std::vector<Step> winograd_transform_steps(const LoweredKernel &naive, const std::string &pad, int lanes, int row_parts = 0) {
  auto in = stage_loops(naive, "wino_in"), out = stage_loops(naive, "wino_out");
  bool blocked = in.count("vl") > 0;
  std::vector<Step> steps;
  // The padded input first, while the input transform's reads of it are affine in its loops.
  place_pad(naive, "wino_in", pad, steps);
  // The input transform: each tile's a x a loads and sums over a vector of channel lanes or of a row's tiles.
  StageSteps tin{"wino_in", steps};
  if (blocked) tin("vectorize", "vl");
  else vectorize_by(tin, "vx", in["vx"], lanes);
  for (Step &p : row_parts ? parallel_over_row_runs("wino_in", {"vn", "vc", "vy"}, in["vy"], row_parts) : parallel_over("wino_in", {"vn", "vc", "vy"}))
    steps.push_back(p);
  // The output transform: vectorized like the input's; NCHW first partitions off the last tile
  // column when it is cut by the edge (its branch would be on the vector's lanes).
  StageSteps tout{"wino_out", steps};
  if (blocked) {
    tout("vectorize", "i4");
  } else {
    int64_t TW = out["i3"], main = TW;
    Step part;
    part.op = "partition", part.stage = "wino_out", part.loop = "i3";
    if (apply_step(naive, part)) steps.push_back(part), main = TW - 1;  // no step before touches wino_out
    vectorize_by(tout, "i3", main, lanes);
  }
  for (Step &p : row_parts ? parallel_over_row_runs("wino_out", {"i0", "i1", "i2"}, out["i2"], row_parts) : parallel_over("wino_out", {"i0", "i1", "i2"}))
    steps.push_back(p);
  return steps;
}

/** The Winograd sketch's GEMM steps: the register tile of `knobs`, U re-blocked and prefetched, the channel tiles parallel. */
Expected<std::vector<Step>> winograd_gemm_steps(const LoweredKernel &naive, const WinogradSketch &knobs) {
  auto gemm = stage_loops(naive, "wino_gemm");
  bool blocked = gemm.count("i4") > 0;
  std::vector<Step> steps;
  // The GEMMs: a register tile around the reduction, each position's channel tiles in parallel.
  StageSteps step{"wino_gemm", steps};
  int64_t T = gemm["i3"];
  // Runs of whole tile rows (row_parts): the tiles split into runs, taken outside every other loop;
  // the steps below tile a run's tiles.
  std::string tiles = "i3";
  if (knobs.row_parts) {
    if (!blocked || T % knobs.row_parts) return make_error("runs of tile rows need conv2d_nchwc's GEMM and tiles the runs divide");
    step("split", "i3")->factor = T / knobs.row_parts, steps.back().names = {"i3p", "i3r"};
    step("reorder")->names = {"i3p", "i0", "i1", "i2"};
    tiles = "i3r", T /= knobs.row_parts;
  }
  // The transformed weight U, packed [xi][c][o] by the naive nest, re-blocked by the channel tile
  // (each tile's weights one contiguous stream) and prefetched 8 KiB ahead, as the template does.
  auto weights = [&](const std::string &innermost) {
    for (const WeightPacking &w : naive.packings)
      if (w.kind == WeightPacking::kWinograd) {
        int64_t P = gemm["i0"], O = w.block, C = gemm["k0"] * (gemm.count("k1") ? gemm["k1"] : 1);
        const std::string &u = naive.buffers[w.param]->name;
        if (knobs.oc_block < O) {  // one tile of all the channels reads [xi][c][o] contiguously already
          Step *p = step("pack");
          p->buffer = u, p->dims = {P, C, O}, p->factor = knobs.oc_block;
        }
        Step *pf = step("prefetch", innermost);
        pf->buffer = u, pf->factor = 2048;
      }
  };
  if (blocked) {
    int64_t b = gemm["i4"], blocks = gemm["i2"];
    if (knobs.oc_block < b || knobs.oc_block % b || blocks % (knobs.oc_block / b))
      return make_error("oc_block " + std::to_string(knobs.oc_block) + " is not a whole number of " + std::to_string(b) + "-channel blocks dividing " + std::to_string(blocks * b));
    if (knobs.px_block < 1 || knobs.px_block > T) return make_error("px_block " + std::to_string(knobs.px_block) + " is not in [1, " + std::to_string(T) + "] tiles");
    step("split", "i2")->factor = knobs.oc_block / b, steps.back().names = {"oo", "oi"};
    step("reorder")->names = {tiles, "oi"};
    step("split", tiles)->factor = knobs.px_block, steps.back().names = {"to", "tp"};
    for (Step &t : register_tile("wino_gemm", {"tp", "oi", "i4"}, {"k0", "k1"})) steps.push_back(t);
    weights("k1");
    if (T % knobs.px_block)
      for (Step &t : register_tile("wino_gemm", {"tp_tail", "oi_tail", "i4_tail"}, {"k0_tail", "k1_tail"})) steps.push_back(t);
  } else if (knobs.channel_lanes) {
    // The template's form: oc_block channels (whole vectors) x px_block tiles, U loaded as
    // vectors and each V broadcast; the epilogue a channel at a time, the tiles as the vector
    // (contiguous in M), read across the accumulators.
    int64_t O = gemm["i2"];
    if (knobs.oc_block < knobs.lanes || knobs.oc_block % knobs.lanes || O % knobs.oc_block)
      return make_error("oc_block " + std::to_string(knobs.oc_block) + " is not whole vectors of " + std::to_string(knobs.lanes) + " dividing " + std::to_string(O) + " channels");
    if (knobs.px_block < 1 || knobs.px_block > T) return make_error("px_block " + std::to_string(knobs.px_block) + " is not in [1, " + std::to_string(T) + "] tiles");
    step("split", "i2")->factor = knobs.oc_block, steps.back().names = {"oo", "oi"};
    step("reorder")->names = {"i3", "oi"};
    step("split", "i3")->factor = knobs.px_block, steps.back().names = {"to", "tp"};
    int64_t rest = T % knobs.px_block;
    for (const char *sfx : {"", "_tail"}) {
      if (*sfx && !rest) continue;
      std::string tp = std::string("tp") + sfx, oi = std::string("oi") + sfx, k0 = std::string("k0") + sfx;
      int64_t width = *sfx ? rest : knobs.px_block;
      step("distribute", oi);
      step("distribute", tp);
      step("reorder")->names = {k0, tp + "_1", oi + "_1"};
      for (const char *l : {"", "_1"}) step("vectorize", oi + l), step("unroll", tp + l);
      step("reorder")->names = {oi + "_2", tp + "_2"};
      step(width >= 2 ? "vectorize" : "unroll", tp + "_2");
      step("unroll", oi + "_2");
      if (!*sfx) weights("k0");
    }
  } else {
    int64_t O = gemm["i2"], PB = knobs.px_block * knobs.lanes, rest = T % PB;
    if (knobs.oc_block < 1 || O % knobs.oc_block) return make_error("oc_block " + std::to_string(knobs.oc_block) + " does not divide " + std::to_string(O) + " channels");
    if (knobs.lanes < 2 || knobs.px_block < 1 || T < PB || rest > knobs.lanes)
      return make_error(std::to_string(knobs.px_block) + " vectors of " + std::to_string(knobs.lanes) + " tiles do not tile " + std::to_string(T) + " tiles up to a vector");
    step("split", "i2")->factor = knobs.oc_block, steps.back().names = {"oo", "oi"};
    step("reorder")->names = {"i3", "oi"};
    step("split", "i3")->factor = PB, steps.back().names = {"to", "ti"};
    step("split", "ti")->factor = knobs.lanes, steps.back().names = {"tv", "tl"};
    step("reorder")->names = {"oi", "tv", "tl"};
    for (Step &t : register_tile("wino_gemm", {"oi", "tv", "tl"}, {"k0"})) steps.push_back(t);
    weights("k0");
    if (rest) {
      step("reorder")->names = {"oi_tail", "ti_tail"};
      for (Step &t : register_tile("wino_gemm", {"oi_tail", "ti_tail"}, {"k0_tail"}, rest >= 2)) steps.push_back(t);
    }
  }
  std::vector<std::string> par{"i0", "i1", "oo"};
  if (knobs.row_parts) par.insert(par.begin(), "i3p");
  for (Step &p : parallel_over("wino_gemm", par)) steps.push_back(p);
  return steps;
}
}  // namespace

Expected<std::vector<Step>> winograd_sketch(const LoweredKernel &naive, const WinogradSketch &knobs) {
  for (const char *stage : {"pad", "wino_in", "wino_gemm", "wino_out"})
    if (!stage_index(naive, stage)) return make_error("the Winograd sketch needs Winograd's naive nests (pad, wino_in, wino_gemm, wino_out)");
  AT_ASSIGN(gemm, winograd_gemm_steps(naive, knobs));
  std::vector<Step> steps = winograd_transform_steps(naive, knobs.pad, knobs.lanes, knobs.row_parts);
  steps.insert(steps.end(), gemm.begin(), gemm.end());
  return steps;
}

std::vector<SketchPoint> winograd_sketches(const LoweredKernel &naive, int m, int lanes, int registers) {
  std::vector<SketchPoint> out;
  auto gemm = stage_loops(naive, "wino_gemm");
  if (gemm.empty()) return out;
  bool blocked = gemm.count("i4") > 0;
  int64_t b = blocked ? gemm["i4"] : 1, channels = gemm["i2"] * b;
  std::vector<int64_t> obs, pxs;
  if (blocked) {
    for (int64_t ob = b; ob <= 64; ob += b) obs.push_back(ob);
    pxs = kWinogradTiles;
  } else {
    obs = {1, 2, 3, 4, 6, 8, 12, 16};
    pxs = {1, 2, 3, 4, 6};
  }
  // NCHW's channel-lane tiles: whole vectors of channels up to 64 x 1 to 16 tiles.
  std::vector<int64_t> lane_obs;
  if (!blocked)
    for (int64_t ob = lanes; ob <= 64; ob += lanes) lane_obs.push_back(ob);
  // The steps before the GEMM's depend on the padded input's placement alone: replayed once per
  // placement, and each GEMM tile's steps from there (the transforms' large expressions made
  // replaying every whole list take 1.4 s per task).
  for (int pad = 0; pad < 3; ++pad) {
    std::string where = pad == 2 ? "vy" : kTilePads[pad];
    std::vector<Step> prefix = winograd_transform_steps(naive, where, lanes);
    auto start = replay(naive, prefix);
    if (!start) continue;
    // A point for a GEMM tile of ob channels x px tiles, if its steps replay after the prefix.
    auto add = [&](int64_t ob, int64_t px, bool channel_lanes) {
      WinogradSketch k;
      k.oc_block = ob, k.px_block = px, k.lanes = lanes, k.pad = where, k.channel_lanes = channel_lanes;
      auto gemm = winograd_gemm_steps(naive, k);
      if (!gemm || !replay(*start, *gemm)) return;
      std::vector<Step> steps = prefix;
      steps.insert(steps.end(), gemm->begin(), gemm->end());
      out.push_back({std::move(steps), {static_cast<int>(ob), static_cast<int>(px), pad, m, channel_lanes}, m});
    };
    for (int64_t ob : obs) {
      if (channels % ob) continue;
      // Registers per tile column: channel vectors (a block wider than the vector counts twice), or pixel vectors.
      int64_t vecs = blocked ? ob / b * ((b + lanes - 1) / lanes) : ob;
      for (int64_t px : pxs)
        if (vecs * px + (blocked ? vecs : px) + 1 <= registers) add(ob, px, false);
    }
    for (int64_t ob : lane_obs) {
      if (channels % ob) continue;
      int64_t vecs = ob / lanes;
      for (int64_t px : kWinogradTiles)
        if (vecs * px + vecs + 1 <= registers) add(ob, px, true);
    }
  }
  return out;
}

}  // namespace autotune
