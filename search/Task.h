#pragma once
// Tuning tasks: one per distinct fused group of a model. A group's workload key is a stable
// structural hash of its body (ops, attributes, shapes and dtypes: the printed IR), the same on
// every run and machine; identical groups (the same conv in several layers) are one task.
#include <string>
#include <vector>

#include "db/Workload.h"
#include "ir/Graph.h"

namespace autotune {

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
  // The groups that write its inputs in the model (of its first group): each body and the
  // parameter it writes, in the model's order. The measurer runs them before each timed run.
  struct Producer {
    Graph body;
    int writes = 0;
  };
  std::vector<Producer> producers;
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
