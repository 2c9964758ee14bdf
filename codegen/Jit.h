#pragma once
// Compiles lowered kernels to machine code for a target CPU (the host's by default) with LLVM ORC's LLJIT: LoopIR ->
// LLVM IR -> the O3 pipeline -> an object file -> linked into the process, one object per stage.
// Objects are cached on disk, keyed by a hash of the stage's unoptimized IR, the target and the
// LLVM version, so a second run of the same model does not recompile, and a tuner's candidates
// that differ in one stage compile only that one. Thread-safe: kernels compile in parallel.
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "codegen/Kernel.h"
#include "codegen/LLVMEmitter.h"

namespace llvm {
class Module;
class TargetMachine;
}  // namespace llvm
namespace llvm::orc {
class LLJIT;
}

namespace autotune {

/** LLVM's O3 module pipeline for `tm` (the CPU JIT's and the GPU path's). */
void optimize_module(llvm::Module &m, llvm::TargetMachine &tm);
/** The module as assembly text (PTX for NVPTX) or, with assembly false, an object file. */
Expected<std::string> emit_module_file(llvm::Module &m, llvm::TargetMachine &tm, bool assembly);

/** void stage(void **buffers, int64_t begin, int64_t end) */
using StageFn = void (*)(void **, int64_t, int64_t);

struct CompiledKernel {
  std::vector<StageFn> stages;
  bool from_cache = false;  // no stage was compiled for it: each was linked already or loaded from the disk cache
  double compile_ms = 0;
};

struct JitOptions {
  std::string cache_dir;  // empty: no disk cache
  Target target = host_target();  // what to compile for; it must be runnable here (Target::runnable_here)
};

class Jit {
 public:
  static Expected<std::unique_ptr<Jit>> create(JitOptions options = {});
  ~Jit();

  Expected<CompiledKernel> compile(const LoweredKernel &k);
  const Target &target() const { return options_.target; }
  /** Whether compiled objects go to the disk cache (a second compile of the same kernel, even in another process, loads it). */
  bool caches() const { return !options_.cache_dir.empty(); }
  /** The kernel as assembly for the target (what a reader checks: zmm or ymm registers, FMAs). */
  Expected<std::string> assembly(const LoweredKernel &k);

 private:
  Jit() = default;
  /** Stage `stage` of `k`, compiled (or loaded from the disk cache, or found linked) on its own; from_cache becomes false when it was compiled. */
  Expected<StageFn> compile_stage(const LoweredKernel &k, size_t stage, bool &from_cache);
  JitOptions options_;
  std::unique_ptr<llvm::orc::LLJIT> jit_;
  std::mutex mu_;  // guards linking into the JIT's dylib
};

/** The default on-disk cache: $XDG_CACHE_HOME/autotune/kernels or ~/.cache/autotune/kernels. */
std::string default_kernel_cache_dir();

}  // namespace autotune
