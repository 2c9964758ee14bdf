#include "codegen/LLVMEmitter.h"

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/IntrinsicsNVPTX.h>
#include <llvm/IR/IntrinsicsX86.h>
#include <llvm/IR/Metadata.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Support/raw_ostream.h>

#include <functional>
#include <map>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include <cmath>
#include <cstring>

#include "ir/Hash.h"

namespace autotune {

using namespace loop;

std::string stage_symbol(const LoweredKernel &k, size_t i) { return k.name + "_s" + std::to_string(i); }

namespace {

class StageEmitter {
 public:
  StageEmitter(llvm::Module &m, const LoweredKernel &k) : m_(m), ctx_(m.getContext()), b_(ctx_), k_(k) {}

  Status emit(size_t stage_index, const Target &target) {
    avx512_ = target.isa == "avx512";
    block_lanes_ = target.lanes;
    const KernelStage &stage = k_.stages[stage_index];
    auto *ptr = llvm::PointerType::get(ctx_, 0);
    auto *i64 = llvm::Type::getInt64Ty(ctx_);
    // The body: one noalias, 64-byte aligned pointer per buffer, so LLVM knows buffers never alias.
    std::vector<llvm::Type *> params(k_.buffers.size(), ptr);
    params.push_back(i64);
    params.push_back(i64);
    auto *body_ty = llvm::FunctionType::get(llvm::Type::getVoidTy(ctx_), params, false);
    fn_ = llvm::Function::Create(body_ty, llvm::Function::InternalLinkage, stage_symbol(k_, stage_index) + "_body", m_);
    set_target_attrs(fn_, target);
    fn_->addFnAttr(llvm::Attribute::AlwaysInline);
    for (size_t i = 0; i < k_.buffers.size(); ++i) {
      fn_->addParamAttr(static_cast<unsigned>(i), llvm::Attribute::NoAlias);
      fn_->addParamAttr(static_cast<unsigned>(i), llvm::Attribute::getWithAlignment(ctx_, llvm::Align(64)));
      buffers_[k_.buffers[i].get()] = fn_->getArg(static_cast<unsigned>(i));
    }
    entry_ = llvm::BasicBlock::Create(ctx_, "entry", fn_);
    b_.SetInsertPoint(entry_);
    llvm::Value *begin = fn_->getArg(static_cast<unsigned>(k_.buffers.size()));
    llvm::Value *end = fn_->getArg(static_cast<unsigned>(k_.buffers.size()) + 1);
    AT_TRY(emit_loop(stage.parallel_var, begin, b_.CreateSub(end, begin), stage.body));
    b_.CreateRetVoid();

    // The entry point the runtime calls: unpacks the buffer table and calls the body (inlined).
    auto *entry_ty = llvm::FunctionType::get(llvm::Type::getVoidTy(ctx_), {ptr, i64, i64}, false);
    auto *entry = llvm::Function::Create(entry_ty, llvm::Function::ExternalLinkage, stage_symbol(k_, stage_index), m_);
    set_target_attrs(entry, target);
    b_.SetInsertPoint(llvm::BasicBlock::Create(ctx_, "entry", entry));
    std::vector<llvm::Value *> args;
    for (size_t i = 0; i < k_.buffers.size(); ++i)
      args.push_back(b_.CreateAlignedLoad(ptr, b_.CreateConstInBoundsGEP1_64(ptr, entry->getArg(0), i), llvm::Align(8)));
    args.push_back(entry->getArg(1));
    args.push_back(entry->getArg(2));
    b_.CreateCall(fn_, args);
    b_.CreateRetVoid();
    return Status::ok();
  }

  /**
   * Stage `stage_index` of a GPU-scheduled kernel (codegen/Gpu: the stage's parallel loop is the
   * block index, its body one loop over the block's threads) as a PTX kernel entry: one global
   * pointer per buffer, the block index from %ctaid.x and the thread index from %tid.x.
   */
  Status emit_gpu(size_t stage_index, const std::string &sm, const std::string &features) {
    const KernelStage &stage = k_.stages[stage_index];
    if (stage.body->kind != StmtKind::kFor || !as_int(stage.body->extent) || !as_int(stage.body->min) || *as_int(stage.body->min) != 0)
      return make_error("stage " + stage.name + " is not GPU-scheduled: its body is not a loop over a block's threads");
    auto *global = llvm::PointerType::get(ctx_, 1);
    std::vector<llvm::Type *> params(k_.buffers.size(), global);
    auto *ty = llvm::FunctionType::get(llvm::Type::getVoidTy(ctx_), params, false);
    fn_ = llvm::Function::Create(ty, llvm::Function::ExternalLinkage, stage_symbol(k_, stage_index), m_);
    fn_->addFnAttr("target-cpu", sm);
    fn_->addFnAttr("target-features", features);
    fn_->addFnAttr(llvm::Attribute::NoUnwind);
    // As on the CPU, 64-byte aligned: device allocations are 256-byte aligned and the arena's
    // offsets are multiples of 64 (runtime/Cuda).
    for (size_t i = 0; i < k_.buffers.size(); ++i) {
      fn_->addParamAttr(static_cast<unsigned>(i), llvm::Attribute::NoAlias);
      fn_->addParamAttr(static_cast<unsigned>(i), llvm::Attribute::getWithAlignment(ctx_, llvm::Align(64)));
      buffers_[k_.buffers[i].get()] = fn_->getArg(static_cast<unsigned>(i));
    }
    entry_ = llvm::BasicBlock::Create(ctx_, "entry", fn_);
    b_.SetInsertPoint(entry_);
    gpu_ = true;
    auto sreg = [&](llvm::Intrinsic::ID id) { return b_.CreateZExt(b_.CreateIntrinsic(id, {}, {}), b_.getInt64Ty()); };
    if (!stage.parallel_var.empty()) vars_[stage.parallel_var] = sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_x);
    vars_[stage.body->var] = sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_tid_x);
    AT_TRY(emit_stmt(stage.body->body[0]));
    b_.CreateRetVoid();
    // A kernel entry, and the block size it is launched with.
    llvm::NamedMDNode *md = m_.getOrInsertNamedMetadata("nvvm.annotations");
    auto annotate = [&](const char *what, int value) {
      md->addOperand(llvm::MDNode::get(ctx_, {llvm::ValueAsMetadata::get(fn_), llvm::MDString::get(ctx_, what),
                                              llvm::ConstantAsMetadata::get(b_.getInt32(static_cast<uint32_t>(value)))}));
    };
    annotate("kernel", 1);
    annotate("maxntidx", static_cast<int>(*as_int(stage.body->extent)));
    return Status::ok();
  }

 private:
  static void set_target_attrs(llvm::Function *f, const Target &t) {
    f->addFnAttr("target-cpu", t.cpu);
    f->addFnAttr("target-features", t.features);
    f->addFnAttr(llvm::Attribute::NoUnwind);
  }

