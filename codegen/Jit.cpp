#include "codegen/Jit.h"

#include "ir/Hash.h"

#include <llvm/Config/llvm-config.h>
#include <llvm/ExecutionEngine/Orc/ExecutionUtils.h>
#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Module.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/TargetParser/Host.h>

#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace autotune {
namespace {

std::string to_string(llvm::Error e) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << e;
  return os.str();
}

Expected<std::unique_ptr<llvm::TargetMachine>> make_target_machine() {
  auto jtmb = llvm::orc::JITTargetMachineBuilder::detectHost();
  if (!jtmb) return make_error("LLVM: cannot detect the host: " + to_string(jtmb.takeError()));
  jtmb->setCodeGenOptLevel(llvm::CodeGenOptLevel::Aggressive);
  auto tm = jtmb->createTargetMachine();
  if (!tm) return make_error("LLVM: " + to_string(tm.takeError()));
  return std::move(*tm);
}

void optimize(llvm::Module &m, llvm::TargetMachine &tm) {
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::PassBuilder pb(&tm);
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  pb.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3).run(m, mam);
}

Expected<std::string> emit_file(llvm::Module &m, llvm::TargetMachine &tm, llvm::CodeGenFileType type) {
  llvm::SmallVector<char, 0> buf;
  llvm::raw_svector_ostream os(buf);
  llvm::legacy::PassManager pm;
  if (tm.addPassesToEmitFile(pm, os, nullptr, type)) return make_error("LLVM: the target cannot emit this file type");
  pm.run(m);
  return std::string(buf.begin(), buf.end());
}

}  // namespace

std::string default_kernel_cache_dir() {
  if (const char *x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/autotune/kernels";
  if (const char *h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/autotune/kernels";
  return "";
}

Jit::~Jit() = default;

Expected<std::unique_ptr<Jit>> Jit::create(JitOptions options) {
  static const bool initialized = [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    return true;
  }();
  (void)initialized;
  std::unique_ptr<Jit> j(new Jit());
  j->options_ = std::move(options);
  AT_ASSIGN(tm, make_target_machine());
  j->target_ = {tm->getTargetTriple().str(), tm->getTargetCPU().str(), tm->getTargetFeatureString().str()};
  auto jit = llvm::orc::LLJITBuilder().create();
  if (!jit) return make_error("LLVM: cannot create the JIT: " + to_string(jit.takeError()));
  j->jit_ = std::move(*jit);
  // Kernels call libm (expf) and nothing else; resolve from the process.
  auto gen = llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(j->jit_->getDataLayout().getGlobalPrefix());
  if (!gen) return make_error("LLVM: " + to_string(gen.takeError()));
  j->jit_->getMainJITDylib().addGenerator(std::move(*gen));
  if (!j->options_.cache_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(j->options_.cache_dir, ec);
    if (ec) j->options_.cache_dir.clear();  // an unwritable cache is no cache, not an error
  }
  return j;
}

Expected<CompiledKernel> Jit::compile(const LoweredKernel &k) {
  auto t0 = std::chrono::steady_clock::now();
  // Emit under a placeholder name and hash that IR with the target and LLVM version: the hash
  // names the symbols and the cache file, so identical kernels (the same conv shape in two
  // layers, or two runs of one model) share one compiled object.
  LoweredKernel named = k;
  named.name = "kernel";
  llvm::LLVMContext ctx;
  AT_ASSIGN(m, emit_llvm(named, ctx, target_));
  std::string ir;
  {
    llvm::raw_string_ostream os(ir);
    m->print(os, nullptr);
  }
  std::string hex = fnv1a_hex(ir + target_.cpu + target_.features + LLVM_VERSION_STRING);
  std::string base;
  for (char c : k.name) base += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  named.name = base + "_" + hex;
  for (llvm::Function &f : *m)
    if (f.getName().starts_with("kernel_s")) f.setName(named.name + f.getName().substr(6).str());

  CompiledKernel out;
  auto lookup_all = [&](bool report) -> Status {
    std::vector<StageFn> fns;
    for (size_t i = 0; i < named.stages.size(); ++i) {
      auto sym = jit_->lookup(stage_symbol(named, i));
      if (!sym) {
        std::string msg = to_string(sym.takeError());
        return make_error(report ? "LLVM: symbol " + stage_symbol(named, i) + " not found: " + msg : msg);
      }
      fns.push_back(sym->toPtr<StageFn>());
    }
    out.stages = std::move(fns);
    return Status::ok();
  };
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (lookup_all(false)) {  // already linked in this process
      out.from_cache = true;
      return out;
    }
  }
  std::string cache_path = options_.cache_dir.empty() ? "" : options_.cache_dir + "/" + named.name + ".o";
  std::string object;
  if (!cache_path.empty()) {
    std::ifstream f(cache_path, std::ios::binary);
    std::ostringstream ss;
    ss << f.rdbuf();
    object = ss.str();
    out.from_cache = !object.empty();
  }
  if (object.empty()) {
    AT_ASSIGN(tm, make_target_machine());
    m->setDataLayout(tm->createDataLayout());
    optimize(*m, *tm);
    AT_ASSIGN(obj, emit_file(*m, *tm, llvm::CodeGenFileType::ObjectFile));
    object = std::move(obj);
    if (!cache_path.empty()) {  // write-then-rename: a concurrent reader never sees half a file
      std::string tmp = cache_path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(next_id_++);
      {
        std::ofstream f(tmp, std::ios::binary);
        f.write(object.data(), static_cast<std::streamsize>(object.size()));
      }
      std::error_code ec;
      std::filesystem::rename(tmp, cache_path, ec);
      if (ec) std::filesystem::remove(tmp, ec);
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (!lookup_all(false)) {  // another thread may have linked it meanwhile
    auto buf = llvm::MemoryBuffer::getMemBufferCopy(object, named.name);
    if (auto err = jit_->addObjectFile(std::move(buf)))
      return make_error("LLVM: cannot link " + named.name + ": " + to_string(std::move(err)));
    AT_TRY(lookup_all(true));
  }
  out.compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace autotune
