#include "codegen/Jit.h"

#include "ir/Files.h"
#include "ir/Hash.h"

#include <llvm/Bitcode/BitcodeWriter.h>
#include <llvm/Config/llvm-config.h>
#include <llvm/ExecutionEngine/Orc/ExecutionUtils.h>
#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Module.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Object/ObjectFile.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/TargetParser/Host.h>


#include <cctype>
#include <cstring>
#include <sstream>
#include <chrono>
#include <cstdlib>
#include <filesystem>

namespace autotune {
namespace {

std::string to_string(llvm::Error e) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << e;
  return os.str();
}

Expected<std::unique_ptr<llvm::TargetMachine>> make_target_machine(const Target &target) {
  llvm::orc::JITTargetMachineBuilder jtmb{llvm::Triple(target.triple)};
  jtmb.setCPU(target.cpu);
  std::vector<std::string> features;
  std::stringstream ss(target.features);
  for (std::string f; std::getline(ss, f, ',');)
    if (!f.empty()) features.push_back(f);
  jtmb.addFeatures(features);
  jtmb.setCodeGenOptLevel(llvm::CodeGenOptLevel::Aggressive);
  auto tm = jtmb.createTargetMachine();
  if (!tm) return make_error("LLVM: target " + target.name + ": " + to_string(tm.takeError()));
  return std::move(*tm);
}

}  // namespace