  llvm::Type *scalar_type(Type t) {
    switch (t) {
      case Type::kF32: return llvm::Type::getFloatTy(ctx_);
      case Type::kI64: return llvm::Type::getInt64Ty(ctx_);
      case Type::kBool: return llvm::Type::getInt1Ty(ctx_);
    }
    return nullptr;
  }

  bool is_vector(const Expr &e) { return vector_mode_ && !vec_var_.empty() && uses_var(e, vec_var_); }

  llvm::Value *splat(llvm::Value *v) {
    if (!vector_mode_ || vec_var_.empty() || v->getType()->isVectorTy()) return v;
    return b_.CreateVectorSplat(lanes_, v);
  }

  /** Makes a and b both vectors (splatting a scalar) when either is one. */
  void match(llvm::Value *&a, llvm::Value *&b) {
    if (a->getType()->isVectorTy() != b->getType()->isVectorTy()) {
      if (!a->getType()->isVectorTy()) a = b_.CreateVectorSplat(lanes_, a);
      else b = b_.CreateVectorSplat(lanes_, b);
    }
  }

  /**
   * The alignment of a contiguous vector access at `index` (its first lane's element) in `buf`:
   * the elements the index is provably a multiple of, in bytes, up to what the buffer itself is
   * aligned to (arguments 64 bytes, stack buffers 32, GPU shared memory 16). Claimed as 4 bytes,
   * NVPTX splits a <4 x float> load into four scalar ones; at 16, it is one ld.global.v4.f32. On
   * the CPU an unaligned vector move costs the same as an aligned one on aligned data, and a wrong
   * claim faults (vmovaps), so CPU code claims 4 bytes as it always has.
   */
  llvm::Align vector_align(const Expr &index, const Buffer &buf) const {
    if (!gpu_) return llvm::Align(4);
    int64_t m = known_multiple(index, {{vec_var_, vec_min_multiple_}});
    uint64_t elem = buf->type == Type::kI64 ? 8 : buf->type == Type::kBool ? 1 : 4;
    uint64_t cap = buf->scope == BufferScope::kLocal ? 32 : buf->scope == BufferScope::kShared ? 16 : 64;
    return llvm::Align(std::max<uint64_t>(std::min<uint64_t>(elem, 4), std::min(cap, elem * static_cast<uint64_t>(m & -m))));
  }

  llvm::Value *element_ptr(const Buffer &buf, llvm::Value *index) {
    auto it = buffers_.find(buf.get());
    AT_CHECK(it != buffers_.end(), "buffer " + buf->name + " is not bound");
    return b_.CreateInBoundsGEP(scalar_type(buf->type), it->second, index);
  }

  /**
   * Whether a contiguous access to `buf` in the current vector loop is masked: a loop of L lanes, L
   * not a power of two (a row's tail), on memory. Stack buffers (accumulators) keep plain <L x T>
   * accesses, which SROA turns into registers; a masked access would keep them in memory.
   */
  bool masked(const Buffer &buf) const {
    return lanes_ > 2 && (lanes_ & (lanes_ - 1)) != 0 && buf->scope != BufferScope::kLocal;
  }
  int wide_lanes() const {
    int w = 1;
    while (w < lanes_) w *= 2;
    return w;
  }
  /** The first `set` of wide_lanes() lanes set. */
  llvm::Value *first_lanes_mask(int set) {
    std::vector<llvm::Constant *> bits;
    for (int l = 0; l < wide_lanes(); ++l) bits.push_back(b_.getInt1(l < set));
    return llvm::ConstantVector::get(bits);
  }
  /** The first `lanes_` of wide_lanes() lanes set. */
  llvm::Value *lane_mask() { return first_lanes_mask(lanes_); }
  /** Shuffle indices 0..n-1: keeps the first n lanes (or widens, the new lanes poison). */
  std::vector<int> first_lanes(int n) const {
    std::vector<int> pick;
    for (int l = 0; l < n; ++l) pick.push_back(l < lanes_ ? l : -1);
    return pick;
  }

  /** An index emitted for lane 0 of the current vector loop (scalar mode). */
  llvm::Value *scalar_index(const Expr &index) {
    bool saved = vector_mode_;
    vector_mode_ = false;
    llvm::Value *v = emit(index);
    vector_mode_ = saved;
    return v;
  }

  llvm::Value *emit_load(const Expr &e) {
    shared_loads_.insert(e->buffer.get());
    const Expr &index = e->args[0];
    llvm::Type *t = scalar_type(e->type);
    if (!is_vector(index)) return b_.CreateAlignedLoad(t, element_ptr(e->buffer, emit(index)), llvm::Align(4));
    auto stride = stride_of(index, vec_var_);
    if (stride == 1) {
      auto *vt = llvm::FixedVectorType::get(t, lanes_);
      llvm::Value *ptr = element_ptr(e->buffer, scalar_index(index));
      if (masked(e->buffer)) {
        // A tail of L lanes, L not a power of two: one masked load of the next power of two, its
        // first L lanes kept (LLVM would split a plain <L x float> load into 4 + 2 + 1 pieces).
        auto *wide = llvm::FixedVectorType::get(t, wide_lanes());
        llvm::Value *v = b_.CreateMaskedLoad(wide, ptr, llvm::Align(4), lane_mask(), llvm::Constant::getNullValue(wide));
        return b_.CreateShuffleVector(v, first_lanes(lanes_));
      }
      return b_.CreateAlignedLoad(vt, ptr, vector_align(index, e->buffer));
    }
    // A small constant stride (a stride-2 pooling window or a stem's patches read every other
    // column): the lanes' elements loaded as whole vectors of the loop's (power-of-two) width, the
    // last masked so that no element past the last lane's is read, then picked out with shuffles.
    // One <27 x float> load for 14 lanes at stride 2, the way before, was split by LLVM into
    // 16 + 8 + 2 + 1 pieces; in one process (`bench --against`, Sapphire Rapids, AVX-512, 2 threads,
    // 6 rounds) ResNet-18's and ResNet-50's max pools ran 0.85 and 0.81 of that time, MobileNetV2's
    // and EfficientNet-B0's stems 0.88 and 0.95.
    if (stride && *stride >= 2 && *stride <= 4) {
      int span = static_cast<int>(*stride * (lanes_ - 1) + 1), w = wide_lanes();
      auto *vt = llvm::FixedVectorType::get(t, w);
      llvm::Value *base = element_ptr(e->buffer, scalar_index(index));
      std::vector<llvm::Value *> parts;
      for (int at = 0; at < span; at += w) {
        llvm::Value *ptr = b_.CreateInBoundsGEP(t, base, b_.getInt64(at));
        int valid = std::min(w, span - at);
        if (valid == w) {
          parts.push_back(b_.CreateAlignedLoad(vt, ptr, llvm::Align(4)));
        } else {
          parts.push_back(b_.CreateMaskedLoad(vt, ptr, llvm::Align(4), first_lanes_mask(valid), llvm::Constant::getNullValue(vt)));
        }
      }
      // Joined pairwise into one vector (a power of two of them, poison filling in), then picked.
      while (parts.size() & (parts.size() - 1)) parts.push_back(llvm::PoisonValue::get(parts[0]->getType()));
      while (parts.size() > 1) {
        std::vector<llvm::Value *> next;
        int n = static_cast<int>(llvm::cast<llvm::FixedVectorType>(parts[0]->getType())->getNumElements());
        std::vector<int> cat;
        for (int l = 0; l < 2 * n; ++l) cat.push_back(l);
        for (size_t i = 0; i < parts.size(); i += 2) next.push_back(b_.CreateShuffleVector(parts[i], parts[i + 1], cat));
        parts = std::move(next);
      }
      std::vector<int> pick;
      for (int l = 0; l < lanes_; ++l) pick.push_back(static_cast<int>(l * *stride));
      return b_.CreateShuffleVector(parts[0], pick);
    }
    if (stride && e->buffer->scope == BufferScope::kLocal && e->type == Type::kF32)
      if (llvm::Value *column = tile_column(e->buffer, *stride, scalar_index(index))) return column;
    // Per-lane loads (strided or irregular indices).
    llvm::Value *idx = emit(index);
    llvm::Value *out = llvm::PoisonValue::get(llvm::FixedVectorType::get(t, lanes_));
    for (int l = 0; l < lanes_; ++l) {
      llvm::Value *li = b_.CreateExtractElement(idx, l);
      out = b_.CreateInsertElement(out, b_.CreateAlignedLoad(t, element_ptr(e->buffer, li), llvm::Align(4)), l);
    }
    return out;
  }

