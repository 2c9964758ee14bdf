#pragma once
// Float functions built from the loop IR's operations (and its exp and log intrinsics), so they
// vectorize wherever the expression does: erf and tanh for GELU and transformer activations,
// power for ONNX Pow. Each is held to the double-precision function by tests/codegen/JitTest.cpp,
// which reports the largest error it measured.
#include "codegen/LoopIR.h"

namespace autotune::math {

/**
 * erf(x): below |x| = 0.5 its Taylor series to x^11 (relative error below 1e-7 there); above,
 * Abramowitz and Stegun's 7.1.26, 1 - t (a1 + a2 t + ... + a5 t^4) exp(-x^2) with t = 1 / (1 + p |x|)
 * (absolute error 1.5e-7 in exact arithmetic), odd in x.
 */
loop::Expr erf(const loop::Expr &x);

/** |x| as max(x, -x). */
loop::Expr abs(const loop::Expr &x);

/** tanh(x): below |x| = 0.3 its Taylor series to x^11; above, 1 - 2 / (exp(2 |x|) + 1), odd in x. */
loop::Expr tanh(const loop::Expr &x);

/**
 * a^b as ONNX's Pow (C's powf): exp(b log |a|), negated for a negative a and an odd integer b,
 * NaN for a negative a and a b that is no integer, 1 for b = 0.
 */
loop::Expr power(const loop::Expr &a, const loop::Expr &b);

}  // namespace autotune::math
