#pragma once
// Sketch rules (issue 10, after Ansor's sketch generation): from a group's naive nests
// (lower_naive), structured step lists the schedule space samples. Each rule reads the nest's
// loops and emits steps for codegen/Steps; the steps are checked when replayed, so a rule that
// does not fit a nest is refused there with the reason, never miscompiled.
#include <optional>
#include <string>
#include <vector>

#include "codegen/Kernel.h"
#include "codegen/Steps.h"
#include "ir/Error.h"

namespace autotune {

/** The knobs of the loop sketch. */
struct LoopSketch {
  int lanes = 16;                // the innermost output loop split by this and vectorized (1: scalar)
  bool unroll_reduction = false; // unroll the reduction loops (k0, k1, ...) of at most 16 iterations, from the innermost
                                 // out while the iterations unrolled together stay within 64
  int parallel_loops = -1;       // outer output loops fused into the parallel loop (-1: all but the innermost)
  std::string pad = "root";      // a conv's padded input: "root", "inline", or the conv's loop to compute it at
  int rows = 0;                  // nests with a reduction: > 0 tiles the last two output loops by rows x lanes
                                 // around the reduction (the lanes must divide the last loop)
  bool rfactor = false;          // one-stage nests with a reduction: the reduction loops fused, split by `lanes`
                                 // and factored (rfactor), the lanes vectorized, each with its own partial
                                 // result, the output loops fused into the parallel loop (a global pool's plane sum)
  bool partition = false;        // the innermost output loop cut where its boundary conditions change (a pool's
                                 // padding: the inside reads plain, no clamp, no select) before it is split
  std::string weight{};          // an argument packed first in blocks of `pack` of its first dimension (shape
  std::vector<int64_t> dims{};   // `dims`): a depthwise conv2d_nchwc's weight, so a vector of its lanes is contiguous
  int64_t pack = 0;
};

/**
 * The loop sketch for a one-stage naive nest of output loops i0..i{n-1} (and reduction loops
 * k0.. inside them), the shape the elementwise and generic reduction templates had: split the
 * innermost output loop by `lanes` and vectorize it, each lane with its own accumulator; its
 * remainder as one vector (masked) when it has 2 or more iterations; the reduction loops
 * unrolled when asked; the outer output loops fused into one parallel loop. With `partition`
 * the innermost output loop is first cut where its conditions change (the sketch's steps then
 * apply to the largest part, the inside). A conv's nest with its padded input (grouped and
 * depthwise convs) places the padded input first (`pad`).
 */
Expected<std::vector<Step>> loop_sketch(const LoweredKernel &naive, const LoopSketch &knobs);

/** The loops named i0, i1, ... (outputs) and k0, k1, ... (reductions) of a naive nest, with their extents, in order. */
void naive_loops(const loop::Stmt &s, std::vector<std::pair<std::string, int64_t>> &outs, std::vector<std::pair<std::string, int64_t>> &reds);

/** A point of a sketch: its step list and its knobs as coordinates (neighbours differ in one). */
struct SketchPoint {
  std::vector<Step> steps;
  std::vector<int> coords;
  int winograd = 0;  // the naive nest the steps apply to: the direct one (0) or Winograd F(m x m, 3x3)'s
};

/** The widest lanes, from `lanes` down to 5, that divide a row of `width` (56: 14 of 16); 0 when none does. */
int widest_dividing_lanes(int64_t width, int lanes);

/** Every point of the loop sketch for a target of `lanes` float lanes whose steps replay on `naive`. */
std::vector<SketchPoint> loop_sketches(const LoweredKernel &naive, int lanes);

/**
 * A batched matmul's register tile (its operands computed, so nothing is packed): `rows` rows x
 * `cols` columns of each batch's output in registers around the reduction, the columns the
 * vector (B's rows are contiguous along them), each loaded B vector feeding `rows` FMAs. Rows and
 * columns left over (ViT's 197 tokens) take tiles of their own: up to four register tiles, the
 * row remainder's loops with the suffix _rt. The batch loops are the parallel loop.
 */
Expected<std::vector<Step>> matmul_tile_sketch(const LoweredKernel &naive, int64_t rows, int64_t cols);

/**
 * A row's passes (a softmax or a layer norm over its innermost axis: loops j1, j2, ... in one
 * stage) as vectors of `lanes` along the row (contiguous): a pass that folds into a row's local
 * value (a maximum, a sum) in partial lanes (rfactor) combined once per row, a pass that stores
 * elements as vectors with the rest of the row as one narrower vector; the other loops fused
 * and parallel.
 */
Expected<std::vector<Step>> row_sketch(const LoweredKernel &naive, int lanes);

/** The knobs of the blocked expand tile sketch. */
struct BlockedExpandTileSketch {
  int64_t blocks = 4;   // channel blocks per unit: the 1x1 conv's register tile has these blocks
  int64_t pixels = 6;   // and this many pixels
  int64_t columns = 7;  // the depthwise conv's register tile: columns of a row x a block's lanes
};

/**
 * The expand tile in NCHW[b]c: a chain of a 1x1 conv2d_nchwc (an inverted residual's expansion)
 * and a stride-1 depthwise conv2d_nchwc (stages s0_conv2d, s1_pad, s1_conv2d) as one parallel loop
 * over (image, unit of `blocks` channel blocks): per unit, the padded input's box (every row with
 * the halo), the 1x1 conv's result for the unit's blocks into a box of its own (its register tile
 * of blocks x pixels, as in its own kernel), then the depthwise conv's tiles of columns x lanes
 * over the unit. The expanded tensor never goes to memory, and no halo is computed twice.
 */
Expected<std::vector<Step>> blocked_expand_tile_sketch(const LoweredKernel &naive, const std::string &weight, const std::vector<int64_t> &dims,
                                                       const BlockedExpandTileSketch &knobs);

/** The knobs of the blocked chain tile sketch. */
struct BlockedChainTileSketch {
  int64_t rows = 1;      // output rows per block: each block is a unit of the parallel loop
  int64_t blocks = 2;    // the 1x1 conv's register tile: output channel blocks
  int64_t pixels = 14;   // and pixels of the block (its rows and columns one run)
  int64_t columns = 7;   // the depthwise conv's register tile: columns of a row x a block's lanes
  std::string pad = "inline";  // the depthwise conv's padded input: "root", "inline", or the box's loop to compute it at (i1_yo)
};

/**
 * Issue 11's anchors at a tile in NCHW[b]c: a chain of a depthwise conv2d_nchwc (of any stride)
 * and a 1x1 conv2d_nchwc (an inverted residual's projection; stages [s0_pad,] s0_conv2d,
 * s1_conv2d) as one parallel loop over (image, block of `rows` output rows): per block, the
 * depthwise conv computes every channel block of those rows into a local box (its register tile
 * of columns x lanes, its weight `depthwise_weight` packed by the block where named), then the 1x1
 * conv runs its register tiles of blocks x pixels over the block's pixels, reading the box (its
 * weight `weight`, shape `dims`, packed by the tile). The depthwise result never goes to memory.
 */
Expected<std::vector<Step>> blocked_chain_tile_sketch(const LoweredKernel &naive, const std::string &weight, const std::vector<int64_t> &dims,
                                                      const std::string &depthwise_weight, const std::vector<int64_t> &depthwise_dims,
                                                      const BlockedChainTileSketch &knobs);

/**
 * The points of the blocked chain tile for a target of `lanes` float lanes and `registers` vector
 * registers, around the default `base` (one of them): blocks of 1 to 8 rows leaving two blocks or
 * more, 1x1 tiles of 1 to 4 channel blocks x 7, 14 or 28 pixels within the registers, depthwise
 * tiles of the row or 7 to 14 columns dividing it, the padded input inline or per channel block of
 * the box; each list replayed on `naive`. Coordinates: rows, blocks, pixels, columns, pad.
 */
std::vector<SketchPoint> blocked_chain_tile_sketches(const LoweredKernel &naive, const std::string &weight, const std::vector<int64_t> &dims,
                                                     const std::string &depthwise_weight, const std::vector<int64_t> &depthwise_dims,
                                                     const BlockedChainTileSketch &base, int lanes, int registers);

/**
 * A layout change (nn.to_nchwc, nn.from_nchwc; its data argument `input`) by tiles of `block`
 * channels x the most columns up to `block` that divide a row: per tile, the input's box copied
 * with its own layout's runs contiguous (cache_read), then read across, so each vector of the
 * output is a column of the copy, which the emitter transposes in registers. The loops outside
 * the tile (image, channel block, row) are fused and parallel.
 */
Expected<std::vector<Step>> layout_change_sketch(const LoweredKernel &naive, const std::string &input, int64_t block);

/**
 * `steps` (a sketch's list ending in parallel_over's fuse steps and parallel step, over the
 * image, the channels or their blocks, and the output rows i2) with the rows split into `parts`
 * runs taken outermost: the parallel loop's contiguous chunks, one per thread, are then runs of
 * rows (every channel of them) instead of runs of channels (every row of them). Every kernel
 * split so hands thread t the same rows of every tensor: what a kernel reads was written by its
 * own thread, a depthwise conv's halo row aside. Nothing when the list does not end so or
 * `parts` does not divide `rows`.
 */
std::optional<std::vector<Step>> rows_across_threads(const std::vector<Step> &steps, int64_t rows, int parts);

/** Whether `steps` hold rows_across_threads' split of the rows. */
bool has_rows_across_threads(const std::vector<Step> &steps);

/**
 * Whether `steps` make (image, block of output rows) the parallel loop, as the chain tiles do
 * (the NCHW one and NCHW16c's): each thread takes a run of row blocks, every channel of them.
 */
bool has_row_blocks_parallel(const std::vector<Step> &steps);

/** The points of the matmul tile for a target of `lanes` lanes and `registers` vector registers. */
std::vector<SketchPoint> matmul_tile_sketches(const LoweredKernel &naive, int lanes, int registers);

/** The knobs of the register-tile sketch (conv and dense). */
struct TileSketch {
  int64_t oc_block = 32;     // output channels per register tile: the vectorized loop, and the weight's packing block
  int64_t px_block = 14;     // conv: output columns per register tile (must divide the output width)
  std::string pad = "root";  // conv's padded input: "root" (its own stage), "inline" (recomputed at every read),
                             // or the loop to compute it at ("i2": per output row, "xo": per tile)
  bool parallel_rows = false;  // conv: the output rows join the parallel loop (else n and channel tiles only)
  bool pixel_epilogue = true;  // conv: store the tile a channel at a time with the columns as the vector
                               // (contiguous in NCHW); else the channels as the vector (a scatter)
  int pixel_vectors = 0;  // 1x1 conv of stride 1: > 0 makes the tile oc_block channels x this many vectors of
                          // `lanes` pixels (rows and columns fused), the pixels as the vector lanes; 0: channel lanes
  int lanes = 16;         // pixel lanes: the vector width; flat pixels and row tiles: the channel vectors' width
  int64_t ic_block = 0;      // conv2d_nchwc: > 0 splits the input channels into tiles of this many (whole blocks),
                             // the tile loop outside the rows and columns (the template's reduction tiles); 0: none
  bool flat_pixels = false;  // conv: rows and columns fused into one pixel loop, split into px_block pixels (any
                             // px_block: a tile may cross rows, the pixels left over take a tile of their own),
                             // the register-blocked conv template's shape; channel lanes only
  bool row_tiles = false;    // conv: register tiles along output rows, px_block columns of a row (the last tile of a row
                             // narrower where px_block does not divide it), the input read in place with its padding
                             // recomputed (the edge tiles' columns partitioned from the inside ones, the kernel rows
                             // outside the input trimmed away): the template with the padding in the tiles
  int parallel = 0;          // flat_pixels, row_tiles and pixel lanes: the parallel loop is n and the channel tiles (0, each thread running
                             // its tiles' pixel blocks and remainder), n and the pixel blocks (1, each running
                             // every channel tile) or all three (2); the remainder's tiles are then a stage of
                             // their own, parallel over n and the channel tiles. Row tiles: n and channel tiles
                             // (0), n and rows (1), all three (2)
  bool unroll_kx = false;    // flat_pixels: unroll the kernel-column loop of the reduction
  int64_t patch_rows = 0;    // pixel lanes on a stem's patches: > 0 computes them per block of this many output rows
                             // into a local box (the blocks the parallel loop, each block's pixel tiles reading it);
                             // 0: the patches a stage of their own
  bool lanes_outer = false;  // conv2d_nchwc: the input channel's lanes (k3) outside the window loops, so the
                             // packed weight is read in order (the template's c, ky, kx); else innermost
};

/**
 * The register-tile sketch for the naive nest of a conv (output loops i0 n, i1 o, i2 oy, i3 ox;
 * reduction k0 c, k1 ky, k2 kx) or a dense layer (i0 m, i1 n; k0 k), Ansor's S-S-R-S tiling on
 * CPU: pack the weight (`weight`, shape `dims`) by oc_block; split the channels into tiles and
 * (conv) the columns into px_block; move the channel lane innermost; distribute the tile over its
 * init, update and epilogue, so the reduction loops move outside the tile; vectorize the channel
 * lanes and unroll the columns (oc_block x px_block accumulators in registers); fuse the outer
 * loops into the parallel loop; place the padded input. On a conv2d_nchwc nest (output loops i0 n,
 * i1 o/b, i2 oy, i3 ox, i4 o%b; reduction k0 c/b, k1 ky, k2 kx, k3 c%b) the tile is oc_block / b
 * channel blocks x px_block columns with each block's b lanes one vector (contiguous in the output
 * and the packed weight), and `ic_block` adds reduction tiles. Where the sketch replays its own
 * steps to read loop names off the nest (row tiles with the padding in them), it sets `made` to
 * the kernel the whole list makes, so the caller need not replay it again (a quarter of a ResNet-50
 * 3x3 conv point's lowering, bench_search).
 */
Expected<std::vector<Step>> tile_sketch(const LoweredKernel &naive, const std::string &weight, const std::vector<int64_t> &dims,
                                        const TileSketch &knobs, std::optional<LoweredKernel> *made = nullptr);

/**
 * Points of the tile sketch for a conv (one group) or dense anchor on a target with `lanes` float
 * lanes and `registers` vector registers: channel tiles of whole vectors up to 64 channels (or half a vector of 8 lanes or more),
 * column tiles dividing the output width whose accumulators and weights fit the registers, each
 * placement of the padded input, with and without rows in the parallel loop, both epilogue
 * orders; for a `pointwise` conv (1x1, stride 1, no padding) also the pixel-lane tiles (1 to 16
 * channels x vectors of pixels that divide the output's pixels); for a conv2d_nchwc nest, tiles of
 * whole channel blocks (each block a vector of its b lanes, split into registers by the target) and reduction tiles of 32 to 128
 * channels (padded input at root, rows not parallel); only lists that replay on `naive`.
 */
std::vector<SketchPoint> tile_sketches(const LoweredKernel &naive, const std::string &weight, const std::vector<int64_t> &dims,
                                       int lanes, int registers, bool pointwise = false);

/** The knobs of the chain tile sketch. */
struct ChainTileSketch {
  int64_t rows = 4;         // output rows per block: each block is a unit of the parallel loop
  int64_t oc_block = 8;     // the 1x1 conv's register tile: output channels
  int pixel_vectors = 3;    // and vectors of `lanes` pixels of the block (its rows' pixels are contiguous)
  int lanes = 16;
  bool pixels_outer = false;  // each pixel tile runs every channel tile (its slice of the box read once), else each channel tile every pixel tile
  std::string pad = "i1_yo";  // the first conv's padded input: "root", "inline", or the box's loop to compute it at
                              // (i1_yo: per channel of the block, its rows with the halo)
};

/**
 * Issue 11's anchors at a tile: a chain of a conv (a depthwise one, of any stride: its result the
 * next conv's input pixel for pixel) and a 1x1 conv in NCHW (lower_naive's joined nests: stages
 * [s0_pad,] s0_conv2d, s1_conv2d) as one parallel loop over (image, block of `rows` output rows):
 * per block, the first conv computes every channel of those rows into a local box (compute_at:
 * the rows its result is read at, no halo), then the 1x1 conv runs its pixel-lane register tiles
 * over the block's pixels, reading the box. The first conv's result never goes to memory.
 */
Expected<std::vector<Step>> chain_tile_sketch(const LoweredKernel &naive, const std::string &weight, const std::vector<int64_t> &dims,
                                              const ChainTileSketch &knobs);

/** The knobs of the expand tile sketch. */
struct ExpandTileSketch {
  int64_t rows = 4;          // the depthwise conv's output rows per block
  int64_t channels = 16;     // channels per block: the 1x1 conv computes these channels of the block's rows (and halo) into a box
  int64_t accumulators = 28;  // the box's register tiles: channels x a row's vectors, at most this many vectors
  int lanes = 16;
};

/**
 * Issue 11's anchors at a tile, the other way round: a chain of a 1x1 conv (MobileNetV2's and
 * EfficientNet's expansion) and a depthwise conv in NCHW (stages s0_conv2d, s1_pad, s1_conv2d) as
 * one parallel loop over (image and block of `channels` channels, block of `rows` output rows):
 * per block, the padded input's box (its rows with the halo), and the 1x1 conv's result for those
 * channels and rows into a box of its own (compute_at with the padded copy's clamped reads: rows
 * outside the image clamped to its edge), a register tile of channels x a row's column vectors;
 * then the depthwise conv's row tiles over the block. The expanded tensor, the widest of the
 * block, never goes to memory; the halo rows are computed twice. With every row in a block, the
 * 1x1 conv's weight (argument `weight`, shape `dims`; "" for none) is packed by its tile.
 */
Expected<std::vector<Step>> expand_tile_sketch(const LoweredKernel &naive, const std::string &weight, const std::vector<int64_t> &dims,
                                               const ExpandTileSketch &knobs);

/**
 * The GEMM tile widths (Winograd tiles per register tile) of the Winograd sketch's conv2d_nchwc
 * points; the widths past 16 fit the registers only with one channel vector.
 */
inline const std::vector<int64_t> kWinogradTiles{1, 2, 3, 4, 6, 8, 12, 14, 16, 24, 28};

/** The knobs of the Winograd sketch. */
struct WinogradSketch {
  int64_t oc_block = 32;     // GEMM register tile: output channels (conv2d_nchwc: whole channel blocks, each a vector)
  int64_t px_block = 6;      // GEMM register tile: tiles (conv2d_nchwc), or vectors of `lanes` tiles (NCHW)
  int lanes = 16;            // NCHW: the vector width over tiles
  std::string pad = "root";  // the padded input: "root", "inline", or "vy" (per row of tiles, into a local box)
  bool channel_lanes = false;  // NCHW: the GEMM's channels as the vector (U loaded, V broadcast, M stored a
                               // channel at a time with the tiles as the vector), px_block tiles; else tiles as the vector
  int row_parts = 0;           // conv2d_nchwc: every stage's threads take runs of whole tile rows (this many, outermost),
                               // so each reads the transformed tensors its own thread wrote; 0: the input transform's
                               // threads split channel blocks, the GEMM's positions, the output transform's channel blocks
};

/**
 * The sketch for Winograd F(m x m, 3x3)'s naive nests (lower_naive with `winograd` m: stages pad,
 * wino_in, wino_gemm, wino_out): the transforms vectorized over the channel lanes (conv2d_nchwc)
 * or the tiles of a row (NCHW) with their outer loops fused into the parallel loop; the GEMM as a
 * register tile of oc_block channels x px_block tiles around the reduction (S-S-R-S), each
 * position's channel tiles in parallel; the padded input placed by `pad`; edge tiles partitioned off.
 */
Expected<std::vector<Step>> winograd_sketch(const LoweredKernel &naive, const WinogradSketch &knobs);

/** Points of the Winograd sketch on `naive` (Winograd F(m x m)'s nests) for `lanes` float lanes and `registers` vector registers. */
std::vector<SketchPoint> winograd_sketches(const LoweredKernel &naive, int m, int lanes, int registers);

}  // namespace autotune