  /**
   * Column `base` of a register tile held row by row in a stack buffer, rows `stride` floats apart,
   * one row per lane: tile[lane * stride + base]. The conv template's pixel epilogue reads its
   * accumulators (a row of channels per pixel) this way, a channel at a time with the pixels as the
   * vector. Read lane by lane, the 32 channels x 14 pixels of ResNet's 3x3 convs took LLVM 770
   * instructions with spills; here each block of `block_lanes_` columns is transposed once, in
   * log2(lanes) rounds of two-source shuffles, and every column read after it is one of its
   * results. nullptr where this does not apply (a base not constant, rows not whole blocks).
   */
  llvm::Value *tile_column(const Buffer &buf, int64_t stride, llvm::Value *base) {
    const int W = block_lanes_;
    auto *k = llvm::dyn_cast<llvm::ConstantInt>(base);
    if (!k || W < 4 || (W & (W - 1)) || lanes_ < 2 || lanes_ > 4 * W || stride < W || stride % W) return nullptr;
    int64_t col = k->getSExtValue();
    if (col < 0 || col >= stride) return nullptr;
    int64_t first = col - col % W;
    auto key = std::make_tuple(buf.get(), stride, lanes_, first);
    auto it = transposed_.find(key);
    if (it == transposed_.end() || it->second.block != b_.GetInsertBlock()) {
      auto *vt = llvm::FixedVectorType::get(b_.getFloatTy(), W);
      // Rows in chunks of W (a tile of more rows than lanes: its columns are longer than a vector).
      std::vector<std::vector<llvm::Value *>> chunks;
      for (int r0 = 0; r0 < lanes_; r0 += W) {
        std::vector<llvm::Value *> rows(W, llvm::PoisonValue::get(vt));
        for (int r = 0; r < W && r0 + r < lanes_; ++r)
          rows[r] = b_.CreateAlignedLoad(vt, element_ptr(buf, b_.getInt64(static_cast<uint64_t>((r0 + r) * stride + first))), llvm::Align(4));
        // Round b swaps bit b of the row and column indices: rows r (bit b clear) and r | b
        // trade the halves of their columns whose bit b differs from their own.
        for (int bit = 1; bit < W; bit *= 2)
          for (int r = 0; r < W; ++r) {
            if (r & bit) continue;
            std::vector<int> lo, hi;
            for (int c = 0; c < W; ++c) {
              lo.push_back(c & bit ? W + (c ^ bit) : c);
              hi.push_back(c & bit ? W + c : c ^ bit);
            }
            llvm::Value *a = rows[r], *b = rows[r | bit];
            rows[r] = b_.CreateShuffleVector(a, b, lo);
            rows[r | bit] = b_.CreateShuffleVector(a, b, hi);
          }
        chunks.push_back(std::move(rows));
      }
      // Column c: its pieces from every chunk, joined, the first lanes_ kept.
      std::vector<llvm::Value *> columns(W);
      for (int c = 0; c < W; ++c) {
        llvm::Value *v = chunks[0][c];
        int have = W;
        for (size_t q = 1; q < chunks.size(); ++q) {
          // v (have lanes) then the next piece (W lanes): both widened to have + W lanes, joined.
          int n = have + W;
          std::vector<int> wide_v, wide_p, join;
          for (int l = 0; l < n; ++l) {
            wide_v.push_back(l < have ? l : -1);
            wide_p.push_back(l < W ? l : -1);
            join.push_back(l < have ? l : n + (l - have));
          }
          v = b_.CreateShuffleVector(b_.CreateShuffleVector(v, wide_v), b_.CreateShuffleVector(chunks[q][c], wide_p), join);
          have = n;
        }
        columns[c] = b_.CreateShuffleVector(v, first_lanes(lanes_));
      }
      it = transposed_.insert_or_assign(key, TransposedBlock{b_.GetInsertBlock(), std::move(columns)}).first;
    }
    return it->second.columns[static_cast<size_t>(col - first)];
  }

  /**
   * `e`'s value, emitted once per straight-line run of stores (shared_): lowering builds DAGs,
   * and Winograd's transforms share each B^T d term among six stores, so emitting them as trees
   * gave LLVM six copies of every load and sum to merge again (F(4x4): 1 MB of IR per kernel).
   */
  llvm::Value *emit(const Expr &e) {
    if (e->args.empty()) return emit_node(e);  // constants and variables: nothing to share
    auto key = std::make_pair(structural_id(e), vector_mode_);
    if (auto it = shared_.find(key); it != shared_.end()) return it->second;
    llvm::Value *v = emit_node(e);
    shared_.emplace(key, v);
    return v;
  }

  /**
   * A number for `e`'s structure: equal for equal expressions, whichever nodes hold them. Schedule
   * steps rebuild expressions (a substitution, a partition's simplification), so a DAG the
   * lowering shared by node becomes a tree of equal copies; numbered by structure they are shared
   * again (NCHW Winograd F(4x4)'s output transform as steps: 347 loads emitted against 44, and
   * LLVM cannot merge them across the scatters between). Each numbered node is held until the
   * kernel is emitted, so an address is never reused for another expression.
   */
  int64_t structural_id(const Expr &e) {
    if (auto it = ids_.find(e.get()); it != ids_.end()) return it->second.second;
    std::string key = std::to_string(static_cast<int>(e->kind)) + "|" + std::to_string(static_cast<int>(e->type)) + "|" +
                      std::to_string(static_cast<int>(e->op)) + "|" + std::to_string(e->int_value) + "|";
    uint64_t bits;
    std::memcpy(&bits, &e->float_value, sizeof bits);
    key += std::to_string(bits) + "|" + e->name + "|" + std::to_string(reinterpret_cast<uintptr_t>(e->buffer.get())) + "|";
    for (const Expr &a : e->args) key += std::to_string(structural_id(a)) + ",";
    int64_t id = interned_.emplace(key, static_cast<int64_t>(interned_.size())).first->second;
    ids_.emplace(e.get(), std::make_pair(e, id));
    return id;
  }

