#include "codegen/LoopIR.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <functional>
#include <numeric>
#include <set>
#include <unordered_map>

#include "ir/Error.h"
#include "ir/Hash.h"

namespace autotune::loop {
namespace {

Expr make(ExprKind kind, Type type) {
  auto e = std::make_shared<ExprNode>();
  e->kind = kind;
  e->type = type;
  return e;
}

}  // namespace

int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b, r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? q - 1 : q;
}

Stmt loop_nest(const std::vector<std::string> &names, const std::vector<int64_t> &extents, Stmt body) {
  for (size_t d = names.size(); d-- > 0;) body = for_loop(names[d], int_imm(0), int_imm(extents[d]), ForKind::kSerial, body);
  return body;
}

Buffer make_buffer(std::string name, Type type, int64_t size, BufferScope scope) {
  return std::make_shared<BufferNode>(BufferNode{std::move(name), type, size, scope});
}

Expr int_imm(int64_t v) {
  Expr e = make(ExprKind::kInt, Type::kI64);
  const_cast<ExprNode *>(e.get())->int_value = v;
  return e;
}

Expr float_imm(double v) {
  Expr e = make(ExprKind::kFloat, Type::kF32);
  const_cast<ExprNode *>(e.get())->float_value = v;
  return e;
}

Expr var(const std::string &name) {
  Expr e = make(ExprKind::kVar, Type::kI64);
  const_cast<ExprNode *>(e.get())->name = name;
  return e;
}

std::optional<int64_t> as_int(const Expr &e) {
  if (e->kind == ExprKind::kInt) return e->int_value;
  return std::nullopt;
}

Expr binary(BinOp op, Expr a, Expr b) {
  AT_CHECK(a != nullptr && b != nullptr, "null operand");
  auto ia = as_int(a), ib = as_int(b);
  bool cmp = op == BinOp::kLT || op == BinOp::kLE || op == BinOp::kEQ || op == BinOp::kNE;
  if (ia && ib) {
    int64_t x = *ia, y = *ib;
    switch (op) {
      case BinOp::kAdd: return int_imm(x + y);
      case BinOp::kSub: return int_imm(x - y);
      case BinOp::kMul: return int_imm(x * y);
      case BinOp::kDiv: return int_imm(floor_div(x, y));
      case BinOp::kMod: return int_imm(x - floor_div(x, y) * y);
      case BinOp::kMin: return int_imm(std::min(x, y));
      case BinOp::kMax: return int_imm(std::max(x, y));
      default: break;
    }
  }
  if (a->type == Type::kI64 && !cmp) {
    if (op == BinOp::kAdd && ia == 0) return b;
    if ((op == BinOp::kAdd || op == BinOp::kSub) && ib == 0) return a;
    if (op == BinOp::kMul && (ia == 1)) return b;
    if ((op == BinOp::kMul || op == BinOp::kDiv) && ib == 1) return a;
    if (op == BinOp::kMul && (ia == 0 || ib == 0)) return int_imm(0);
    if (op == BinOp::kMod && ib == 1) return int_imm(0);
    // (x + c1) + c2 -> x + (c1 + c2): keeps unrolled and split indices short.
    if (op == BinOp::kAdd && ib && a->kind == ExprKind::kBinary && a->op == BinOp::kAdd && as_int(a->args[1]))
      return binary(BinOp::kAdd, a->args[0], int_imm(*as_int(a->args[1]) + *ib));
  }
  auto e = make(ExprKind::kBinary, cmp || op == BinOp::kAnd || op == BinOp::kOr ? Type::kBool : a->type);
  auto *n = const_cast<ExprNode *>(e.get());
  n->op = op;
  n->args = {std::move(a), std::move(b)};
  return e;
}

Expr select(Expr cond, Expr a, Expr b) {
  auto e = make(ExprKind::kSelect, a->type);
  const_cast<ExprNode *>(e.get())->args = {std::move(cond), std::move(a), std::move(b)};
  return e;
}

Expr load(Buffer b, Expr index) {
  auto e = make(ExprKind::kLoad, b->type);
  auto *n = const_cast<ExprNode *>(e.get());
  n->buffer = std::move(b);
  n->args = {std::move(index)};
  return e;
}

Expr cast(Type t, Expr v) {
  if (v->type == t) return v;
  if (t == Type::kF32 && v->kind == ExprKind::kInt) return float_imm(static_cast<double>(v->int_value));
  auto e = make(ExprKind::kCast, t);
  const_cast<ExprNode *>(e.get())->args = {std::move(v)};
  return e;
}

Expr call(const std::string &fn, std::vector<Expr> args, Type t) {
  auto e = make(ExprKind::kCall, t);
  auto *n = const_cast<ExprNode *>(e.get());
  n->name = fn;
  n->args = std::move(args);
  return e;
}

