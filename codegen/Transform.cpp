#include "codegen/Transform.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <unordered_map>
#include <unordered_set>

namespace autotune {

using namespace loop;

namespace {

/** A copy of `s` with new children (the same kind, variable, bounds, buffer and expressions). */
Stmt with_body(const Stmt &s, std::vector<Stmt> body) {
  switch (s->kind) {
    case StmtKind::kFor: return for_loop(s->var, s->min, s->extent, s->for_kind, body[0]);
    case StmtKind::kAllocate: return allocate(s->buffer, body[0]);
    case StmtKind::kSeq: return seq(std::move(body));
    case StmtKind::kIf: return if_then(s->index, body[0], body.size() > 1 ? body[1] : nullptr);
    case StmtKind::kLet: return let(s->var, s->value, body[0]);
    case StmtKind::kStore:
    case StmtKind::kPrefetch:
    case StmtKind::kBarrier: return s;
  }
  return s;
}

/** `s` with the loop named `name` replaced by what `fn` makes of it (every such loop). */
Expected<Stmt> map_loop(const Stmt &s, const std::string &name, const std::function<Expected<Stmt>(const Stmt &)> &fn) {
  if (s->kind == StmtKind::kFor && s->var == name) return fn(s);
  if (s->body.empty()) return s;
  std::vector<Stmt> body;
  bool changed = false;
  for (const Stmt &b : s->body) {
    if (!b) {
      body.push_back(b);
      continue;
    }
    AT_ASSIGN(nb, map_loop(b, name, fn));
    changed |= nb.get() != b.get();
    body.push_back(nb);
  }
  return changed ? with_body(s, std::move(body)) : s;
}

void collect_names(const Stmt &s, std::multiset<std::string> &loops, std::set<std::string> &all) {
  if (!s) return;
  if (s->kind == StmtKind::kFor) loops.insert(s->var), all.insert(s->var);
  if (s->kind == StmtKind::kLet) all.insert(s->var);
  for (const Stmt &b : s->body) collect_names(b, loops, all);
}

/** An error unless each of `names` is a name not bound anywhere in `s` (and they differ). */
Status fresh_names(const Stmt &s, const std::vector<std::string> &names) {
  std::multiset<std::string> loops;
  std::set<std::string> all;
  collect_names(s, loops, all);
  std::set<std::string> seen;
  for (const std::string &n : names) {
    if (n.empty()) return make_error("a loop needs a name");
    if (all.count(n) || !seen.insert(n).second) return make_error("the name " + n + " is already used in this loop nest");
  }
  return Status::ok();
}

Expected<int64_t> constant(const Expr &e, const std::string &loop, const char *what) {
  auto v = as_int(e);
  if (!v) return make_error("loop " + loop + ": its " + what + " " + to_string(e) + " is not a constant");
  return *v;
}

struct Access {
  Buffer buffer;
  Expr index;
};

/** The loads in `e`; a node shared by several parents (an inlined producer's value) is walked once. */
void collect_expr(const Expr &e, std::vector<Access> &loads, NodeSet &seen) {
  if (e->args.empty() || !reads_filter(e) || !seen.insert(e.get())) return;
  if (e->kind == ExprKind::kLoad) loads.push_back({e->buffer, e->args[0]});
  for (const Expr &a : e->args) collect_expr(a, loads, seen);
}

/** Every store and load in `s` (a load at one node once), and the buffers allocated inside it (private to an iteration). */
void collect_accesses(const Stmt &s, std::vector<Access> &stores, std::vector<Access> &loads, std::set<const BufferNode *> &inner,
                      NodeSet &seen) {
  if (!s) return;
  switch (s->kind) {
    case StmtKind::kStore:
      stores.push_back({s->buffer, s->index});
      collect_expr(s->index, loads, seen);
      collect_expr(s->value, loads, seen);
      return;
    case StmtKind::kPrefetch:  // a hint: reads nothing
    case StmtKind::kBarrier: return;
    case StmtKind::kFor:
      collect_expr(s->min, loads, seen);
      collect_expr(s->extent, loads, seen);
      break;
    case StmtKind::kIf: collect_expr(s->index, loads, seen); break;
    case StmtKind::kLet: collect_expr(s->value, loads, seen); break;
    case StmtKind::kAllocate: inner.insert(s->buffer.get()); break;
    case StmtKind::kSeq: break;
  }
  for (const Stmt &b : s->body) collect_accesses(b, stores, loads, inner, seen);
}

void collect_accesses(const Stmt &s, std::vector<Access> &stores, std::vector<Access> &loads, std::set<const BufferNode *> &inner) {
  NodeSet seen;
  collect_accesses(s, stores, loads, inner, seen);
}

/** The iterations of a loop `var` from lo to hi, whose body is being checked. */
struct Iterations {
  std::string var;
  int64_t lo = 0, hi = -1;
};
bool iterations_apart(const Stmt &body, const BufferNode *b, const Iterations &loop);

/**
 * Why iterations of `body` may not be reordered, or "": a buffer it writes (and did not allocate
 * inside) is read at an index it does not write, so one iteration may read what another wrote.
 * Given the loop whose body it is, a buffer read elsewhere than it is written passes when its
 * accesses provably keep to elements of their own iteration (iterations_apart: a softmax's
 * exponentials stored in its output and read back by the passes after).
 */
std::string carried_dependence(const Stmt &body, const Iterations &loop = {}) {
  std::vector<Access> stores, loads;
  std::set<const BufferNode *> inner;
  collect_accesses(body, stores, loads, inner);
  // Indices compare by their text, printed only for the buffers written here.
  std::map<const BufferNode *, std::set<std::string>> written;
  for (const Access &a : stores)
    if (!inner.count(a.buffer.get())) written[a.buffer.get()].insert(to_string(a.index));
  std::set<const BufferNode *> apart;
  for (const Access &a : loads) {
    auto it = written.find(a.buffer.get());
    if (it == written.end() || apart.count(a.buffer.get())) continue;
    std::string index = to_string(a.index);
    if (it->second.count(index)) continue;
    if (!loop.var.empty() && iterations_apart(body, a.buffer.get(), loop)) {
      apart.insert(a.buffer.get());
      continue;
    }
    return a.buffer->name + " is written and read at another index (" + a.buffer->name + "[" + index + "])";
  }
  return "";
}

/**
 * The first store in `s` whose index does not use `v`, as text, or "". With `private_ok`, stores
 * to buffers allocated inside `s` are skipped: each iteration has its own.
 */
std::string store_not_using(const Stmt &s, const std::string &v, bool private_ok, std::set<const BufferNode *> inner = {}) {
  if (!s) return "";
  if (s->kind == StmtKind::kAllocate && private_ok) inner.insert(s->buffer.get());
  if (s->kind == StmtKind::kStore && !uses_var(s->index, v) && !inner.count(s->buffer.get()))
    return s->buffer->name + "[" + to_string(s->index) + "]";
  for (const Stmt &b : s->body)
    if (std::string found = store_not_using(b, v, private_ok, inner); !found.empty()) return found;
  return "";
}

/** The first branch condition or let value in `s` that uses `v`, as text, or "". */
std::string scalar_use_of(const Stmt &s, const std::string &v) {
  if (!s) return "";
  if (s->kind == StmtKind::kIf && uses_var(s->index, v)) return "the condition " + to_string(s->index);
  if (s->kind == StmtKind::kLet && uses_var(s->value, v)) return "let " + s->var;
  if (s->kind == StmtKind::kFor && s->for_kind == ForKind::kVectorized) return "the vectorized loop " + s->var + " inside it";
  if (s->kind == StmtKind::kFor && (uses_var(s->min, v) || uses_var(s->extent, v))) return "the bounds of loop " + s->var;
  for (const Stmt &b : s->body)
    if (std::string found = scalar_use_of(b, v); !found.empty()) return found;
  return "";
}

/** The vectorized loop around loop `name` in `s`, or "". */
std::string vectorized_around(const Stmt &s, const std::string &name) {
  std::string around;
  std::function<bool(const Stmt &, const std::string &)> walk = [&](const Stmt &x, const std::string &vec) {
    if (!x) return false;
    if (x->kind == StmtKind::kFor && x->var == name) return around = vec, true;
    std::string v = x->kind == StmtKind::kFor && x->for_kind == ForKind::kVectorized ? x->var : vec;
    for (const Stmt &b : x->body)
      if (walk(b, v)) return true;
    return false;
  };
  walk(s, "");
  return around;
}

}  // namespace

Stmt map_exprs(const Stmt &s, const std::function<Expr(const Expr &)> &fn, const std::string &bound) {
  if (!s) return s;
  auto inner = [&](const Stmt &b) { return map_exprs(b, fn, bound); };
  switch (s->kind) {
    case StmtKind::kFor: return for_loop(s->var, fn(s->min), fn(s->extent), s->for_kind, !bound.empty() && s->var == bound ? s->body[0] : inner(s->body[0]));
    case StmtKind::kStore: return store(s->buffer, fn(s->index), fn(s->value));
    case StmtKind::kPrefetch: return prefetch(s->buffer, fn(s->index));
    case StmtKind::kBarrier: return s;
    case StmtKind::kAllocate: return allocate(s->buffer, inner(s->body[0]));
    case StmtKind::kSeq: {
      std::vector<Stmt> body;
      for (const Stmt &b : s->body) body.push_back(inner(b));
      return seq(std::move(body));
    }
    case StmtKind::kIf: return if_then(fn(s->index), inner(s->body[0]), s->body.size() > 1 ? inner(s->body[1]) : nullptr);
    case StmtKind::kLet: return let(s->var, fn(s->value), !bound.empty() && s->var == bound ? s->body[0] : inner(s->body[0]));
  }
  return s;
}

Stmt substitute(const Stmt &s, const std::string &v, const Expr &value) {
  loop::ExprMemo memo;
  return map_exprs(s, [&](const Expr &e) { return loop::substitute(e, v, value, &memo); }, v);
}

namespace {

/** `s` with every loop inside it renamed to its name + suffix (a tail's copy of the loops, so names stay unique). */
Stmt rename_loops(const Stmt &s, const std::string &suffix) {
  if (!s) return s;
  if (s->kind == StmtKind::kFor) {
    Stmt body = rename_loops(substitute(s->body[0], s->var, var(s->var + suffix)), suffix);
    return for_loop(s->var + suffix, s->min, s->extent, s->for_kind, body);
  }
  if (s->body.empty()) return s;
  std::vector<Stmt> body;
  for (const Stmt &b : s->body) body.push_back(rename_loops(b, suffix));
  return with_body(s, std::move(body));
}

}  // namespace

Expected<Stmt> find_loop(const Stmt &s, const std::string &name) {
  std::vector<Stmt> found;
  std::function<void(const Stmt &)> walk = [&](const Stmt &x) {
    if (!x) return;
    if (x->kind == StmtKind::kFor && x->var == name) found.push_back(x);
    for (const Stmt &b : x->body) walk(b);
  };
  walk(s);
  if (found.empty()) return make_error("there is no loop " + name);
  if (found.size() > 1) return make_error("there are " + std::to_string(found.size()) + " loops named " + name);
  return found[0];
}

Expected<Stmt> split(const Stmt &s, const std::string &name, int64_t factor, const std::string &outer, const std::string &inner,
                     const std::string &tail) {
  AT_ASSIGN(l, find_loop(s, name));
  AT_ASSIGN(mn, constant(l->min, name, "start"));
  AT_ASSIGN(ex, constant(l->extent, name, "extent"));
  if (factor < 1 || factor > ex) return make_error("loop " + name + ": split factor " + std::to_string(factor) + " is not in [1, " + std::to_string(ex) + "]");
  if (tail.empty()) return make_error("loop " + name + ": the tail suffix is empty");
  std::vector<std::string> names{outer, inner, inner + tail};
  if (ex % factor) {
    std::multiset<std::string> inside;
    std::set<std::string> all;
    collect_names(l->body[0], inside, all);
    for (const std::string &n : inside) names.push_back(n + tail);
  }
  AT_TRY(fresh_names(s, names));
  return map_loop(s, name, [&](const Stmt &x) -> Expected<Stmt> {
    Expr at = int_imm(mn) + var(outer) * factor + var(inner);
    Stmt tiles = for_loop(outer, int_imm(0), int_imm(ex / factor), ForKind::kSerial,
                          for_loop(inner, int_imm(0), int_imm(factor), x->for_kind, substitute(x->body[0], name, at)));
    if (ex % factor == 0) return tiles;
    // The tail's copy of the loops inside gets its own names (k becomes k_tail): later steps
    // transform the tiles, and the remainder runs as it was.
    Stmt rest = for_loop(inner + tail, int_imm(0), int_imm(ex % factor), x->for_kind == ForKind::kVectorized ? ForKind::kSerial : x->for_kind,
                         rename_loops(substitute(x->body[0], name, int_imm(mn + ex / factor * factor) + var(inner + tail)), tail));
    return seq({tiles, rest});
  });
}

Expected<Stmt> reorder(const Stmt &s, const std::vector<std::string> &order) {
  if (order.size() < 2) return s;
  std::set<std::string> want(order.begin(), order.end());
  if (want.size() != order.size()) return make_error("reorder names a loop twice");
  for (const std::string &n : order) AT_TRY(find_loop(s, n));
  // The outermost loop of the band: the first of them met walking down from the top.
  std::string top;
  std::function<void(const Stmt &)> walk = [&](const Stmt &x) {
    if (!x || !top.empty()) return;
    if (x->kind == StmtKind::kFor && want.count(x->var)) {
      top = x->var;
      return;
    }
    for (const Stmt &b : x->body) walk(b);
  };
  walk(s);
  return map_loop(s, top, [&](const Stmt &x) -> Expected<Stmt> {
    std::map<std::string, Stmt> loops;
    Stmt cur = x;
    while (loops.size() < want.size()) {
      if (cur->kind != StmtKind::kFor || !want.count(cur->var))
        return make_error("reorder: loops " + [&] {
          std::string names;
          for (const std::string &n : order) names += (names.empty() ? "" : ", ") + n;
          return names;
        }() + " are not perfectly nested (a statement other than the next loop is between them)");
      loops[cur->var] = cur;
      cur = cur->body[0];
    }
    Stmt body = cur;
    for (const auto &[name, l] : loops) {
      for (const auto &[other, _] : loops)
        if (uses_var(l->min, other) || uses_var(l->extent, other))
          return make_error("reorder: the bounds of loop " + name + " depend on loop " + other);
      if (l->for_kind == ForKind::kVectorized) return make_error("reorder: loop " + name + " is vectorized; reorder before vectorizing");
    }
    if (std::string why = carried_dependence(body); !why.empty()) return make_error("reorder: " + why);
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
      const Stmt &l = loops[*it];
      body = for_loop(l->var, l->min, l->extent, l->for_kind, body);
    }
    return body;
  });
}