  /** Forgets the shared values: at a statement that is not a store (a loop, a branch, a binding), or a store to a buffer they read. */
  void forget_shared() { shared_.clear(), shared_loads_.clear(); }

  llvm::Value *emit_node(const Expr &e) {
    switch (e->kind) {
      case ExprKind::kInt: return b_.getInt64(static_cast<uint64_t>(e->int_value));
      case ExprKind::kFloat: return llvm::ConstantFP::get(llvm::Type::getFloatTy(ctx_), e->float_value);
      case ExprKind::kVar: {
        if (is_vector(e)) {
          std::vector<llvm::Constant *> steps;
          for (int l = 0; l < lanes_; ++l) steps.push_back(b_.getInt64(static_cast<uint64_t>(l)));
          return b_.CreateAdd(b_.CreateVectorSplat(lanes_, vars_.at(e->name)), llvm::ConstantVector::get(steps));
        }
        auto it = vars_.find(e->name);
        AT_CHECK(it != vars_.end(), "unbound variable " + e->name);
        return it->second;
      }
      case ExprKind::kBinary: return emit_binary(e);
      case ExprKind::kSelect: {
        llvm::Value *c = emit(e->args[0]), *a = emit(e->args[1]), *b = emit(e->args[2]);
        match(a, b);
        if (c->getType()->isVectorTy() && !a->getType()->isVectorTy()) a = splat(a), b = splat(b);
        if (!c->getType()->isVectorTy() && a->getType()->isVectorTy()) c = splat(c);
        return b_.CreateSelect(c, a, b);
      }
      case ExprKind::kLoad: return emit_load(e);
      case ExprKind::kCast: {
        llvm::Value *v = emit(e->args[0]);
        llvm::Type *to = scalar_type(e->type);
        if (v->getType()->isVectorTy()) to = llvm::FixedVectorType::get(to, lanes_);
        Type from = e->args[0]->type;
        if (e->type == Type::kF32) return from == Type::kBool ? b_.CreateUIToFP(v, to) : b_.CreateSIToFP(v, to);
        return b_.CreateFPToSI(v, to);
      }
      case ExprKind::kCall: return emit_call(e);
    }
    AT_CHECK(false, "bad expression kind");
  }

  llvm::Value *emit_binary(const Expr &e) {
    llvm::Value *a = emit(e->args[0]), *b = emit(e->args[1]);
    match(a, b);
    bool fp = e->args[0]->type == Type::kF32;
    switch (e->op) {
      case BinOp::kAdd: return fp ? b_.CreateFAdd(a, b) : b_.CreateAdd(a, b);
      case BinOp::kSub: return fp ? b_.CreateFSub(a, b) : b_.CreateSub(a, b);
      case BinOp::kMul: return fp ? b_.CreateFMul(a, b) : b_.CreateMul(a, b);
      case BinOp::kDiv: {
        if (fp) return b_.CreateFDiv(a, b);
        // Floor division: truncating division corrected when the remainder's sign differs.
        llvm::Value *q = b_.CreateSDiv(a, b), *r = b_.CreateSRem(a, b);
        llvm::Value *zero = llvm::Constant::getNullValue(a->getType());
        llvm::Value *adjust = b_.CreateAnd(b_.CreateICmpNE(r, zero), b_.CreateICmpNE(b_.CreateICmpSLT(r, zero), b_.CreateICmpSLT(b, zero)));
        return b_.CreateSub(q, b_.CreateZExt(adjust, a->getType()));
      }
      case BinOp::kMod: {
        AT_CHECK(!fp, "float modulo");
        llvm::Value *r = b_.CreateSRem(a, b);
        llvm::Value *zero = llvm::Constant::getNullValue(a->getType());
        llvm::Value *adjust = b_.CreateAnd(b_.CreateICmpNE(r, zero), b_.CreateICmpNE(b_.CreateICmpSLT(r, zero), b_.CreateICmpSLT(b, zero)));
        return b_.CreateSelect(adjust, b_.CreateAdd(r, b), r);
      }
      case BinOp::kMin:
        return fp ? b_.CreateBinaryIntrinsic(llvm::Intrinsic::minnum, a, b) : b_.CreateSelect(b_.CreateICmpSLT(a, b), a, b);
      case BinOp::kMax:
        return fp ? b_.CreateBinaryIntrinsic(llvm::Intrinsic::maxnum, a, b) : b_.CreateSelect(b_.CreateICmpSGT(a, b), a, b);
      case BinOp::kLT: return fp ? b_.CreateFCmpOLT(a, b) : b_.CreateICmpSLT(a, b);
      case BinOp::kLE: return fp ? b_.CreateFCmpOLE(a, b) : b_.CreateICmpSLE(a, b);
      case BinOp::kEQ: return fp ? b_.CreateFCmpOEQ(a, b) : b_.CreateICmpEQ(a, b);
      case BinOp::kNE: return fp ? b_.CreateFCmpUNE(a, b) : b_.CreateICmpNE(a, b);
      case BinOp::kAnd: return b_.CreateAnd(a, b);
      case BinOp::kOr: return b_.CreateOr(a, b);
    }
    AT_CHECK(false, "bad binary op");
  }

  /** i32, or a vector of i32 as wide as `t`: the float's bits, for exp's and log's exponent arithmetic. */
  llvm::Type *int32_like(llvm::Type *t) {
    if (t->isVectorTy()) return llvm::VectorType::get(b_.getInt32Ty(), llvm::cast<llvm::VectorType>(t)->getElementCount());
    return b_.getInt32Ty();
  }

  /** x clamped to [lo, hi] (a NaN stays NaN: each comparison is false for it). */
  llvm::Value *clamped(llvm::Value *x, double lo, double hi) {
    llvm::Type *t = x->getType();
    x = b_.CreateSelect(b_.CreateFCmpOGT(x, llvm::ConstantFP::get(t, hi)), llvm::ConstantFP::get(t, hi), x);
    return b_.CreateSelect(b_.CreateFCmpOLT(x, llvm::ConstantFP::get(t, lo)), llvm::ConstantFP::get(t, lo), x);
  }

  /** 2^k as a float (or vector of them) of type `t`, k an i32 (vector) in [-126, 127]: k + 127 in the exponent field. */
  llvm::Value *pow2(llvm::Value *k, llvm::Type *t) {
    llvm::Type *it = k->getType();
    return b_.CreateBitCast(b_.CreateShl(b_.CreateAdd(k, llvm::ConstantInt::get(it, 127)), llvm::ConstantInt::get(it, 23)), t);
  }

