#pragma once
// The GPU path (issue 13), first stage: NVIDIA targets described in configs/targets/sm_*.json
// ("kind": "gpu"); every fused group lowered under a GPU schedule (each stage's output loops
// fused and bound to blocks x threads, one output element per thread, a guard where the block
// does not divide them); PTX through LLVM's NVPTX backend; ptxas, where installed, as the check.
// The same GPU-scheduled kernel also runs on the CPU with its blocks as the parallel loop and its
// threads a serial loop inside (what CPU implementations of CUDA do), so its results are checked
// against the reference executor on a machine without a GPU. No launch, no device memory and no
// timing yet: that needs the CUDA driver, which these machines lack.
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "codegen/Kernel.h"
#include "codegen/LoopIR.h"
#include "ir/Error.h"
#include "ir/Graph.h"

namespace autotune {

struct GpuTarget {
  std::string name;  // "sm_80"
  std::string sm;    // the architecture LLVM and ptxas compile for: "sm_80"
  std::string ptx;   // the PTX ISA version feature: "ptx78"
  int sm_count = 0, warp_size = 32, max_threads_per_block = 1024;
  int threads_per_block = 256;  // the GPU schedule's block size (a multiple of the warp)
  int64_t shared_bytes_per_block = 48 << 10, shared_bytes_per_sm = 0;
  int registers_per_thread = 255, registers_per_sm = 65536;
  int max_threads_per_sm = 2048, max_blocks_per_sm = 32;  // the SM's limits on resident threads and blocks (occupancy)

  std::string to_json() const;
};

/** A GPU description by name (a built-in configs/targets/sm_*.json) or JSON file with "kind": "gpu". */
Expected<GpuTarget> resolve_gpu_target(const std::string &name_or_file);
/** Whether resolve_gpu_target takes this name (a built-in GPU description, or a file that is one). */
bool is_gpu_target(const std::string &name_or_file);

/**
 * A reduction stage as a tiled GPU kernel. The stage (output loops around acc = init; reduction
 * loops around acc = U(acc, ...); the epilogue's store) is read as a batched GEMM: U's operands
 * (its largest subexpressions free of acc that use a reduction loop) each depend on some output
 * loops; two operands whose sets neither holds the other split the output loops into m (the
 * first's own), n (the second's own) and batch (both), so every operand is an "A" (m, batch, k)
 * or a "B" (n, batch, k). A block computes bm x bn outputs of one batch index with
 * (bm / tm) x (bn / tn) threads, each a tm x tn register tile (its rows i * bm / tm + its thread's
 * row, so a warp's shared reads and global stores are spread, not strided); the reduction loops
 * fused into k run in chunks of bk: every thread of the block loads a share of each operand's
 * bm x bk (bn x bk) chunk into shared memory (the order of the load that walks global memory
 * contiguously), a barrier, the tm x tn updates from shared memory, a barrier. Edges are guarded:
 * tiles need not divide m, n or k.
 */
struct GpuTile {
  int64_t bm = 64, bn = 64, bk = 16, tm = 4, tn = 4;
  bool m_fastest = false;  // consecutive threads take consecutive m (else n): which one the output stores walk contiguously
  bool pad = true;         // each shared row one element longer: a warp reading a column hits different banks
  bool pack = true;        // a conv or dense weight read as a B operand packed [O / 32][...][32] (a WeightPacking the
                           // runtime applies), so a warp's loads of consecutive output channels are contiguous