Expected<Stmt> fuse(const Stmt &s, const std::string &outer, const std::string &inner, const std::string &fused) {
  AT_ASSIGN(o, find_loop(s, outer));
  if (o->body[0]->kind != StmtKind::kFor || o->body[0]->var != inner)
    return make_error("fuse: loop " + inner + " is not the whole body of loop " + outer);
  const Stmt &i = o->body[0];
  AT_ASSIGN(omin, constant(o->min, outer, "start"));
  AT_ASSIGN(oext, constant(o->extent, outer, "extent"));
  AT_ASSIGN(imin, constant(i->min, inner, "start"));
  AT_ASSIGN(iext, constant(i->extent, inner, "extent"));
  if (o->for_kind != ForKind::kSerial || i->for_kind != ForKind::kSerial) return make_error("fuse: only serial loops are fused");
  AT_TRY(fresh_names(s, {fused}));
  return map_loop(s, outer, [&](const Stmt &) -> Expected<Stmt> {
    // Both loops' variables in one walk, each rewritten sum folded: outer * iext + inner reads the fused loop again.
    std::map<std::string, Expr> values = {{inner, int_imm(imin) + var(fused) % int_imm(iext)}, {outer, int_imm(omin) + var(fused) / int_imm(iext)}};
    loop::ExprMemo memo;
    Stmt body = map_exprs(i->body[0], [&](const Expr &e) { return substitute_and_fold(e, values, memo); });
    return for_loop(fused, int_imm(0), int_imm(oext * iext), ForKind::kSerial, body);
  });
}

Expected<Stmt> unroll(const Stmt &s, const std::string &name) {
  AT_ASSIGN(l, find_loop(s, name));
  AT_ASSIGN(ex, constant(l->extent, name, "extent"));
  if (ex > 64) return make_error("unroll: loop " + name + " has " + std::to_string(ex) + " iterations; at most 64 are unrolled");
  if (l->for_kind != ForKind::kSerial) return make_error("unroll: loop " + name + " is already " + for_kind_name(l->for_kind));
  return map_loop(s, name, [](const Stmt &x) -> Expected<Stmt> { return for_loop(x->var, x->min, x->extent, ForKind::kUnrolled, x->body[0]); });
}

namespace {
Stmt expand_private(const Stmt &body, const std::string &v, int64_t mn, int64_t ex);
}  // namespace

Expected<Stmt> vectorize(const Stmt &s, const std::string &name) {
  AT_ASSIGN(l, find_loop(s, name));
  AT_ASSIGN(ex, constant(l->extent, name, "extent"));
  AT_ASSIGN(mn, constant(l->min, name, "start"));
  if (ex < 2 || ex > 64) return make_error("vectorize: loop " + name + " has " + std::to_string(ex) + " iterations; vectors have 2 to 64 lanes");
  if (l->for_kind != ForKind::kSerial) return make_error("vectorize: loop " + name + " is already " + for_kind_name(l->for_kind));
  // Buffers allocated inside get a slice per lane (Halide's storage expansion): a reduction's
  // accumulator allocated per output element becomes one vector of accumulators.
  const Stmt body = expand_private(l->body[0], name, mn, ex);
  if (std::string st = store_not_using(body, name, false); !st.empty())
    return make_error("vectorize: loop " + name + ": the store to " + st + " does not move with it (lanes would write one element)");
  if (std::string use = scalar_use_of(body, name); !use.empty())
    return make_error("vectorize: loop " + name + ": " + use + " depends on it and must stay scalar");
  if (std::string why = carried_dependence(body, {name, mn, mn + ex - 1}); !why.empty()) return make_error("vectorize: loop " + name + ": " + why);
  // Lanes are one level deep: no vectorized loop may enclose this one.
  std::string around = vectorized_around(s, name);
  if (!around.empty()) return make_error("vectorize: loop " + name + " is inside the vectorized loop " + around);
  return map_loop(s, name, [&](const Stmt &x) -> Expected<Stmt> { return for_loop(x->var, x->min, x->extent, ForKind::kVectorized, body); });
}

namespace {
/** Does any expression of `s` mention variable `v`? */
bool stmt_uses_var(const Stmt &s, const std::string &v) {
  if (!s) return false;
  for (const Expr &e : {s->min, s->extent, s->index, s->value})
    if (e && uses_var(e, v)) return true;
  for (const Stmt &b : s->body)
    if (stmt_uses_var(b, v)) return true;
  return false;
}
}  // namespace

Expected<KernelStage> parallelize(const KernelStage &stage, const std::string &name) {
  // Already parallel: over more than one iteration, or over a loop of one the body still reads.
  if (stage.parallel_extent != 1 || (!stage.parallel_var.empty() && stmt_uses_var(stage.body, stage.parallel_var)))
    return make_error("parallel: stage " + stage.name + " is already parallel over " + stage.parallel_var);
  const Stmt &l = stage.body;
  if (l->kind != StmtKind::kFor || l->var != name) return make_error("parallel: loop " + name + " is not the whole body of stage " + stage.name);
  AT_ASSIGN(mn, constant(l->min, name, "start"));
  AT_ASSIGN(ex, constant(l->extent, name, "extent"));
  if (l->for_kind != ForKind::kSerial) return make_error("parallel: loop " + name + " is " + for_kind_name(l->for_kind));
  if (std::string st = store_not_using(l->body[0], name, true); !st.empty())
    return make_error("parallel: loop " + name + ": the store to " + st + " does not depend on it (threads would race)");
  if (std::string why = carried_dependence(l->body[0], {name, mn, mn + ex - 1}); !why.empty()) return make_error("parallel: loop " + name + ": " + why);
  KernelStage out = stage;
  out.parallel_var = name;
  out.parallel_extent = ex;
  out.body = mn == 0 ? l->body[0] : substitute(l->body[0], name, var(name) + int_imm(mn));
  return out;
}

// --- producers, consumers and local buffers ---------------------------------------------------

Expected<size_t> stage_index(const LoweredKernel &k, const std::string &name) {
  for (size_t i = 0; i < k.stages.size(); ++i)
    if (k.stages[i].name == name) return i;
  return make_error("there is no stage " + name);
}

