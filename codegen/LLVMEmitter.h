#pragma once
// LoopIR -> LLVM IR through IRBuilder. One function per stage, `void @<kernel>_s<k>(ptr bufs,
// i64 begin, i64 end)`, running the stage's parallel loop over [begin, end); `bufs` holds one
// pointer per kernel buffer (64-byte aligned, never aliasing). No fast-math reassociation:
// accumulations keep their order, and fused multiply-adds are only formed where the IR asks for
// them (fmuladd).
#include <memory>

#include "codegen/Kernel.h"
#include "codegen/Target.h"
#include "ir/Error.h"

namespace llvm {
class LLVMContext;
class Module;
}  // namespace llvm

namespace autotune {

Expected<std::unique_ptr<llvm::Module>> emit_llvm(const LoweredKernel &k, llvm::LLVMContext &ctx, const Target &target);

/**
 * Stage `stage` of `k` alone, as emit_llvm emits it (its entry named stage_symbol(k, stage)): the
 * JIT compiles and caches each stage on its own, so candidates that differ in one stage share the
 * others' objects.
 */
Expected<std::unique_ptr<llvm::Module>> emit_llvm_stage(const LoweredKernel &k, size_t stage, llvm::LLVMContext &ctx, const Target &target);

/**
 * A GPU-scheduled kernel (codegen/Gpu.h) for NVPTX: one kernel entry per stage, named as
 * stage_symbol names it, taking one global pointer per buffer; the stage's parallel loop is the
 * block index, its body's loop the thread index. `sm` and `features` ("sm_80", "+ptx78") are
 * the functions' target attributes.
 */
Expected<std::unique_ptr<llvm::Module>> emit_llvm_gpu(const LoweredKernel &k, llvm::LLVMContext &ctx, const std::string &sm, const std::string &features);

/** The LLVM IR of `k` as emitted, before any optimization, as text (for tests and inspection). */
Expected<std::string> emit_llvm_text(const LoweredKernel &k, const Target &target);

/** The name of stage `i`'s entry function. */
std::string stage_symbol(const LoweredKernel &k, size_t i);

}  // namespace autotune
