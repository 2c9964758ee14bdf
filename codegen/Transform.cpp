#include "codegen/Transform.h"

#include <functional>
#include <map>
#include <set>

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
    case StmtKind::kPrefetch: return s;
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
  std::string index;
};

void collect_expr(const Expr &e, std::vector<Access> &loads) {
  if (e->kind == ExprKind::kLoad) loads.push_back({e->buffer, to_string(e->args[0])});
  for (const Expr &a : e->args) collect_expr(a, loads);
}

/** Every store and load in `s`, and the buffers allocated inside it (private to an iteration). */
void collect_accesses(const Stmt &s, std::vector<Access> &stores, std::vector<Access> &loads, std::set<const BufferNode *> &inner) {
  if (!s) return;
  switch (s->kind) {
    case StmtKind::kStore:
      stores.push_back({s->buffer, to_string(s->index)});
      collect_expr(s->index, loads);
      collect_expr(s->value, loads);
      return;
    case StmtKind::kPrefetch: return;  // a hint: reads nothing
    case StmtKind::kFor:
      collect_expr(s->min, loads);
      collect_expr(s->extent, loads);
      break;
    case StmtKind::kIf: collect_expr(s->index, loads); break;
    case StmtKind::kLet: collect_expr(s->value, loads); break;
    case StmtKind::kAllocate: inner.insert(s->buffer.get()); break;
    case StmtKind::kSeq: break;
  }
  for (const Stmt &b : s->body) collect_accesses(b, stores, loads, inner);
}

/**
 * Why iterations of `body` may not be reordered, or "": a buffer it writes (and did not allocate
 * inside) is read at an index it does not write, so one iteration may read what another wrote.
 */
