#pragma once
// The loop IR: what a fused group becomes before LLVM. Expressions over int64 indices and
// float32 values; statements are loops, stores into buffers, local allocations and branches.
// Nodes are immutable and shared; builders fold constants so printed IR stays readable.
//
// Vectorization is a loop kind, as in Halide: a `vectorized` loop of constant extent L is
// emitted as L-lane vector code; each load and store inside it becomes a vector access, a
// scalar access broadcast, or per-lane accesses, decided from the stride of its index in the
// loop variable (stride_of). `unrolled` loops are emitted once per iteration. A kernel's
// outermost loop may be `parallel`: the runtime splits its range across threads.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace autotune::loop {

enum class Type { kF32, kI64, kBool };

enum class BufferScope {
  kParam,  // a kernel argument: a graph value or a weight
  kTemp,   // lives across the stages of one kernel call; the runtime allocates it
  kLocal,  // private to one iteration of a stage's parallel loop (stack); in a GPU kernel's thread loop, to one thread
  kShared, // a GPU kernel's block-shared memory (allocated inside its thread loop, shared by the block's threads);
           // serialized on the CPU, private to one iteration of the parallel loop over blocks, like kLocal
};

struct BufferNode {
  std::string name;
  Type type = Type::kF32;
  int64_t size = 0;  // elements
  BufferScope scope = BufferScope::kParam;
  /** Bytes of memory the buffer needs: its element count times the size of its type. */
  size_t bytes() const { return static_cast<size_t>(size) * (type == Type::kI64 ? 8 : type == Type::kBool ? 1 : 4); }
};
using Buffer = std::shared_ptr<const BufferNode>;
Buffer make_buffer(std::string name, Type type, int64_t size, BufferScope scope);

/**
 * A node's structural hash, computed on first use (structural_hash) and kept: nodes are immutable
 * and shared, so a stage that many kernels share (a replayed prefix, an unvaried transform) is
 * hashed once. 0 means "not yet"; a copy starts at 0 (a copied node is about to be changed).
 * Threads that hash one node at once store the same value.
 */
struct HashSlot {
  mutable std::atomic<uint64_t> value{0};
  HashSlot() = default;
  HashSlot(const HashSlot &) {}
  HashSlot &operator=(const HashSlot &) {
    value.store(0, std::memory_order_relaxed);
    return *this;
  }
};

enum class ExprKind { kInt, kFloat, kVar, kBinary, kSelect, kLoad, kCast, kCall };
enum class BinOp { kAdd, kSub, kMul, kDiv, kMod, kMin, kMax, kLT, kLE, kEQ, kNE, kAnd, kOr };

struct ExprNode;
using Expr = std::shared_ptr<const ExprNode>;

struct ExprNode {
  ExprKind kind;
  Type type;
  int64_t int_value = 0;     // kInt
  double float_value = 0;    // kFloat
  std::string name;          // kVar: variable; kCall: intrinsic (exp, sqrt, fmuladd, floor)
  BinOp op = BinOp::kAdd;    // kBinary
  std::vector<Expr> args;    // operands; kLoad: {index}; kSelect: {cond, a, b}; kCast: {value}
  Buffer buffer;             // kLoad
  HashSlot hash;             // structural_hash's, kept
  HashSlot reads;            // reads_filter's, kept
  HashSlot vars;             // vars_filter's, kept
};

/**
 * The buffers the loads at and below `e` read, as a 63-bit Bloom filter (buffer_bit of each),
 * computed on first use and kept in the node like its hash. A walk looking for one buffer's loads
 * skips a subtree whose filter lacks the buffer's bit; one that looks for loads skips a filter of 0.
 */
uint64_t reads_filter(const Expr &e);
inline uint64_t buffer_bit(const void *buffer) {
  return 1ULL << ((reinterpret_cast<uintptr_t>(buffer) >> 4) * 0x9E3779B97F4A7C15ULL >> 32) % 63;
}

/**
 * The variables at and below `e`, as a 63-bit Bloom filter (var_bit of each name), kept in the
 * node like reads_filter. A substitution skips a subtree whose filter lacks its variables' bits:
 * the weights' indices, constants and whatever else does not use the loop being rewritten.
 */
uint64_t vars_filter(const Expr &e);
uint64_t var_bit(const std::string &name);