Expr min(Expr a, Expr b) { return binary(BinOp::kMin, std::move(a), std::move(b)); }
Expr max(Expr a, Expr b) { return binary(BinOp::kMax, std::move(a), std::move(b)); }
Expr operator+(Expr a, Expr b) { return binary(BinOp::kAdd, std::move(a), std::move(b)); }
Expr operator-(Expr a, Expr b) { return binary(BinOp::kSub, std::move(a), std::move(b)); }
Expr operator*(Expr a, Expr b) { return binary(BinOp::kMul, std::move(a), std::move(b)); }
Expr operator/(Expr a, Expr b) { return binary(BinOp::kDiv, std::move(a), std::move(b)); }
Expr operator%(Expr a, Expr b) { return binary(BinOp::kMod, std::move(a), std::move(b)); }
Expr operator<(Expr a, Expr b) { return binary(BinOp::kLT, std::move(a), std::move(b)); }
Expr operator<=(Expr a, Expr b) { return binary(BinOp::kLE, std::move(a), std::move(b)); }
Expr operator==(Expr a, Expr b) { return binary(BinOp::kEQ, std::move(a), std::move(b)); }
Expr both(Expr a, Expr b) { return binary(BinOp::kAnd, std::move(a), std::move(b)); }
Expr operator+(Expr a, int64_t b) { return std::move(a) + int_imm(b); }
Expr operator*(Expr a, int64_t b) { return std::move(a) * int_imm(b); }

void for_each_node(const Expr &e, const std::function<void(const Expr &)> &fn) {
  fn(e);
  for (const Expr &a : e->args) for_each_node(a, fn);
}

bool uses_var(const Expr &e, const std::string &v) {
  if (e->kind == ExprKind::kVar) return e->name == v;
  for (const Expr &a : e->args)
    if (uses_var(a, v)) return true;
  return false;
}

namespace {

/** stride_of in one walk: whether `e` uses v, and its stride in v (0 when it does not use v). */
std::pair<bool, std::optional<int64_t>> stride_walk(const Expr &e, const std::string &v) {
  if (e->kind == ExprKind::kVar) return e->name == v ? std::pair{true, std::optional<int64_t>(1)} : std::pair{false, std::optional<int64_t>(0)};
  if (e->kind == ExprKind::kCast) return stride_walk(e->args[0], v);
  if (e->kind != ExprKind::kBinary) {
    for (const Expr &a : e->args)
      if (uses_var(a, v)) return {true, std::nullopt};
    return {false, 0};
  }
  auto [ua, a] = stride_walk(e->args[0], v);
  auto [ub, b] = stride_walk(e->args[1], v);
  if (!ua && !ub) return {false, 0};
  if (!a || !b) return {true, std::nullopt};
  if (e->op == BinOp::kAdd) return {true, *a + *b};
  if (e->op == BinOp::kSub) return {true, *a - *b};
  if (e->op == BinOp::kMul) {
    if (*a == 0 && as_int(e->args[0])) return {true, *as_int(e->args[0]) * *b};
    if (*b == 0 && as_int(e->args[1])) return {true, *as_int(e->args[1]) * *a};
  }
  return {true, std::nullopt};
}

}  // namespace

std::optional<int64_t> stride_of(const Expr &e, const std::string &v) {
  // One walk: checking uses_var at every level made it quadratic in the index's depth, and the
  // emitter and the cost model's features call it for every vectorized access.
  return stride_walk(e, v).second;
}

int64_t known_multiple(const Expr &e, const std::map<std::string, int64_t> &vars) {
  constexpr int64_t kAny = int64_t{1} << 30;  // what 0 is a multiple of (capped: products stay in range)
  if (e->type != Type::kI64) return 1;
  switch (e->kind) {
    case ExprKind::kInt: return e->int_value == 0 ? kAny : std::min(kAny, e->int_value < 0 ? -e->int_value : e->int_value);
    case ExprKind::kVar: {
      auto it = vars.find(e->name);
      return it == vars.end() ? 1 : std::max<int64_t>(1, it->second);
    }
    case ExprKind::kBinary: {
      if (e->op == BinOp::kMul) return std::min(kAny, known_multiple(e->args[0], vars) * known_multiple(e->args[1], vars));
      if (e->op == BinOp::kAdd || e->op == BinOp::kSub || e->op == BinOp::kMin || e->op == BinOp::kMax)
        return std::gcd(known_multiple(e->args[0], vars), known_multiple(e->args[1], vars));
      return 1;
    }
    case ExprKind::kSelect: return std::gcd(known_multiple(e->args[1], vars), known_multiple(e->args[2], vars));
    default: return 1;
  }
}

std::optional<Affine> affine_form(const Expr &e) {
  if (e->type != Type::kI64) return std::nullopt;
  switch (e->kind) {
    case ExprKind::kInt: return Affine{{}, e->int_value};
    case ExprKind::kVar: return Affine{{{e->name, 1}}, 0};
    case ExprKind::kBinary: {
      if (e->op != BinOp::kAdd && e->op != BinOp::kSub && e->op != BinOp::kMul) return std::nullopt;
      auto a = affine_form(e->args[0]), b = affine_form(e->args[1]);
      if (!a || !b) return std::nullopt;
      if (e->op == BinOp::kMul) {
        if (!a->coeff.empty() && !b->coeff.empty()) return std::nullopt;
        if (a->coeff.empty()) std::swap(a, b);  // b is now the constant factor
        int64_t f = b->constant;
        Affine out{{}, a->constant * f};
        if (f != 0)
          for (const auto &[v, c] : a->coeff) out.coeff[v] = c * f;
        return out;
      }
      int64_t sign = e->op == BinOp::kAdd ? 1 : -1;
      Affine out = *a;
      out.constant += sign * b->constant;
      for (const auto &[v, c] : b->coeff)
        if ((out.coeff[v] += sign * c) == 0) out.coeff.erase(v);
      return out;
    }
    default: return std::nullopt;
  }
}

