#pragma once
// Schedule primitives as transformations of a stage's loop nest (issue 10's first layer):
// split, reorder, fuse, unroll, vectorize, and parallel (the stage's outer loop). Each takes
// the loop IR and returns the transformed loop IR, or an error naming the loop and the reason it
// is refused; none changes what the nest computes (the tests run every result through the JIT
// against the reference executor).
//
// Loops are named by their variable. A name must be unique in the statement it is looked up in
// (find_loop says so otherwise); the names a transformation creates are checked to be new.
//
// Legality, as Halide and TVM's TensorIR decide it for these primitives:
// - Loop bounds must be constants (every nest the templates build has constant bounds).
// - reorder and vectorize move iterations of a loop past others. They are refused when the
//   loops' body reads a buffer it also writes at an index other than the one written (a value
//   carried from one iteration to another, as in a prefix sum). An accumulation into the same
//   index (a reduction) may be reordered: floating-point sums are reassociated, as every tensor
//   compiler does.
// - vectorize also needs every store inside to move with the loop (no two lanes write one element).
// - parallel needs the loop to be the whole stage body and every store to depend on it.
#include <functional>
#include <string>
#include <vector>

#include "codegen/Kernel.h"
#include "ir/Error.h"

namespace autotune {

/**
 * `s` with `fn` applied to every expression in it (loop bounds, indices, values, conditions);
 * below a loop or let that binds `bound`, only that binding's own bounds or value.
 */
loop::Stmt map_exprs(const loop::Stmt &s, const std::function<loop::Expr(const loop::Expr &)> &fn, const std::string &bound = "");

/** `s` with every free use of variable `v` replaced by `value` (loops and lets that rebind v shadow it). */
loop::Stmt substitute(const loop::Stmt &s, const std::string &v, const loop::Expr &value);

/**
 * Every load of buffer `b` in `e`, rewritten by `fn` (loads inside the index are rewritten first);
 * `e` itself where nothing changed. Each shared node is mapped once (`memo`, kept over a statement).
 */
Expected<loop::Expr> map_loads(const loop::Expr &e, const loop::BufferNode *b, const std::function<Expected<loop::Expr>(const loop::Expr &)> &fn,
                               loop::ExprMemo &memo);

/** Every store in `s`, in order. */
std::vector<loop::Stmt> stores_of(const loop::Stmt &s);

/**
 * Whether every store in `s` moves with variable `v` (its index uses v), stores to buffers `s`
 * allocates excepted (private to an iteration): iterations of a loop over v write apart.
 */
bool stores_move_with(const loop::Stmt &s, const std::string &v);

/** Every loop of `s` as (name, constant extent or 0), outermost first. */
void loops_of(const loop::Stmt &s, std::vector<std::pair<std::string, int64_t>> &out);

/** The loop named `name` in `s`: an error if there is none or more than one. */
Expected<loop::Stmt> find_loop(const loop::Stmt &s, const std::string &name);

/**
 * Splits loop `name` (extent E) into `outer` (E / factor) x `inner` (factor). When factor does not
 * divide E, the E % factor iterations left run after the tiles in a loop `inner`_tail: no guard
 * in the inner loop, so it can still be vectorized or unrolled. The loops inside the tail are
 * renamed with the suffix `tail` (k becomes k_tail), the tail loop itself `inner` + `tail`: later
 * steps transform the tiles' loops (another suffix keeps two splits' tails apart: a matmul's rows
 * and columns both left over).
 */
Expected<loop::Stmt> split(const loop::Stmt &s, const std::string &name, int64_t factor, const std::string &outer,
                           const std::string &inner, const std::string &tail = "_tail");

/**
 * Puts the perfectly nested loops `order` (outermost first) in that order. They must form one
 * band: each is the whole body of the one above, with no other statement between.
 */
Expected<loop::Stmt> reorder(const loop::Stmt &s, const std::vector<std::string> &order);

/** Fuses loop `outer` and the loop `inner` that is its whole body into one loop `fused`. */
Expected<loop::Stmt> fuse(const loop::Stmt &s, const std::string &outer, const std::string &inner, const std::string &fused);

/**
 * Distributes loop `name` over the statements of its body (loop fission): `for v { S1; S2; S3 }`
 * becomes `for v { S1 } for v_1 { S2 } for v_2 { S3 }`. Buffers allocated around the statements
 * are expanded across the loop first (a slice per iteration, allocated around the new loops) and
 * lets around them are repeated in each copy. Refused when one iteration reads what another
 * writes. This is how a reduction's init, update and epilogue, nested in a register tile, become
 * three nests, so the reduction loops can move outside the tile.
 */
Expected<loop::Stmt> distribute(const loop::Stmt &s, const std::string &name);

/**
 * Trims loop `name` to the iterations where its body does something (Halide's and TVM's bound
 * tightening at a boundary): every store in it must be an update guarded by a condition, b[i] =
 * fmuladd(select(c, x, 0), y, b[i]) or b[i] = select(c, v, b[i]), the same conjuncts of c using
 * the loop for every store, each a comparison linear in the loop with the rest bound outside it.
 * The loop then runs from the largest to the smallest bound they give (variable bounds: a conv's
 * kernel rows inside the input, per output row), and the selects keep the other conjuncts. The
 * loop can no longer be split, unrolled or vectorized. Refused for any other body.
 */
Expected<loop::Stmt> trim(const loop::Stmt &s, const std::string &name);

/**
 * Splits stage `stage` into consecutive stages (loop fission at the stage level): loop `name`,
 * the whole body of the stage, is distributed over its statements (as distribute does) and each
 * copy becomes a stage of its own, the first keeping the name, copy j named `stage`_j, so each
 * can take its own parallel loop: the pixel blocks of a conv in one, their remainder's channel
 * blocks in the next. The runtime runs stages in order with a barrier between them, so every
 * piece sees what the pieces before it wrote. Refused when the stage is parallel already or the
 * statements share a buffer allocated in the loop.
 */
Expected<LoweredKernel> fission(const LoweredKernel &k, const std::string &stage, const std::string &name);

/**
 * Factors the reduction in loop `outer` over its inner loop `inner` (Halide's and TVM's rfactor):
 * every store in `outer` must update one element b[idx] (idx the same for all and free of the
 * loops and lets inside `outer`) as b[idx] + t, max(b[idx], t), min(b[idx], t) or fmuladd(x, y,
 * b[idx]), and lie inside `inner`. Each iteration of `inner` then accumulates into its own element
 * of a local buffer of partial results, set to the combine's identity before `outer` (a loop
 * `inner`_ri) and combined into b[idx] after it (a loop `inner`_rc, unrolled), so `inner` can be
 * vectorized: each lane its own partial, as a global pool sums a plane in vectors. Sums are
 * reassociated. Refused inside a vectorized loop (a partial buffer per lane would be needed).
 */
Expected<loop::Stmt> rfactor(const loop::Stmt &s, const std::string &outer, const std::string &inner);

/**
 * Prefetches the stream `buffer` is read in by loop `name`: at the end of each iteration, one
 * prefetch per 64-byte line of what the body reads, `distance` elements ahead (the templates'
 * weight prefetch: a conv reads its weights from memory once per inference, and the hardware
 * prefetchers stop at every 4 KiB page).
 */
Expected<loop::Stmt> prefetch_stream(const loop::Stmt &s, const std::string &name, const loop::Buffer &buffer, int64_t distance);

/**
 * Partitions loop `name` where a condition in its body changes value (Halide's and TVM's loop
 * partitioning, for boundary conditions): every comparison, min and max in the body that depends
 * on the loop's variable switches where it is decided for every value of the other loops it
 * depends on (at the iterations where it switches for the least and the largest value of the
 * rest of its affine form: a column px * m + pf with pf in [0, m)), and the loop becomes
 * consecutive loops over the ranges between those iterations, each body simplified for its range
 * (parts that simplify alike merge; a comparison
 * decided there is replaced by its branch, a min or max of known order by its argument). A
 * padded input's row [0, W + 2) becomes the left border, the inside [1, W + 1), whose reads are
 * then affine, clamps and select gone, and the right border. The largest part keeps the name;
 * each other part k becomes `name`_bk, with the loops inside it renamed `loop`_`name`bk. Every
 * part starts at 0. An unrolled loop's parts stay unrolled. Refused when nothing in the body
 * switches inside the loop's range, and for vectorized and parallel loops.
 */
Expected<loop::Stmt> partition(const loop::Stmt &s, const std::string &name);

/**
 * Moves loop `name` after the statements that follow it in its sequence (a partitioned tile's
 * edge pixels after its inside ones: the order the register allocator is given). Refused where
 * the loop and a statement it passes may reach one element of a buffer either writes (their
 * indices compared as affine forms over their own loops, the loops around them held equal), and
 * where the loop is not a statement of a sequence.
 */
Expected<loop::Stmt> sink(const loop::Stmt &s, const std::string &name);

/**
 * `s` simplified over its own loops' ranges, as partition simplifies each part: a comparison
 * decided for every iteration is replaced by its branch, a min or max of known order by its
 * argument (a pool without padding then reads its input plain, with no clamp and no select).
 */
loop::Stmt simplify_over_loops(const loop::Stmt &s);

/** Marks loop `name` unrolled (constant extent up to 64). */
Expected<loop::Stmt> unroll(const loop::Stmt &s, const std::string &name);

/** Marks loop `name` vectorized: its constant extent (2 to 64) becomes the lanes. */
Expected<loop::Stmt> vectorize(const loop::Stmt &s, const std::string &name);

/**
 * Makes loop `name`, which must be the whole body of a stage that is not parallel yet, the
 * stage's parallel loop: the runtime splits its iterations across threads.
 */
Expected<KernelStage> parallelize(const KernelStage &stage, const std::string &name);

// Producers, consumers and local buffers. A producer stage is a nest of loops (its parallel loop
// included) around one store, producer[index] = value, whose index is affine in every loop of
// the nest with nested strides (a row-major box, like the copy of a padded input). A read of the
// producer's buffer elsewhere is mapped back to the producer's loop indices digit by digit; the
// read is refused unless each digit provably stays in its loop's range, which makes the mapping
// exact. compute_root is the initial state: every stage starts as a nest of its own, stored in
// a temporary.

/** The index of the stage named `name` in `k`, or an error saying there is none. */
Expected<size_t> stage_index(const LoweredKernel &k, const std::string &name);

/**
 * Recomputes stage `producer` at every read in stage `consumer`: each read of its buffer becomes
 * the producer's value at the read's indices. The producer stage and its buffer go away. The
 * buffer must be a temporary read by no other stage, and no stage from the producer to the
 * consumer may write what the producer reads.
 */
Expected<LoweredKernel> compute_inline(const LoweredKernel &k, const std::string &producer, const std::string &consumer);

/**
 * Computes stage `producer` inside loop `loop` of stage `consumer` (or per iteration of the
 * consumer's parallel loop, when `loop` names it): at each iteration, the box of producer
 * elements the loop's body reads is computed into a local buffer, and the body reads it there.
 * Neighbouring boxes overlap where reads do (a halo is recomputed). The box must be the same
 * size at every iteration and at most 1 MiB (it lives on the stack).
 */
Expected<LoweredKernel> compute_at(const LoweredKernel &k, const std::string &producer, const std::string &consumer,
                                   const std::string &loop);

/**
 * Accumulates into a local copy of `buffer` inside loop `loop` of `stage` (Ansor's cache_write,
 * Halide's update in a register tile): the box of elements the loop's body touches is read in
 * before the body (when the body reads the buffer), accessed locally, and written back after.
 * Every access must be affine with the same dependence on loops outside `loop`, and one store
 * must cover the whole box, so no element another iteration owns is written back.
 */
Expected<KernelStage> cache_write(const KernelStage &stage, const std::string &buffer, const std::string &loop);

/**
 * Reads `buffer` through a local copy inside loop `loop` of `stage` (Ansor's cache_read at a
 * compute location): at each iteration the box of elements the loop's body reads is copied in,
 * the innermost stride innermost (contiguous), and the body reads the copy. A body that reads a
 * buffer across its rows (a layout change: one element from each of 16 channel planes per
 * vector) then reads a tile whose columns the emitter transposes in registers. The box has one
 * dimension per distinct stride of the loops inside, its rows padded to 16 floats; every read
 * must be affine and move alike with the loops outside, and the loop must not write the buffer.
 */
Expected<KernelStage> cache_read(const KernelStage &stage, const std::string &buffer, const std::string &loop);

/**
 * Packs weight argument `buffer`, of row-major shape `dims`, as w[d0 / block][d1]...[dm][d0 % block]
 * (a conv's OIHW weight as [O/B][C][KH][KW][B], a dense weight [N][K] as [N/B][K][B]): every read
 * is rewritten, and the kernel asks the runtime to pack the argument once when the model is
 * loaded. A read whose first index is not block * outer + inner with inner provably in [0, block)
 * is refused. A Winograd-transformed weight in its naive layout [xi][c][o] (`dims` {a * a, C, O})
 * is re-blocked by its channels instead, as [xi][o / block][c][o % block]: a register tile of
 * `block` channels then streams its weights contiguously.
 */
Expected<LoweredKernel> pack(const LoweredKernel &k, const std::string &buffer, const std::vector<int64_t> &dims, int64_t block);

}  // namespace autotune