namespace {

struct Range {
  int64_t lo = 0, hi = 0;  // inclusive
};
using Ranges = std::map<std::string, Range>;

/** The range of every loop in `s` with constant bounds (a name bound twice gets the hull). */
void loop_ranges(const Stmt &s, Ranges &out) {
  if (!s) return;
  if (s->kind == StmtKind::kFor) {
    auto mn = as_int(s->min), ex = as_int(s->extent);
    if (mn && ex && *ex > 0) {
      Range r{*mn, *mn + *ex - 1};
      auto [it, fresh] = out.emplace(s->var, r);
      if (!fresh) it->second = {std::min(it->second.lo, r.lo), std::max(it->second.hi, r.hi)};
    }
  }
  for (const Stmt &b : s->body) loop_ranges(b, out);
}

Ranges stage_ranges(const KernelStage &st) {
  Ranges r;
  if (!st.parallel_var.empty()) r[st.parallel_var] = {0, st.parallel_extent - 1};
  loop_ranges(st.body, r);
  return r;
}

/** The range of `a` over `r`, or an error naming a variable that is not a loop with constant bounds. */
Expected<Range> range_of(const Affine &a, const Ranges &r) {
  Range out{a.constant, a.constant};
  for (const auto &[v, c] : a.coeff) {
    auto it = r.find(v);
    if (it == r.end()) return make_error(v + " is not a loop with constant bounds");
    int64_t x = c * it->second.lo, y = c * it->second.hi;
    out.lo += std::min(x, y);
    out.hi += std::max(x, y);
  }
  return out;
}

/** `a` restricted to the variables in `vars` (keep = true) or to the others (keep = false, with the constant). */
Affine part(const Affine &a, const std::set<std::string> &vars, bool keep) {
  Affine out;
  if (!keep) out.constant = a.constant;
  for (const auto &[v, c] : a.coeff)
    if (vars.count(v) == keep) out.coeff[v] = c;
  return out;
}

void accesses_of(const Stmt &s, const BufferNode *b, std::vector<Expr> &loads, std::vector<Expr> &stores);

int64_t gcd64(int64_t a, int64_t b) {
  a = a < 0 ? -a : a, b = b < 0 ? -b : b;
  while (b) a %= b, std::swap(a, b);
  return a;
}

/** An integer expression as sum(coefficient * atom) + constant: atoms are variables and whatever is not a sum or a product by a constant. */
struct Linear {
  std::map<std::string, std::pair<int64_t, Expr>> atoms;
  int64_t constant = 0;
};

void linearize(const Expr &e, int64_t scale, Linear &out) {
  if (e->kind == ExprKind::kInt) {
    out.constant += scale * e->int_value;
    return;
  }
  if (e->kind == ExprKind::kBinary && (e->op == BinOp::kAdd || e->op == BinOp::kSub)) {
    linearize(e->args[0], scale, out);
    linearize(e->args[1], e->op == BinOp::kAdd ? scale : -scale, out);
    return;
  }
  if (e->kind == ExprKind::kBinary && e->op == BinOp::kMul)
    for (int c = 0; c < 2; ++c)
      if (auto k = as_int(e->args[c])) {
        linearize(e->args[1 - c], scale * *k, out);
        return;
      }
  auto &atom = out.atoms[to_string(e)];
  atom.first += scale, atom.second = e;
}

/** A term of a linear equation: a coefficient over an integer range; `iteration` marks a difference of a loop's iterations. */
struct Term {
  int64_t a;
  Range r;
  bool iteration;
};

Range sum_range(const std::vector<Term> &t) {
  Range out{0, 0};
  for (const Term &x : t) {
    int64_t p = x.a * x.r.lo, q = x.a * x.r.hi;
    out.lo += std::min(p, q), out.hi += std::max(p, q);
  }
  return out;
}

/**
 * Whether every solution of sum(a * x) == 0 (each x in its range) has the iteration terms 0.
 * The terms whose coefficients are at least a cut share a factor m; when the others' sum stays
 * within (-m, m), it is 0 and so is theirs, and each part is decided alone (a row's stride
 * separating the columns inside it). A single term a * x == 0 is x == 0.
 */
bool forces_zero(std::vector<Term> t) {
  t.erase(std::remove_if(t.begin(), t.end(), [](const Term &x) { return x.a == 0 || (x.r.lo == 0 && x.r.hi == 0); }), t.end());
  if (std::none_of(t.begin(), t.end(), [](const Term &x) { return x.iteration; }) || t.size() == 1) return true;
  std::set<int64_t> cuts;
  for (const Term &x : t) cuts.insert(x.a < 0 ? -x.a : x.a);
  for (int64_t cut : cuts) {
    std::vector<Term> large, small;
    int64_t m = 0;
    for (const Term &x : t) {
      bool big = (x.a < 0 ? -x.a : x.a) >= cut;
      (big ? large : small).push_back(x);
      if (big) m = gcd64(m, x.a);
    }
    if (small.empty()) continue;
    Range s = sum_range(small);
    if (s.hi >= m || s.lo <= -m) continue;
    for (Term &x : large) x.a /= m;
    return forces_zero(small) && forces_zero(large);
  }
  return false;
}

/**
 * Whether no element of `b` that one iteration of `loop` stores is read or stored by another.
 * Each access is linear in atoms: the loop's variable v, or v / C and v % C together (loops
 * fused into v), which tell v apart; the loops inside (their own iteration in each access); and
 * atoms of the loops around, the same in every access. Two iterations meet where the difference
 * of two accesses is 0, and forces_zero shows that only equal iterations make it so (a
 * softmax's row read back in its own iteration over rows, or over vector lanes of pixels).
 */
bool iterations_apart(const Stmt &body, const BufferNode *b, const Iterations &loop) {
  if (loop.hi <= loop.lo) return true;  // one iteration
  std::vector<Expr> loads, stores;
  accesses_of(body, b, loads, stores);
  Ranges r;
  loop_ranges(body, r);
  std::multiset<std::string> names;
  std::set<std::string> inner;
  collect_names(body, names, inner);
  auto uses_inner = [&](const Expr &e) { return std::any_of(inner.begin(), inner.end(), [&](const std::string &v) { return uses_var(e, v); }); };
  // The range of an atom of the loop's variable alone: v, v / C or v % C.
  auto iteration_range = [&](const Expr &e) -> std::optional<Range> {
    if (e->kind == ExprKind::kVar) return Range{loop.lo, loop.hi};
    if (e->kind != ExprKind::kBinary || (e->op != BinOp::kDiv && e->op != BinOp::kMod) || e->args[0]->kind != ExprKind::kVar ||
        e->args[0]->name != loop.var || loop.lo < 0)
      return std::nullopt;
    auto c = as_int(e->args[1]);
    if (!c || *c <= 0) return std::nullopt;
    if (e->op == BinOp::kDiv) return Range{loop.lo / *c, loop.hi / *c};
    return Range{0, std::min(*c - 1, loop.hi)};
  };
  struct Form {
    Linear all;
    std::map<std::string, int64_t> fixed;  // the atoms of v and of the loops around, with their coefficients
    std::vector<Term> in;                  // the loops inside
  };
  std::vector<Form> forms;
  std::vector<Term> iteration_terms;
  for (const std::vector<Expr> *list : {&stores, &loads})
    for (const Expr &i : *list) {
      Form f;
      linearize(i, 1, f.all);
      for (const auto &[key, atom] : f.all.atoms) {
        const auto &[a, e] = atom;
        if (a == 0) continue;
        bool of_v = uses_var(e, loop.var), of_inner = uses_inner(e);
        if (of_inner) {
          if (of_v || e->kind != ExprKind::kVar || !r.count(e->name)) return false;
          f.in.push_back({a, r.at(e->name), false});
          continue;
        }
        f.fixed[key] = a;
        if (!of_v || !forms.empty()) continue;
        auto range = iteration_range(e);
        if (!range) return false;
        iteration_terms.push_back({a, {range->lo - range->hi, range->hi - range->lo}, true});
      }
      if (!forms.empty() && f.fixed != forms[0].fixed) return false;
      forms.push_back(std::move(f));
    }
  if (forms.empty()) return true;
  // The atoms must tell the iterations apart: v itself, or v / C with v % C.
  bool tells = false;
  for (const auto &[key, a] : forms[0].fixed) {
    const Expr &e = forms[0].all.atoms.at(key).second;
    if (e->kind == ExprKind::kVar && e->name == loop.var) tells = true;
    if (e->kind == ExprKind::kBinary && e->op == BinOp::kDiv && uses_var(e, loop.var)) {
      std::string mod = "(" + to_string(e->args[0]) + " % " + to_string(e->args[1]) + ")";
      tells |= forms[0].fixed.count(mod) > 0;
    }
  }
  if (!tells) return false;
  for (size_t s = 0; s < stores.size(); ++s)
    for (size_t x = 0; x < forms.size(); ++x) {
      std::vector<Term> t = iteration_terms;
      for (const Term &y : forms[x].in) t.push_back(y);
      for (const Term &y : forms[s].in) t.push_back({-y.a, y.r, false});
      int64_t k = forms[x].all.constant - forms[s].all.constant;
      t.push_back({1, {k, k}, false});
      if (!forces_zero(t)) return false;
    }
  return true;
}

/** The range of integer expression `e` over `r`: affine forms, and min/max of such; nullopt otherwise. */
std::optional<Range> int_range(const Expr &e, const Ranges &r) {
  if (e->type != Type::kI64) return std::nullopt;
  if (e->kind == ExprKind::kBinary && (e->op == BinOp::kMin || e->op == BinOp::kMax)) {
    auto a = int_range(e->args[0], r), b = int_range(e->args[1], r);
    if (!a || !b) return std::nullopt;
    if (e->op == BinOp::kMin) return Range{std::min(a->lo, b->lo), std::min(a->hi, b->hi)};
    return Range{std::max(a->lo, b->lo), std::max(a->hi, b->hi)};
  }
  auto a = affine_form(e);
  if (!a) return std::nullopt;
  auto out = range_of(*a, r);
  if (!out) return std::nullopt;
  return *out;
}

/** The value of condition `c` everywhere in `r`, when it is the same everywhere and known. */
std::optional<bool> decide(const Expr &c, const Ranges &r) {
  if (c->kind != ExprKind::kBinary) return std::nullopt;
  if (c->op == BinOp::kAnd || c->op == BinOp::kOr) {
    auto a = decide(c->args[0], r), b = decide(c->args[1], r);
    bool is_and = c->op == BinOp::kAnd;
    if ((a && *a != is_and) || (b && *b != is_and)) return !is_and;  // one false operand of and, one true of or
    if (a && b) return is_and;
    return std::nullopt;
  }
  if ((c->op != BinOp::kLT && c->op != BinOp::kLE) || c->args[0]->type != Type::kI64) return std::nullopt;
  auto d = int_range(c->args[0] - c->args[1], r);
  if (!d) return std::nullopt;
  int64_t limit = c->op == BinOp::kLT ? 0 : 1;  // a - b < limit
  if (d->hi < limit) return true;
  if (d->lo >= limit) return false;
  return std::nullopt;
}

/** `e` simplified over `r`: decided conditions' selects and ands, and mins and maxes of known order. */
Expr simplify_over(const Expr &e, const Ranges &r) {
  if (!e || e->args.empty()) return e;
  std::vector<Expr> args;
  bool changed = false;
  for (const Expr &a : e->args) args.push_back(simplify_over(a, r)), changed |= args.back().get() != a.get();
  Expr x = changed ? with_args(e, std::move(args)) : e;
  if (x->kind == ExprKind::kSelect) {
    if (auto d = decide(x->args[0], r)) return *d ? x->args[1] : x->args[2];
  } else if (x->kind == ExprKind::kBinary && x->op == BinOp::kAnd) {
    if (decide(x->args[0], r) == true) return x->args[1];
    if (decide(x->args[1], r) == true) return x->args[0];
  } else if (x->kind == ExprKind::kBinary && (x->op == BinOp::kMin || x->op == BinOp::kMax) && x->type == Type::kI64) {
    auto a = int_range(x->args[0], r), b = int_range(x->args[1], r);
    if (a && b) {
      bool first = x->op == BinOp::kMin ? a->hi <= b->lo : a->lo >= b->hi;
      bool second = x->op == BinOp::kMin ? b->hi <= a->lo : b->lo >= a->hi;
      if (first) return x->args[0];
      if (second) return x->args[1];
    }
  }
  return x;
}

/** The iterations t of loop variable `v` where a comparison, min or max in `e` that depends on v alone changes value at t. */
void switch_points(const Expr &e, const std::string &v, const Ranges &r, std::set<int64_t> &out) {
  if (!e) return;
  for (const Expr &a : e->args) switch_points(a, v, r, out);
  if (e->kind != ExprKind::kBinary || e->args[0]->type != Type::kI64) return;
  bool cmp = e->op == BinOp::kLT || e->op == BinOp::kLE, minmax = e->op == BinOp::kMin || e->op == BinOp::kMax;
  if (!cmp && !minmax) return;
  auto d = affine_form(e->args[0] - e->args[1]);
  if (!d || !d->coeff.count(v)) return;
  // a - b = c v + rest; a < b is d < 0, a <= b (and where a min or max switches) d - 1 < 0.
  int64_t c = d->coeff.at(v);
  Affine rest = *d;
  rest.coeff.erase(v);
  if (e->op != BinOp::kLT) rest.constant -= 1;
  // Other loops in `rest` (the phase pf of a column px * m + pf): the condition is decided for
  // all of their values on either side of the cuts made by rest's least and largest values.
  auto range = range_of(rest, r);
  if (!range) return;
  for (int64_t R : {range->lo, range->hi}) {
    // The first v at which c v + R < 0 changes value.
    if (c > 0) out.insert(-floor_div(R, c));          // ceil(-R / c): from there c v + R >= 0
    else out.insert(floor_div(R, -c) + 1);             // from there -|c| v + R < 0
  }
}

void stmt_switch_points(const Stmt &s, const std::string &v, const Ranges &r, std::set<int64_t> &out) {
  if (!s) return;
  for (const Expr &e : {s->min, s->extent, s->index, s->value}) switch_points(e, v, r, out);
  for (const Stmt &b : s->body) stmt_switch_points(b, v, r, out);
}

/** `s` with the ifs whose condition is decided over `r` replaced by their branch. */
Stmt resolve_ifs(const Stmt &s, const Ranges &r) {
  if (!s) return s;
  if (s->kind == StmtKind::kIf) {
    if (auto d = decide(s->index, r)) return *d ? resolve_ifs(s->body[0], r) : s->body.size() > 1 ? resolve_ifs(s->body[1], r) : seq({});
  }
  if (s->body.empty()) return s;
  std::vector<Stmt> body;
  for (const Stmt &b : s->body) body.push_back(resolve_ifs(b, r));
  return with_body(s, body);
}

/** `s` simplified over `r`: every expression by simplify_over, the ifs decided there by resolve_ifs. */
Stmt simplify_stmt_over(const Stmt &s, const Ranges &r) {
  return resolve_ifs(map_exprs(s, [&](const Expr &e) { return simplify_over(e, r); }), r);
}

}  // namespace

Expected<Expr> map_loads(const Expr &e, const BufferNode *b, const std::function<Expected<Expr>(const Expr &)> &fn, ExprMemo &memo) {
  if (e->args.empty() || !(reads_filter(e) & buffer_bit(b))) return e;  // no load of b below
  // Expressions are DAGs (a Winograd transform shares each partial sum among several outputs): each node is mapped once.
  if (auto hit = memo.find(e.get()); hit != memo.end()) return hit->second;
  std::vector<Expr> args;
  bool changed = false;
  for (const Expr &a : e->args) {
    AT_ASSIGN(na, map_loads(a, b, fn, memo));
    changed |= na.get() != a.get();
    args.push_back(na);
  }
  Expr out = e;
  if (changed) {
    auto copy = std::make_shared<ExprNode>(*e);
    copy->args = std::move(args);
    out = copy;
  }
  if (e->kind == ExprKind::kLoad && e->buffer.get() == b) {
    AT_ASSIGN(mapped, fn(out));
    out = mapped;
  }
  memo.emplace(e.get(), out);
  return out;
}