  /**
   * exp's reduction and polynomial (Cephes' expf) of a clamped argument: x = n ln2 + r with
   * n = floor(x log2(e) + 1/2), ln2 split in two so n ln2 is exact; returns exp(r) by a degree-6
   * polynomial, and n, for the caller to scale by 2^n.
   */
  std::pair<llvm::Value *, llvm::Value *> exp_reduced(llvm::Value *x) {
    llvm::Type *t = x->getType();
    auto c = [&](double v) { return llvm::ConstantFP::get(t, v); };
    auto fma = [&](llvm::Value *a, llvm::Value *b, llvm::Value *d) { return b_.CreateIntrinsic(llvm::Intrinsic::fmuladd, {t}, {a, b, d}); };
    llvm::Value *n = b_.CreateUnaryIntrinsic(llvm::Intrinsic::floor, fma(x, c(1.44269504088896341), c(0.5)));
    llvm::Value *r = fma(n, c(-0.693359375), x);
    r = fma(n, c(2.12194440e-4), r);
    llvm::Value *y = c(1.9875691500e-4);
    for (double k : {1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1}) y = fma(y, r, c(k));
    return {fma(y, b_.CreateFMul(r, r), b_.CreateFAdd(r, c(1.0))), n};
  }

  /** Whether `t` is a vector of 16 floats on an AVX-512 target: what vscalefps (AVX-512F) takes. */
  bool zmm_float(llvm::Type *t) const {
    auto *vt = llvm::dyn_cast<llvm::FixedVectorType>(t);
    return avx512_ && vt && vt->getNumElements() == 16 && vt->getElementType()->isFloatTy();
  }

  /**
   * No result of exp or the logistic is a denormal. An Intel core takes a microcode assist for
   * every FMA, multiply or division with a denormal operand or result (a scratch loop on Sapphire
   * Rapids: 56 ns a 16-lane FMA with a denormal operand against 1.28; an add or vscalefps none),
   * and SiLU multiplies x by its logistic. exp gives 0 below ln FLT_MIN (this constant); the
   * logistic reads exp(-x) at -x no larger than it, so its result stays at FLT_MIN or above.
   */
  static constexpr double kExpNormalLo = -87.33654022216797;

  /**
   * exp(x) of 16 floats on AVX-512: exp_reduced's polynomial scaled by 2^n with vscalefps, which
   * rounds once to +inf past the largest float and to a denormal or 0 below the smallest, and
   * keeps NaN, so none of emit_exp's splitting of 2^n or integer conversions are needed. x is
   * clamped to [-120, hi] first (NaN stays NaN), so an infinite x reduces without inf - inf.
   * Where the result is a normal float it is emit_exp's, bit for bit: both scale the same
   * polynomial value by an exact power of 2. A 1x1 conv with a SiLU epilogue (EfficientNet-B0's
   * 16 -> 96 at 112x112) ran 0.56 against 0.70 ms with it in emit_sigmoid.
   */
  llvm::Value *exp_scalef(llvm::Value *x, double hi = 120.0) {
    llvm::Type *t = x->getType();
    auto [y, n] = exp_reduced(clamped(x, -120.0, hi));
    return b_.CreateIntrinsic(llvm::Intrinsic::x86_avx512_mask_scalef_ps_512, {},
                              {y, n, llvm::PoisonValue::get(t), b_.getInt16(-1), b_.getInt32(4 /* the current rounding */)});
  }

  /**
   * exp(x) of float32 scalars and vectors without a library call, which LLVM makes once per lane
   * (a 1x1 conv with a SiLU epilogue ran at 6 GFLOP/s on them). Cephes' expf: x = n ln2 + r with
   * n = floor(x log2(e) + 1/2), ln2 split in two so n ln2 is exact, exp(r) by a degree-6
   * polynomial, 2^n built in the exponent field. Within 1.3 ulps of the exact value on [-87.3, 88.7]
   * (tests/codegen/JitTest.cpp checks 2 at every width); 0 below (results that would be
   * denormal: kExpNormalLo), +inf above, NaN stays NaN.
   */
  llvm::Value *emit_exp(llvm::Value *x) {
    llvm::Type *t = x->getType();
    const double hi = 88.72283935546875, lo = kExpNormalLo;
    auto zero_below_lo = [&](llvm::Value *v) {  // NaN stays NaN: the comparison is false for it
      return b_.CreateSelect(b_.CreateFCmpOLT(x, llvm::ConstantFP::get(t, lo)), llvm::ConstantFP::get(t, 0.0), v);
    };
    if (zmm_float(t)) return zero_below_lo(exp_scalef(x));
    auto c = [&](double v) { return llvm::ConstantFP::get(t, v); };
    auto [y, n] = exp_reduced(clamped(x, lo, hi));
    llvm::Type *it = int32_like(t);
    // 2^n in two halves, each a normal float: n reaches 128 (exp just below FLT_MAX) and -126.
    llvm::Value *ni = b_.CreateFPToSI(n, it), *n1 = b_.CreateAShr(ni, llvm::ConstantInt::get(it, 1)), *n2 = b_.CreateSub(ni, n1);
    y = b_.CreateFMul(b_.CreateFMul(y, pow2(n1, t)), pow2(n2, t));
    y = b_.CreateSelect(b_.CreateFCmpOGT(x, c(hi)), c(INFINITY), y);
    y = zero_below_lo(y);
    return b_.CreateSelect(b_.CreateFCmpUNO(x, x), x, y);
  }

  /**
   * The logistic function 1 / (1 + exp(-x)), with exp(-x) as exp_scalef's on AVX-512 and
   * elsewhere as emit_exp's without its edge cases (2^n one normal float, n in [-125, 127]), -x
   * clamped to at most -kExpNormalLo (and to -120 or -87 below, where the logistic is already 1:
   * exp(-x) is below half an ulp of 1). So exp(-x) is at most about 2^126 and the logistic at
   * least FLT_MIN: where the true value is below FLT_MIN (x under ln FLT_MIN) the result is
   * sigmoid(ln FLT_MIN), FLT_MIN within 38 ulps, and never a denormal. The clamp was at 88 on this
   * route (1 / (1 + exp(88)) = 6.1e-39 for every x <= -88) and at 120 on exp_scalef's (denormals
   * between -88.7 and -87.3): each such value took an assist in the division and another in SiLU's
   * multiply: a SiLU over values there took 4.4-4.8x its time (a scratch model, one process). The clamp
   * costs no operation. About ten operations fewer than exp's route per vector: a 1x1 conv with a
   * SiLU epilogue at 112x112 (EfficientNet's 16->96) ran 0.217-0.224 against 0.241-0.248 ms
   * (two pairs, cores apart; with Clip 0.162).
   * tests/codegen/JitTest.cpp holds it to the double-precision logistic.
   */
  llvm::Value *emit_sigmoid(llvm::Value *x) {
    llvm::Type *t = x->getType();
    auto c = [&](double v) { return llvm::ConstantFP::get(t, v); };
    if (zmm_float(t)) return b_.CreateFDiv(c(1.0), b_.CreateFAdd(exp_scalef(b_.CreateFNeg(x), -kExpNormalLo), c(1.0)));  // NaN stays
    auto fma = [&](llvm::Value *a, llvm::Value *b, llvm::Value *d) { return b_.CreateIntrinsic(llvm::Intrinsic::fmuladd, {t}, {a, b, d}); };
    auto [y, n] = exp_reduced(clamped(b_.CreateFNeg(x), -87.0, -kExpNormalLo));
    llvm::Value *s = b_.CreateFDiv(c(1.0), fma(y, pow2(b_.CreateFPToSI(n, int32_like(t)), t), c(1.0)));
    // fptosi of NaN is poison: the select keeps it out of the result.
    return b_.CreateSelect(b_.CreateFCmpUNO(x, x), x, s);
  }