Expr to_expr(const Affine &a) {
  Expr out = int_imm(a.constant);
  for (const auto &[v, c] : a.coeff) out = c == 1 ? var(v) + out : var(v) * c + out;
  return out;
}

namespace {

/** An integer expression as sum(coeff * term) + constant over terms that are not sums (keyed by their text). */
struct Linear {
  std::map<std::string, std::pair<Expr, int64_t>> terms;
  int64_t constant = 0;
  void add(const Expr &t, int64_t c) {
    auto &[term, coeff] = terms.try_emplace(to_string(t), t, 0).first->second;
    if ((coeff += c) == 0) terms.erase(to_string(t));
  }
};

void linearize(const Expr &e, int64_t scale, Linear &out) {
  if (auto c = as_int(e)) {
    out.constant += scale * *c;
    return;
  }
  if (e->kind == ExprKind::kBinary && (e->op == BinOp::kAdd || e->op == BinOp::kSub)) {
    linearize(e->args[0], scale, out);
    linearize(e->args[1], e->op == BinOp::kAdd ? scale : -scale, out);
    return;
  }
  if (e->kind == ExprKind::kBinary && e->op == BinOp::kMul) {
    if (auto c = as_int(e->args[1])) return linearize(e->args[0], scale * *c, out);
    if (auto c = as_int(e->args[0])) return linearize(e->args[1], scale * *c, out);
  }
  out.add(e, scale);
}

/** c * B * (x / B) + c * (x % B) -> c * x, for every such pair in `l`; true when one was folded. */
bool fold_pairs(Linear &l) {
  for (auto &[key, dt] : l.terms) {
    const auto &[d, dc] = dt;
    if (d->kind != ExprKind::kBinary || d->op != BinOp::kDiv) continue;
    auto b = as_int(d->args[1]);
    if (!b || *b <= 0 || dc % *b) continue;
    std::string mod = to_string(d->args[0] % d->args[1]);
    auto m = l.terms.find(mod);
    if (m == l.terms.end() || m->second.second * *b != dc) continue;
    Expr x = d->args[0];
    int64_t c = m->second.second;
    std::string div = key;
    l.terms.erase(m);
    l.terms.erase(div);
    linearize(x, c, l);
    return true;
  }
  return false;
}

/** Marks whether the terms of sum `t` (as linearize splits it) hold a division or a remainder by a positive constant. */
void div_mod_terms(const Expr &t, bool &div, bool &mod) {
  if (t->kind != ExprKind::kBinary) return;
  if (t->op == BinOp::kAdd || t->op == BinOp::kSub) return div_mod_terms(t->args[0], div, mod), div_mod_terms(t->args[1], div, mod);
  if (t->op == BinOp::kMul) {
    if (as_int(t->args[1])) return div_mod_terms(t->args[0], div, mod);
    if (as_int(t->args[0])) return div_mod_terms(t->args[1], div, mod);
    return;
  }
  if (t->op == BinOp::kDiv || t->op == BinOp::kMod)
    if (auto b = as_int(t->args[1]); b && *b > 0) (t->op == BinOp::kDiv ? div : mod) = true;
}

bool has_div_and_mod_terms(const Expr &e) {
  bool div = false, mod = false;
  div_mod_terms(e, div, mod);
  return div && mod;
}

}  // namespace

Expr with_args(const Expr &e, std::vector<Expr> args) {
  switch (e->kind) {
    case ExprKind::kBinary: return binary(e->op, args[0], args[1]);
    case ExprKind::kSelect: return select(args[0], args[1], args[2]);
    case ExprKind::kLoad: return load(e->buffer, args[0]);
    case ExprKind::kCast: return cast(e->type, args[0]);
    case ExprKind::kCall: return call(e->name, std::move(args), e->type);
    default: return e;
  }
}

namespace {

/** `x` (its arguments folded already) with its own sum folded: c * B * (y / B) + c * (y % B) -> c * y. */
Expr fold_sum(Expr x) {
  // Every sum inside a sum is folded on its own first, so the whole sum is linearized (each term
  // printed for its key) only where a pair can fold: a term y / B beside a term z % B.
  if (x->type != Type::kI64 || x->kind != ExprKind::kBinary || (x->op != BinOp::kAdd && x->op != BinOp::kSub) || !has_div_and_mod_terms(x))
    return x;
  Linear l;
  linearize(x, 1, l);
  bool folded = false;
  while (fold_pairs(l)) folded = true;
  if (!folded) return x;
  Expr out = int_imm(l.constant);
  for (const auto &[key, t] : l.terms) out = (t.second == 1 ? t.first : t.first * t.second) + out;
  return out;
}

}  // namespace