void optimize_module(llvm::Module &m, llvm::TargetMachine &tm) {
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

/** Whether `object` parses as an object file for this host (a cheap check before linking). */
bool validate_object(const std::string &object) {
  auto parsed = llvm::object::ObjectFile::createObjectFile(llvm::MemoryBufferRef(object, "kernel"));
  if (!parsed) {
    llvm::consumeError(parsed.takeError());
    return false;
  }
  return true;
}

Expected<std::string> emit_module_file(llvm::Module &m, llvm::TargetMachine &tm, bool assembly) {
  llvm::SmallVector<char, 0> buf;
  llvm::raw_svector_ostream os(buf);
  llvm::legacy::PassManager pm;
  if (tm.addPassesToEmitFile(pm, os, nullptr, assembly ? llvm::CodeGenFileType::AssemblyFile : llvm::CodeGenFileType::ObjectFile))
    return make_error("LLVM: the target cannot emit this file type");
  pm.run(m);
  return std::string(buf.begin(), buf.end());
}

namespace {

/**
 * A cache entry is the object file followed by a footer: a magic, the object's length and its
 * FNV-1a. A truncated, damaged or foreign file fails the check and is rebuilt, never trusted.
 */
constexpr char kCacheMagic[8] = {'a', 't', 'k', 'o', 'b', 'j', '0', '1'};
constexpr size_t kFooterBytes = 8 + 8 + 8;

std::string seal_cache_entry(const std::string &object) {
  std::string out = object;
  uint64_t fields[2] = {object.size(), fnv1a(object)};
  out.append(kCacheMagic, sizeof kCacheMagic);
  out.append(reinterpret_cast<const char *>(fields), sizeof fields);
  return out;
}

/** The object inside a cache entry, or "" when the entry does not check out. */
std::string open_cache_entry(const std::string &entry) {
  if (entry.size() < kFooterBytes) return "";
  size_t n = entry.size() - kFooterBytes;
  uint64_t fields[2];
  std::memcpy(fields, entry.data() + n + sizeof kCacheMagic, sizeof fields);
  if (entry.compare(n, sizeof kCacheMagic, kCacheMagic, sizeof kCacheMagic) != 0 || fields[0] != n) return "";
  std::string object = entry.substr(0, n);
  return fnv1a(object) == fields[1] ? object : "";
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
  AT_TRY(options.target.runnable_here());
  std::unique_ptr<Jit> j(new Jit());
  j->options_ = std::move(options);
  AT_TRY(make_target_machine(j->options_.target));  // a target LLVM cannot build fails here, not at the first kernel
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
  CompiledKernel out;
  out.from_cache = true;  // until a stage is compiled here
  for (size_t i = 0; i < k.stages.size(); ++i) {
    AT_ASSIGN(fn, compile_stage(k, i, out.from_cache));
    out.stages.push_back(fn);
  }
  out.compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

Expected<StageFn> Jit::compile_stage(const LoweredKernel &k, size_t stage, bool &from_cache) {
  // Emit under a placeholder name and hash that IR with the target and LLVM version: the hash
  // names the symbols and the cache file, so identical stages (the same conv shape in two
  // layers, two runs of one model, or two candidates of one task that differ only in another
  // stage, such as Winograd's input and output transforms) share one compiled object.
  LoweredKernel named;
  named.name = "kernel";
  named.buffers = k.buffers;
  named.num_params = k.num_params;
  named.stages = k.stages;
  llvm::LLVMContext ctx;
  const Target &target = options_.target;
  AT_ASSIGN(m, emit_llvm_stage(named, stage, ctx, target));
  // The key hashes the module's bitcode, not its text: the same module, written 3.5x faster (0.71
  // against 2.46 ms for a tuning candidate's stages), and the key is computed on every compile,
  // a cache hit's included.
  std::string bitcode;
  {
    llvm::raw_string_ostream os(bitcode);
    llvm::WriteBitcodeToFile(*m, os);
  }
  std::string hex = fnv1a_hex(bitcode + target.cpu + target.features + LLVM_VERSION_STRING);
  std::string base;
  for (char c : k.name) base += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  named.name = base + "_" + hex;
  for (llvm::Function &f : *m)
    if (f.getName().starts_with("kernel_s")) f.setName(named.name + f.getName().substr(6).str());
  const std::string symbol = stage_symbol(named, stage);

  auto lookup = [&](bool report) -> Expected<StageFn> {
    auto sym = jit_->lookup(symbol);
    if (!sym) {
      std::string msg = to_string(sym.takeError());
      return make_error(report ? "LLVM: symbol " + symbol + " not found: " + msg : msg);
    }
    return sym->toPtr<StageFn>();
  };
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto fn = lookup(false)) return *fn;  // already linked in this process
  }
  std::string cache_path = options_.cache_dir.empty() ? "" : options_.cache_dir + "/" + symbol + ".o";
  std::string object;
  bool cached = false;
  if (!cache_path.empty()) {
    if (auto entry = read_file(cache_path)) object = open_cache_entry(*entry);  // a missing or bad entry: rebuild
    cached = !object.empty();
  }
  auto build = [&]() -> Expected<std::string> {
    AT_ASSIGN(tm, make_target_machine(target));
    m->setDataLayout(tm->createDataLayout());
    optimize_module(*m, *tm);
    AT_ASSIGN(obj, emit_module_file(*m, *tm, false));
    // A cache that cannot be written (a full disk, no permission) costs a recompile next time,
    // nothing more: the entry is written whole or not at all.
    if (!cache_path.empty()) (void)write_file_atomic(cache_path, seal_cache_entry(obj));
    return obj;
  };
  if (object.empty()) {
    AT_ASSIGN(obj, build());
    object = std::move(obj);
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (auto fn = lookup(false)) return *fn;  // another thread linked it meanwhile
  // A cached object that passed its checksum but still does not link (written by another LLVM
  // build, say) is rebuilt once from the IR; a fresh object that does not link is an error.
  auto link = [&](const std::string &obj) -> Expected<StageFn> {
    if (auto err = jit_->addObjectFile(llvm::MemoryBuffer::getMemBufferCopy(obj, symbol)))
      return make_error("LLVM: cannot link " + symbol + ": " + to_string(std::move(err)));
    return lookup(true);
  };
  Expected<StageFn> linked = validate_object(object) ? link(object) : Expected<StageFn>(make_error("LLVM: " + symbol + " is not a valid object file"));
  if (!linked) {
    if (!cached) return linked.error();
    cached = false;
    AT_ASSIGN(obj, build());
    AT_ASSIGN(fn, link(obj));
    linked = fn;
  }
  from_cache = from_cache && cached;
  return *linked;
}

Expected<std::string> Jit::assembly(const LoweredKernel &k) {
  llvm::LLVMContext ctx;
  AT_ASSIGN(m, emit_llvm(k, ctx, options_.target));
  AT_ASSIGN(tm, make_target_machine(options_.target));
  m->setDataLayout(tm->createDataLayout());
  optimize_module(*m, *tm);
  return emit_module_file(*m, *tm, true);
}

}  // namespace autotune