  /**
   * log(x) of float32 scalars and vectors, also without a library call: x = m 2^e with m in
   * [sqrt(1/2), sqrt(2)) (a denormal x scaled by 2^23 first), log(m) = 2 atanh(s) with
   * s = (m - 1) / (m + 1), |s| <= 0.1716, by its odd series to s^11 (the next term is below
   * 1e-10), plus e ln2. 0 gives -inf, a negative x or NaN gives NaN, +inf stays +inf.
   * tests/codegen/JitTest.cpp holds it to the double-precision log.
   */
  llvm::Value *emit_log(llvm::Value *x) {
    llvm::Type *t = x->getType();
    auto c = [&](double v) { return llvm::ConstantFP::get(t, v); };
    auto fma = [&](llvm::Value *a, llvm::Value *b, llvm::Value *d) { return b_.CreateIntrinsic(llvm::Intrinsic::fmuladd, {t}, {a, b, d}); };
    llvm::Type *it = int32_like(t);
    auto ic = [&](int v) { return llvm::ConstantInt::get(it, v); };
    llvm::Value *tiny = b_.CreateFCmpOLT(x, c(1.17549435e-38));
    llvm::Value *xs = b_.CreateSelect(tiny, b_.CreateFMul(x, c(8388608.0)), x);
    llvm::Value *bits = b_.CreateBitCast(xs, it);
    llvm::Value *e = b_.CreateSub(b_.CreateLShr(bits, ic(23)), ic(127));
    e = b_.CreateSelect(tiny, b_.CreateSub(e, ic(23)), e);
    llvm::Value *m = b_.CreateBitCast(b_.CreateOr(b_.CreateAnd(bits, ic(0x7fffff)), ic(0x3f800000)), t);
    llvm::Value *big = b_.CreateFCmpOGT(m, c(1.41421356237309505));
    m = b_.CreateSelect(big, b_.CreateFMul(m, c(0.5)), m);
    e = b_.CreateSelect(big, b_.CreateAdd(e, ic(1)), e);
    llvm::Value *s = b_.CreateFDiv(b_.CreateFSub(m, c(1.0)), b_.CreateFAdd(m, c(1.0)));
    llvm::Value *s2 = b_.CreateFMul(s, s);
    llvm::Value *p = c(2.0 / 11);
    for (double k : {2.0 / 9, 2.0 / 7, 2.0 / 5, 2.0 / 3, 2.0}) p = fma(p, s2, c(k));
    llvm::Value *y = fma(b_.CreateSIToFP(e, t), c(0.693147180559945309), b_.CreateFMul(p, s));
    y = b_.CreateSelect(b_.CreateFCmpOEQ(x, c(0.0)), c(-INFINITY), y);
    y = b_.CreateSelect(b_.CreateFCmpOEQ(x, c(INFINITY)), x, y);
    return b_.CreateSelect(b_.CreateFCmpULT(x, c(0.0)), c(NAN), y);
  }

  llvm::Value *emit_call(const Expr &e) {
    std::vector<llvm::Value *> args;
    bool any_vector = false;
    for (const Expr &a : e->args) {
      args.push_back(emit(a));
      any_vector |= args.back()->getType()->isVectorTy();
    }
    if (any_vector)
      for (auto &a : args) a = splat(a);
    llvm::Type *t = args[0]->getType();
    if (e->name == "fmuladd") return b_.CreateIntrinsic(llvm::Intrinsic::fmuladd, {t}, args);
    if (e->name == "exp") return emit_exp(args[0]);
    if (e->name == "log") return emit_log(args[0]);
    if (e->name == "sigmoid") return emit_sigmoid(args[0]);
    if (e->name == "sqrt") return b_.CreateUnaryIntrinsic(llvm::Intrinsic::sqrt, args[0]);
    if (e->name == "floor") return b_.CreateUnaryIntrinsic(llvm::Intrinsic::floor, args[0]);
    AT_CHECK(false, "unknown intrinsic " + e->name);
  }

  Status emit_loop(const std::string &v, llvm::Value *min, llvm::Value *extent, const Stmt &body) {
    llvm::BasicBlock *pre = b_.GetInsertBlock();
    auto *header = llvm::BasicBlock::Create(ctx_, v + ".header", fn_);
    auto *loop_body = llvm::BasicBlock::Create(ctx_, v + ".body", fn_);
    auto *exit = llvm::BasicBlock::Create(ctx_, v + ".exit", fn_);
    llvm::Value *end = b_.CreateAdd(min, extent);
    b_.CreateBr(header);
    b_.SetInsertPoint(header);
    llvm::PHINode *iv = b_.CreatePHI(b_.getInt64Ty(), 2, v);
    iv->addIncoming(min, pre);
    b_.CreateCondBr(b_.CreateICmpSLT(iv, end), loop_body, exit);
    b_.SetInsertPoint(loop_body);
    llvm::Value *saved = vars_.count(v) ? vars_[v] : nullptr;
    vars_[v] = iv;
    forget_shared();
    AT_TRY(emit_stmt(body));
    llvm::Value *next = b_.CreateAdd(iv, b_.getInt64(1));
    iv->addIncoming(next, b_.GetInsertBlock());
    llvm::BranchInst *back = b_.CreateBr(header);
    // Unrolling is the schedule's decision (unrolled loops are emitted unrolled): LLVM unrolling a
    // reduction loop around a register block interleaves its iterations and spills accumulators.
    llvm::MDNode *self = llvm::MDNode::getTemporary(ctx_, {}).release();
    llvm::MDNode *loop_id = llvm::MDNode::get(ctx_, {self, llvm::MDNode::get(ctx_, {llvm::MDString::get(ctx_, "llvm.loop.unroll.disable")})});
    loop_id->replaceOperandWith(0, loop_id);
    llvm::MDNode::deleteTemporary(self);
    back->setMetadata(llvm::LLVMContext::MD_loop, loop_id);
    b_.SetInsertPoint(exit);
    if (saved) vars_[v] = saved;
    else vars_.erase(v);
    return Status::ok();
  }