namespace {

/** map_stmt_loads with the memo of the nodes mapped so far. */
Expected<Stmt> map_stmt_loads_memo(const Stmt &s, const BufferNode *b, const std::function<Expected<Expr>(const Expr &)> &fn,
                                   const std::function<Expected<Stmt>(const Stmt &)> &on_store, ExprMemo &memo) {
  if (!s) return s;
  auto ex = [&](const Expr &e) { return map_loads(e, b, fn, memo); };
  switch (s->kind) {
    case StmtKind::kStore: {
      AT_ASSIGN(i, ex(s->index));
      AT_ASSIGN(v, ex(s->value));
      Stmt out = store(s->buffer, i, v);
      if (s->buffer.get() == b && on_store) return on_store(out);
      return out;
    }
    case StmtKind::kBarrier: return s;
    case StmtKind::kPrefetch: {
      if (s->buffer.get() == b) return seq({});  // a hint about memory that is no longer read there
      AT_ASSIGN(i, ex(s->index));
      return prefetch(s->buffer, i);
    }
    case StmtKind::kFor: {
      AT_ASSIGN(mn, ex(s->min));
      AT_ASSIGN(e, ex(s->extent));
      AT_ASSIGN(body, map_stmt_loads_memo(s->body[0], b, fn, on_store, memo));
      return for_loop(s->var, mn, e, s->for_kind, body);
    }
    case StmtKind::kIf: {
      AT_ASSIGN(c, ex(s->index));
      AT_ASSIGN(t, map_stmt_loads_memo(s->body[0], b, fn, on_store, memo));
      Stmt e = nullptr;
      if (s->body.size() > 1 && s->body[1]) {
        AT_ASSIGN(x, map_stmt_loads_memo(s->body[1], b, fn, on_store, memo));
        e = x;
      }
      return if_then(c, t, e);
    }
    case StmtKind::kLet: {
      AT_ASSIGN(v, ex(s->value));
      AT_ASSIGN(body, map_stmt_loads_memo(s->body[0], b, fn, on_store, memo));
      return let(s->var, v, body);
    }
    case StmtKind::kAllocate:
    case StmtKind::kSeq: {
      std::vector<Stmt> body;
      for (const Stmt &x : s->body) {
        AT_ASSIGN(nx, map_stmt_loads_memo(x, b, fn, on_store, memo));
        body.push_back(nx);
      }
      return with_body(s, std::move(body));
    }
  }
  return s;
}

/** Every expression of `s` through map_loads (each shared node once); stores to `b` through `on_store` when it is given. */
Expected<Stmt> map_stmt_loads(const Stmt &s, const BufferNode *b, const std::function<Expected<Expr>(const Expr &)> &fn,
                              const std::function<Expected<Stmt>(const Stmt &)> &on_store = nullptr) {
  ExprMemo memo;
  return map_stmt_loads_memo(s, b, fn, on_store, memo);
}

/** `s` with the allocation of `from` replaced by one of `to` (the accesses are rewritten separately). */
Stmt replace_allocation(const Stmt &s, const BufferNode *from, const Buffer &to) {
  if (!s || s->body.empty()) return s;
  std::vector<Stmt> body;
  for (const Stmt &b : s->body) body.push_back(replace_allocation(b, from, to));
  if (s->kind == StmtKind::kAllocate && s->buffer.get() == from) return allocate(to, body[0]);
  return with_body(s, std::move(body));
}

/**
 * `body` with buffer `b` widened to a slice per iteration of loop `v` (min `mn`, extent `ex`):
 * b[i] becomes b'[i * ex + v - mn] (`v` minor: a vectorized loop's lanes are contiguous) or, with
 * `major`, b'[(v - mn) * size + i] (each iteration's slice contiguous: a tile's accumulators keep
 * their vector layout when an outer loop of the tile is distributed).
 */
std::pair<Stmt, Buffer> expand_buffer(const Stmt &body, const Buffer &b, const std::string &v, int64_t mn, int64_t ex, bool major = false) {
  Buffer wide = make_buffer(b->name, b->type, b->size * ex, b->scope);
  Expr lane = mn == 0 ? var(v) : var(v) - int_imm(mn);
  auto at = [&](const Expr &i) { return major ? lane * int_imm(b->size) + i : i * int_imm(ex) + lane; };
  auto expanded = map_stmt_loads(
      body, b.get(), [&](const Expr &e) -> Expected<Expr> { return load(wide, at(e->args[0])); },
      [&](const Stmt &x) -> Expected<Stmt> { return store(wide, at(x->index), x->value); });
  return {replace_allocation(*expanded, b.get(), wide), wide};  // the rewrites cannot fail
}

Stmt expand_private(const Stmt &body, const std::string &v, int64_t mn, int64_t ex) {
  std::vector<Buffer> owned;
  std::function<void(const Stmt &)> walk = [&](const Stmt &x) {
    if (!x) return;
    if (x->kind == StmtKind::kAllocate) owned.push_back(x->buffer);
    for (const Stmt &b : x->body) walk(b);
  };
  walk(body);
  Stmt out = body;
  for (const Buffer &b : owned) out = expand_buffer(out, b, v, mn, ex).first;
  return out;
}

/** The loads of `b` in `s` (their index expressions) and the number of stores to it. */
void accesses_of(const Stmt &s, const BufferNode *b, std::vector<Expr> &loads, std::vector<Expr> &stores) {
  // A weight's `pack` walks a Winograd kernel's every stage this way, and it was a quarter of a 3x3
  // conv point's lowering: subtrees that read no `b` are skipped by their kept reads_filter (the
  // transforms' 2.5 K-node DAGs, shared by every point of the task, are filtered once), leaves
  // never enter the set, and the set is a NodeSet.
  struct Walk {
    const BufferNode *b;
    std::vector<Expr> &loads, &stores;
    NodeSet seen;  // expressions are DAGs: each shared node once
    uint64_t bit;
    void ex(const Expr &e) {
      if (e->args.empty() || !(reads_filter(e) & bit) || !seen.insert(e.get())) return;
      if (e->kind == ExprKind::kLoad && e->buffer.get() == b) loads.push_back(e->args[0]);
      for (const Expr &a : e->args) ex(a);
    }
    void st(const Stmt &x) {
      if (!x) return;
      if (x->kind == StmtKind::kStore) {
        if (x->buffer.get() == b) stores.push_back(x->index);
        ex(x->index), ex(x->value);
      }
      if (x->kind == StmtKind::kFor) ex(x->min), ex(x->extent);
      if (x->kind == StmtKind::kIf) ex(x->index);
      if (x->kind == StmtKind::kLet) ex(x->value);
      for (const Stmt &c : x->body) st(c);
    }
  } w{b, loads, stores, {}, buffer_bit(b)};
  w.st(s);
}

/** The buffers `s` (or an expression) reads and writes. */
void buffers_of(const Stmt &s, std::set<const BufferNode *> &reads, std::set<const BufferNode *> &writes) {
  std::vector<Access> stores, loads;
  std::set<const BufferNode *> inner;
  collect_accesses(s, stores, loads, inner);
  for (const Access &a : stores) writes.insert(a.buffer.get());
  for (const Access &a : loads) reads.insert(a.buffer.get());
}

/** The producer's loop space: its loops (outermost first), their extents and the store's strides. */
struct Space {
  std::string stage;
  Buffer buffer;
  std::vector<std::string> vars;
  std::vector<int64_t> extents, strides;
  int64_t offset = 0;
  Expr value;               // the element's value (one store), or null:
  Stmt body;                // the statements that compute it (a reduction's init, update and epilogue)
  bool vectorized = false;  // its innermost loop was
};

Expected<Space> producer_space(const KernelStage &st) {
  Space sp;
  sp.stage = st.name;
  auto fail = [&](const std::string &why) { return make_error("stage " + st.name + " is not a producer nest: " + why); };
  std::map<std::string, int64_t> extent;
  if (st.parallel_extent > 1) extent[st.parallel_var] = st.parallel_extent;
  Stmt cur = st.body;
  while (cur->kind == StmtKind::kFor) {
    AT_ASSIGN(mn, constant(cur->min, cur->var, "start"));
    AT_ASSIGN(ex, constant(cur->extent, cur->var, "extent"));
    if (mn != 0) return fail("loop " + cur->var + " does not start at 0");
    extent[cur->var] = ex;
    sp.vectorized = cur->for_kind == ForKind::kVectorized;
    cur = cur->body[0];
  }
  Expr index;
  if (cur->kind == StmtKind::kStore) {
    sp.buffer = cur->buffer, sp.value = cur->value, index = cur->index;
  } else {
    // Statements computing each element (a naive reduction: an accumulator set, updated by the
    // reduction's loops, its result stored): one buffer written that they do not allocate, at one
    // index, and read (an accumulation in place) only there.
    std::vector<Access> stores, loads;
    std::set<const BufferNode *> inner;
    collect_accesses(cur, stores, loads, inner);
    for (const Access &a : stores) {
      if (inner.count(a.buffer.get())) continue;
      if (!sp.buffer) sp.buffer = a.buffer, index = a.index;
      else if (a.buffer != sp.buffer) return fail("the body of its loops writes " + sp.buffer->name + " and " + a.buffer->name);
      else if (to_string(a.index) != to_string(index))
        return fail("the body of its loops writes " + sp.buffer->name + " at " + to_string(index) + " and at " + to_string(a.index));
    }
    if (!sp.buffer) return fail("the body of its loops stores nothing it does not allocate");
    for (const Access &a : loads)
      if (a.buffer == sp.buffer && to_string(a.index) != to_string(index))
        return fail("the body of its loops reads " + sp.buffer->name + " at " + to_string(a.index) + ", not the element it writes");
    sp.body = cur;
  }
  auto idx = affine_form(index);
  if (!idx) return fail("the index " + to_string(index) + " is not affine");
  std::vector<std::pair<int64_t, std::string>> dims;
  for (const auto &[v, e] : extent) {
    auto it = idx->coeff.find(v);
    if (it == idx->coeff.end() || it->second <= 0) return fail("the index " + to_string(index) + " does not increase with loop " + v);
    dims.emplace_back(it->second, v);
  }
  if (idx->coeff.size() != dims.size()) return fail("the index " + to_string(index) + " uses a variable that is not one of its loops");
  std::sort(dims.rbegin(), dims.rend());
  for (size_t d = 0; d < dims.size(); ++d) {
    sp.vars.push_back(dims[d].second);
    sp.strides.push_back(dims[d].first);
    sp.extents.push_back(extent[dims[d].second]);
    if (d > 0 && sp.strides[d - 1] < sp.strides[d] * sp.extents[d])
      return fail("the index " + to_string(index) + " is not a row-major box (loop " + sp.vars[d] + " overlaps loop " + sp.vars[d - 1] + ")");
  }
  if (sp.strides.empty() || sp.strides.back() != 1) return fail("the index " + to_string(index) + " has no unit-stride loop");
  sp.offset = idx->constant;
  return sp;
}

/**
 * `e` as c * min(max(a, 0), hi) with a affine (c = 1 without a product; either bound may be
 * missing where a partition proved it holds, hi then -1): a padded copy's read of its source,
 * clamped into the source's rows or columns so that the select around it stays in bounds.
 */
std::optional<std::tuple<Affine, int64_t, int64_t>> clamp_term(const Expr &e) {
  int64_t c = 1, hi = -1;
  Expr m = e;
  if (e->kind == ExprKind::kBinary && e->op == BinOp::kMul) {
    if (auto k = as_int(e->args[1])) c = *k, m = e->args[0];
    else if (auto k0 = as_int(e->args[0])) c = *k0, m = e->args[1];
  }
  bool bounded = false;
  while (m->kind == ExprKind::kBinary && (m->op == BinOp::kMin || m->op == BinOp::kMax)) {
    auto b = as_int(m->args[1]);
    if (!b || (m->op == BinOp::kMax && *b != 0)) return std::nullopt;
    if (m->op == BinOp::kMin) {
      if (hi != -1) return std::nullopt;
      hi = *b;
    }
    bounded = true, m = m->args[0];
  }
  auto a = affine_form(m);
  if (!bounded || !a) return std::nullopt;
  return std::make_tuple(*a, c, hi);
}

/**
 * A read of the producer's buffer at `index`, as one affine index per producer loop, each checked
 * to stay in its loop's range. With `clamped`, an index may also hold terms stride * min(max(a,
 * 0), extent - 1) of a producer loop (a padded copy's clamped read): that loop's digit is then a,
 * unchecked, and (*clamped)[k] says the read takes min(max(digit, 0), extent - 1).
 */
Expected<std::vector<Affine>> digits_of(const Expr &index, const Space &sp, const Ranges &ranges, std::vector<bool> *clamped = nullptr) {
  std::string what = "the read " + sp.buffer->name + "[" + to_string(index) + "]";
  auto h = affine_form(index);
  std::vector<std::pair<size_t, Affine>> clamps;
  if (!h && clamped) {
    // A sum of affine terms and clamped ones.
    std::vector<Expr> terms, stack{index};
    while (!stack.empty()) {
      Expr e = stack.back();
      stack.pop_back();
      if (e->kind == ExprKind::kBinary && e->op == BinOp::kAdd) stack.push_back(e->args[0]), stack.push_back(e->args[1]);
      else terms.push_back(e);
    }
    Affine rest;
    for (const Expr &t : terms) {
      if (auto a = affine_form(t)) {
        for (const auto &[v, c] : a->coeff) rest.coeff[v] += c;
        rest.constant += a->constant;
        continue;
      }
      auto ct = clamp_term(t);
      if (!ct) return make_error(what + " is not affine");
      const auto &[a, c, hi] = *ct;
      size_t k = 0;
      while (k < sp.strides.size() && (sp.strides[k] != c || (hi != -1 && sp.extents[k] != hi + 1))) ++k;
      if (k == sp.strides.size()) return make_error(what + " clamps to no producer loop's range");
      clamps.emplace_back(k, a);
    }
    h = rest;
  }
  if (!h) return make_error(what + " is not affine");
  std::vector<Affine> d(sp.vars.size());
  for (const auto &[v, c] : h->coeff) {
    size_t k = 0;
    while (k < sp.strides.size() && (c % sp.strides[k] != 0 || std::abs(c) < sp.strides[k])) ++k;
    if (k == sp.strides.size()) return make_error(what + ": the stride of " + v + " is no multiple of a producer loop's");
    d[k].coeff[v] += c / sp.strides[k];
  }
  int64_t rest = h->constant - sp.offset;
  for (size_t k = 0; k < sp.strides.size(); ++k) {
    int64_t q = floor_div(rest, sp.strides[k]);
    d[k].constant += q;
    rest -= q * sp.strides[k];
  }
  if (clamped) clamped->assign(d.size(), false);
  for (const auto &[k, a] : clamps) {
    if (!d[k].coeff.empty() || d[k].constant != 0 || (*clamped)[k]) return make_error(what + " is not affine in producer loop " + sp.vars[k]);
    d[k] = a, (*clamped)[k] = true;
  }
  for (size_t k = 0; k < d.size(); ++k) {
    auto r = range_of(d[k], ranges);
    if (!r) return make_error(what + ": " + r.error().message);
    if (clamped && (*clamped)[k]) continue;
    if (r->lo < 0 || r->hi >= sp.extents[k])
      return make_error(what + " reaches " + sp.vars[k] + " in [" + std::to_string(r->lo) + ", " + std::to_string(r->hi) +
                        "], outside the producer's [0, " + std::to_string(sp.extents[k] - 1) + "]");
  }
  return d;
}

/** `x` (the producer's value or statements) with its loops' variables replaced by the given indices. */
template <class T>
T at_indices(T x, const Space &sp, const std::vector<Expr> &at) {
  // Substitute through fresh names first, so an index that mentions a producer loop's own name is not substituted twice.
  for (size_t k = 0; k < sp.vars.size(); ++k) x = substitute(x, sp.vars[k], var("\x01" + sp.vars[k]));
  for (size_t k = 0; k < sp.vars.size(); ++k) x = substitute(x, "\x01" + sp.vars[k], at[k]);
  return x;
}

/** The producer's value at the given loop indices. */
Expr value_at(const Space &sp, const std::vector<Expr> &at) { return at_indices(sp.value, sp, at); }

struct ProducerConsumer {
  size_t p = 0, c = 0;
  Space space;
};

/** The checks compute_inline and compute_at share: the stages exist in order and the producer may move into the consumer. */
Expected<ProducerConsumer> producer_consumer(const LoweredKernel &k, const std::string &producer, const std::string &consumer) {
  ProducerConsumer pc;
  AT_ASSIGN(p, stage_index(k, producer));
  AT_ASSIGN(c, stage_index(k, consumer));
  if (p >= c) return make_error("stage " + producer + " does not run before stage " + consumer);
  AT_ASSIGN(sp, producer_space(k.stages[p]));
  const BufferNode *b = sp.buffer.get();
  if (sp.buffer->scope != BufferScope::kTemp) return make_error("stage " + producer + " writes " + b->name + ", which is not a temporary of the kernel");
  std::set<const BufferNode *> preads, pwrites;
  buffers_of(sp.body ? sp.body : store(sp.buffer, int_imm(0), sp.value), preads, pwrites);
  for (size_t i = 0; i < k.stages.size(); ++i) {
    if (i == p) continue;
    std::set<const BufferNode *> r, w;
    buffers_of(k.stages[i].body, r, w);
    if (w.count(b)) return make_error("stage " + k.stages[i].name + " also writes " + b->name);
    if (i != c && r.count(b)) return make_error("stage " + k.stages[i].name + " also reads " + b->name);
    if (i > p && i <= c)
      for (const BufferNode *x : preads)
        if (w.count(x)) return make_error("stage " + k.stages[i].name + " writes " + x->name + ", which stage " + producer + " reads");
  }
  pc.p = p, pc.c = c, pc.space = std::move(sp);
  return pc;
}

/** `k` without stage `p` and its buffer, with stage `c` replaced. */
LoweredKernel without_producer(const LoweredKernel &k, const ProducerConsumer &pc, KernelStage consumer) {
  LoweredKernel out = k;
  out.stages[pc.c] = std::move(consumer);
  out.stages.erase(out.stages.begin() + pc.p);
  out.buffers.erase(std::remove(out.buffers.begin(), out.buffers.end(), pc.space.buffer), out.buffers.end());
  return out;
}

/** The names of the loops inside `s`. */
std::set<std::string> loops_in(const Stmt &s) {
  std::multiset<std::string> loops;
  std::set<std::string> all;
  collect_names(s, loops, all);
  return {loops.begin(), loops.end()};
}

/** A name like `base` not bound in `s` (base, base_1, base_2, ...). */
std::string fresh_name(const Stmt &s, const std::string &base, std::set<std::string> &taken) {
  std::multiset<std::string> loops;
  std::set<std::string> all;
  collect_names(s, loops, all);
  std::string n = base;
  for (int i = 1; all.count(n) || taken.count(n); ++i) n = base + "_" + std::to_string(i);
  taken.insert(n);
  return n;
}

Expected<Stmt> body_at(const Space &sp, const std::vector<Expr> &at, const Buffer &local, const Expr &li, const std::string &suffix,
                       const Stmt &around, std::set<std::string> &taken) {
  Stmt b = sp.body;
  for (const std::string &l : loops_in(b)) {
    std::string to = fresh_name(around, l + suffix, taken);
    AT_ASSIGN(renamed, map_loop(b, l, [&](const Stmt &f) -> Expected<Stmt> {
      return for_loop(to, f->min, f->extent, f->for_kind, substitute(f->body[0], l, var(to)));
    }));
    b = renamed;
  }
  std::vector<Access> stores, loads;
  std::set<const BufferNode *> inner;
  collect_accesses(b, stores, loads, inner);
  std::map<const BufferNode *, Buffer> fresh;
  for (const BufferNode *x : inner) fresh[x] = make_buffer(x->name + suffix, x->type, x->size, x->scope);
  b = at_indices(replace_buffers(b, fresh), sp, at);
  return map_stmt_loads(
      b, sp.buffer.get(), [&](const Expr &) -> Expected<Expr> { return load(local, li); },
      [&](const Stmt &st) -> Expected<Stmt> { return store(local, li, st->value); });
}

/** A nest over `extents` (outermost first) around body(indices); the innermost loop vectorized when asked and 2 to 64 long. */
Stmt box_nest(const std::vector<std::string> &names, const std::vector<int64_t> &extents, bool vectorize_inner,
              const std::function<Stmt(const std::vector<Expr> &)> &body) {
  std::vector<Expr> at;
  for (const std::string &n : names) at.push_back(var(n));
  Stmt s = body(at);
  for (size_t d = names.size(); d-- > 0;) {
    bool vec = vectorize_inner && d + 1 == names.size() && extents[d] >= 2 && extents[d] <= 64;
    s = for_loop(names[d], int_imm(0), int_imm(extents[d]), vec ? ForKind::kVectorized : ForKind::kSerial, s);
  }
  return s;
}

/** Row-major strides of a box. */
std::vector<int64_t> box_strides(const std::vector<int64_t> &extents, int64_t &size) {
  std::vector<int64_t> st(extents.size());
  size = 1;
  for (size_t d = extents.size(); d-- > 0;) st[d] = size, size *= extents[d];
  return st;
}

constexpr int64_t kMaxLocalBytes = 1 << 20;

/** The body of loop `loop` in `s`, which a local buffer can be placed in: not vectorized, nor inside a vectorized loop (a box per lane). */
Expected<Stmt> scalar_loop_body(const Stmt &s, const std::string &loop) {
  AT_ASSIGN(l, find_loop(s, loop));
  if (l->for_kind == ForKind::kVectorized) return make_error("the loop is vectorized");
  if (std::string v = vectorized_around(s, loop); !v.empty()) return make_error("the loop is inside the vectorized loop " + v);
  return l->body[0];
}

/** `s` with the body of loop `name` replaced by `body`. */
Expected<Stmt> with_loop_body(const Stmt &s, const std::string &name, const Stmt &body) {
  return map_loop(s, name, [&](const Stmt &l) -> Expected<Stmt> { return for_loop(l->var, l->min, l->extent, l->for_kind, body); });
}

}  // namespace

