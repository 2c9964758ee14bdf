#include "search/Task.h"

#include <algorithm>
#include <unordered_map>

#include "codegen/Schedule.h"
#include "ir/Printer.h"
#include "runtime/Runtime.h"

namespace autotune {
const Node *schedule_anchor(const Graph &body) {
  const Node *anchor = nullptr;
  for (const Node &n : body.nodes)
    if (is_conv_op(n.op) || n.op == "nn.dense") anchor = &n;
  return anchor;
}

std::string anchor_key(const Graph &body) {
  const Node *anchor = schedule_anchor(body);
  if (!anchor) return "";
  std::string key = anchor->op + "(";
  for (const ValueId &v : anchor->inputs) key += type_str(body.type_of(v)) + ",";
  for (const auto &[name, value] : anchor->attrs.items()) key += name + "=" + attr_value_str(value) + ",";
  return key + ")->" + type_str(anchor->type);
}

std::vector<GroupProducer> group_producers(const Graph &fused, size_t node) {
  const Node &n = fused.nodes[node];
  std::vector<GroupProducer> producers;
  if (!n.is_function()) return producers;
  for (size_t j = 0; j < n.inputs.size(); ++j) {
    const ValueId &v = n.inputs[j];
    if (v.kind != ValueId::Kind::kNode) continue;
    const Node &p = fused.nodes[static_cast<size_t>(v.index)];
    // A group of one output whose type is the parameter's (never a tuple's element).
    if (!p.is_function() || p.body->outputs.size() != 1 || p.type != n.body->inputs[j].type) continue;
    GroupProducer g{*p.body, static_cast<int>(j), std::vector<Tensor>(p.inputs.size())};
    for (size_t k = 0; k < p.inputs.size(); ++k)
      if (p.inputs[k].kind == ValueId::Kind::kConstant) g.args[k] = fused.constants[static_cast<size_t>(p.inputs[k].index)].value;
    producers.push_back(std::move(g));
  }
  std::sort(producers.begin(), producers.end(), [&](const GroupProducer &a, const GroupProducer &b) {
    return n.inputs[static_cast<size_t>(a.writes)].index < n.inputs[static_cast<size_t>(b.writes)].index;
  });
  return producers;
}

std::vector<Task> extract_tasks(const Graph &fused) {
  std::vector<Task> tasks;
  std::unordered_map<std::string, size_t> index;
  for (size_t i = 0; i < fused.nodes.size(); ++i) {
    const Node &n = fused.nodes[i];
    if (!n.is_function()) continue;
    std::string h = workload_hash(*n.body);
    auto it = index.find(h);
    if (it == index.end()) {
      Task t;
      t.hash = h;
      t.body = *n.body;
      t.flops = group_flops(*n.body);
      t.ops = group_ops(*n.body);
      t.shape = shape_str(n.type.shape);
      for (const ValueId &v : n.inputs) t.constant.push_back(v.kind == ValueId::Kind::kConstant);
      t.producers = group_producers(fused, i);
      it = index.emplace(h, tasks.size()).first;
      tasks.push_back(std::move(t));
    }
    tasks[it->second].groups.push_back(static_cast<int>(i));
  }
  return tasks;
}

}  // namespace autotune