  int64_t threads() const { return (bm / tm) * (bn / tn); }
  std::string to_json() const;
  bool operator==(const GpuTile &o) const = default;
};
Expected<GpuTile> gpu_tile_from_json(const std::string &json);

/**
 * A reduction stage that is no GEMM (a GEMV, a global pool, a mean) with a long reduction as a
 * cooperative row reduction: a block of `threads` computes threads / lanes outputs, `lanes`
 * threads each; a thread combines every lanes-th term of its output's reduction (consecutive
 * threads reading consecutive terms: coalesced), the partials meet in shared memory and are
 * halved log2(lanes) times between barriers, and the output's first thread applies the init and
 * the epilogue. The update must be a sum (acc + x, fmuladd(a, b, acc)), a max or a min.
 */
struct GpuReduce {
  int64_t lanes = 256, threads = 256;
  std::string to_json() const;
  bool operator==(const GpuReduce &o) const = default;
};

/** A group's GPU schedule: its GEMM stage's tile, its row reduction's, or neither (the defaults). */
struct GpuSchedule {
  std::optional<GpuTile> tile;
  std::optional<GpuReduce> reduce;
  // Off: no tile packs its weights, whatever its `pack` says (a runtime's choice where a weight is
  // computed by the graph, not a constant packed once; not part of the schedule's JSON).
  bool pack_weights = true;
  // Off: a stencil reduction (a depthwise conv, a pool) runs one output per thread, each reading
  // its window from global memory, instead of halo tiles in shared memory (not in the JSON either).
  bool halo_tiles = true;
};

/** A reduction stage's shape as a row reduction: its outputs, the terms each combines, the combine ("add", "max", "min"). */
struct RowReduceShape {
  int64_t outputs = 1, k = 1;
  std::string combine;
};
Expected<RowReduceShape> row_reduce_shape(const KernelStage &st);
/**
 * A stage of scalars and passes over a row (softmax, LayerNorm: a scalar set from scalars, a loop
 * combining terms into a scalar, a loop storing each element of the row, a store per row) as rows
 * (combine ""; k the longest pass). lower_gpu gives such a stage lanes threads per row under the
 * same GpuReduce knobs: each pass strided over the lanes, each combine's partials halved in shared
 * memory and the total given to every lane, a barrier after each pass.
 */
Expected<RowReduceShape> row_program_shape(const KernelStage &st);
/** The default row reduction: the largest power of two lanes up to k, 32 to 256, in blocks of 256 threads. */
GpuReduce default_gpu_reduce(const RowReduceShape &r, const GpuTarget &gpu);
/** Lanes 32-256 (at most the power of two at or above k), blocks of 128-512 threads. */
std::vector<GpuReduce> gpu_reduce_space(const RowReduceShape &r, const GpuTarget &gpu);

/**
 * The sectors and the useful bytes of one access `index` into 4-byte elements, by the 32 threads
 * of the first warp with every other variable at its loop's start: (32-byte sectors touched,
 * bytes the warp asks for). A contiguous access is 4 sectors for 128 bytes, a broadcast 1 for 4.
 * With `vector_var`, each thread's access is a vector over that variable's `vector_lanes` values:
 * their elements together (a warp's ld.global.v4.f32 of consecutive floats: 16 sectors, 512 bytes).
 */
std::pair<int64_t, int64_t> warp_sectors(const loop::Expr &index, const std::string &thread_var, const std::map<std::string, int64_t> &at,
                                         const std::string &vector_var = "", int64_t vector_lanes = 1);

/** A GPU schedule as a tuning record's JSON: {"version": 1, "gpu_tile": {...}} or {"version": 1, "gpu_reduce": {...}}. */
std::string gpu_schedule_to_json(const GpuSchedule &s);
/** The GPU schedule a record's JSON holds, or why it holds none (a CPU schedule, a bad tile). */
Expected<GpuSchedule> gpu_schedule_from_json(const std::string &json);

/** A reduction stage's GEMM shape (see GpuTile), or why it has none (one operand, or operands over the same loops). */
struct GemmShape {
  int64_t batch = 1, m = 1, n = 1, k = 1;
  bool m_contiguous = false;  // the output's stores walk memory contiguously along m (else along n)
};
Expected<GemmShape> gemm_shape(const KernelStage &st);

/**
 * The default tile for a GEMM shape on `gpu`: 64 x 64 blocks of 16 x 16 threads, narrower where m
 * or n is smaller, or where there would be fewer blocks than SMs (the wider side halved first).
 */
GpuTile default_gpu_tile(const GemmShape &g, const GpuTarget &gpu);
/** Ok if `t` is a legal tile on `gpu` (divisions, threads per block, shared memory), else why not. */
Status check_gpu_tile(const GpuTile &t, const GpuTarget &gpu);
/** Ok if `r` is a legal row reduction on `gpu` (lanes a power of two dividing threads, threads per block), else why not. */
Status check_gpu_reduce(const GpuReduce &r, const GpuTarget &gpu);
/** Every legal tile for `g` on `gpu` from the knob values the search samples (block sides 16-128, register tiles 1-8, chunks 8-32). */
std::vector<GpuTile> gpu_tile_space(const GemmShape &g, const GpuTarget &gpu);

/** The schedules a stage of a group's naive nests can take on `gpu`: its default first, then its space. */
struct GpuStageSpace {
  bool tile = false;  // a GEMM's tiles (GpuSchedule::tile), else a row reduction's or row program's lanes (GpuSchedule::reduce)
  GpuSchedule fallback;
  std::vector<GpuSchedule> space;
};
/**
 * The space lower_gpu's choice for `st` tunes: a GEMM's tiles, else a long row reduction's, else a
 * long row program's lanes; nullopt where the stage has none (halo tiles, elementwise stages, one
 * output per thread). lower_gpu decides by the same tests, so the GPU tuner's space is the one
 * lower_gpu applies.
 */
std::optional<GpuStageSpace> gpu_stage_space(const KernelStage &st, const GpuTarget &gpu);

/**
 * The group's naive nests (lower_naive) under the GPU schedule. A stage that gemm_shape reads as a
 * GEMM (both sides at least 16) gets `schedule.tile` (default_gpu_tile when none is given); else a
 * stage that row_reduce_shape reads, then one that row_program_shape reads, with at least 32
 * terms per output or whenever `schedule.reduce` is given, `schedule.reduce`
 * (default_gpu_reduce); else a stencil (a depthwise conv, a pool) halo tiles; else an elementwise
 * stage 4 outputs per thread as vectors; every other stage one output element per thread: the perfect nest of
 * output loops at its top (loops every store inside moves with, or stores to buffers private to
 * an iteration) fused into one of extent E, then split into blocks of T threads (T the target's
 * threads_per_block, or E rounded up to a warp when smaller): the stage's parallel loop is the
 * block index, its body a loop over the threads with the old body under `if (b * T + t < E)`.
 */
Expected<LoweredKernel> lower_gpu(const Graph &body, const std::string &name, const GpuTarget &gpu, const GpuSchedule &schedule = {});
/**
 * lower_gpu under `chosen` (a tuning database's record), or under the defaults when `chosen` does
 * not lower on this device: a tile tuned for another GPU whose block needs more shared memory or
 * threads than this one has, or a record whose stage reads differently. Deploy then runs the
 * default kernel instead of failing; `note` says which record was set aside and why ("" when
 * `chosen` lowered). `chosen.pack_weights` holds for the defaults too.
 */
Expected<LoweredKernel> lower_gpu_or_default(const Graph &body, const std::string &name, const GpuTarget &gpu, const GpuSchedule &chosen,
                                             std::string &note);

/**
 * A GPU-scheduled kernel as CPU code, as CPU implementations of CUDA run it: each stage's thread
 * loop is split at its barriers into one loop over the threads per barrier-free region, a region
 * inside a loop or branch that holds a barrier split inside it (that loop's bounds and that
 * branch's condition must be the same for every thread, as on the GPU, or this is an error);
 * a thread's private buffer that lives across a barrier gets one copy per thread; shared
 * buffers are allocated once per block. The result has no barriers and runs on the CPU JIT.
 */
Expected<LoweredKernel> serialize_threads(const LoweredKernel &k);

/** One stage's kernel entry and its launch. */
struct GpuLaunch {
  std::string entry;
  int64_t blocks = 1, threads = 1;
};

struct PtxKernel {
  std::string ptx;
  std::vector<GpuLaunch> launches;  // in stage order: launched one after another
  bool from_cache = false;
};

/**
 * A GPU-scheduled kernel as PTX for `gpu` (LLVM's NVPTX backend after the O3 pipeline). With a
 * `cache_dir`, the PTX is kept there as `<kernel>_<hash>.ptx`, the hash over the unoptimized
 * IR, the sm, the PTX version and LLVM's version, sealed with a last line holding the hash of
 * the text before it: an entry that fails the check is rebuilt, never trusted.
 */
Expected<PtxKernel> emit_ptx(const LoweredKernel &k, const GpuTarget &gpu, const std::string &cache_dir = "");

/** ptxas: $AUTOTUNE_PTXAS, else `ptxas` on PATH, else /usr/local/cuda/bin/ptxas; "" when there is none. */
std::string find_ptxas();

/** Assembles `ptx` for gpu.sm with `ptxas` (output discarded); the error quotes ptxas's first complaint. */
Status ptxas_check(const std::string &ptx, const GpuTarget &gpu, const std::string &ptxas);

/** What ptxas allocated for one kernel entry (its -v report). */
struct PtxasEntry {
  std::string entry;
  int64_t registers = -1, shared_bytes = 0, stack_bytes = -1, spill_store_bytes = 0, spill_load_bytes = 0;
};
/** ptxas_check, and the resources ptxas gave each entry: the registers and spills the GPU features can only estimate. */
Expected<std::vector<PtxasEntry>> ptxas_resources(const std::string &ptx, const GpuTarget &gpu, const std::string &ptxas);

}  // namespace autotune