namespace {
/** substitute_and_fold below the top: `bits` is the variables' filter (vars_filter). */
Expr substitute_and_fold_in(const Expr &e, const std::map<std::string, Expr> &values, uint64_t bits, ExprMemo &memo) {
  if (e->kind == ExprKind::kVar) {
    auto it = values.find(e->name);
    return it == values.end() ? e : it->second;
  }
  if (e->args.empty() || !(vars_filter(e) & bits)) return e;  // none of the variables below
  if (auto it = memo.find(e.get()); it != memo.end()) return it->second;
  Expr out = e;
  for (size_t i = 0; i < e->args.size(); ++i) {
    Expr a = substitute_and_fold_in(e->args[i], values, bits, memo);
    if (a.get() == e->args[i].get()) continue;
    std::vector<Expr> args(e->args.begin(), e->args.begin() + static_cast<std::ptrdiff_t>(i));
    args.push_back(std::move(a));
    for (size_t j = i + 1; j < e->args.size(); ++j) args.push_back(substitute_and_fold_in(e->args[j], values, bits, memo));
    out = fold_sum(with_args(e, std::move(args)));
    break;
  }
  memo.emplace(e.get(), out);
  return out;
}
}  // namespace

Expr substitute_and_fold(const Expr &e, const std::map<std::string, Expr> &values, ExprMemo &memo) {
  uint64_t bits = 0;
  for (const auto &[v, value] : values) bits |= var_bit(v);
  return substitute_and_fold_in(e, values, bits, memo);
}