std::string carried_dependence(const Stmt &body) {
  std::vector<Access> stores, loads;
  std::set<const BufferNode *> inner;
  collect_accesses(body, stores, loads, inner);
  std::map<const BufferNode *, std::set<std::string>> written;
  for (const Access &a : stores)
    if (!inner.count(a.buffer.get())) written[a.buffer.get()].insert(a.index);
  for (const Access &a : loads) {
    auto it = written.find(a.buffer.get());
    if (it != written.end() && !it->second.count(a.index))
      return a.buffer->name + " is written and read at another index (" + a.buffer->name + "[" + a.index + "])";
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

}  // namespace

Stmt substitute(const Stmt &s, const std::string &v, const Expr &value) {
  if (!s) return s;
  switch (s->kind) {
    case StmtKind::kFor: {
      Expr mn = loop::substitute(s->min, v, value), ex = loop::substitute(s->extent, v, value);
      Stmt body = s->var == v ? s->body[0] : substitute(s->body[0], v, value);
      return for_loop(s->var, mn, ex, s->for_kind, body);
    }
    case StmtKind::kStore: return store(s->buffer, loop::substitute(s->index, v, value), loop::substitute(s->value, v, value));
    case StmtKind::kPrefetch: return prefetch(s->buffer, loop::substitute(s->index, v, value));
    case StmtKind::kAllocate: return allocate(s->buffer, substitute(s->body[0], v, value));
    case StmtKind::kSeq: {
      std::vector<Stmt> body;
      for (const Stmt &b : s->body) body.push_back(substitute(b, v, value));
      return seq(std::move(body));
    }
    case StmtKind::kIf:
      return if_then(loop::substitute(s->index, v, value), substitute(s->body[0], v, value),
                     s->body.size() > 1 ? substitute(s->body[1], v, value) : nullptr);
    case StmtKind::kLet:
      return let(s->var, loop::substitute(s->value, v, value), s->var == v ? s->body[0] : substitute(s->body[0], v, value));
  }
  return s;
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

Expected<Stmt> split(const Stmt &s, const std::string &name, int64_t factor, const std::string &outer, const std::string &inner) {
  AT_ASSIGN(l, find_loop(s, name));
  AT_ASSIGN(mn, constant(l->min, name, "start"));
  AT_ASSIGN(ex, constant(l->extent, name, "extent"));
  if (factor < 1 || factor > ex) return make_error("loop " + name + ": split factor " + std::to_string(factor) + " is not in [1, " + std::to_string(ex) + "]");
  std::vector<std::string> names{outer, inner, inner + "_tail"};
  if (ex % factor) {
    std::multiset<std::string> inside;
    std::set<std::string> all;
    collect_names(l->body[0], inside, all);
    for (const std::string &n : inside) names.push_back(n + "_tail");
  }
  AT_TRY(fresh_names(s, names));
  return map_loop(s, name, [&](const Stmt &x) -> Expected<Stmt> {
    Expr at = int_imm(mn) + var(outer) * factor + var(inner);
    Stmt tiles = for_loop(outer, int_imm(0), int_imm(ex / factor), ForKind::kSerial,
                          for_loop(inner, int_imm(0), int_imm(factor), x->for_kind, substitute(x->body[0], name, at)));
    if (ex % factor == 0) return tiles;
    // The tail's copy of the loops inside gets its own names (k becomes k_tail): later steps
    // transform the tiles, and the remainder runs as it was.
    Stmt tail = for_loop(inner + "_tail", int_imm(0), int_imm(ex % factor), x->for_kind == ForKind::kVectorized ? ForKind::kSerial : x->for_kind,
                         rename_loops(substitute(x->body[0], name, int_imm(mn + ex / factor * factor) + var(inner + "_tail")), "_tail"));
    return seq({tiles, tail});
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
    Stmt body = substitute(i->body[0], inner, int_imm(imin) + var(fused) % int_imm(iext));
    body = substitute(body, outer, int_imm(omin) + var(fused) / int_imm(iext));
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

Expected<Stmt> vectorize(const Stmt &s, const std::string &name) {
  AT_ASSIGN(l, find_loop(s, name));
  AT_ASSIGN(ex, constant(l->extent, name, "extent"));
  if (ex < 2 || ex > 64) return make_error("vectorize: loop " + name + " has " + std::to_string(ex) + " iterations; vectors have 2 to 64 lanes");
  if (l->for_kind != ForKind::kSerial) return make_error("vectorize: loop " + name + " is already " + for_kind_name(l->for_kind));
  const Stmt &body = l->body[0];
  if (std::string st = store_not_using(body, name, false); !st.empty())
    return make_error("vectorize: loop " + name + ": the store to " + st + " does not move with it (lanes would write one element)");
  if (std::string use = scalar_use_of(body, name); !use.empty())
    return make_error("vectorize: loop " + name + ": " + use + " depends on it and must stay scalar");
  if (std::string why = carried_dependence(body); !why.empty()) return make_error("vectorize: loop " + name + ": " + why);
  return map_loop(s, name, [](const Stmt &x) -> Expected<Stmt> { return for_loop(x->var, x->min, x->extent, ForKind::kVectorized, x->body[0]); });
}

Expected<KernelStage> parallelize(const KernelStage &stage, const std::string &name) {
  if (stage.parallel_extent != 1) return make_error("parallel: stage " + stage.name + " is already parallel over " + stage.parallel_var);
  const Stmt &l = stage.body;
  if (l->kind != StmtKind::kFor || l->var != name) return make_error("parallel: loop " + name + " is not the whole body of stage " + stage.name);
  AT_ASSIGN(mn, constant(l->min, name, "start"));
  AT_ASSIGN(ex, constant(l->extent, name, "extent"));
  if (l->for_kind != ForKind::kSerial) return make_error("parallel: loop " + name + " is " + for_kind_name(l->for_kind));
  if (std::string st = store_not_using(l->body[0], name, true); !st.empty())
    return make_error("parallel: loop " + name + ": the store to " + st + " does not depend on it (threads would race)");
  if (std::string why = carried_dependence(l->body[0]); !why.empty()) return make_error("parallel: loop " + name + ": " + why);
  KernelStage out = stage;
  out.parallel_var = name;
  out.parallel_extent = ex;
  out.body = mn == 0 ? l->body[0] : substitute(l->body[0], name, var(name) + int_imm(mn));
  return out;
}

}  // namespace autotune
