#include "codegen/Gpu.h"

#include <fcntl.h>
#include <llvm/Config/llvm-config.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetOptions.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>

#include "codegen/Jit.h"
#include "codegen/LLVMEmitter.h"
#include "codegen/Lower.h"
#include "codegen/Target.h"
#include "codegen/Transform.h"
#include "ir/Files.h"
#include "ir/Hash.h"

namespace autotune {

const std::vector<std::pair<std::string, std::string>> &builtin_target_descriptions();  // BuiltinTargets.cpp (generated)

namespace {

using namespace loop;

Expected<GpuTarget> parse_gpu(const std::string &text, const std::string &label) {
  if (!is_gpu_description(text)) return make_error(label + ": not a GPU description (\"kind\": \"gpu\"); CPU kernels are compiled by run, bench and the tuner");
  nlohmann::json j = nlohmann::json::parse(text);
  GpuTarget g;
  try {
    for (auto &[k, v] : j.items()) {
      if (k == "kind") continue;
      if (k == "name") g.name = v.get<std::string>();
      else if (k == "sm") g.sm = v.get<std::string>();
      else if (k == "ptx") g.ptx = v.get<std::string>();
      else if (k == "sm_count") g.sm_count = v.get<int>();
      else if (k == "warp_size") g.warp_size = v.get<int>();
      else if (k == "max_threads_per_block") g.max_threads_per_block = v.get<int>();
      else if (k == "threads_per_block") g.threads_per_block = v.get<int>();
      else if (k == "shared_bytes_per_block") g.shared_bytes_per_block = v.get<int64_t>();
      else if (k == "shared_bytes_per_sm") g.shared_bytes_per_sm = v.get<int64_t>();
      else if (k == "registers_per_thread") g.registers_per_thread = v.get<int>();
      else if (k == "registers_per_sm") g.registers_per_sm = v.get<int>();
      else return make_error(label + ": unknown field '" + k + "'");
    }
  } catch (const std::exception &e) {
    return make_error(label + ": " + e.what());
  }
  if (g.sm.rfind("sm_", 0) != 0) return make_error(label + ": sm must name an architecture such as sm_80");
  if (g.ptx.rfind("ptx", 0) != 0) return make_error(label + ": ptx must name a PTX ISA version such as ptx78");
  if (g.warp_size < 1 || g.threads_per_block < g.warp_size || g.threads_per_block % g.warp_size || g.threads_per_block > g.max_threads_per_block)
    return make_error(label + ": threads_per_block must be a multiple of the warp size, at most max_threads_per_block");
  return g;
}

/** The stage under the GPU schedule (lower_gpu). */
Expected<KernelStage> gpu_stage(const KernelStage &st, const GpuTarget &gpu) {
  // The output loops: the perfect nest at the top, each from 0 with a constant extent, each moving every store below it.
  std::vector<std::string> outs;
  int64_t extent = 1;
  for (Stmt cur = st.body; cur && cur->kind == StmtKind::kFor; cur = cur->body[0]) {
    auto mn = as_int(cur->min), ex = as_int(cur->extent);
    if (!mn || *mn != 0 || !ex || !stores_move_with(cur->body[0], cur->var)) break;
    outs.push_back(cur->var);
    extent *= *ex;
  }
  Stmt body = st.body;
  std::string f = outs.empty() ? "" : outs[0];
  for (size_t i = 1; i < outs.size(); ++i) {
    std::string fused = "gpu_f" + std::to_string(i);
    AT_ASSIGN(next, fuse(body, f, outs[i], fused));
    body = next;
    f = fused;
  }
  int64_t warp = gpu.warp_size, threads = std::min<int64_t>(gpu.threads_per_block, (extent + warp - 1) / warp * warp);
  int64_t blocks = (extent + threads - 1) / threads;
  Expr id = var("gpu_block") * threads + var("gpu_thread");
  Stmt inside = f.empty() ? body : substitute(body->body[0], f, id);
  if (blocks * threads != extent) inside = if_then(id < int_imm(extent), inside);
  KernelStage out = st;
  out.parallel_var = "gpu_block";
  out.parallel_extent = blocks;
  out.body = for_loop("gpu_thread", int_imm(0), int_imm(threads), ForKind::kSerial, inside);
  return out;
}

}  // namespace

std::string GpuTarget::to_json() const {
  nlohmann::json j{{"name", name},
                   {"kind", "gpu"},
                   {"sm", sm},
                   {"ptx", ptx},
                   {"sm_count", sm_count},
                   {"warp_size", warp_size},
                   {"max_threads_per_block", max_threads_per_block},
                   {"threads_per_block", threads_per_block},
                   {"shared_bytes_per_block", shared_bytes_per_block},
                   {"shared_bytes_per_sm", shared_bytes_per_sm},
                   {"registers_per_thread", registers_per_thread},
                   {"registers_per_sm", registers_per_sm}};
  return j.dump(2);
}

Expected<GpuTarget> resolve_gpu_target(const std::string &name_or_file) {
  for (const auto &[name, json] : builtin_target_descriptions())
    if (name == name_or_file) return parse_gpu(json, "target " + name);
  if (!std::filesystem::is_regular_file(name_or_file)) {
    std::string names;
    for (const auto &[name, json] : builtin_target_descriptions())
      if (is_gpu_description(json)) names += (names.empty() ? "" : ", ") + name;
    return make_error("unknown GPU target '" + name_or_file + "' (" + names + ", or a JSON file with \"kind\": \"gpu\")");
  }
  AT_ASSIGN(text, read_file(name_or_file));
  return parse_gpu(text, name_or_file);
}

bool is_gpu_target(const std::string &name_or_file) {
  for (const auto &[name, json] : builtin_target_descriptions())
    if (name == name_or_file) return is_gpu_description(json);
  if (!std::filesystem::is_regular_file(name_or_file)) return false;
  auto text = read_file(name_or_file);
  return text && is_gpu_description(*text);
}

Expected<LoweredKernel> lower_gpu(const Graph &body, const std::string &name, const GpuTarget &gpu) {
  AT_ASSIGN(k, lower_naive(body, name, KernelSchedule{}));
  for (KernelStage &st : k.stages) {
    auto s = gpu_stage(st, gpu);
    if (!s) return make_error(name + " stage " + st.name + ": " + s.error().message);
    st = s.take();
  }
  k.schedule = "gpu: one output element per thread, " + std::to_string(gpu.threads_per_block) + " threads per block at most";
  return k;
}

Expected<PtxKernel> emit_ptx(const LoweredKernel &k, const GpuTarget &gpu, const std::string &cache_dir) {
  static std::once_flag init;
  std::call_once(init, [] {
    LLVMInitializeNVPTXTargetInfo();
    LLVMInitializeNVPTXTarget();
    LLVMInitializeNVPTXTargetMC();
    LLVMInitializeNVPTXAsmPrinter();
  });
  const std::string triple = "nvptx64-nvidia-cuda", features = "+" + gpu.ptx;
  std::string err;
  const llvm::Target *t = llvm::TargetRegistry::lookupTarget(triple, err);
  if (!t) return make_error("LLVM has no NVPTX backend: " + err);
  std::unique_ptr<llvm::TargetMachine> tm(
      t->createTargetMachine(triple, gpu.sm, features, llvm::TargetOptions(), std::nullopt, std::nullopt, llvm::CodeGenOptLevel::Aggressive));
  if (!tm) return make_error("LLVM: no NVPTX target machine for " + gpu.sm + " " + features);
  llvm::LLVMContext ctx;
  AT_ASSIGN(m, emit_llvm_gpu(k, ctx, gpu.sm, features));
  PtxKernel out;
  std::string path, seal;
  if (!cache_dir.empty()) {
    std::string ir;
    llvm::raw_string_ostream os(ir);
    m->print(os, nullptr);
    path = cache_dir + "/" + k.name + "_" + fnv1a_hex(os.str() + gpu.sm + features + LLVM_VERSION_STRING) + ".ptx";
    if (auto entry = read_file(path)) {
      size_t last = entry->rfind("// autotune-ptx ");
      if (last != std::string::npos && entry->substr(last) == "// autotune-ptx " + fnv1a_hex(entry->substr(0, last)) + "\n")
        out.ptx = entry->substr(0, last), out.from_cache = true;  // a damaged entry fails the check: rebuilt below
    }
  }
  if (!out.from_cache) {
    m->setDataLayout(tm->createDataLayout());
    optimize_module(*m, *tm);
    AT_ASSIGN(ptx, emit_module_file(*m, *tm, true));
    out.ptx = ptx;
    if (!path.empty()) {
      std::error_code ec;
      std::filesystem::create_directories(cache_dir, ec);
      (void)write_file_atomic(path, ptx + "// autotune-ptx " + fnv1a_hex(ptx) + "\n");  // a cache that cannot be written only costs time
    }
  }
  for (size_t i = 0; i < k.stages.size(); ++i)
    out.launches.push_back({stage_symbol(k, i), k.stages[i].parallel_extent, *as_int(k.stages[i].body->extent)});
  return out;
}

std::string find_ptxas() {
  if (const char *env = std::getenv("AUTOTUNE_PTXAS"); env && *env) return std::filesystem::exists(env) ? env : "";
  if (const char *path = std::getenv("PATH")) {
    std::string p = path;
    for (size_t at = 0; at <= p.size();) {
      size_t colon = p.find(':', at);
      std::string dir = p.substr(at, colon == std::string::npos ? std::string::npos : colon - at);
      if (!dir.empty() && access((dir + "/ptxas").c_str(), X_OK) == 0) return dir + "/ptxas";
      if (colon == std::string::npos) break;
      at = colon + 1;
    }
  }
  return access("/usr/local/cuda/bin/ptxas", X_OK) == 0 ? "/usr/local/cuda/bin/ptxas" : "";
}

Status ptxas_check(const std::string &ptx, const GpuTarget &gpu, const std::string &ptxas) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("autotune_ptxas_" + std::to_string(getpid()) + "_" + std::to_string(std::hash<std::string>{}(ptx)));
  fs::create_directories(dir);
  fs::path in = dir / "k.ptx", log = dir / "log.txt";
  std::ofstream(in) << ptx;
  pid_t pid = fork();
  if (pid < 0) {
    fs::remove_all(dir);
    return make_error("ptxas: cannot fork");
  }
  if (pid == 0) {
    int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd >= 0) dup2(fd, 1), dup2(fd, 2);
    std::string arch = "-arch=" + gpu.sm;
    execl(ptxas.c_str(), ptxas.c_str(), arch.c_str(), "-o", "/dev/null", in.c_str(), static_cast<char *>(nullptr));
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  std::string said;
  std::getline(std::ifstream(log), said);
  fs::remove_all(dir);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return Status::ok();
  return make_error("ptxas -arch=" + gpu.sm + " refused the PTX: " + (said.empty() ? "exit status " + std::to_string(WEXITSTATUS(status)) : said));
}

}  // namespace autotune
