#pragma once
// The schedule space of a fused group on a target: the knob values its template accepts.
// Sampling and mutation only ever produce schedules that validate_schedule() accepts. A register
// budget (accumulators + weight vectors + a broadcast within the target's vector registers: 16
// on AVX2, 32 on AVX-512) shapes where sampling looks, the way Ansor's sketch rules do; it is a
// prior, not a legality rule. Where the group has naive nests, the step lists of the sketch
// rules are points of the space too: a quarter to three quarters of the samples.
#include <cstdint>
#include <optional>
#include <vector>

#include "codegen/Lower.h"
#include "codegen/Sketch.h"

namespace autotune {

class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed * 0x9e3779b97f4a7c15ULL + 1) {}
  uint64_t next();
  int uniform(int n) { return static_cast<int>(next() % static_cast<uint64_t>(n)); }
  double unit() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

 private:
  uint64_t state_;
};

/** Every legal value of each knob for this group, as lists. */
struct ScheduleSpace {
  std::vector<int> vector_width, oc_block, px_block, ic_block, winograd;
  std::vector<KernelSchedule::Parallel> parallel;
  std::vector<bool> unroll_kx, pad_at_root, pixel_epilogue, pixel_vectors;
  std::vector<int> pv_oc_block, pv_px_block;  // with pixel_vectors: channels and pixel vectors per block
  int register_budget = 15;  // vector registers for accumulators and weights
  // The points of the sketch rules (codegen/Sketch) on the group's naive nests, the points of
  // the space that are loop transformations instead of template knobs: each its step list, its
  // sketch knobs as coordinates (a mutation moves to a point differing in one) and the naive
  // nest it applies to (direct, or Winograd F(m x m)'s). A schedule with steps keeps the other
  // knobs at sketch_knobs.
  std::vector<SketchPoint> sketches;
  KernelSchedule sketch_knobs;  // the knobs a sketch point carries (unused by its lowering, but for winograd)

  /** Sketch point `i` as a schedule: its steps, on the naive nest it was made for. */
  KernelSchedule sketch(size_t i) const;

  /** The space of `body` on `target`; without `steps`, the template knobs only (the space before issue 10). */
  static ScheduleSpace of(const Graph &body, const Target &target = host_target(), bool steps = true);
  /** Number of points (before the register prior). */
  int64_t size() const;
  KernelSchedule sample(Rng &rng) const;
  /** A point of the template knobs only (no step list). */
  KernelSchedule sample_knobs(Rng &rng) const;
  /** Changes one knob to another legal value. */
  KernelSchedule mutate(const KernelSchedule &s, Rng &rng) const;
  /**
   * A child of two schedules: the knobs that shape the register block (template, vector width,
   * blocks, Winograd) from one parent, each other knob from either; `a` when the mix is illegal.
   */
  KernelSchedule crossover(const KernelSchedule &a, const KernelSchedule &b, Rng &rng) const;
  bool within_budget(const KernelSchedule &s) const;

  /**
   * A schedule's family: the structure its knobs or steps choose before any size is picked, as
   * Ansor's sketches are (the algorithm: direct, Winograd F(2x2) or F(4x4); a template, its
   * pixel-vector variant or a step list; where a direct kernel's padded input lives: stored at
   * root, read in place, or computed inline or at a tile). Sizes (blocks, splits, vector width,
   * parallel axes, unrolling) do not change it.
   */
  static int family(const KernelSchedule &s);
  /** The families of this space's points (sorted). */
  std::vector<int> families() const;
  /** A point of family `f`, by sampling up to `tries` points; nullopt if none came. */
  std::optional<KernelSchedule> sample_family(int f, Rng &rng, int tries = 256) const;
  /** Clears the knobs the schedule's template does not have; false if what is left is illegal. */
  static bool legalize(KernelSchedule &s);
};

}  // namespace autotune
