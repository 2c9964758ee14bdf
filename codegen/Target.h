#pragma once
// What kernels are compiled, scheduled and measured for: a CPU's instruction set, vector width,
// register file, caches and threads. Detected from the host by default (LLVM's host CPU and
// features, cache sizes from sysfs); a named ISA ("avx2", "avx512": configs/targets/*.json,
// built into the binary) or a JSON file overrides the fields it names, on top of the host's.
// The target feeds the LLVM target machine (so --target avx2 on an AVX-512 host emits AVX2
// code), the default schedule and the schedule space (lanes, register budget), the measured
// peak, and the tuning database's key: records of one target never serve another.
#include <cstdint>
#include <string>

#include "ir/Error.h"

namespace autotune {

struct Target {
  std::string name = "host";  // "host", a named ISA ("avx2", "avx512") or the stem of a JSON file
  std::string isa;            // "avx512", "avx2" or "sse" (x86); "generic" elsewhere
  std::string triple, cpu, features;  // what LLVM compiles for ("x86_64-pc-linux-gnu", "rocketlake", "+avx2,...")
  int lanes = 4;              // float32 lanes of one vector register
  int vector_registers = 16;  // architectural vector registers
  int fma_units = 2;          // FMA pipes per core (from the description; the measured peak is the truth)
  // 512-bit FMAs a core issues per cycle, measured when the host is detected (AVX-512 only; 0:
  // not known): 2 where it has two full-width pipes (Sapphire Rapids), 1 where a 512-bit FMA
  // takes both 256-bit pipes (Zen 4) or there is one 512-bit pipe. Where it is 1, a register tile
  // is bound by its FMAs before its loads; where 2, by its loads (codegen/Schedule's 1x1 tiles).
  int wide_fma_pipes = 0;
  int64_t l1_bytes = 32 << 10, l2_bytes = 1 << 20, l3_bytes = 8 << 20;  // data cache per core (L3: shared)
  int cores = 1, threads = 1;

  /** The JSON description: every field above. */
  std::string to_json() const;
  /**
   * The key of the tuning database's records: "x86_64-pc-linux-gnu/rocketlake/<hash of the
   * features>/2t". `run_threads` <= 0 counts one per hardware thread, as the thread pool does.
   */
  std::string key(int run_threads) const;
  /** Whether the code this target compiles can run here; the error names what the host lacks. */
  Status runnable_here() const;
};

/** The machine this process runs on. */
const Target &host_target();

/**
 * A target by name or file: "host" (or ""), a named ISA ("avx2", "avx512"), or a path to a JSON
 * file with any of Target's fields. Fields not given keep the host's values; an ISA narrower than
 * the host's keeps the host's CPU model with the wider features switched off.
 */
Expected<Target> resolve_target(const std::string &name_or_file);

/** Whether a JSON description is a GPU's ("kind": "gpu": codegen/Gpu.h reads it), not a CPU target's. */
bool is_gpu_description(const std::string &json);

/** The names resolve_target knows without a file. */
std::string known_target_names();  // "host, avx2, avx512"

}  // namespace autotune