namespace {

/** Closed integer intervals of variables in scope. */
using Ranges = std::map<std::string, std::pair<int64_t, int64_t>>;

/** The interval of integer expression `e` given `r`, or nullopt when unknown. */
std::optional<std::pair<int64_t, int64_t>> interval(const Expr &e, const Ranges &r) {
  if (e->type != Type::kI64) return std::nullopt;
  if (auto c = as_int(e)) return std::make_pair(*c, *c);
  if (e->kind == ExprKind::kVar) {
    auto it = r.find(e->name);
    if (it == r.end()) return std::nullopt;
    return it->second;
  }
  if (e->kind != ExprKind::kBinary) return std::nullopt;
  auto b = as_int(e->args[1]);
  if ((e->op == BinOp::kDiv || e->op == BinOp::kMod) && b && *b > 0) {
    if (e->op == BinOp::kMod) return std::make_pair<int64_t, int64_t>(0, *b - 1);
    auto a = interval(e->args[0], r);
    if (!a) return std::nullopt;
    return std::make_pair(floor_div(a->first, *b), floor_div(a->second, *b));
  }
  auto a = interval(e->args[0], r), c = interval(e->args[1], r);
  if (!a || !c) return std::nullopt;
  switch (e->op) {
    case BinOp::kAdd: return std::make_pair(a->first + c->first, a->second + c->second);
    case BinOp::kSub: return std::make_pair(a->first - c->second, a->second - c->first);
    case BinOp::kMul: {
      int64_t p[] = {a->first * c->first, a->first * c->second, a->second * c->first, a->second * c->second};
      return std::make_pair(*std::min_element(p, p + 4), *std::max_element(p, p + 4));
    }
    case BinOp::kMin: return std::make_pair(std::min(a->first, c->first), std::min(a->second, c->second));
    case BinOp::kMax: return std::make_pair(std::max(a->first, c->first), std::max(a->second, c->second));
    default: return std::nullopt;
  }
}

Expr sum_of(const Linear &l, int64_t divide_by, int64_t constant) {
  Expr out = int_imm(constant);
  for (const auto &[key, t] : l.terms) {
    int64_t c = t.second / divide_by;
    out = (c == 1 ? t.first : t.first * c) + out;
  }
  return out;
}

/**
 * Simplified forms of the expressions of one scope (one set of ranges), by node: lowering builds
 * DAGs (Winograd's transforms share each B^T d term among six stores), and a tree walk would
 * simplify a shared node once per path and return copies, so the kernel would no longer share it.
 */
/**
 * Keyed by node address, each entry holding its node: the simplification recurses into
 * expressions it builds, and a temporary freed while its entry stayed would hand that entry to the
 * next node allocated at its address (a lane's position along k came back as the lane's row:
 * (t / 4) % 4 for t % 4).
 */
using Memo = std::unordered_map<const ExprNode *, std::pair<Expr, Expr>>;

Expr simplify_div_mod(const Expr &e, const Ranges &r, Memo &memo) {
  if (!e || e->args.empty()) return e;
  if (auto it = memo.find(e.get()); it != memo.end()) return it->second.second;
  std::vector<Expr> args;
  bool changed = false;
  for (const Expr &a : e->args) args.push_back(simplify_div_mod(a, r, memo)), changed |= args.back().get() != a.get();
  Expr x = changed ? with_args(e, std::move(args)) : e;
  auto simplified = [&]() -> Expr {
    if (x->kind != ExprKind::kBinary || (x->op != BinOp::kDiv && x->op != BinOp::kMod) || x->type != Type::kI64) return x;
    auto b = as_int(x->args[1]);
    if (!b || *b <= 1) return x;
    bool div = x->op == BinOp::kDiv;
    // (y % M) % B = y % B where B divides M.
    const Expr &a0 = x->args[0];
    if (!div && a0->kind == ExprKind::kBinary && a0->op == BinOp::kMod)
      if (auto m = as_int(a0->args[1]); m && *m > 0 && *m % *b == 0) return simplify_div_mod(a0->args[0] % x->args[1], r, memo);
    Linear l;
    linearize(a0, 1, l);
    if (l.terms.empty()) return x;
    // x = g X + s with g a divisor of B, X the terms whose coefficients g divides (and g's multiple
    // of the constant), s the rest: where s provably lies in [0, g), x / B = X / (B / g) and
    // x % B = (X % (B / g)) g + s (floor division). g = B is the plain case (x / B = X,
    // x % B = s); a smaller g is a common factor, as a reshape's flattened index has: (784 c + 28 h
    // + w) / 1568 is c / 2 for h, w inside a 28 x 28 plane.
    std::set<int64_t> divisors{*b};
    for (const auto &[key, t] : l.terms) divisors.insert(std::gcd(std::abs(t.second), *b));
    for (auto g = divisors.rbegin(); g != divisors.rend() && *g > 1; ++g) {
      Linear big, small;
      for (const auto &[key, t] : l.terms) (t.second % *g == 0 ? big : small).terms.emplace(key, t);
      if (big.terms.empty() && *g != *b) continue;
      int64_t qc = floor_div(l.constant, *g), rc = l.constant - qc * *g;
      int64_t lo = rc, hi = rc;
      bool known = true;
      for (const auto &[key, t] : small.terms) {
        auto iv = interval(t.first, r);
        if (!iv) {
          known = false;
          break;
        }
        int64_t a = iv->first * t.second, c = iv->second * t.second;
        lo += std::min(a, c), hi += std::max(a, c);
      }
      if (!known || lo < 0 || hi >= *g) continue;
      Expr X = sum_of(big, *g, qc), rest = sum_of(small, 1, rc);
      if (*g == *b) return div ? X : rest;
      Expr inner = simplify_div_mod(div ? X / int_imm(*b / *g) : X % int_imm(*b / *g), r, memo);
      return div ? inner : inner * *g + rest;
    }
    // Exact whatever the ranges: (B q + s) / B = q + s / B and (B q + s) % B = s % B.
    Linear q, rest;
    for (const auto &[key, t] : l.terms) (t.second % *b == 0 ? q : rest).terms.emplace(key, t);
    int64_t qc = floor_div(l.constant, *b), rc = l.constant - qc * *b;
    if (q.terms.empty() || rest.terms.empty()) return x;
    Expr s0 = sum_of(rest, 1, rc);
    if (!div) return simplify_div_mod(s0 % x->args[1], r, memo);
    return sum_of(q, *b, qc) + simplify_div_mod(s0 / x->args[1], r, memo);
  };
  Expr out = simplified();
  return memo.emplace(e.get(), std::make_pair(e, out)).first->second.second;
}

Stmt simplify_div_mod(const Stmt &s, Ranges &r, Memo &memo) {
  if (!s) return s;
  auto ex = [&](const Expr &e) { return e ? simplify_div_mod(e, r, memo) : e; };
  auto scoped = [&](const std::string &v, std::optional<std::pair<int64_t, int64_t>> iv, const Stmt &body) {
    std::optional<std::pair<int64_t, int64_t>> saved;
    if (auto it = r.find(v); it != r.end()) saved = it->second;
    if (iv) r[v] = *iv;
    else r.erase(v);
    Memo inner;  // another range for v: the outer scope's forms may not hold
    Stmt out = simplify_div_mod(body, r, inner);
    if (saved) r[v] = *saved;
    else r.erase(v);
    return out;
  };
  switch (s->kind) {
    case StmtKind::kFor: {
      Expr mn = ex(s->min), ext = ex(s->extent);
      auto lo = interval(mn, r);
      auto n = as_int(ext);
      std::optional<std::pair<int64_t, int64_t>> iv;
      if (lo && n && *n > 0) iv = std::make_pair(lo->first, lo->second + *n - 1);
      return for_loop(s->var, mn, ext, s->for_kind, scoped(s->var, iv, s->body[0]));
    }
    case StmtKind::kLet: {
      Expr v = ex(s->value);
      return let(s->var, v, scoped(s->var, interval(v, r), s->body[0]));
    }
    case StmtKind::kStore: return store(s->buffer, ex(s->index), ex(s->value));
    case StmtKind::kPrefetch: return prefetch(s->buffer, ex(s->index));
    case StmtKind::kBarrier: return s;
    case StmtKind::kAllocate: return allocate(s->buffer, simplify_div_mod(s->body[0], r, memo));
    case StmtKind::kSeq: {
      std::vector<Stmt> body;
      for (const Stmt &b : s->body) body.push_back(simplify_div_mod(b, r, memo));
      return seq(std::move(body));
    }
    case StmtKind::kIf:
      return if_then(ex(s->index), simplify_div_mod(s->body[0], r, memo), s->body.size() > 1 ? simplify_div_mod(s->body[1], r, memo) : nullptr);
  }
  return s;
}

}  // namespace