  Status emit_stmt(const Stmt &s) {
    // Values are shared between consecutive stores only: anything else changes the bindings, the
    // vector mode or the block the values were emitted in.
    bool straight = s->kind == StmtKind::kStore || s->kind == StmtKind::kPrefetch || s->kind == StmtKind::kSeq;
    if (!straight) forget_shared();
    Status st = emit_stmt_node(s);
    if (!straight || (s->kind == StmtKind::kStore && shared_loads_.count(s->buffer.get()))) forget_shared();
    return st;
  }

  Status emit_stmt_node(const Stmt &s) {
    switch (s->kind) {
      case StmtKind::kSeq:
        for (const Stmt &x : s->body) AT_TRY(emit_stmt(x));
        return Status::ok();
      case StmtKind::kFor: {
        if (s->for_kind == ForKind::kSerial || s->for_kind == ForKind::kParallel)
          return emit_loop(s->var, emit(s->min), emit(s->extent), s->body[0]);
        auto extent = as_int(s->extent);
        if (!extent) return make_error(std::string(for_kind_name(s->for_kind)) + " loop " + s->var + " needs a constant extent");
        if (s->for_kind == ForKind::kUnrolled) {
          llvm::Value *base = emit(s->min);
          for (int64_t k = 0; k < *extent; ++k) {
            vars_[s->var] = b_.CreateAdd(base, b_.getInt64(static_cast<uint64_t>(k)));
            forget_shared();
            AT_TRY(emit_stmt(s->body[0]));
          }
          vars_.erase(s->var);
          return Status::ok();
        }
        if (!vec_var_.empty()) return make_error("nested vectorized loops (" + vec_var_ + ", " + s->var + ")");
        vec_var_ = s->var;
        vec_min_multiple_ = known_multiple(s->min);
        lanes_ = static_cast<int>(*extent);
        vars_[s->var] = emit(s->min);
        vector_mode_ = true;
        forget_shared();
        Status st = emit_stmt(s->body[0]);
        vector_mode_ = false;
        vec_var_.clear();
        vars_.erase(s->var);
        return st;
      }
      case StmtKind::kStore: {
        for (auto it = transposed_.begin(); it != transposed_.end();)
          it = std::get<0>(it->first) == s->buffer.get() ? transposed_.erase(it) : std::next(it);
        llvm::Value *value = emit(s->value);
        if (!is_vector(s->index)) {
          if (value->getType()->isVectorTy()) return make_error("store of a vector to a scalar location in " + s->buffer->name);
          b_.CreateAlignedStore(value, element_ptr(s->buffer, emit(s->index)), llvm::Align(4));
          return Status::ok();
        }
        value = splat(value);
        if (stride_of(s->index, vec_var_) == 1) {
          llvm::Value *ptr = element_ptr(s->buffer, scalar_index(s->index));
          if (masked(s->buffer)) {
            b_.CreateMaskedStore(b_.CreateShuffleVector(value, first_lanes(wide_lanes())), ptr, llvm::Align(4), lane_mask());
            return Status::ok();
          }
          b_.CreateAlignedStore(value, ptr, vector_align(s->index, s->buffer));
          return Status::ok();
        }
        llvm::Value *idx = emit(s->index);
        // AVX-512 scatters a vector to irregular or strided addresses in one instruction. Per-lane
        // extracts and stores ran no faster (ResNet-50's 3x3 conv at 56x56 storing 28 channel
        // vectors to their planes: 0.70-0.74 ms with the scatter, 0.75-0.76 per lane) and were
        // most of its compile time: 0.05 s against 0.18 s. Stack buffers keep per-lane stores,
        // which SROA turns into register moves. Without AVX-512 the backend would scalarize a
        // scatter into the same per-lane code.
        if (avx512_ && s->buffer->scope != BufferScope::kLocal) {
          b_.CreateMaskedScatter(value, element_ptr(s->buffer, idx), llvm::Align(4), llvm::Constant::getAllOnesValue(llvm::FixedVectorType::get(b_.getInt1Ty(), lanes_)));
          return Status::ok();
        }
        for (int l = 0; l < lanes_; ++l)
          b_.CreateAlignedStore(b_.CreateExtractElement(value, l), element_ptr(s->buffer, b_.CreateExtractElement(idx, l)),
                                llvm::Align(4));
        return Status::ok();
      }
      case StmtKind::kPrefetch: {
        // llvm.prefetch(address, read, locality 3 (keep in all levels), data cache).
        // A plain (not inbounds) address: a prefetch may point past the buffer, and never faults.
        auto it = buffers_.find(s->buffer.get());
        AT_CHECK(it != buffers_.end(), "buffer " + s->buffer->name + " is not bound");
        llvm::Value *ptr = b_.CreateGEP(scalar_type(s->buffer->type), it->second, scalar_index(s->index));
        b_.CreateIntrinsic(llvm::Intrinsic::prefetch, {ptr->getType()}, {ptr, b_.getInt32(0), b_.getInt32(3), b_.getInt32(1)});
        return Status::ok();
      }
      case StmtKind::kBarrier: {
        if (!gpu_) return make_error("a barrier outside a GPU kernel (serialize_threads splits the thread loop at barriers for the CPU)");
        b_.CreateIntrinsic(llvm::Intrinsic::nvvm_barrier0, {}, {});
        return Status::ok();
      }
      case StmtKind::kAllocate: {
        auto *arr = llvm::ArrayType::get(scalar_type(s->buffer->type), static_cast<uint64_t>(s->buffer->size));
        if (gpu_ && s->buffer->scope == BufferScope::kShared) {
          // The block's shared memory: a module global in NVPTX's shared address space (3).
          auto *g = new llvm::GlobalVariable(m_, arr, false, llvm::GlobalValue::InternalLinkage, llvm::UndefValue::get(arr),
                                             fn_->getName() + "_" + s->buffer->name, nullptr, llvm::GlobalValue::NotThreadLocal, 3);
          g->setAlignment(llvm::Align(16));
          buffers_[s->buffer.get()] = g;
          return emit_stmt(s->body[0]);
        }
        // Stack allocations go in the entry block, where LLVM promotes small ones to registers (on
        // the CPU, a serialized GPU kernel's shared memory too: one block runs per parallel iteration).
        llvm::IRBuilder<> eb(entry_, entry_->begin());
        llvm::AllocaInst *a = eb.CreateAlloca(arr);
        a->setAlignment(llvm::Align(32));
        buffers_[s->buffer.get()] = a;
        return emit_stmt(s->body[0]);
      }
      case StmtKind::kIf: {
        if (is_vector(s->index)) return make_error("a branch on a vector condition");
        llvm::Value *c = emit(s->index);
        auto *then_bb = llvm::BasicBlock::Create(ctx_, "then", fn_);
        auto *else_bb = llvm::BasicBlock::Create(ctx_, "else", fn_);
        auto *done = llvm::BasicBlock::Create(ctx_, "endif", fn_);
        b_.CreateCondBr(c, then_bb, else_bb);
        b_.SetInsertPoint(then_bb);
        AT_TRY(emit_stmt(s->body[0]));
        b_.CreateBr(done);
        b_.SetInsertPoint(else_bb);
        forget_shared();  // the then-branch's values do not dominate the else-branch
        if (s->body.size() > 1) AT_TRY(emit_stmt(s->body[1]));
        b_.CreateBr(done);
        b_.SetInsertPoint(done);
        return Status::ok();
      }
      case StmtKind::kLet: {
        if (is_vector(s->value)) return make_error("let " + s->var + " of a vector value");
        llvm::Value *saved = vars_.count(s->var) ? vars_[s->var] : nullptr;
        vars_[s->var] = emit(s->value);
        forget_shared();  // a shared node may mention the name just bound
        AT_TRY(emit_stmt(s->body[0]));
        if (saved) vars_[s->var] = saved;
        else vars_.erase(s->var);
        return Status::ok();
      }
    }
    return make_error("bad statement kind");
  }

