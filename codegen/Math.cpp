#include "codegen/Math.h"

#include <cmath>
#include <vector>

namespace autotune::math {

using namespace loop;

namespace {
/** c[0] + y (c[1] + y (c[2] + ...)), Horner's rule. */
Expr horner(const Expr &y, const std::vector<double> &c) {
  Expr p = float_imm(c.back());
  for (size_t i = c.size() - 1; i-- > 0;) p = float_imm(c[i]) + y * p;
  return p;
}
}  // namespace

Expr abs(const Expr &x) { return max(x, float_imm(0) - x); }

Expr erf(const Expr &x) {
  // 2 / sqrt(pi) * (-1)^k / (k! (2k + 1)), k = 0..5.
  const double s = 2.0 / std::sqrt(M_PI);
  Expr x2 = x * x;
  Expr small = x * horner(x2, {s, -s / 3, s / 10, -s / 42, s / 216, -s / 1320});
  Expr a = math::abs(x);
  Expr t = float_imm(1) / (float_imm(1) + float_imm(0.3275911) * a);
  Expr poly = t * horner(t, {0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429});
  Expr large = float_imm(1) - poly * call("exp", {float_imm(0) - a * a});
  return select(a < float_imm(0.5), small, select(x < float_imm(0), float_imm(0) - large, large));
}

Expr tanh(const Expr &x) {
  Expr x2 = x * x;
  Expr small = x * horner(x2, {1.0, -1.0 / 3, 2.0 / 15, -17.0 / 315, 62.0 / 2835, -1382.0 / 155925});
  Expr a = math::abs(x);
  Expr large = float_imm(1) - float_imm(2) / (call("exp", {a * float_imm(2)}) + float_imm(1));
  return select(a < float_imm(0.3), small, select(x < float_imm(0), float_imm(0) - large, large));
}

Expr power(const Expr &a, const Expr &b) {
  Expr r = call("exp", {b * call("log", {math::abs(a)})});
  Expr is_int = call("floor", {b}) == b;
  Expr odd = both(is_int, binary(BinOp::kNE, call("floor", {b * float_imm(0.5)}) * float_imm(2), b));
  Expr negative = select(odd, float_imm(0) - r, select(is_int, r, float_imm(NAN)));
  return select(b == float_imm(0), float_imm(1), select(a < float_imm(0), negative, r));
}

}  // namespace autotune::math