Expr int_imm(int64_t v);
Expr float_imm(double v);
Expr var(const std::string &name);  // int64 loop or let variable
Expr binary(BinOp op, Expr a, Expr b);
Expr select(Expr cond, Expr a, Expr b);
Expr load(Buffer b, Expr index);
Expr cast(Type t, Expr v);
Expr call(const std::string &fn, std::vector<Expr> args, Type t = Type::kF32);
Expr min(Expr a, Expr b);
Expr max(Expr a, Expr b);
/** Logical and (a named function: an overloaded && would also capture null checks on Expr). */
Expr both(Expr a, Expr b);

Expr operator+(Expr a, Expr b);
Expr operator-(Expr a, Expr b);
Expr operator*(Expr a, Expr b);
Expr operator/(Expr a, Expr b);  // integers: floor division (indices here are never negative where it matters)
Expr operator%(Expr a, Expr b);  // integers: floor modulo
Expr operator<(Expr a, Expr b);
Expr operator<=(Expr a, Expr b);
Expr operator==(Expr a, Expr b);
Expr operator+(Expr a, int64_t b);
Expr operator*(Expr a, int64_t b);

/** a / b rounded toward negative infinity (what kDiv computes on integers). */
int64_t floor_div(int64_t a, int64_t b);

/** Constant value of an int expression, if it is one. */
std::optional<int64_t> as_int(const Expr &e);
/**
 * The value of integer expression `e` with variables bound by `vars` (floor division and modulo,
 * comparisons as 0/1), or nullopt: an unbound variable, a load, a float, a division by zero.
 */
std::optional<int64_t> evaluate(const Expr &e, const std::map<std::string, int64_t> &vars);
/** Calls `fn` on `e` and on every node below it, parents first (a tree walk: a shared node once per path). */
void for_each_node(const Expr &e, const std::function<void(const Expr &)> &fn);
/** Does `e` mention variable `v`? */
bool uses_var(const Expr &e, const std::string &v);
/**
 * The constant c with e(v + 1) - e(v) == c for all v, when e is affine in v (0 when e does not
 * depend on v); nullopt otherwise. Decides how a vectorized access is emitted.
 */
std::optional<int64_t> stride_of(const Expr &e, const std::string &v);
/**
 * A positive k that provably divides every value of the integer expression `e` (1 when nothing is
 * known), where each variable of `vars` is a multiple of its entry and the others of 1: sums take
 * the gcd, products multiply, constants are themselves (0 divides by anything: a large power of
 * two). The emitter's alignment of a vector access: its first lane's index a multiple of 4 floats
 * in a 64-byte aligned buffer is a 16-byte aligned load (one `ld.global.v4.f32` on the GPU).
 */
int64_t known_multiple(const Expr &e, const std::map<std::string, int64_t> &vars = {});
/** `e` with arguments `args` (same kind, operator, buffer, function and type), rebuilt by the builders above (constants re-folded). */
Expr with_args(const Expr &e, std::vector<Expr> args);
/**
 * One rewrite's results by node. An inlined producer makes an expression a DAG (a Winograd
 * transform's 2.5 K nodes stand for 40 K as a tree): with a memo shared over a whole statement,
 * each shared node is rewritten once and stays shared. A memo serves one rewrite only (one
 * variable and value), and the expressions it was filled from must outlive it.
 */
using ExprMemo = std::unordered_map<const ExprNode *, Expr>;

/**
 * The nodes a walk over a DAG has visited (each shared node walked once): open addressing on the
 * pointers, no allocation per node. std::unordered_set allocated a node per insert, half of the
 * walk that finds a weight's reads in a Winograd kernel's 2.5 K-node transforms.
 */
class NodeSet {
 public:
  /** True if `p` was not in the set (and is now). */
  bool insert(const void *p) {
    if ((size_ + 1) * 2 > slots_.size()) grow();
    size_t mask = slots_.size() - 1;
    for (size_t i = hash(p) & mask;; i = (i + 1) & mask) {
      if (slots_[i] == p) return false;
      if (!slots_[i]) {
        slots_[i] = p, ++size_;
        return true;
      }
    }
  }

 private:
  static size_t hash(const void *p) { return static_cast<size_t>((reinterpret_cast<uintptr_t>(p) >> 4) * 0x9E3779B97F4A7C15ull >> 20); }
  void grow() {
    std::vector<const void *> old = std::move(slots_);
    slots_.assign(std::max<size_t>(64, old.size() * 2), nullptr);
    size_ = 0;
    for (const void *p : old)
      if (p) insert(p);
  }
  std::vector<const void *> slots_;
  size_t size_ = 0;
};