  llvm::Module &m_;
  llvm::LLVMContext &ctx_;
  llvm::IRBuilder<> b_;
  const LoweredKernel &k_;
  llvm::Function *fn_ = nullptr;
  llvm::BasicBlock *entry_ = nullptr;
  std::unordered_map<const BufferNode *, llvm::Value *> buffers_;
  std::unordered_map<std::string, llvm::Value *> vars_;
  std::string vec_var_;
  int64_t vec_min_multiple_ = 1;  // what the vector loop's first value is a multiple of (known_multiple)
  int lanes_ = 1;
  bool avx512_ = false;  // the CPU target has AVX-512: scatters, vscalefps
  bool gpu_ = false;  // emitting a PTX kernel entry (emit_gpu)
  bool vector_mode_ = false;
  int block_lanes_ = 8;  // the target's float lanes: the width of a transposed block
  // Columns of a register tile transposed once for every read of its columns (`tile_column`),
  // valid while the insertion point stays in the block they were emitted in and nothing stores to
  // the tile: key (buffer, stride, lanes, first column of the block).
  struct TransposedBlock {
    llvm::BasicBlock *block;
    std::vector<llvm::Value *> columns;
  };
  std::map<std::tuple<const BufferNode *, int64_t, int, int64_t>, TransposedBlock> transposed_;
  // Values emitted in the current straight-line run of stores, by expression structure and
  // vector mode, and the buffers they load.
  std::map<std::pair<int64_t, bool>, llvm::Value *> shared_;
  std::unordered_map<const ExprNode *, std::pair<Expr, int64_t>> ids_;  // structural_id's numbers (the node held)
  std::unordered_map<std::string, int64_t> interned_;
  std::unordered_set<const BufferNode *> shared_loads_;
};

}  // namespace

namespace {
/**
 * A module for `triple` with each stage of `k` in [first, last) emitted by `emit_stage(emitter,
 * stage index)`, verified.
 */
Expected<std::unique_ptr<llvm::Module>> emit_module(const LoweredKernel &k, llvm::LLVMContext &ctx, const std::string &triple,
                                                    const std::function<Status(StageEmitter &, size_t)> &emit_stage, size_t first,
                                                    size_t last) {
  auto m = std::make_unique<llvm::Module>(k.name, ctx);
  m->setTargetTriple(triple);
  for (size_t i = first; i < last; ++i) {
    StageEmitter e(*m, k);
    if (auto st = emit_stage(e, i); !st) return make_error(k.name + " stage " + std::to_string(i) + ": " + st.error().message);
  }
  std::string err;
  llvm::raw_string_ostream os(err);
  if (llvm::verifyModule(*m, &os)) return make_error(k.name + ": invalid LLVM IR: " + os.str().substr(0, 300));
  return m;
}
}  // namespace

Expected<std::unique_ptr<llvm::Module>> emit_llvm(const LoweredKernel &k, llvm::LLVMContext &ctx, const Target &target) {
  return emit_module(k, ctx, target.triple, [&](StageEmitter &e, size_t i) { return e.emit(i, target); }, 0, k.stages.size());
}

Expected<std::unique_ptr<llvm::Module>> emit_llvm_stage(const LoweredKernel &k, size_t stage, llvm::LLVMContext &ctx, const Target &target) {
  AT_CHECK(stage < k.stages.size(), k.name + " has no stage " + std::to_string(stage));
  return emit_module(k, ctx, target.triple, [&](StageEmitter &e, size_t i) { return e.emit(i, target); }, stage, stage + 1);
}

Expected<std::unique_ptr<llvm::Module>> emit_llvm_gpu(const LoweredKernel &k, llvm::LLVMContext &ctx, const std::string &sm, const std::string &features) {
  return emit_module(k, ctx, "nvptx64-nvidia-cuda", [&](StageEmitter &e, size_t i) { return e.emit_gpu(i, sm, features); }, 0, k.stages.size());
}

Expected<std::string> emit_llvm_text(const LoweredKernel &k, const Target &target) {
  llvm::LLVMContext ctx;
  AT_ASSIGN(m, emit_llvm(k, ctx, target));
  std::string ir;
  llvm::raw_string_ostream os(ir);
  m->print(os, nullptr);
  return os.str();
}

namespace {
/** The k.buffers and every stage's loop IR. */
std::string body_text(const LoweredKernel &k) {
  std::string s;
  for (size_t i = 0; i < k.buffers.size(); ++i)
    s += "  buffer " + k.buffers[i]->name + "[" + std::to_string(k.buffers[i]->size) + "]" +
         (static_cast<int>(i) < k.num_params ? " param" : static_cast<int>(i) == k.num_params ? " output" : " temp") + "\n";
  for (const KernelStage &st : k.stages)
    s += "stage " + st.name + ": parallel (" + st.parallel_var + ", 0, " + std::to_string(st.parallel_extent) + ") {\n" +
         loop::to_string(st.body, 2) + "}\n";
  return s;
}
}  // namespace

std::string LoweredKernel::to_string() const { return "kernel " + name + " (" + schedule + ")\n" + body_text(*this); }

std::string LoweredKernel::identity() const {
  // The buffers and packings as text, each stage's loop IR by its structural hash: printing the
  // IR walked an inlined Winograd transform as a tree, 13% of the search's time lowering points.
  std::string s;
  for (size_t i = 0; i < buffers.size(); ++i)
    s += "buffer " + buffers[i]->name + "[" + std::to_string(buffers[i]->size) + "] " + std::to_string(static_cast<int>(buffers[i]->type)) +
         (static_cast<int>(i) < num_params ? " param" : static_cast<int>(i) == num_params ? " output" : " temp") + "\n";
  for (const KernelStage &st : stages)
    s += "stage " + st.name + " " + st.parallel_var + " " + std::to_string(st.parallel_extent) + " " + std::to_string(loop::structural_hash(st.body)) + "\n";
  for (const WeightPacking &p : packings)
    s += "packing " + std::to_string(p.param) + " " + std::to_string(p.kind) + " " + std::to_string(p.block) + " " + std::to_string(p.tile) + "\n";
  return fnv1a_hex(s);
}

}  // namespace autotune