Expected<LoweredKernel> compute_inline(const LoweredKernel &k, const std::string &producer, const std::string &consumer) {
  AT_ASSIGN(pc, producer_consumer(k, producer, consumer));
  if (pc.space.body)
    return make_error("compute_inline " + producer + " into " + consumer + ": stage " + producer +
                      " computes each element in statements (a reduction), not as one value; compute_at places it");
  const KernelStage &cs = k.stages[pc.c];
  Ranges ranges = stage_ranges(cs);
  auto body = map_stmt_loads(cs.body, pc.space.buffer.get(), [&](const Expr &ld) -> Expected<Expr> {
    AT_ASSIGN(d, digits_of(ld->args[0], pc.space, ranges));
    std::vector<Expr> at;
    for (const Affine &a : d) at.push_back(to_expr(a));
    return value_at(pc.space, at);
  });
  if (!body) return make_error("compute_inline " + producer + " into " + consumer + ": " + body.error().message);
  KernelStage out = cs;
  out.body = *body;
  return without_producer(k, pc, out);
}

Expected<LoweredKernel> compute_at(const LoweredKernel &k, const std::string &producer, const std::string &consumer, const std::string &loop) {
  AT_ASSIGN(pc, producer_consumer(k, producer, consumer));
  const KernelStage &cs = k.stages[pc.c];
  const Space &sp = pc.space;
  const BufferNode *b = sp.buffer.get();
  std::string where = "compute_at " + producer + " in " + consumer + " at " + loop + ": ";
  bool at_stage = loop == cs.parallel_var && !loop.empty();
  Stmt inside;
  if (at_stage) {
    inside = cs.body;
  } else {
    auto b = scalar_loop_body(cs.body, loop);
    if (!b) return make_error(where + b.error().message);
    inside = *b;
  }
  std::vector<Expr> all_loads, in_loads, stores;
  accesses_of(cs.body, b, all_loads, stores);
  accesses_of(inside, b, in_loads, stores);
  if (in_loads.empty()) return make_error(where + "the loop does not read " + b->name);
  if (in_loads.size() != all_loads.size()) return make_error(where + "stage " + consumer + " also reads " + b->name + " outside the loop");
  Ranges ranges = stage_ranges(cs);
  std::set<std::string> inner = loops_in(inside);
  // The box: per producer loop, the outer part of every read's index must agree; the inner parts give its extent.
  size_t D = sp.vars.size();
  // A loop of the box some read clamps (a padded copy's first or last rows, computed at a block of
  // rows): the box's element j holds the producer at min(max(outer + lo + j, 0), extent - 1), so a
  // clamped read min(max(v, 0), extent - 1) finds its element at that minus outer + lo, inside the
  // box whatever v is (an edge row computed twice instead of a row outside the producer).
  std::vector<bool> clamped_box(D, false);
  auto box_in = [&](const Space &in_space, std::vector<Affine> &outer, std::vector<Range> &box) -> Status {
    size_t n = in_space.vars.size();
    outer.assign(n, Affine{}), box.assign(n, Range{}), clamped_box.assign(D, false);
    for (size_t i = 0; i < in_loads.size(); ++i) {
      std::vector<bool> clamped;
      AT_ASSIGN(d, digits_of(in_loads[i], in_space, ranges, n == D ? &clamped : nullptr));
      for (size_t x = 0; x < clamped.size(); ++x) clamped_box[x] = clamped_box[x] || clamped[x];
      for (size_t x = 0; x < n; ++x) {
        Affine o = part(d[x], inner, false), in = part(d[x], inner, true);
        in.constant = o.constant, o.constant = 0;
        AT_ASSIGN(r, range_of(in, ranges));
        if (i == 0) outer[x] = o, box[x] = r;
        else if (!(outer[x] == o)) return make_error("reads of " + b->name + " move differently with the loops outside it (" + to_string(to_expr(outer[x])) + " and " + to_string(to_expr(o)) + ")");
        else box[x] = {std::min(box[x].lo, r.lo), std::max(box[x].hi, r.hi)};
      }
    }
    return Status::ok();
  };
  std::vector<Affine> outer;
  std::vector<Range> box;
  // The space the reads are mapped in: the producer's, or with its last two loops as one where a
  // flat tile of pixels (a 1x1 conv's rows and columns fused) reads its rows and columns as one
  // run. Where that run is whole rows, the box is those rows, every column.
  Space reads = sp;
  Status mapped = box_in(sp, outer, box);
  if (!mapped && D >= 2 && sp.strides[D - 2] == sp.extents[D - 1] * sp.strides[D - 1]) {
    Space flat = sp;
    int64_t W = sp.extents[D - 1];
    flat.vars.pop_back(), flat.strides.erase(flat.strides.end() - 2), flat.extents.pop_back(), flat.extents.back() *= W;
    std::vector<Affine> fo;
    std::vector<Range> fb;
    if (box_in(flat, fo, fb)) {
      const Affine &o = fo.back();
      const Range &r = fb.back();
      bool whole = r.lo % W == 0 && (r.hi + 1) % W == 0 && std::all_of(o.coeff.begin(), o.coeff.end(), [&](const auto &c) { return c.second % W == 0; });
      if (!whole) return make_error(where + "the reads of " + b->name + " take rows " + sp.vars[D - 2] + " and columns " + sp.vars[D - 1] + " as one run that is not whole rows of " + std::to_string(W));
      outer = fo, box = fb;
      for (auto &[v, c] : outer.back().coeff) c /= W;
      box.back() = {r.lo / W, (r.hi + 1) / W - 1};
      outer.push_back(Affine{}), box.push_back({0, W - 1});
      reads = flat, mapped = Status::ok();
    }
  }
  if (!mapped) return make_error(where + mapped.error().message);
  // A clamped read finds its element inside the box only where the box meets the producer's range
  // at every iteration of the loops outside (a block of rows past the image would not).
  for (size_t x = 0; x < D && x < outer.size(); ++x) {
    if (!clamped_box[x]) continue;
    AT_ASSIGN(o, range_of(outer[x], ranges));
    if (o.hi + box[x].lo > sp.extents[x] - 1 || o.lo + box[x].hi < 0)
      return make_error(where + "the box of " + b->name + " it reads may lie wholly outside the producer's loop " + sp.vars[x]);
  }
  std::vector<int64_t> ext(D);
  for (size_t x = 0; x < D; ++x) ext[x] = box[x].hi - box[x].lo + 1;
  int64_t size = 0;
  std::vector<int64_t> ls = box_strides(ext, size);
  if (size * 4 > kMaxLocalBytes) return make_error(where + "the box of " + b->name + " it reads is " + std::to_string(size * 4) + " bytes; at most 1 MiB is kept on the stack");
  std::set<std::string> taken;
  Buffer local = make_buffer(fresh_name(cs.body, sp.buffer->name + "_at_" + loop, taken), sp.buffer->type, size, BufferScope::kLocal);
  std::vector<std::string> names;
  for (size_t x = 0; x < D; ++x) names.push_back(fresh_name(cs.body, sp.vars[x] + "_" + loop, taken));
  std::vector<Expr> at;
  Expr li = int_imm(0);
  for (size_t x = 0; x < D; ++x) {
    Expr a = to_expr(outer[x]) + int_imm(box[x].lo) + var(names[x]);
    at.push_back(clamped_box[x] ? min(max(a, int_imm(0)), int_imm(sp.extents[x] - 1)) : a);
    li = li + var(names[x]) * ls[x];
  }
  Stmt element;
  if (!sp.body) {
    element = store(local, li, value_at(sp, at));
  } else {
    auto computed = body_at(sp, at, local, li, "_" + loop, cs.body, taken);
    if (!computed) return make_error(where + computed.error().message);
    element = *computed;
  }
  // A producer of statements keeps its box loops serial: vectorizing one (a later step) gives each
  // lane its own accumulator, which marking the loop here would not.
  Stmt fill = box_nest(names, ext, sp.vectorized && !sp.body, [&](const std::vector<Expr> &) { return element; });
  // A read's index in the box, in the space it was mapped in (rows and columns as one run: the
  // box's whole rows are contiguous in it, its first element at the first row's first column).
  std::vector<int64_t> rlo, rls;
  for (size_t x = 0; x < reads.vars.size(); ++x) rlo.push_back(box[x].lo), rls.push_back(ls[x]);
  if (reads.vars.size() < D) rlo.back() *= sp.extents[D - 1], rls.back() = ls[D - 1];
  AT_ASSIGN(body, map_stmt_loads(inside, b, [&](const Expr &ld) -> Expected<Expr> {
    std::vector<bool> clamped;
    AT_ASSIGN(d, digits_of(ld->args[0], reads, ranges, reads.vars.size() == D ? &clamped : nullptr));
    Expr li = int_imm(0);
    for (size_t x = 0; x < d.size(); ++x) {
      if (x < clamped.size() && clamped[x]) {
        Affine base = outer[x];
        base.constant += box[x].lo;
        li = li + (min(max(to_expr(d[x]), int_imm(0)), int_imm(sp.extents[x] - 1)) - to_expr(base)) * rls[x];
        continue;
      }
      Affine in = part(d[x], inner, true);
      in.constant = d[x].constant - rlo[x];
      li = li + to_expr(in) * rls[x];
    }
    return load(local, li);
  }));
  Stmt computed = allocate(local, seq({fill, body}));
  KernelStage out = cs;
  if (at_stage) {
    out.body = computed;
  } else {
    AT_ASSIGN(nb, with_loop_body(cs.body, loop, computed));
    out.body = nb;
  }
  return without_producer(k, pc, out);
}