/** `e` with variable `v` replaced by `value`, re-folded. */
Expr substitute(const Expr &e, const std::string &v, const Expr &value, ExprMemo *memo = nullptr);

/**
 * `e` with each variable of `values` replaced by its value, and every sum among the nodes that
 * changed that holds c * B * (x / B) + c * (x % B) rewritten to c * x (floor division and modulo:
 * the identity holds for every x); `e` itself (the same node) where nothing changed. Fusing loops
 * i (extent A) and j (extent B) into f substitutes i = f / B and j = f % B in one walk, and an
 * access i * B + j then reads f again: stride 1 in f, so vectorizing f reads contiguous lanes
 * instead of gathering.
 */
Expr substitute_and_fold(const Expr &e, const std::map<std::string, Expr> &values, ExprMemo &memo);


/** An integer expression as sum(coeff[v] * v) + constant; no zero coefficients are kept. */
struct Affine {
  std::map<std::string, int64_t> coeff;
  int64_t constant = 0;
  bool operator==(const Affine &o) const { return coeff == o.coeff && constant == o.constant; }
};
/** `e` as an affine form (sums, differences and products with constants of variables), or nullopt. */
std::optional<Affine> affine_form(const Expr &e);
/** The expression of an affine form. */
Expr to_expr(const Affine &a);

enum class StmtKind { kFor, kStore, kAllocate, kSeq, kIf, kLet, kPrefetch, kBarrier };
enum class ForKind { kSerial, kParallel, kVectorized, kUnrolled };
const char *for_kind_name(ForKind k);

struct StmtNode;
using Stmt = std::shared_ptr<const StmtNode>;

struct StmtNode {
  StmtKind kind;
  std::string var;           // kFor, kLet
  Expr min, extent;          // kFor
  ForKind for_kind = ForKind::kSerial;
  Buffer buffer;             // kStore, kAllocate, kPrefetch
  Expr index, value;         // kStore; kPrefetch: index; kLet: value; kIf: index holds the condition
  std::vector<Stmt> body;    // kFor/kAllocate/kLet: {body}; kSeq: the statements; kIf: {then[, else]}
  HashSlot hash;             // structural_hash's, kept
};

Stmt for_loop(const std::string &var, Expr min, Expr extent, ForKind kind, Stmt body);
/** Serial loops `names` (outermost first) from 0 to `extents` around `body`. */
Stmt loop_nest(const std::vector<std::string> &names, const std::vector<int64_t> &extents, Stmt body);
Stmt store(Buffer b, Expr index, Expr value);
Stmt allocate(Buffer b, Stmt body);
Stmt seq(std::vector<Stmt> stmts);
Stmt if_then(Expr cond, Stmt then_case, Stmt else_case = nullptr);
Stmt let(const std::string &var, Expr value, Stmt body);
/** A hint that b[index] will be read soon (its cache line fetched now); no effect on results. */
Stmt prefetch(Buffer b, Expr index);
/**
 * A GPU kernel's barrier (__syncthreads): every thread of the block reaches it before any goes on,
 * and the block's shared-memory writes before it are seen by every thread after it. Legal only in
 * a GPU kernel's thread loop, where every thread reaches it (no branch or loop bound around it
 * depends on the thread); on the CPU, serialize_threads (codegen/Gpu) splits the thread loop there.
 */
Stmt barrier();

std::string to_string(const Expr &e);
std::string to_string(const Stmt &s, int indent = 0);
/**
 * A 64-bit hash of a statement's structure (every field of every node; buffers by name, type,
 * size and scope), memoized by node: a DAG is hashed in time linear in its nodes, where printing
 * it walks it as a tree (an inlined Winograd transform: 2.5 K nodes that print as 40 K).
 */
uint64_t structural_hash(const Stmt &s);

/** `s` with every access to (and allocation of) a buffer that `to` maps replaced by its image. */
Stmt replace_buffers(const Stmt &s, const std::map<const BufferNode *, Buffer> &to);

/**
 * `s` with integer divisions and modulos by a constant B resolved where the ranges of the loop
 * and let variables prove them: x = B * q + r with every term of q a multiple of B and r known
 * to lie in [0, B) gives x / B = q and x % B = r. A blocked layout's index, (c / 16) * S + c % 16
 * with c = 16 * block + lane, then reads `lane` again: stride 1 in a vectorized lane, a vector
 * access instead of one per lane.
 */
Stmt simplify_div_mod(const Stmt &s, const std::map<std::string, std::pair<int64_t, int64_t>> &ranges = {});

}  // namespace autotune::loop