Stmt simplify_div_mod(const Stmt &s, const std::map<std::string, std::pair<int64_t, int64_t>> &ranges) {
  Ranges r = ranges;
  Memo memo;
  return simplify_div_mod(s, r, memo);
}

std::optional<int64_t> evaluate(const Expr &e, const std::map<std::string, int64_t> &vars) {
  switch (e->kind) {
    case ExprKind::kInt: return e->int_value;
    case ExprKind::kVar: {
      auto it = vars.find(e->name);
      if (it == vars.end()) return std::nullopt;
      return it->second;
    }
    case ExprKind::kSelect: {
      auto c = evaluate(e->args[0], vars);
      if (!c) return std::nullopt;
      return evaluate(e->args[*c ? 1 : 2], vars);
    }
    case ExprKind::kBinary: {
      auto a = evaluate(e->args[0], vars), b = evaluate(e->args[1], vars);
      if (!a || !b) return std::nullopt;
      switch (e->op) {
        case BinOp::kAdd: return *a + *b;
        case BinOp::kSub: return *a - *b;
        case BinOp::kMul: return *a * *b;
        case BinOp::kDiv: return *b ? std::optional<int64_t>(floor_div(*a, *b)) : std::nullopt;
        case BinOp::kMod: return *b ? std::optional<int64_t>(*a - floor_div(*a, *b) * *b) : std::nullopt;
        case BinOp::kMin: return std::min(*a, *b);
        case BinOp::kMax: return std::max(*a, *b);
        case BinOp::kLT: return *a < *b;
        case BinOp::kLE: return *a <= *b;
        case BinOp::kEQ: return *a == *b;
        case BinOp::kNE: return *a != *b;
        case BinOp::kAnd: return *a && *b;
        case BinOp::kOr: return *a || *b;
      }
      return std::nullopt;
    }
    case ExprKind::kFloat:
    case ExprKind::kLoad:
    case ExprKind::kCast:
    case ExprKind::kCall: return std::nullopt;
  }
  return std::nullopt;
}

namespace {
/** substitute below the top: `bit` is v's (var_bit). */
Expr substitute_in(const Expr &e, const std::string &v, uint64_t bit, const Expr &value, ExprMemo *memo) {
  // One walk: a node is rebuilt only when one of its arguments changed (asking uses_var at every
  // level made deep indices quadratic), and a subtree whose variables' filter lacks v's bit is
  // not entered (weights' indices, constants, the loads that other loops index).
  if (e->kind == ExprKind::kVar) return e->name == v ? value : e;
  if (e->args.empty() || !(vars_filter(e) & bit)) return e;
  if (memo)
    if (auto it = memo->find(e.get()); it != memo->end()) return it->second;
  Expr out = e;
  for (size_t i = 0; i < e->args.size(); ++i) {
    Expr a = substitute_in(e->args[i], v, bit, value, memo);
    if (a.get() == e->args[i].get()) continue;
    std::vector<Expr> args(e->args.begin(), e->args.begin() + static_cast<std::ptrdiff_t>(i));
    args.push_back(std::move(a));
    for (size_t j = i + 1; j < e->args.size(); ++j) args.push_back(substitute_in(e->args[j], v, bit, value, memo));
    out = with_args(e, std::move(args));
    break;
  }
  if (memo) memo->emplace(e.get(), out);
  return out;
}
}  // namespace

Expr substitute(const Expr &e, const std::string &v, const Expr &value, ExprMemo *memo) {
  return substitute_in(e, v, var_bit(v), value, memo);
}

const char *for_kind_name(ForKind k) {
  switch (k) {
    case ForKind::kSerial: return "for";
    case ForKind::kParallel: return "parallel";
    case ForKind::kVectorized: return "vectorized";
    case ForKind::kUnrolled: return "unrolled";
  }
  return "?";
}

namespace {
Stmt make_stmt(StmtKind kind) {
  auto s = std::make_shared<StmtNode>();
  s->kind = kind;
  return s;
}
StmtNode *mut(const Stmt &s) { return const_cast<StmtNode *>(s.get()); }
}  // namespace

Stmt for_loop(const std::string &v, Expr min, Expr extent, ForKind kind, Stmt body) {
  Stmt s = make_stmt(StmtKind::kFor);
  auto *n = mut(s);
  n->var = v;
  n->min = std::move(min);
  n->extent = std::move(extent);
  n->for_kind = kind;
  n->body = {std::move(body)};
  return s;
}

Stmt store(Buffer b, Expr index, Expr value) {
  Stmt s = make_stmt(StmtKind::kStore);
  auto *n = mut(s);
  n->buffer = std::move(b);
  n->index = std::move(index);
  n->value = std::move(value);
  return s;
}