namespace {
/**
 * The box of a buffer's elements that `accesses` (indices, inside a loop whose inner loops are
 * `inner`) touch: one dimension per distinct stride of the inner loops, largest first, 1 always
 * among them; each access's index as one digit per stride (its loops of that stride, its constant
 * split largest stride first). Every access must be affine, rise with each inner loop and move
 * alike with the loops outside (`outer`, its constant left out).
 */
struct StridedBox {
  std::vector<int64_t> strides;
  std::vector<Range> box;
  std::vector<int64_t> ext;
  Affine outer;
  std::vector<std::vector<Affine>> digits;  // per access, in the order given
  std::set<std::string> inner;
  std::string buffer;

  /** The buffer's index of element r of the box (its coordinates, largest stride first). */
  Expr global_at(const std::vector<Expr> &r) const {
    Expr gi = to_expr(outer);
    for (size_t x = 0; x < strides.size(); ++x) gi = gi + (int_imm(box[x].lo) + r[x]) * strides[x];
    return gi;
  }

  /** Where the access at `index` lands in a copy of the box with strides `ls` (its digits found again). */
  Expected<Expr> local_at(const Expr &index, const std::vector<int64_t> &ls) const {
    auto a = affine_form(index);
    if (!a) return make_error("the access " + buffer + "[" + to_string(index) + "] is not affine");
    std::vector<Affine> d = digits_of(part(*a, inner, true), a->constant);
    Expr li = int_imm(0);
    for (size_t x = 0; x < strides.size(); ++x) {
      d[x].constant -= box[x].lo;
      li = li + to_expr(d[x]) * ls[x];
    }
    return li;
  }

  std::vector<Affine> digits_of(const Affine &inner_part, int64_t constant) const {
    std::vector<Affine> d(strides.size());
    for (size_t x = 0; x < strides.size(); ++x) {
      for (const auto &[v, c] : inner_part.coeff)
        if (c == strides[x]) d[x].coeff[v] = 1;
      d[x].constant = floor_div(constant, strides[x]);
      constant -= d[x].constant * strides[x];
    }
    return d;
  }
};

Expected<StridedBox> strided_box(const std::vector<Expr> &accesses, const std::set<std::string> &inner, const Ranges &ranges,
                                 const std::string &buffer) {
  StridedBox sb;
  sb.inner = inner, sb.buffer = buffer;
  std::set<int64_t, std::greater<>> strides;
  std::vector<std::pair<Affine, int64_t>> parts;  // inner part, constant
  for (size_t i = 0; i < accesses.size(); ++i) {
    const Expr &e = accesses[i];
    auto a = affine_form(e);
    if (!a) return make_error("the access " + buffer + "[" + to_string(e) + "] is not affine");
    Affine outer = part(*a, inner, false);
    outer.constant = 0;
    if (auto r = range_of(outer, ranges); !r) return make_error("the access " + buffer + "[" + to_string(e) + "]: " + r.error().message);
    if (i == 0) sb.outer = outer;
    else if (!(outer == sb.outer)) return make_error("accesses of " + buffer + " move differently with the loops outside it");
    Affine in = part(*a, inner, true);
    for (const auto &[v, c] : in.coeff) {
      if (c <= 0) return make_error("the access " + buffer + "[" + to_string(e) + "] decreases with loop " + v);
      strides.insert(c);
    }
    parts.emplace_back(std::move(in), a->constant);
  }
  if (strides.empty() || *strides.rbegin() != 1) strides.insert(1);
  sb.strides.assign(strides.begin(), strides.end());
  size_t D = sb.strides.size();
  sb.box.resize(D);
  for (size_t i = 0; i < parts.size(); ++i) {
    sb.digits.push_back(sb.digits_of(parts[i].first, parts[i].second));
    for (size_t x = 0; x < D; ++x) {
      AT_ASSIGN(r, range_of(sb.digits[i][x], ranges));
      sb.box[x] = i == 0 ? r : Range{std::min(sb.box[x].lo, r.lo), std::max(sb.box[x].hi, r.hi)};
    }
  }
  for (size_t x = 0; x < D; ++x) sb.ext.push_back(sb.box[x].hi - sb.box[x].lo + 1);
  return sb;
}

/** The body of loop `loop` in `s`, where a local copy can go, and buffer `name` among those it stores to (`stored`) or reads, not allocated inside it. */
struct CachedBuffer {
  Stmt inside;
  Buffer buf;
  std::vector<Access> stores;  // every store in the body
};
Expected<CachedBuffer> cached_buffer(const Stmt &s, const std::string &loop, const std::string &name, bool stored, const std::string &where) {
  auto found = scalar_loop_body(s, loop);
  if (!found) return make_error(where + found.error().message);
  CachedBuffer c{*found, nullptr, {}};
  std::vector<Access> ld;
  std::set<const BufferNode *> allocated;
  collect_accesses(c.inside, c.stores, ld, allocated);
  for (const Access &a : stored ? c.stores : ld)
    if (a.buffer->name == name) c.buf = a.buffer;
  if (!c.buf) return make_error(where + (stored ? "the loop does not store to " : "the loop does not read ") + name);
  if (allocated.count(c.buf.get())) return make_error(where + name + " is allocated inside the loop");
  return c;
}
}  // namespace

Expected<KernelStage> cache_write(const KernelStage &stage, const std::string &buffer, const std::string &loop) {
  std::string where = "cache_write " + buffer + " at " + loop + " in stage " + stage.name + ": ";
  AT_ASSIGN(cached, cached_buffer(stage.body, loop, buffer, true, where));
  const Stmt inside = cached.inside;
  const Buffer buf = cached.buf;
  std::vector<Expr> loads, stores;
  accesses_of(inside, buf.get(), loads, stores);
  Ranges ranges = stage_ranges(stage);
  std::set<std::string> inner = loops_in(inside);
  std::vector<Expr> all = loads;
  all.insert(all.end(), stores.begin(), stores.end());
  auto found_box = strided_box(all, inner, ranges, buffer);
  if (!found_box) return make_error(where + found_box.error().message);
  const StridedBox &sb = *found_box;
  const std::vector<int64_t> &sv = sb.strides, &ext = sb.ext;
  const std::vector<Range> &box = sb.box;
  size_t D = sv.size();
  // The box maps one to one onto the buffer only if each stride steps over the box of the smaller ones.
  for (size_t x = 0; x + 1 < D; ++x) {
    int64_t span = 0;
    for (size_t y = x + 1; y < D; ++y) span += sv[y] * (ext[y] - 1);
    if (sv[x] <= span) return make_error(where + "the box of " + buffer + " it touches overlaps itself (stride " + std::to_string(sv[x]) + ")");
  }
  // One store must cover the whole box: then every element written back is one this iteration writes.
  bool covered = false;
  for (size_t i = loads.size(); i < all.size() && !covered; ++i) {
    covered = true;
    for (size_t x = 0; x < D && covered; ++x) {
      auto r = range_of(sb.digits[i][x], ranges);
      covered = r && r->lo == box[x].lo && r->hi == box[x].hi && sb.digits[i][x].coeff.size() <= 1;
    }
  }
  if (!covered) return make_error(where + "no store covers the whole box of " + buffer + " it touches");
  int64_t size = 0;
  std::vector<int64_t> ls = box_strides(ext, size);
  if (size * 4 > kMaxLocalBytes) return make_error(where + "the box is " + std::to_string(size * 4) + " bytes; at most 1 MiB is kept on the stack");
  std::set<std::string> taken;
  Buffer local = make_buffer(fresh_name(stage.body, buffer + "_" + loop, taken), buf->type, size, BufferScope::kLocal);
  auto global_at = [&](const std::vector<Expr> &r) { return sb.global_at(r); };
  auto local_at = [&](const Expr &index) -> Expected<Expr> {
    // The digits of this access again (the walk below meets accesses in its own order).
    auto li = sb.local_at(index, ls);
    if (!li) return make_error(where + li.error().message);
    return li;
  };
  std::vector<std::string> names;
  for (size_t x = 0; x < D; ++x) names.push_back(fresh_name(stage.body, buffer + "_c" + std::to_string(x), taken));
  auto local_index = [&](const std::vector<Expr> &r) {
    Expr li = int_imm(0);
    for (size_t x = 0; x < D; ++x) li = li + r[x] * ls[x];
    return li;
  };
  Stmt read_in = box_nest(names, ext, true, [&](const std::vector<Expr> &r) { return store(local, local_index(r), load(buf, global_at(r))); });
  // The write-back reuses the read's loop names: the same index text tells the dependence checks that it writes what was read.
  Stmt write_back = box_nest(names, ext, true, [&](const std::vector<Expr> &r) { return store(buf, global_at(r), load(local, local_index(r))); });
  AT_ASSIGN(body, map_stmt_loads(
                      inside, buf.get(),
                      [&](const Expr &e) -> Expected<Expr> {
                        AT_ASSIGN(li, local_at(e->args[0]));
                        return load(local, li);
                      },
                      [&](const Stmt &s) -> Expected<Stmt> {
                        AT_ASSIGN(li, local_at(s->index));
                        return store(local, li, s->value);
                      }));
  std::vector<Stmt> parts;
  if (!loads.empty()) parts.push_back(read_in);
  parts.push_back(body);
  parts.push_back(write_back);
  Stmt computed = allocate(local, seq(parts));
  KernelStage out = stage;
  AT_ASSIGN(nb, with_loop_body(stage.body, loop, computed));
  out.body = nb;
  return out;
}

Expected<KernelStage> cache_read(const KernelStage &stage, const std::string &buffer, const std::string &loop) {
  std::string where = "cache_read " + buffer + " at " + loop + " in stage " + stage.name + ": ";
  // Divisions and modulos the loops resolve resolved first: a blocked layout's (c / 16, c % 16)
  // with c split by 16 is (block, lane), affine.
  const Stmt whole = loop::simplify_div_mod(stage.body);
  AT_ASSIGN(cached, cached_buffer(whole, loop, buffer, false, where));
  const Stmt inside = cached.inside;
  const Buffer buf = cached.buf;
  for (const Access &a : cached.stores)
    if (a.buffer == buf) return make_error(where + "the loop writes " + buffer + " too");
  std::vector<Expr> loads, stores;
  accesses_of(inside, buf.get(), loads, stores);
  Ranges ranges = stage_ranges(stage);
  std::set<std::string> inner = loops_in(inside);
  auto found_box = strided_box(loads, inner, ranges, buffer);
  if (!found_box) return make_error(where + found_box.error().message);
  const StridedBox &sb = *found_box;
  size_t D = sb.strides.size();
  if (D < 2) return make_error(where + "the loop reads " + buffer + " along one stride only: a copy would read it as the loop does");
  // Rows of the box start on a cache line (16 floats): a tile of 16 rows is then read a column at a
  // time by whole-vector transposes (the emitter's tile columns), whatever the row's length.
  std::vector<int64_t> ls(D);
  ls[D - 1] = 1;
  for (size_t x = D - 1; x-- > 0;) ls[x] = ls[x + 1] * (x + 2 == D ? (sb.ext[D - 1] + 15) / 16 * 16 : sb.ext[x + 1]);
  int64_t size = ls[0] * sb.ext[0];
  if (size * 4 > kMaxLocalBytes) return make_error(where + "the box is " + std::to_string(size * 4) + " bytes; at most 1 MiB is kept on the stack");
  std::set<std::string> taken;
  Buffer local = make_buffer(fresh_name(whole, buffer + "_" + loop, taken), buf->type, size, BufferScope::kLocal);
  std::vector<std::string> names;
  for (size_t x = 0; x < D; ++x) names.push_back(fresh_name(whole, buffer + "_r" + std::to_string(x), taken));
  Stmt fill = box_nest(names, sb.ext, true, [&](const std::vector<Expr> &r) {
    Expr li = int_imm(0);
    for (size_t x = 0; x < D; ++x) li = li + r[x] * ls[x];
    return store(local, li, load(buf, sb.global_at(r)));
  });
  AT_ASSIGN(body, map_stmt_loads(inside, buf.get(), [&](const Expr &e) -> Expected<Expr> {
    auto li = sb.local_at(e->args[0], ls);
    if (!li) return make_error(where + li.error().message);
    return load(local, *li);
  }));
  KernelStage out = stage;
  AT_ASSIGN(nb, with_loop_body(whole, loop, allocate(local, seq({fill, body}))));
  out.body = nb;
  return out;
}

Expected<Stmt> distribute(const Stmt &s, const std::string &name) {
  AT_ASSIGN(l, find_loop(s, name));
  AT_ASSIGN(mn, constant(l->min, name, "start"));
  AT_ASSIGN(ex, constant(l->extent, name, "extent"));
  if (l->for_kind != ForKind::kSerial) return make_error("distribute: loop " + name + " is " + for_kind_name(l->for_kind));
  // Peel the allocations and lets around the statements.
  Stmt body = l->body[0];
  std::vector<Buffer> owned;
  std::vector<std::pair<std::string, Expr>> lets;
  while (body->kind == StmtKind::kAllocate || body->kind == StmtKind::kLet) {
    if (body->kind == StmtKind::kAllocate) owned.push_back(body->buffer);
    else lets.emplace_back(body->var, body->value);
    body = body->body[0];
  }
  if (body->kind != StmtKind::kSeq || body->body.size() < 2)
    return make_error("distribute: the body of loop " + name + " is not a sequence of statements");
  // Buffers allocated in the body are private to an iteration (the expansion below keeps them so); any other buffer must not carry a value between iterations.
  if (std::string why = carried_dependence(l->body[0]); !why.empty()) return make_error("distribute: loop " + name + ": " + why);
  std::vector<Buffer> wide;
  for (const Buffer &b : owned) {
    auto [nb, w] = expand_buffer(body, b, name, mn, ex, true);
    body = nb;
    wide.push_back(w);
  }
  std::vector<std::string> names{name};
  for (size_t j = 1; j < body->body.size(); ++j) names.push_back(name + "_" + std::to_string(j));
  AT_TRY(fresh_names(s, std::vector<std::string>(names.begin() + 1, names.end())));
  std::vector<Stmt> loops;
  for (size_t j = 0; j < body->body.size(); ++j) {
    Stmt piece = body->body[j];
    for (auto it = lets.rbegin(); it != lets.rend(); ++it) piece = let(it->first, it->second, piece);
    if (j > 0) piece = substitute(piece, name, var(names[j]));
    loops.push_back(for_loop(names[j], l->min, l->extent, ForKind::kSerial, piece));
  }
  Stmt out = seq(loops);
  for (auto it = wide.rbegin(); it != wide.rend(); ++it) out = allocate(*it, out);
  return map_loop(s, name, [&](const Stmt &) -> Expected<Stmt> { return out; });
}

