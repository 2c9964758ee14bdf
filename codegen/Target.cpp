#include "codegen/Target.h"

#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include "ir/Files.h"
#include "ir/Hash.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace autotune {

const std::vector<std::pair<std::string, std::string>> &builtin_target_descriptions();  // BuiltinTargets.cpp (generated)

namespace {

/** The "+name" features of an LLVM feature string (a later "-name" switches one off again). */
std::set<std::string> enabled_features(const std::string &features) {
  std::set<std::string> on;
  std::stringstream ss(features);
  for (std::string f; std::getline(ss, f, ',');) {
    if (f.size() < 2) continue;
    if (f[0] == '+') on.insert(f.substr(1));
    else if (f[0] == '-') on.erase(f.substr(1));
  }
  return on;
}

/** A sysfs cache size ("48K", "2048K", "32M") in bytes, or 0. */
int64_t parse_cache_size(const std::string &s) {
  try {
    size_t pos = 0;
    int64_t v = std::stoll(s, &pos);
    char unit = pos < s.size() ? s[pos] : ' ';
    return unit == 'K' ? v << 10 : unit == 'M' ? v << 20 : unit == 'G' ? v << 30 : v;
  } catch (const std::exception &) {
    return 0;
  }
}

std::string read_line(const std::string &path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

#if defined(__x86_64__)
// Twelve independent chains of FMAs: enough to keep two pipes of 4-cycle latency busy.
__attribute__((target("avx512f"))) float fma_chains_512(int64_t iters) {
  __m512 b = _mm512_set1_ps(0.9999999f), c = _mm512_set1_ps(1e-7f), a[12];
  for (int k = 0; k < 12; ++k) a[k] = _mm512_set1_ps(1.0f + static_cast<float>(k));
  for (int64_t i = 0; i < iters; ++i)
    for (int k = 0; k < 12; ++k) a[k] = _mm512_fmadd_ps(a[k], b, c);
  for (int k = 1; k < 12; ++k) a[0] = _mm512_add_ps(a[0], a[k]);
  alignas(64) float out[16];
  _mm512_store_ps(out, a[0]);
  return out[0] + out[15];
}

__attribute__((target("avx2,fma"))) float fma_chains_256(int64_t iters) {
  __m256 b = _mm256_set1_ps(0.9999999f), c = _mm256_set1_ps(1e-7f), a[12];
  for (int k = 0; k < 12; ++k) a[k] = _mm256_set1_ps(1.0f + static_cast<float>(k));
  for (int64_t i = 0; i < iters; ++i)
    for (int k = 0; k < 12; ++k) a[k] = _mm256_fmadd_ps(a[k], b, c);
  for (int k = 1; k < 12; ++k) a[0] = _mm256_add_ps(a[0], a[k]);
  alignas(32) float out[8];
  _mm256_store_ps(out, a[0]);
  return out[0] + out[7];
}

/**
 * 512-bit FMAs per cycle on this core, from the time of the same number of 512-bit and 256-bit
 * FMAs (every AVX-512 core issues two 256-bit FMAs a cycle): equal times mean two 512-bit pipes,
 * twice the time one. The fastest of seven alternating timings each (about 2 ms in all), after a
 * warm-up (a core may start its upper halves slowly); the ratio is 1 or 2 far beyond a loaded
 * host's noise, which only lengthens timings.
 */
int measure_wide_fma_pipes() {
  constexpr int64_t kIters = 40000;
  volatile float sink = fma_chains_512(kIters) + fma_chains_256(kIters);
  double t512 = 1e30, t256 = 1e30;
  for (int rep = 0; rep < 7; ++rep)
    for (bool wide : {true, false}) {
      auto t0 = std::chrono::steady_clock::now();
      sink = sink + (wide ? fma_chains_512(kIters) : fma_chains_256(kIters));
      double &best = wide ? t512 : t256;
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
  (void)sink;
  return t512 < 1.5 * t256 ? 2 : 1;
}
#endif

/** Fills the ISA, lanes and register count from the enabled features (x86; "generic" elsewhere). */
void classify_isa(Target &t) {
  std::set<std::string> on = enabled_features(t.features);
  bool x86 = t.triple.rfind("x86_64", 0) == 0;
  if (x86 && on.count("avx512f")) t.isa = "avx512", t.lanes = 16, t.vector_registers = 32;
  else if (x86 && on.count("avx2") && on.count("fma")) t.isa = "avx2", t.lanes = 8, t.vector_registers = 16;
  else if (x86) t.isa = "sse", t.lanes = 4, t.vector_registers = 16;
  else t.isa = "generic", t.lanes = 4, t.vector_registers = 16;
}

Target detect_host() {
  Target t;
  t.name = "host";
  if (auto jtmb = llvm::orc::JITTargetMachineBuilder::detectHost()) {
    t.triple = jtmb->getTargetTriple().str();
    t.cpu = jtmb->getCPU();
    t.features = jtmb->getFeatures().getString();
  } else {
    llvm::consumeError(jtmb.takeError());
  }
  classify_isa(t);
#if defined(__x86_64__)
  if (t.isa == "avx512") t.wide_fma_pipes = measure_wide_fma_pipes();
#endif
  // Caches of cpu0 from sysfs: the L1 data cache, the unified L2 and L3.
  for (int i = 0; i < 8; ++i) {
    std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/";
    std::string level = read_line(dir + "level"), type = read_line(dir + "type");
    if (level.empty()) break;
    int64_t size = parse_cache_size(read_line(dir + "size"));
    if (size <= 0) continue;
    if (level == "1" && type == "Data") t.l1_bytes = size;
    else if (level == "2") t.l2_bytes = size;
    else if (level == "3") t.l3_bytes = size;
  }
  t.threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::set<std::string> cores;  // distinct (package, core) pairs of the online CPUs
  for (int c = 0; c < t.threads; ++c) {
    std::string topo = "/sys/devices/system/cpu/cpu" + std::to_string(c) + "/topology/";
    std::string core = read_line(topo + "core_id"), package = read_line(topo + "physical_package_id");
    if (!core.empty()) cores.insert(package + "/" + core);
  }
  t.cores = cores.empty() ? t.threads : static_cast<int>(cores.size());
  return t;
}

bool gpu_kind(const nlohmann::json &j) { return j.is_object() && j.contains("kind") && j["kind"] == "gpu"; }

/** Applies a JSON description's fields to `t`; the error names the field. */
Status apply_description(Target &t, const std::string &json, const std::string &label) {
  nlohmann::json j = nlohmann::json::parse(json, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return make_error(label + ": not a JSON object");
  if (gpu_kind(j))
    return make_error(label + " is a GPU: tuning, run and bench take it (on the machine's GPU, through the CUDA driver), and 'autotune compile --model M --target " +
                      j.value("name", std::string("sm_XX")) + " --out DIR' writes its PTX");
  try {
    // The instruction set first: the ISA, lanes and registers follow from the features unless the
    // description says otherwise.
    if (j.contains("triple")) t.triple = j["triple"].get<std::string>();
    if (j.contains("cpu")) t.cpu = j["cpu"].get<std::string>();
    if (j.contains("features")) t.features += (t.features.empty() ? "" : ",") + j["features"].get<std::string>();  // on top of the host's
    classify_isa(t);
    for (auto &[k, v] : j.items()) {
      if (k == "triple" || k == "cpu" || k == "features") continue;
      if (k == "name") t.name = v.get<std::string>();
      else if (k == "isa") t.isa = v.get<std::string>();
      else if (k == "lanes") t.lanes = v.get<int>();
      else if (k == "vector_registers") t.vector_registers = v.get<int>();
      else if (k == "fma_units") t.fma_units = v.get<int>();
      else if (k == "wide_fma_pipes") t.wide_fma_pipes = v.get<int>();
      else if (k == "l1_bytes") t.l1_bytes = v.get<int64_t>();
      else if (k == "l2_bytes") t.l2_bytes = v.get<int64_t>();
      else if (k == "l3_bytes") t.l3_bytes = v.get<int64_t>();
      else if (k == "cores") t.cores = v.get<int>();
      else if (k == "threads") t.threads = v.get<int>();
      else if (k == "peak_gflops" || k == "peak_gflops_per_thread") continue;  // measurements `autotune target --json` prints
      else return make_error(label + ": unknown field '" + k + "'");
    }
  } catch (const std::exception &e) {
    return make_error(label + ": " + e.what());
  }
  if (t.lanes != 4 && t.lanes != 8 && t.lanes != 16) return make_error(label + ": lanes must be 4, 8 or 16");
  if (t.vector_registers < 8 || t.vector_registers > 64) return make_error(label + ": vector_registers must be between 8 and 64");
  if (t.fma_units < 1 || t.fma_units > 4) return make_error(label + ": fma_units must be between 1 and 4");
  if (t.wide_fma_pipes < 0 || t.wide_fma_pipes > 4) return make_error(label + ": wide_fma_pipes must be between 0 (unknown) and 4");
  if (t.cores < 1 || t.threads < 1) return make_error(label + ": cores and threads must be at least 1");
  for (int64_t c : {t.l1_bytes, t.l2_bytes, t.l3_bytes})
    if (c < 1024) return make_error(label + ": cache sizes must be at least 1 KiB");
  return Status::ok();
}

}  // namespace

std::string Target::to_json() const {
  nlohmann::json j{{"name", name},       {"isa", isa},     {"triple", triple}, {"cpu", cpu},
                   {"features", features}, {"lanes", lanes}, {"vector_registers", vector_registers},
                   {"fma_units", fma_units}, {"wide_fma_pipes", wide_fma_pipes}, {"l1_bytes", l1_bytes}, {"l2_bytes", l2_bytes},
                   {"l3_bytes", l3_bytes}, {"cores", cores}, {"threads", threads}};
  return j.dump(2);
}

std::string Target::key(int run_threads) const {
  // The features as a set, so "avx512" resolved on an AVX-512 host (the host's features plus the
  // ones it already has) keys the same records as "host".
  std::string set;
  for (const std::string &f : enabled_features(features)) set += f + ",";
  if (run_threads <= 0) run_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return triple + "/" + cpu + "/" + fnv1a_hex(set).substr(0, 8) + "/" + std::to_string(run_threads) + "t";
}

Status Target::runnable_here() const {
  const Target &host = host_target();
  if (triple != host.triple) return make_error("target " + name + " is " + triple + ", this machine is " + host.triple);
  std::set<std::string> have = enabled_features(host.features);
  for (const std::string &f : enabled_features(features))
    if (!have.count(f))
      return make_error("target " + name + " (" + isa + ") needs the CPU feature " + f + ", which this machine (" + host.cpu + ", " + host.isa +
                        ") lacks");
  return Status::ok();
}

const Target &host_target() {
  static const Target host = detect_host();
  return host;
}

bool is_gpu_description(const std::string &json) { return gpu_kind(nlohmann::json::parse(json, nullptr, false)); }

std::string known_target_names() {
  std::string names = "host";
  for (const auto &[name, json] : builtin_target_descriptions())
    if (!is_gpu_description(json)) names += ", " + name;  // GPUs: codegen/Gpu.h
  return names;
}

Expected<Target> resolve_target(const std::string &name_or_file) {
  Target t = host_target();
  if (name_or_file.empty() || name_or_file == "host") return t;
  for (const auto &[name, json] : builtin_target_descriptions()) {
    if (name != name_or_file) continue;
    AT_TRY(apply_description(t, json, "target " + name));
    return t;
  }
  if (!std::filesystem::is_regular_file(name_or_file))
    return make_error("unknown target '" + name_or_file + "' (" + known_target_names() + ", or a JSON file)");
  AT_ASSIGN(text, read_file(name_or_file));
  t.name = std::filesystem::path(name_or_file).stem().string();
  AT_TRY(apply_description(t, text, name_or_file));
  return t;
}

}  // namespace autotune
