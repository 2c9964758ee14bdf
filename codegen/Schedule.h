#pragma once
// The schedule of a fused group: the knobs of its anchor's template as plain data (JSON with a
// version), the check that a schedule can lower a group (with the reason when it cannot), and the
// default schedule for a target. The schedule space (search/ScheduleSpace) is built on these.
#include <optional>
#include <string>

#include "codegen/Steps.h"
#include "codegen/Target.h"
#include "ir/Graph.h"

namespace autotune {

struct SketchPoint;  // codegen/Sketch.h

/**
 * The schedule of one fused group: the knobs of its anchor's template. Plain data, JSON with a
 * version (schedule_to_json); validate_schedule() gives the reason an illegal one is illegal.
 */
struct KernelSchedule {
  enum class Parallel { kOc, kPx, kOcPx };
  int vector_width = 8;       // float lanes of vectorized loops (elementwise, reductions, direct conv)
  int oc_block = 16;          // conv/dense: output channels per register block and packing block
                              // (a multiple of 8); 0: the direct template
  int px_block = 6;           // conv: output pixels per register block (depthwise: output rows per block)
  Parallel parallel = Parallel::kOc;  // conv: the threads split output-channel blocks, pixel blocks, or both
  bool unroll_kx = false;     // conv: unroll the kernel-column loop of the reduction
  bool pad_at_root = true;    // conv: store a padded copy of the input first (root), or read the
                              // input in place: register tiles along rows, the padding in the edge
                              // tiles (rows_eligible), else the bounds recomputed at every read;
                              // depthwise: copy each plane to the stack just before it is read;
                              // a stem on pixel_vectors: its patches stored (root), or computed
                              // per block of output rows into a local box (off)
  int ic_block = 0;           // conv: input channels per reduction tile, the tile loop outside the
                              // pixel loop so its input slice stays in cache (partial sums go
                              // through the output); 0: one tile
  int winograd = 0;             // conv 3x3, stride 1: m = 2 or 4 computes it as Winograd F(m x m, 3x3) (a GEMM
                                // per transformed position, oc_block x px_block tiles in registers); 0: direct
  bool pixel_epilogue = false;  // conv: store the epilogue one output channel at a time with the block's
                                // pixels as the vector (contiguous in NCHW), not one pixel at a time
                                // with channels as the vector (a lane per channel plane)
  bool pixel_vectors = false;   // conv 1x1, no padding, one group (pointwise_eligible; a stride subsamples first), or
                                // a stem (patches_eligible: its windows gathered first, im2col): the
                                // register block is oc_block channels x px_block pixels with the
                                // pixels as the vectors (contiguous in NCHW) and each weight
                                // broadcast, so the epilogue stores whole vectors of a channel plane
  std::vector<Step> steps;      // when not empty: the group's naive nests (lower_naive) transformed by
                                // these steps (codegen/Steps, from a sketch: codegen/Sketch) instead of
                                // the template; vector_width is then only what the sketch used

  std::vector<KernelSchedule> segments;  // a group of several anchors (split_segments): each segment's schedule;
                                        // the fields above are then unused

