#pragma once
// The tuned plan checked in the model: kernels are tuned one at a time, each measured alone, where
// its inputs sit in the cache as its own previous run left them. In the model they were just
// written by another kernel, split across the cores by that kernel's parallel loop, and a schedule
// that won alone can lose there (MobileNetV2's 1x1 convs with a residual add at 14x14: 0.076 ms
// alone, 0.160 in the model against the default's 0.089). The check times the model with its
// default schedules and with the tuned plan, alternating, with every group's time in the model;
// a group whose tuned schedule is slower in the model than its default keeps the default in the
// saved plan (the plan the runtime loads), and the plan is timed again.
//
// With runners_up (off by default: measured level end to end, docs/architecture.md, "The loop and
// the database"), before a group falls back to its default, or keeps a tuned schedule that gains
// nothing in the model, its task's runners-up get a look there: the schedules the confirmation phase measured
// (kConfirmations times) faster than the default alone, after the plan's own. Each variant of the
// plan (every such group on its task's second schedule, then on its third) is timed beside the
// default model, and a group takes a runner-up that ran faster than its default in the model (and
// clearly faster than the plan's schedule, where that one was not reverted). Why: a kernel's worth
// in the model depends on how its neighbours split their work over the cores, which a kernel
// timed alone does not see, so the search's first choice is not always the best it confirmed.
//
// With takes 2 (off by default, as runners_up), each timing the check decides on (the plan's and
// each variant's) is taken twice, the other timings between, and the take whose default model ran
// faster is kept: the host has slow stretches the hand-off does not tell.
//
// On a host that moves its cores (ThreadPool::handoff_ns: near, or apart and then some kernels
// 1.4x slower and others not), a check taken apart would revert groups by the other machine's
// times, where the tuner chose every schedule by its times near. Given the tuning run's near
// level, the check is timed again while the hand-off says the cores were apart, a few times; if
// they stay apart, nothing is reverted and the report says so. The checked plan's timing after a
// revert is taken the same way.
#include <string>
#include <vector>

#include "ir/Error.h"
#include "ir/Graph.h"
#include "ir/Tensor.h"

namespace autotune {

class CompiledModel;

/** Two compiled models timed alternately: end-to-end and per-group medians. */
struct SideBySide {
  double a_ms = 0, b_ms = 0;
  std::vector<double> a_group_ms, b_group_ms;  // per group, medians
  double handoff_ns = 0;                       // the larger of the hand-offs before and after the runs
};

/**
 * Models a and b run alternately, `rounds` timed runs each after 3 untimed, on the same inputs;
 * each timed run follows an untimed run of the same model (its caches as its own run left them).
 */
Expected<SideBySide> side_by_side(CompiledModel &a, CompiledModel &b, const std::vector<Tensor> &inputs, int rounds);

/**
 * side_by_side `rounds` times with the order swapped every time (a first in even rounds, b first
 * in odd ones): within one side_by_side the model that runs first was about 1% faster (MobileNetV2,
 * 2026-11-28), so one timing favours a and a decision on a difference that small needs both
 * orders. Each round's end-to-end medians and hand-off, in a's and b's terms whatever went first.
 */
struct Alternated {
  struct Round {
    double a_ms = 0, b_ms = 0, handoff_ns = 0;
    bool a_first = true;
    int pair = 0;  // which pair of compiled copies ran (alternate's a2, b2: 1)
    std::vector<double> a_group_ms, b_group_ms;
  };
  std::vector<Round> rounds;
  double near_ns = 0;  // near_handoff_ns over the rounds
  /** b / a of each round (with near_only, of the rounds whose hand-off was near: cores_apart). */
  std::vector<double> ratios(bool near_only = false) const;
  /** The median of each group's round medians, a's (or b's). */
  std::vector<double> group_ms(bool of_b) const;
};
/**
 * With a second pair (a2, b2: the same plans compiled again, b2 before a2 where b was compiled
 * after a), the rounds take the pairs in turn (a, b in even rounds) and swap who goes first every
 * two rounds: two compiles of one plan run about 1% apart, the later one mostly faster (one plan
 * compiled twice: B / A 0.983-0.991, EfficientNet-B0, 2026-11-29), which one pair alone credits to
 * b; with two pairs 0.993-1.005.
 */
Expected<Alternated> alternate(CompiledModel &a, CompiledModel &b, const std::vector<Tensor> &inputs, int runs, int rounds,
                               CompiledModel *a2 = nullptr, CompiledModel *b2 = nullptr);

struct PlanCheckOptions {
  std::string db_path;  // the tuning database holding the model's plan (written)
  int threads = 0;      // 0: one per hardware thread
  int rounds = 20;      // timed runs of each model, alternating (after 3 untimed)
  double margin = 1.05; // a group is reverted when its tuned time in the model exceeds the default's by this factor
  double near_ns = 0;   // the tuning run's near hand-off (db/TuningDb.h: near_handoff_ns; 0: unknown, every check counts as near)
  int mode_tries = 5;   // side-by-side timings taken while the cores stay apart, before giving up on a check near
  double mode_wait_s = 2; // the pause before each timing again
  int takes = 1;          // each timing the check decides on taken this many times (others between), the quietest kept
  int runners_up = 0;     // variants timed: each second-looked group's task's 2nd, 3rd, ... confirmed schedule (0: none)
  double second_look = 0.97;  // tuned groups whose time in the model is above the default's times this get a second look
  double gain = 0.03;     // a runner-up replaces a schedule that was not reverted when its ratio to the default is this much lower
};

struct PlanCheckReport {
  struct Reverted {
    size_t group = 0;
    std::string ops, shape;
    double default_ms = 0, tuned_ms = 0;  // medians in the model
  };
  double untuned_ms = 0, tuned_ms = 0;  // end to end, medians, the plan as the tuner saved it
  std::vector<Reverted> reverted;       // groups that keep their default
  struct RunnerUp {
    size_t group = 0;
    std::string ops, shape;
    int rank = 0;               // its place in its task's ranking (TuningDb::ranked; 1 is the best, mostly the plan's own)
    double tuned_ratio = 0;     // the plan's schedule over the default, in the model (the first timing)
    double ratio = 0;           // the runner-up's over the default, in the model (its variant's timing)
    double alone_ratio = 0;     // the runner-up's confirmed ratio, alone
  };
  std::vector<RunnerUp> runners_up;     // groups that run a runner-up instead of the plan's schedule (or the default)
  int second_looked = 0;                // groups given a second look (with a runner-up to try)
  int variants = 0;                     // variants of the plan compiled and timed for it
  double checked_ms = 0;                // end to end with the checked plan (= tuned_ms when nothing was reverted)
  double checked_untuned_ms = 0;        // the default model timed alongside it
  int tuned_groups = 0;                 // groups running a tuned schedule in the plan as the tuner saved it
  int checked_tuned_groups = 0;         // and in the checked plan
  double handoff_ns = 0;                // the larger hand-off around the first check's runs (0: one thread)
  bool apart = false;                   // the cores stayed apart for every try: nothing was reverted
  int tries = 0;                        // side-by-side timings taken for the first check
  bool checked_apart = false;           // the checked plan's timing (after a revert) was taken apart, every try
};

/** Checks the plan of `fused` (a fused graph) saved in the database; see above. */
Expected<PlanCheckReport> check_plan_in_model(const Graph &fused, const PlanCheckOptions &options);

}  // namespace autotune