Stmt prefetch(Buffer b, Expr index) {
  Stmt s = make_stmt(StmtKind::kPrefetch);
  auto *n = mut(s);
  n->buffer = std::move(b);
  n->index = std::move(index);
  return s;
}

Stmt barrier() { return make_stmt(StmtKind::kBarrier); }

Stmt allocate(Buffer b, Stmt body) {
  Stmt s = make_stmt(StmtKind::kAllocate);
  mut(s)->buffer = std::move(b);
  mut(s)->body = {std::move(body)};
  return s;
}

Stmt seq(std::vector<Stmt> stmts) {
  if (stmts.size() == 1) return stmts[0];
  Stmt s = make_stmt(StmtKind::kSeq);
  mut(s)->body = std::move(stmts);
  return s;
}

Stmt if_then(Expr cond, Stmt then_case, Stmt else_case) {
  Stmt s = make_stmt(StmtKind::kIf);
  mut(s)->index = std::move(cond);
  mut(s)->body = {std::move(then_case)};
  if (else_case) mut(s)->body.push_back(std::move(else_case));
  return s;
}

Stmt let(const std::string &v, Expr value, Stmt body) {
  Stmt s = make_stmt(StmtKind::kLet);
  mut(s)->var = v;
  mut(s)->value = std::move(value);
  mut(s)->body = {std::move(body)};
  return s;
}

namespace {
Expr replace_buffers_in(const Expr &e, const std::map<const BufferNode *, Buffer> &to, std::map<const ExprNode *, Expr> &memo) {
  if (!e || e->args.empty()) return e;
  if (auto it = memo.find(e.get()); it != memo.end()) return it->second;
  std::vector<Expr> args;
  bool changed = false;
  for (const Expr &a : e->args) {
    args.push_back(replace_buffers_in(a, to, memo));
    changed |= args.back().get() != a.get();
  }
  Expr out = e;
  auto b = e->kind == ExprKind::kLoad ? to.find(e->buffer.get()) : to.end();
  if (b != to.end()) out = load(b->second, args[0]);
  else if (changed) out = with_args(e, std::move(args));
  return memo[e.get()] = out;
}
}  // namespace

Stmt replace_buffers(const Stmt &s, const std::map<const BufferNode *, Buffer> &to) {
  std::map<const ExprNode *, Expr> memo;
  std::function<Stmt(const Stmt &)> go = [&](const Stmt &st) -> Stmt {
    if (!st) return st;
    auto n = std::make_shared<StmtNode>(*st);
    if (n->buffer)
      if (auto it = to.find(n->buffer.get()); it != to.end()) n->buffer = it->second;
    n->min = replace_buffers_in(n->min, to, memo);
    n->extent = replace_buffers_in(n->extent, to, memo);
    n->index = replace_buffers_in(n->index, to, memo);
    n->value = replace_buffers_in(n->value, to, memo);
    for (Stmt &b : n->body) b = go(b);
    return n;
  };
  return go(s);
}

std::string to_string(const Expr &e) {
  switch (e->kind) {
    case ExprKind::kInt: return std::to_string(e->int_value);
    case ExprKind::kFloat: {
      char buf[48];
      auto [end, ec] = std::to_chars(buf, buf + sizeof buf, static_cast<float>(e->float_value));
      std::string s(buf, end);
      if (s.find_first_of(".en") == std::string::npos) s += ".0";
      return s + "f";
    }
    case ExprKind::kVar: return e->name;
    case ExprKind::kBinary: {
      static const char *ops[] = {"+", "-", "*", "/", "%", "min", "max", "<", "<=", "==", "!=", "&&", "||"};
      const char *o = ops[static_cast<int>(e->op)];
      if (e->op == BinOp::kMin || e->op == BinOp::kMax)
        return std::string(o) + "(" + to_string(e->args[0]) + ", " + to_string(e->args[1]) + ")";
      return "(" + to_string(e->args[0]) + " " + o + " " + to_string(e->args[1]) + ")";
    }
    case ExprKind::kSelect:
      return "select(" + to_string(e->args[0]) + ", " + to_string(e->args[1]) + ", " + to_string(e->args[2]) + ")";
    case ExprKind::kLoad: return e->buffer->name + "[" + to_string(e->args[0]) + "]";
    case ExprKind::kCast: return std::string(e->type == Type::kF32 ? "float32" : "int64") + "(" + to_string(e->args[0]) + ")";
    case ExprKind::kCall: {
      std::string s = e->name + "(";
      for (size_t i = 0; i < e->args.size(); ++i) s += (i ? ", " : "") + to_string(e->args[i]);
      return s + ")";
    }
  }
  return "?";
}

namespace {
/**
 * A Bloom filter of what `own` marks at and below `e`, kept in the node's `slot` once computed
 * (reads_filter, vars_filter). Leaves are not kept: their own bits are the whole filter.
 */
template <class Own>
uint64_t kept_filter(const Expr &e, HashSlot ExprNode::*slot, Own own) {
  constexpr uint64_t kKept = 1ULL << 63;  // own bits are below it: a kept filter is never 0
  if (!e) return 0;
  if (e->args.empty()) return own(*e);
  if (uint64_t f = ((*e).*slot).value.load(std::memory_order_relaxed)) return f & ~kKept;
  uint64_t f = own(*e);
  for (const Expr &a : e->args) f |= kept_filter(a, slot, own);
  ((*e).*slot).value.store(f | kKept, std::memory_order_relaxed);
  return f;
}
}  // namespace