namespace {

void conjuncts_of(const Expr &c, std::vector<Expr> &out) {
  if (c->kind == ExprKind::kBinary && c->op == BinOp::kAnd) {
    conjuncts_of(c->args[0], out);
    conjuncts_of(c->args[1], out);
    return;
  }
  out.push_back(c);
}

void vars_of(const Expr &e, std::set<std::string> &out) {
  if (!e) return;
  if (e->kind == ExprKind::kVar) out.insert(e->name);
  for (const Expr &a : e->args) vars_of(a, out);
}

bool is_float_zero(const Expr &e) { return e->kind == ExprKind::kFloat && e->float_value == 0; }

/** A store's guard: the conjuncts of its select's condition that use the loop, the others, and how to rebuild the value without the first. */
struct Guard {
  std::vector<Expr> on_loop, rest;
  std::function<Expr(const Expr &)> rebuild;  // the value with its select's condition replaced (nullptr: no condition left)
};

/**
 * The guard of `st` on loop variable `v`: st is b[i] = fmuladd(select(c, x, 0), y, b[i]) (either
 * product operand) or b[i] = select(c, value, b[i]), so it does nothing where c is false.
 */
std::optional<Guard> guard_of(const Stmt &st, const std::string &v) {
  const Expr &val = st->value;
  auto same_element = [&](const Expr &e) {
    return e->kind == ExprKind::kLoad && e->buffer.get() == st->buffer.get() && to_string(e->args[0]) == to_string(st->index);
  };
  Guard g;
  Expr cond;
  if (val->kind == ExprKind::kCall && val->name == "fmuladd" && val->args.size() == 3 && same_element(val->args[2])) {
    for (int a : {0, 1}) {
      const Expr &sel = val->args[a];
      if (sel->kind != ExprKind::kSelect || !is_float_zero(sel->args[2])) continue;
      cond = sel->args[0];
      g.rebuild = [val, a, sel](const Expr &c) {
        std::vector<Expr> args = val->args;
        args[a] = c ? select(c, sel->args[1], sel->args[2]) : sel->args[1];
        return with_args(val, args);
      };
      break;
    }
  } else if (val->kind == ExprKind::kSelect && same_element(val->args[2])) {
    cond = val->args[0];
    g.rebuild = [val](const Expr &c) { return c ? select(c, val->args[1], val->args[2]) : val->args[1]; };
  }
  if (!cond) return std::nullopt;
  std::vector<Expr> all;
  conjuncts_of(cond, all);
  for (const Expr &c : all) (uses_var(c, v) ? g.on_loop : g.rest).push_back(c);
  return g;
}

/** Every store in `s`, in order. */
void stores_in(const Stmt &s, std::vector<Stmt> &out) {
  if (!s) return;
  if (s->kind == StmtKind::kStore) out.push_back(s);
  for (const Stmt &b : s->body) stores_in(b, out);
}

}  // namespace

std::vector<Stmt> stores_of(const Stmt &s) {
  std::vector<Stmt> out;
  stores_in(s, out);
  return out;
}

bool stores_move_with(const Stmt &s, const std::string &v) { return store_not_using(s, v, true).empty(); }

Expected<Stmt> trim(const Stmt &s, const std::string &name) {
  AT_ASSIGN(l, find_loop(s, name));
  AT_ASSIGN(mn, constant(l->min, name, "start"));
  AT_ASSIGN(ex, constant(l->extent, name, "extent"));
  if (l->for_kind != ForKind::kSerial) return make_error("trim: loop " + name + " is " + for_kind_name(l->for_kind));
  std::vector<Stmt> stores;
  stores_in(l->body[0], stores);
  if (stores.empty()) return make_error("trim: loop " + name + " stores nothing");
  // Every store must do nothing where the same conditions on the loop are false.
  std::vector<Expr> conds;
  std::string key;
  for (const Stmt &st : stores) {
    auto g = guard_of(st, name);
    if (!g || g->on_loop.empty())
      return make_error("trim: the store to " + st->buffer->name + " in loop " + name + " is not an update guarded by a condition on " + name);
    std::string k;
    for (const Expr &c : g->on_loop) k += to_string(c) + ";";
    if (conds.empty()) conds = g->on_loop, key = k;
    else if (k != key) return make_error("trim: the stores in loop " + name + " are guarded by different conditions on it");
  }
  // Each condition a * v + r < 0 (or <= 0), a a constant: a bound on v from variables bound outside the loop.
  std::multiset<std::string> inner_loops;
  std::set<std::string> inner;
  collect_names(l->body[0], inner_loops, inner);
  Expr lo = int_imm(mn), hi = int_imm(mn + ex);
  for (const Expr &c : conds) {
    if (c->kind != ExprKind::kBinary || (c->op != BinOp::kLT && c->op != BinOp::kLE))
      return make_error("trim: the condition " + to_string(c) + " is not a comparison");
    Expr d = c->args[0] - c->args[1];
    auto a = stride_of(d, name);
    if (!a || *a == 0) return make_error("trim: the condition " + to_string(c) + " is not linear in " + name);
    Expr r = loop::substitute(d, name, int_imm(0));
    std::set<std::string> vs;
    vars_of(r, vs);
    for (const std::string &x : vs)
      if (inner.count(x)) return make_error("trim: the condition " + to_string(c) + " uses " + x + ", bound inside loop " + name);
    int64_t t = c->op == BinOp::kLT ? -1 : 0;  // a * v + r <= t
    if (*a > 0) hi = min(hi, (int_imm(t) - r) / int_imm(*a) + int_imm(1));
    else lo = max(lo, (r - int_imm(t) + int_imm(-*a - 1)) / int_imm(-*a));
  }
  // The conditions hold on every iteration left: the selects keep only the others.
  std::function<Stmt(const Stmt &)> rewrite = [&](const Stmt &x) -> Stmt {
    if (!x) return x;
    if (x->kind == StmtKind::kStore) {
      auto g = guard_of(x, name);
      Expr rest;
      for (const Expr &c : g->rest) rest = rest ? both(rest, c) : c;
      return store(x->buffer, x->index, g->rebuild(rest));
    }
    if (x->body.empty()) return x;
    std::vector<Stmt> body;
    for (const Stmt &b : x->body) body.push_back(rewrite(b));
    return with_body(x, std::move(body));
  };
  Stmt trimmed = for_loop(name, lo, max(int_imm(0), hi - lo), ForKind::kSerial, rewrite(l->body[0]));
  return map_loop(s, name, [&](const Stmt &) -> Expected<Stmt> { return trimmed; });
}

Expected<LoweredKernel> fission(const LoweredKernel &k, const std::string &stage, const std::string &name) {
  AT_ASSIGN(i, stage_index(k, stage));
  const KernelStage &st = k.stages[i];
  if (st.parallel_extent != 1 || (!st.parallel_var.empty() && stmt_uses_var(st.body, st.parallel_var)))
    return make_error("fission: stage " + stage + " is already parallel over " + st.parallel_var);
  if (st.body->kind != StmtKind::kFor || st.body->var != name) return make_error("fission: loop " + name + " is not the whole body of stage " + stage);
  AT_ASSIGN(pieces, distribute(st.body, name));
  // A buffer the pieces share (an allocation in the loop's body, expanded across it) would have
  // to outlive a stage: refused.
  if (pieces->kind != StmtKind::kSeq) return make_error("fission: the statements of loop " + name + " share a buffer allocated in it");
  LoweredKernel out = k;
  std::vector<KernelStage> made;
  for (size_t j = 0; j < pieces->body.size(); ++j) {
    KernelStage piece = st;
    piece.name = j ? stage + "_" + std::to_string(j) : stage;
    if (j && stage_index(k, piece.name)) return make_error("fission: there is a stage " + piece.name + " already");
    piece.body = pieces->body[j];
    made.push_back(piece);
  }
  out.stages.erase(out.stages.begin() + static_cast<std::ptrdiff_t>(i));
  out.stages.insert(out.stages.begin() + static_cast<std::ptrdiff_t>(i), made.begin(), made.end());
  return out;
}

Expected<Stmt> rfactor(const Stmt &s, const std::string &outer, const std::string &inner) {
  std::string where = "rfactor " + outer + " over " + inner + ": ";
  AT_ASSIGN(l, find_loop(s, outer));
  if (std::string v = vectorized_around(s, outer); !v.empty()) return make_error(where + "it is inside vectorized loop " + v);
  if (l->for_kind == ForKind::kVectorized || l->for_kind == ForKind::kParallel) return make_error(where + "loop " + outer + " is " + for_kind_name(l->for_kind));
  if (inner == outer) return make_error(where + "the inner loop is the outer one");
  AT_ASSIGN(in, find_loop(l, inner));
  AT_ASSIGN(extent, constant(in->extent, inner, "extent"));
  AT_ASSIGN(start, constant(in->min, inner, "start"));
  if (in->for_kind == ForKind::kVectorized || in->for_kind == ForKind::kParallel) return make_error(where + "loop " + inner + " is " + for_kind_name(in->for_kind));
  if (extent < 2 || extent > 64) return make_error(where + "loop " + inner + " has " + std::to_string(extent) + " iterations; 2 to 64 partials are kept");
  // Every store in `outer` is inside `inner` and updates one element.
  std::vector<Stmt> stores, inside;
  stores_in(l, stores);
  stores_in(in, inside);
  if (stores.empty()) return make_error(where + "loop " + outer + " stores nothing");
  if (inside.size() != stores.size()) return make_error(where + "a store in loop " + outer + " is outside loop " + inner);
  const Buffer buf = stores[0]->buffer;
  const Expr idx = stores[0]->index;
  std::multiset<std::string> bound_loops;
  std::set<std::string> bound;
  collect_names(l, bound_loops, bound);
  for (const std::string &v : bound)
    if (uses_var(idx, v)) return make_error(where + "the element " + buf->name + "[" + to_string(idx) + "] moves with " + v);
  if (buf->type != Type::kF32) return make_error(where + buf->name + " is not a float buffer");
  std::string text = to_string(idx);
  std::vector<Expr> loads, written;
  accesses_of(l, buf.get(), loads, written);
  for (const Expr &i : loads)
    if (to_string(i) != text) return make_error(where + buf->name + " is read at another element, " + to_string(i));
  std::vector<Expr> loads_inside, written_inside;
  accesses_of(in, buf.get(), loads_inside, written_inside);
  if (loads_inside.size() != loads.size()) return make_error(where + buf->name + " is read in loop " + outer + " outside loop " + inner);
  // The combine: the same for every store, with b[idx] as one operand.
  auto is_acc = [&](const Expr &e) { return e->kind == ExprKind::kLoad && e->buffer.get() == buf.get(); };
  auto combine_of = [&](const Expr &v) -> std::string {
    if (v->kind == ExprKind::kBinary && (v->op == BinOp::kAdd || v->op == BinOp::kMax || v->op == BinOp::kMin) && (is_acc(v->args[0]) != is_acc(v->args[1])))
      return v->op == BinOp::kAdd ? "add" : v->op == BinOp::kMax ? "max" : "min";
    if (v->kind == ExprKind::kCall && v->name == "fmuladd" && v->args.size() == 3 && is_acc(v->args[2]) && !is_acc(v->args[0]) && !is_acc(v->args[1])) return "add";
    return "";
  };
  std::string op;
  for (const Stmt &st : stores) {
    if (st->buffer.get() != buf.get() || to_string(st->index) != text) return make_error(where + "loop " + outer + " stores to more than one element");
    std::string c = combine_of(st->value);
    if (c.empty()) return make_error(where + "the store " + buf->name + "[" + text + "] = " + to_string(st->value) + " is not a sum, max or min into it");
    if (!op.empty() && c != op) return make_error(where + "the stores combine differently (" + op + ", " + c + ")");
    op = c;
  }
  std::set<std::string> taken;
  std::string ri = fresh_name(s, inner + "_ri", taken), rc = fresh_name(s, inner + "_rc", taken);
  Buffer part = make_buffer(buf->name + "_rf", Type::kF32, extent, BufferScope::kLocal);
  Expr lane = start == 0 ? var(inner) : var(inner) - int_imm(start);
  AT_ASSIGN(body, map_stmt_loads(
                      l, buf.get(), [&](const Expr &) -> Expected<Expr> { return load(part, lane); },
                      [&](const Stmt &x) -> Expected<Stmt> { return store(part, lane, x->value); }));
  double inf = std::numeric_limits<double>::infinity();
  Expr identity = float_imm(op == "add" ? 0.0 : op == "max" ? -inf : inf);
  auto combine = [&](const Expr &a, const Expr &b) { return op == "add" ? a + b : op == "max" ? max(a, b) : min(a, b); };
  Stmt init = for_loop(ri, int_imm(0), int_imm(extent), ForKind::kVectorized, store(part, var(ri), identity));
  Stmt fold = for_loop(rc, int_imm(0), int_imm(extent), ForKind::kUnrolled, store(buf, idx, combine(load(buf, idx), load(part, var(rc)))));
  Stmt out = allocate(part, seq({init, body, fold}));
  return map_loop(s, outer, [&](const Stmt &) -> Expected<Stmt> { return out; });
}

