#pragma once
// Tuning tasks: one per distinct fused group of a model. A group's workload key is a stable
// structural hash of its body (ops, attributes, shapes and dtypes: the printed IR), the same on
// every run and machine; identical groups (the same conv in several layers) are one task.
#include <string>
#include <vector>

#include "db/Workload.h"
#include "ir/Graph.h"
#include "ir/Tensor.h"

namespace autotune {

/**
 * A group that writes one of another group's inputs in the model (its producer). The measurer
 * runs its default kernel into that input before each timed run, so the kernel measured finds the
 * input where the model leaves it: just written, each part in the cache of the core that wrote it
 * (MeasureOptions::producers). `args` are its inputs: from group_producers the model's own
 * weights (the others without data), from TaskData::add_producers every one, the rest seeded.
 * The weights matter: on random weights in [-1, 1] a producer's output grows with its fan-in,
 * and a consumer's SiLU of it underflows to denormals, on which Intel cores take microcode
 * assists (EfficientNet-B0's expansion chains timed 1.6-2.2x slower merged than apart that way,
 * 0.61-1.16 with denormals flushed; three of them 0.82-0.92 in the model).
 */
struct GroupProducer {
  Graph body;
  int writes = 0;  // the parameter of the consumer's body it writes
  std::vector<Tensor> args;
};

/** The producers of the fused graph's node `node` (groups of one output whose type is the parameter's), in the model's order: the last ran just before it. */
std::vector<GroupProducer> group_producers(const Graph &fused, size_t node);

struct Task {
  std::string hash;         // 16 hex digits
  Graph body;               // the fused group
  std::vector<int> groups;  // indices of the model's function nodes with this workload
  double flops = 0;
  std::string ops;          // "nn.conv2d+add+nn.relu"
  std::string shape;        // of its output
  // constant[i]: the body's parameter i is one of the model's constants (a weight) in its first
  // group. A whole inference runs between two uses of a weight, so the measurer evicts them from
  // cache before each timed run (MeasureOptions::cold_weights).
  std::vector<bool> constant;
  // The groups that write its inputs in the model (of its first group), in the model's order.
  std::vector<GroupProducer> producers;
};

/** A group's anchor: its (last) conv or dense, the op the templates and tile sketches are made for; null if none. */
const Node *schedule_anchor(const Graph &body);

/**
 * What a group's schedule shapes: its anchor (the conv or dense the templates and tile sketches
 * are made for) with its attributes and its operands' and result's types; "" for a group without
 * one. Groups that differ only in their epilogue (a conv with and without the residual add) have
 * the same key, and one's schedules are the other's points too.
 */
std::string anchor_key(const Graph &body);

/** The tasks of a fused graph, in order of first use. */
std::vector<Task> extract_tasks(const Graph &fused);

}  // namespace autotune