uint64_t reads_filter(const Expr &e) {
  return kept_filter(e, &ExprNode::reads, [](const ExprNode &n) { return n.kind == ExprKind::kLoad ? buffer_bit(n.buffer.get()) : 0; });
}

uint64_t var_bit(const std::string &name) { return 1ULL << fnv1a(name) % 63; }

uint64_t vars_filter(const Expr &e) {
  return kept_filter(e, &ExprNode::vars, [](const ExprNode &n) { return n.kind == ExprKind::kVar ? var_bit(n.name) : 0; });
}

namespace {
struct StructuralHasher {
  // Each node keeps its hash (HashSlot): a DAG's shared node is walked once, and so is a subtree
  // that many kernels share. A computed hash is never 0 (0 marks "not yet").
  static uint64_t mix(uint64_t h, uint64_t v) {
    uint64_t state = h ^ (v * 0xff51afd7ed558ccdULL);
    return splitmix64(state);
  }
  static uint64_t kept(const HashSlot &slot, uint64_t h) {
    h += h == 0;
    slot.value.store(h, std::memory_order_relaxed);
    return h;
  }
  static uint64_t buffer(const Buffer &b) {
    if (!b) return 0;
    uint64_t h = mix(fnv1a(b->name), static_cast<uint64_t>(b->size));
    return mix(mix(h, static_cast<uint64_t>(b->type)), static_cast<uint64_t>(b->scope));
  }
  static uint64_t expr(const Expr &e) {
    if (!e) return 0x51ed2701ULL;
    if (uint64_t h = e->hash.value.load(std::memory_order_relaxed)) return h;
    uint64_t bits;
    std::memcpy(&bits, &e->float_value, sizeof bits);
    uint64_t h = mix(static_cast<uint64_t>(e->kind), static_cast<uint64_t>(e->type));
    h = mix(mix(mix(h, static_cast<uint64_t>(e->int_value)), bits), static_cast<uint64_t>(e->op));
    h = mix(mix(h, e->name.empty() ? 0 : fnv1a(e->name)), buffer(e->buffer));
    for (const Expr &a : e->args) h = mix(h, expr(a));
    return kept(e->hash, mix(h, e->args.size()));
  }
  static uint64_t stmt(const Stmt &s) {
    if (!s) return 0x2545f491ULL;
    if (uint64_t h = s->hash.value.load(std::memory_order_relaxed)) return h;
    uint64_t h = mix(static_cast<uint64_t>(s->kind) + 0x100, s->var.empty() ? 0 : fnv1a(s->var));
    h = mix(mix(mix(h, expr(s->min)), expr(s->extent)), static_cast<uint64_t>(s->for_kind));
    h = mix(mix(mix(h, buffer(s->buffer)), expr(s->index)), expr(s->value));
    for (const Stmt &b : s->body) h = mix(h, stmt(b));
    return kept(s->hash, mix(h, s->body.size()));
  }
};
}  // namespace

uint64_t structural_hash(const Stmt &s) { return StructuralHasher::stmt(s); }

std::string to_string(const Stmt &s, int indent) {
  std::string pad(indent, ' ');
  switch (s->kind) {
    case StmtKind::kFor:
      return pad + for_kind_name(s->for_kind) + " (" + s->var + ", " + to_string(s->min) + ", " + to_string(s->extent) +
             ") {\n" + to_string(s->body[0], indent + 2) + pad + "}\n";
    case StmtKind::kStore: return pad + s->buffer->name + "[" + to_string(s->index) + "] = " + to_string(s->value) + "\n";
    case StmtKind::kAllocate:
      return pad + "allocate " + s->buffer->name + "[" + std::to_string(s->buffer->size) + "]" + (s->buffer->scope == BufferScope::kShared ? " shared" : "") + "\n" +
             to_string(s->body[0], indent);
    case StmtKind::kSeq: {
      std::string out;
      for (const Stmt &b : s->body) out += to_string(b, indent);
      return out;
    }
    case StmtKind::kIf: {
      std::string out = pad + "if (" + to_string(s->index) + ") {\n" + to_string(s->body[0], indent + 2) + pad + "}";
      if (s->body.size() > 1) out += " else {\n" + to_string(s->body[1], indent + 2) + pad + "}";
      return out + "\n";
    }
    case StmtKind::kLet:
      return pad + "let " + s->var + " = " + to_string(s->value) + "\n" + to_string(s->body[0], indent);
    case StmtKind::kPrefetch: return pad + "prefetch " + s->buffer->name + "[" + to_string(s->index) + "]\n";
    case StmtKind::kBarrier: return pad + "barrier\n";
  }
  return "?";
}

}  // namespace autotune::loop