Expected<LoweredKernel> pack(const LoweredKernel &k, const std::string &buffer, const std::vector<int64_t> &dims, int64_t block) {
  std::string where = "pack " + buffer + ": ";
  int p = -1;
  for (int i = 0; i < k.num_params; ++i)
    if (k.buffers[i]->name == buffer) p = i;
  if (p < 0) return make_error(where + "there is no argument " + buffer);
  // A Winograd-transformed weight still in its plain layout [xi][c][o] (packed with one block of
  // all O channels) is re-blocked instead: dims are then that layout's {a * a, C, O}.
  int winograd = -1;
  for (size_t i = 0; i < k.packings.size(); ++i)
    if (k.packings[i].param == p) {
      const WeightPacking &w = k.packings[i];
      if (w.kind != WeightPacking::kWinograd || dims.size() != 3 || w.block != dims[2]) return make_error(where + "it is already packed");
      winograd = static_cast<int>(i);
    }
  if (winograd < 0 && dims.size() != 2 && dims.size() != 4) return make_error(where + "only conv (4-d) and dense (2-d) weights are packed");
  if (winograd >= 0 && k.packings[winograd].block == block) return make_error(where + "it is already in blocks of " + std::to_string(block));
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  // The argument holds the weight as the graph gives it (a Winograd weight's 3 x 3 taps become a * a values).
  int64_t holds = winograd < 0 ? k.buffers[p]->size : k.buffers[p]->size / 9 * (k.packings[winograd].tile + 2) * (k.packings[winograd].tile + 2);
  if (n != holds) return make_error(where + "its shape holds " + std::to_string(n) + " elements, the argument " + std::to_string(holds));
  size_t blocked = winograd >= 0 ? 2 : 0;  // the dimension split into blocks: the channels o of [xi][c][o], else the first
  if (block < 1 || dims[blocked] % block) return make_error(where + "block " + std::to_string(block) + " does not divide " + std::to_string(dims[blocked]));
  Space sp;
  sp.buffer = k.buffers[p];
  int64_t stride = 1;
  sp.strides.resize(dims.size());
  for (size_t d = dims.size(); d-- > 0;) sp.strides[d] = stride, stride *= dims[d], sp.vars.insert(sp.vars.begin(), "d" + std::to_string(d));
  sp.extents = dims;
  int64_t rest = n / dims[0];
  LoweredKernel out = k;
  for (KernelStage &st : out.stages) {
    std::vector<Expr> loads, stores;
    accesses_of(st.body, sp.buffer.get(), loads, stores);
    if (!stores.empty()) return make_error(where + "stage " + st.name + " writes it");
    if (loads.empty()) continue;
    Ranges ranges = stage_ranges(st);
    auto body = map_stmt_loads(st.body, sp.buffer.get(), [&](const Expr &ld) -> Expected<Expr> {
      AT_ASSIGN(d, digits_of(ld->args[0], sp, ranges));
      // The blocked index as block * outer + inner, inner in [0, block).
      Affine outer, inner;
      for (const auto &[v, c] : d[blocked].coeff) (c % block == 0 ? outer.coeff[v] : inner.coeff[v]) = c % block == 0 ? c / block : c;
      outer.constant = floor_div(d[blocked].constant, block);
      inner.constant = d[blocked].constant - outer.constant * block;
      AT_ASSIGN(r, range_of(inner, ranges));
      if (r.lo < 0 || r.hi >= block)
        return make_error("the read " + buffer + "[" + to_string(ld->args[0]) + "]: its " + (blocked ? "last" : "first") + " index is not a multiple of " +
                          std::to_string(block) + " plus a part in [0, " + std::to_string(block) + ")");
      if (blocked)  // [xi][c][o] -> [xi][o / block][c][o % block]
        return load(sp.buffer, (((to_expr(d[0]) * (dims[2] / block) + to_expr(outer)) * dims[1] + to_expr(d[1])) * block) + to_expr(inner));
      Expr flat = int_imm(0);
      for (size_t x = 1; x < d.size(); ++x) flat = flat + to_expr(d[x]) * sp.strides[x];
      return load(sp.buffer, ((to_expr(outer) * rest + flat) * block) + to_expr(inner));
    });
    if (!body) return make_error(where + body.error().message);
    st.body = *body;
  }
  if (winograd >= 0) out.packings[winograd].block = block;
  else out.packings.push_back({p, dims.size() == 4 ? WeightPacking::kOIHWToOIHWo : WeightPacking::kNKToNKn, block});
  return out;
}

Expected<Stmt> prefetch_stream(const Stmt &s, const std::string &name, const Buffer &buffer, int64_t distance) {
  AT_ASSIGN(l, find_loop(s, name));
  std::vector<Expr> loads, stores;
  accesses_of(l->body[0], buffer.get(), loads, stores);
  if (loads.empty()) return make_error("prefetch: loop " + name + " does not read " + buffer->name);
  // The first read's index with the loops inside at their start, and the span the body reads.
  Ranges inner;
  loop_ranges(l->body[0], inner);
  auto a = affine_form(loads[0]);
  if (!a) return make_error("prefetch: the read " + buffer->name + "[" + to_string(loads[0]) + "] is not affine");
  Affine base = *a, span;
  for (const auto &[v, c] : a->coeff)
    if (inner.count(v)) span.coeff[v] = c, base.coeff.erase(v), base.constant += c * inner[v].lo;
  for (auto &[v, c] : span.coeff) span.constant -= c * inner[v].lo;
  AT_ASSIGN(r, range_of(span, inner));
  if (r.lo < 0 || r.hi >= 4096) return make_error("prefetch: loop " + name + " reads " + buffer->name + " over more than 4096 elements");
  std::vector<Stmt> body{l->body[0]};
  for (int64_t at = 0; at <= r.hi; at += 16) body.push_back(prefetch(buffer, to_expr(base) + int_imm(distance + at)));
  return with_loop_body(s, name, seq(body));
}

void loops_of(const Stmt &s, std::vector<std::pair<std::string, int64_t>> &out) {
  if (!s) return;
  if (s->kind == StmtKind::kFor) out.emplace_back(s->var, as_int(s->extent).value_or(0));
  for (const Stmt &b : s->body) loops_of(b, out);
}

Stmt simplify_over_loops(const Stmt &s) {
  Ranges r;
  loop_ranges(s, r);
  return simplify_stmt_over(s, r);
}

Expected<Stmt> partition(const Stmt &s, const std::string &name) {
  AT_ASSIGN(l, find_loop(s, name));
  AT_ASSIGN(mn, constant(l->min, name, "start"));
  AT_ASSIGN(ex, constant(l->extent, name, "extent"));
  // An unrolled loop's parts stay unrolled (a register tile's edge pixels from its inside ones).
  if (l->for_kind != ForKind::kSerial && l->for_kind != ForKind::kUnrolled)
    return make_error("partition: loop " + name + " is already " + for_kind_name(l->for_kind));
  // Each range's body simplified for it (the ranges of every loop around and inside known);
  // neighbours that simplify to the same body are one part (a min or max whose arguments are
  // equal at its switch point gives a cut either side of it).
  Ranges outer;
  loop_ranges(s, outer);
  std::set<int64_t> points;
  stmt_switch_points(l->body[0], name, outer, points);
  std::vector<int64_t> cuts{mn};
  for (int64_t t : points)
    if (t > mn && t < mn + ex) cuts.push_back(t);
  cuts.push_back(mn + ex);
  std::vector<int64_t> kept{mn};
  std::vector<Stmt> bodies;
  for (size_t k = 0; k + 1 < cuts.size(); ++k) {
    Ranges r = outer;
    r[name] = {cuts[k], cuts[k + 1] - 1};
    Stmt body = simplify_stmt_over(l->body[0], r);
    // The same body: hashes first, the text only to confirm an equal hash (printing every
    // neighbour was a quarter of a partition step).
    if (!bodies.empty() && structural_hash(body) == structural_hash(bodies.back()) && to_string(body) == to_string(bodies.back())) {
      kept.back() = cuts[k + 1];
      continue;
    }
    bodies.push_back(body);
    kept.push_back(cuts[k + 1]);
  }
  cuts = kept;
  if (bodies.size() < 2) return make_error("partition: no condition in loop " + name + "'s body changes inside its range");
  size_t largest = 0;
  for (size_t k = 0; k + 1 < cuts.size(); ++k)
    if (cuts[k + 1] - cuts[k] > cuts[largest + 1] - cuts[largest]) largest = k;
  std::vector<std::string> fresh;
  for (size_t k = 0; k + 1 < cuts.size(); ++k)
    if (k != largest) fresh.push_back(name + "_b" + std::to_string(k));
  AT_TRY(fresh_names(s, fresh));
  return map_loop(s, name, [&](const Stmt &) -> Expected<Stmt> {
    std::vector<Stmt> parts;
    for (size_t k = 0; k + 1 < cuts.size(); ++k) {
      Stmt body = bodies[k];
      std::string v = k == largest ? name : name + "_b" + std::to_string(k);
      body = substitute(body, name, var(v) + int_imm(cuts[k]));
      if (k != largest) body = rename_loops(body, "_" + name + "b" + std::to_string(k));
      parts.push_back(for_loop(v, int_imm(0), int_imm(cuts[k + 1] - cuts[k]), l->for_kind, body));
    }
    return seq(parts);
  });
}

namespace {

/** Each access to a buffer that `s` does not allocate: the buffer, the index, and whether it is a store. */
struct IndexedAccess {
  const BufferNode *buffer;
  Expr index;
  bool store;
};

void indexed_accesses(const Stmt &s, std::vector<IndexedAccess> &out) {
  std::set<const BufferNode *> reads, writes;
  buffers_of(s, reads, writes);
  std::function<void(const Stmt &)> walk = [&](const Stmt &x) {
    if (!x) return;
    if (x->kind == StmtKind::kAllocate) reads.erase(x->buffer.get()), writes.erase(x->buffer.get());
    for (const Stmt &b : x->body) walk(b);
  };
  walk(s);
  for (const BufferNode *b : writes) reads.insert(b);
  for (const BufferNode *b : reads) {
    std::vector<Expr> loads, stores;
    accesses_of(s, b, loads, stores);
    for (const Expr &i : loads) out.push_back({b, i, false});
    for (const Expr &i : stores) out.push_back({b, i, true});
  }
}

/**
 * Why statements `a` and `b` (siblings of one sequence) may not swap, or "": a buffer one writes
 * that the other reads or writes at an element both may reach. Indices are compared as affine
 * forms over the loops inside the two statements (`inner`, ranges `r`), the variables around them
 * equal on both sides; an index that is not affine in them, or that differs in the outer
 * variables, counts as reaching every element.
 */
std::string swap_dependence(const Stmt &a, const Stmt &b, const Ranges &r) {
  std::vector<IndexedAccess> xa, xb;
  indexed_accesses(a, xa);
  indexed_accesses(b, xb);
  std::multiset<std::string> loops;
  std::set<std::string> inner;
  collect_names(a, loops, inner);
  collect_names(b, loops, inner);
  for (const IndexedAccess &x : xa)
    for (const IndexedAccess &y : xb) {
      if (x.buffer != y.buffer || (!x.store && !y.store)) continue;
      auto why = [&] { return x.buffer->name + "[" + to_string(x.index) + "] and " + y.buffer->name + "[" + to_string(y.index) + "]"; };
      auto fx = affine_form(x.index), fy = affine_form(y.index);
      if (!fx || !fy) return why() + " are not affine";
      if (part(*fx, inner, false).coeff != part(*fy, inner, false).coeff) return why() + " differ in the loops around them";
      Affine ix = part(*fx, inner, true), iy = part(*fy, inner, true);
      ix.constant = fx->constant, iy.constant = fy->constant;
      auto rx = range_of(ix, r), ry = range_of(iy, r);
      if (!rx || !ry) return why() + ": " + (rx ? ry.error().message : rx.error().message);
      if (rx->lo <= ry->hi && ry->lo <= rx->hi) return why() + " may meet";
    }
  return "";
}

}  // namespace

Expected<Stmt> sink(const Stmt &s, const std::string &name) {
  AT_TRY(find_loop(s, name));
  Ranges r;
  loop_ranges(s, r);
  std::string refused;
  bool found = false;
  std::function<Stmt(const Stmt &)> walk = [&](const Stmt &x) -> Stmt {
    if (!x) return x;
    if (x->kind == StmtKind::kSeq) {
      auto at = std::find_if(x->body.begin(), x->body.end(), [&](const Stmt &c) { return c->kind == StmtKind::kFor && c->var == name; });
      if (at != x->body.end()) {
        found = true;
        std::vector<Stmt> body;
        for (auto it = x->body.begin(); it != x->body.end(); ++it) {
          if (it == at) continue;
          if (it > at)
            if (std::string why = swap_dependence(*at, *it, r); !why.empty() && refused.empty()) refused = why;
          body.push_back(*it);
        }
        body.push_back(*at);
        return seq(body);
      }
    }
    std::vector<Stmt> body;
    for (const Stmt &b : x->body) body.push_back(walk(b));
    return x->body.empty() ? x : with_body(x, body);
  };
  Stmt out = walk(s);
  if (!found) return make_error("sink: loop " + name + " is not a statement of a sequence");
  if (!refused.empty()) return make_error("sink: loop " + name + " cannot move after the statements that follow it: " + refused);
  return out;
}

}  // namespace autotune
