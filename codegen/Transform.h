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
#include <string>
#include <vector>

#include "codegen/Kernel.h"
#include "ir/Error.h"

namespace autotune {

/** `s` with every free use of variable `v` replaced by `value` (loops and lets that rebind v shadow it). */
loop::Stmt substitute(const loop::Stmt &s, const std::string &v, const loop::Expr &value);

/** The loop named `name` in `s`: an error if there is none or more than one. */
Expected<loop::Stmt> find_loop(const loop::Stmt &s, const std::string &name);

/**
 * Splits loop `name` (extent E) into `outer` (E / factor) x `inner` (factor). When factor does not
 * divide E, the E % factor iterations left run after the tiles in a loop `inner`_tail: no guard
 * in the inner loop, so it can still be vectorized or unrolled. The loops inside the tail are
 * renamed with the suffix _tail (k becomes k_tail): later steps transform the tiles' loops.
 */
Expected<loop::Stmt> split(const loop::Stmt &s, const std::string &name, int64_t factor, const std::string &outer,
                           const std::string &inner);

/**
 * Puts the perfectly nested loops `order` (outermost first) in that order. They must form one
 * band: each is the whole body of the one above, with no other statement between.
 */
Expected<loop::Stmt> reorder(const loop::Stmt &s, const std::vector<std::string> &order);

/** Fuses loop `outer` and the loop `inner` that is its whole body into one loop `fused`. */
Expected<loop::Stmt> fuse(const loop::Stmt &s, const std::string &outer, const std::string &inner, const std::string &fused);

/** Marks loop `name` unrolled (constant extent up to 64). */
Expected<loop::Stmt> unroll(const loop::Stmt &s, const std::string &name);

/** Marks loop `name` vectorized: its constant extent (2 to 64) becomes the lanes. */
Expected<loop::Stmt> vectorize(const loop::Stmt &s, const std::string &name);

/**
 * Makes loop `name`, which must be the whole body of a stage that is not parallel yet, the
 * stage's parallel loop: the runtime splits its iterations across threads.
 */
Expected<KernelStage> parallelize(const KernelStage &stage, const std::string &name);

}  // namespace autotune