  std::string to_string() const;
  bool operator==(const KernelSchedule &o) const;
};

/** The schedule as JSON: {"version": 1, "vector_width": 8, ...}. */
std::string schedule_to_json(const KernelSchedule &s);
/** Reads schedule JSON; an error names what is wrong (version, a field, a value). */
Expected<KernelSchedule> schedule_from_json(const std::string &json);

/** Ok if `s` can lower `body`, or the reason it cannot ("oc_block 24 does not divide 64 output channels"). */
Status validate_schedule(const Graph &body, const KernelSchedule &s);

/**
 * The schedule the runtime uses for a group on `target` when nothing better is known: vectors
 * of the target's width, and for conv and dense a register block sized to its register file
 * (two weight vectors and as many pixels as the rest of the registers hold: 12 accumulators of 8
 * floats on AVX2, 28 of 16 on AVX-512). With `row_parts` > 1 (the runtime's choice for the
 * model, rows_by_thread) the threads split the output's rows where can_split_rows, not its
 * channels.
 */
KernelSchedule default_schedule(const Graph &body, const Target &target = host_target(), int row_parts = 0);

/**
 * Whether the default schedule of `body` can split its output rows into `parts` runs, one per
 * thread, outermost (rows_across_threads; a 1x1 conv2d_nchwc by its pixel blocks): an NCHW or
 * NCHWc output whose rows `parts` divides, computed by elementwise ops, a layout change, a pool,
 * a depthwise (grouped) conv, a conv2d_nchwc that is not Winograd's or an NCHW 1x1 conv on pixel
 * lanes. default_schedule with
 * row_parts splits them so where this holds, and keeps its channel split elsewhere.
 */
bool can_split_rows(const Graph &body, int parts);

/**
 * Whether the threads of `s` split `body`'s output rows: rows_across_threads' runs, a chain
 * tile's blocks of rows, or a conv's pixel blocks (parallel px, not Winograd), which are runs of
 * rows too.
 */
bool splits_rows(const Graph &body, const KernelSchedule &s);

/**
 * `s` with its threads splitting `body`'s output rows into `parts` runs (rows_across_threads on
 * its steps, replayed), where can_split_rows and its list ends in the parallel fuse of image,
 * channels and rows; nothing otherwise. Each thread's loops inside its run stay as they were.
 */
std::optional<KernelSchedule> with_rows_split(const Graph &body, const KernelSchedule &s, int parts);

/** Whether `op` is a 2-D convolution: nn.conv2d (NCHW) or nn.conv2d_nchwc (activations in NCHW[b]c). */
inline bool is_conv_op(const std::string &op) { return op == "nn.conv2d" || op == "nn.conv2d_nchwc"; }
/** A conv node's output channels and its channel block (0: NCHW; the output's last dim for conv2d_nchwc). */
inline int64_t conv_block(const Node &n) { return n.op == "nn.conv2d_nchwc" ? n.type.shape[4] : 0; }
inline int64_t conv_out_channels(const Node &n) { return n.type.shape[1] * std::max<int64_t>(1, conv_block(n)); }

/**
 * Whether conv node `n` runs with `s` as register tiles along output rows that read its input in
 * place, the padding in the tiles (codegen/Sketch row_tile_sketch): pad_at_root off, the
 * blocked template, one group, the input an argument, no reduction tiles, not Winograd; NCHW
 * also with the pixel epilogue (else its padding is recomputed at every read, the older form).
 */
bool rows_eligible(const Node &n, const KernelSchedule &s);

/**
 * A chain's points of its tile sketch for `target` (the tuner's space of a chain group): the
 * blocked chain tile's (blocked_chain_tile_sketches) for a depthwise conv2d_nchwc and the 1x1
 * conv2d_nchwc after it; none for other chains, which run their default.
 */
std::vector<SketchPoint> chain_tile_points(const Graph &body, const Target &target);

/** The m of the Winograd F(m x m, 3x3) a default takes for conv node `n` where it takes Winograd: 4 from 14x14 outputs up in NCHW16c and from 28x28 in NCHW, else 2. */
int64_t default_winograd_tile(const Node &n);

/** Whether conv node `n` can be computed by Winograd F(2x2, 3x3) (3x3, stride 1, dilation 1, one group, argument weight). */
bool winograd_eligible(const Graph &body, const Node &n);

/**
 * Whether conv node `n` can take pixel_vectors: 1x1, no padding, one group, an argument weight, and
 * an input that is an argument or a prologue's pixelwise result (a fused squeeze-excitation scale).
 */
bool pointwise_eligible(const Graph &body, const Node &n);

/**
 * Whether conv node `n` can take pixel_vectors by its patches: a stem (one group, fewer than 8
 * input channels, a window wider than 1x1 or padding, argument input and weight), whose naive
 * nests then gather every output pixel's window into a patches stage (im2col) and run as a 1x1
 * conv over its C x KH x KW values.
 */
bool patches_eligible(const Graph &body, const Node &n);

/** pointwise_eligible or patches_eligible: the convs pixel_vectors applies to. */
bool pixel_vectors_eligible(const Graph &body, const Node &n);

/** Whether the epilogue after a group's conv (node `anchor`) allows pixel_epilogue. */
bool epilogue_is_pixelwise(const Graph &body, int anchor);

}  // namespace autotune
