#include "ir/Partition.h"

#include <algorithm>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "ir/Rewriter.h"

namespace autotune {
namespace {

int anchors_of(const Graph &body) {
  int anchors = 0;
  for (const Node &m : body.nodes) anchors += is_anchor_op(m.op);
  return anchors;
}

/** Why consumer `c` (a function node) cannot take in the node `producer` it reads, or "". */
std::string why_not_consumer(const Graph &g, int c, int producer) {
  const Node &n = g.nodes[c];
  if (!n.is_function()) return "%" + std::to_string(c) + " is not a fused group";
  const Graph &body = *n.body;
  int anchors = anchors_of(body);
  if (anchors < 1) return "%" + std::to_string(c) + " has no anchor";
  for (size_t a = 0; a < n.inputs.size(); ++a) {
    if (n.inputs[a] != ValueId::node(producer)) continue;
    for (const Node &m : body.nodes)
      for (size_t k = 0; k < m.inputs.size(); ++k)
        if (m.inputs[k] == ValueId::input(static_cast<int>(a)) && k > 0 && is_anchor_op(m.op))
          return "%" + std::to_string(c) + " reads it as input " + std::to_string(k) + " of " + m.op + " (only a data input is recomputed)";
  }
  return "";
}

/**
 * Why consumer `c` cannot run after producer `producer` as a chain, or "": its one anchor must
 * read the producer's result as its data input (directly or through ops before it), and nothing
 * after that input may read the producer's result (the kernel keeps one value between segments).
 */
std::string why_not_chain(const Graph &g, int c, int producer) {
  const Node &n = g.nodes[c];
  const Graph &body = *n.body;
  std::string name = "%" + std::to_string(c);
  if (anchors_of(body) != 1) return name + " is a chain already";
  int anchor = 0;
  while (!is_anchor_op(body.nodes[anchor].op)) ++anchor;
  ValueId data = body.nodes[anchor].inputs[0];
  // cut: the last body node before the consumer's anchor's data is complete (-1: the data is the argument).
  int cut = data.kind == ValueId::Kind::kNode ? data.index : -1;
  if (data.kind == ValueId::Kind::kInput && n.inputs[data.index] != ValueId::node(producer))
    return name + "'s anchor does not read it as its data input";
  std::vector<bool> reaches(body.nodes.size(), false);  // node depends on the producer's result
  for (size_t i = 0; i < body.nodes.size(); ++i)
    for (size_t k = 0; k < body.nodes[i].inputs.size(); ++k) {
      ValueId v = body.nodes[i].inputs[k];
      bool from_producer = v.kind == ValueId::Kind::kInput && n.inputs[v.index] == ValueId::node(producer);
      bool the_data = static_cast<int>(i) == anchor && k == 0;
      if (from_producer && static_cast<int>(i) > cut && !the_data) return name + " reads it after its anchor's data input";
      reaches[i] = reaches[i] || from_producer || (v.kind == ValueId::Kind::kNode && reaches[v.index]);
    }
  if (cut >= 0 && !reaches[cut]) return name + "'s anchor does not read it as its data input";
  return "";
}

}  // namespace

std::string move_name(const PartitionMove &m) {
  return (m.kind == PartitionMove::kChain ? "chain:%" : "prologue:%") + std::to_string(m.producer);
}

std::vector<PartitionMove> partition_moves(const Graph &fused, int max_copies) {
  Uses uses = find_uses(fused);
  std::vector<PartitionMove> out;
  for (size_t i = 0; i < fused.nodes.size(); ++i) {
    const Node &n = fused.nodes[i];
    if (!n.is_function() || n.body->nodes.empty()) continue;
    // Injective ops are index moves the consumer's reads recompute as well: a layout change of
    // squeeze-excitation's per-channel scale before its multiply (EfficientNet-B0's blocks in
    // NCHW16c), or a layout change read by a conv.
    bool elementwise = true;
    for (const Node &m : n.body->nodes) elementwise &= find_op(m.op)->pattern <= OpPattern::kInjective && m.type.dtype == DType::kFloat32;
    int anchors = anchors_of(*n.body);
    if (!elementwise && anchors != 1) continue;
    PartitionMove mv;
    mv.kind = elementwise ? PartitionMove::kPrologue : PartitionMove::kChain;
    mv.producer = static_cast<int>(i);
    for (int c : uses.consumers[i])
      if (std::find(mv.consumers.begin(), mv.consumers.end(), c) == mv.consumers.end()) mv.consumers.push_back(c);
    int copies = mv.kind == PartitionMove::kChain ? 1 : max_copies;
    if (uses.is_output[i]) mv.why_not = "it is a graph output (stored anyway)";
    else if (mv.consumers.empty()) mv.why_not = "nothing reads it";
    else if (static_cast<int>(mv.consumers.size()) > copies)
      mv.why_not = "it has " + std::to_string(mv.consumers.size()) + " consumers (at most " + std::to_string(copies) +
                   (mv.kind == PartitionMove::kChain ? ": an anchor is never recomputed)" : " copies)");
    for (int c : mv.consumers)
      if (mv.why_not.empty()) mv.why_not = why_not_consumer(fused, c, mv.producer);
    if (mv.why_not.empty() && mv.kind == PartitionMove::kChain) mv.why_not = why_not_chain(fused, mv.consumers[0], mv.producer);
    out.push_back(std::move(mv));
  }
  return out;
}

Expected<Graph> apply_move(const Graph &fused, int producer, int max_copies) {
  std::string where = "move %" + std::to_string(producer) + ": ";
  if (producer < 0 || producer >= static_cast<int>(fused.nodes.size())) return make_error(where + "no such node");
  PartitionMove mv;
  for (PartitionMove &m : partition_moves(fused, max_copies))
    if (m.producer == producer) mv = std::move(m);
  if (mv.producer < 0) return make_error(where + "not a group of elementwise, broadcast or injective ops, nor of one anchor");
  if (!mv.why_not.empty()) return make_error(where + mv.why_not);
  const Node &p = fused.nodes[producer];
  Rewriter rw(fused);
  for (size_t i = 0; i < fused.nodes.size(); ++i) {
    int ci = static_cast<int>(i);
    if (ci == producer) continue;  // every reader recomputes it
    if (std::find(mv.consumers.begin(), mv.consumers.end(), ci) == mv.consumers.end()) {
      AT_TRY(rw.copy(ci));
      continue;
    }
    // The consumer's new body: the producer's body, then the consumer's, reading its result.
    const Node &c = fused.nodes[i];
    GraphBuilder body;
    std::vector<ValueId> args;
    std::unordered_map<int64_t, ValueId> param;  // outer value -> body input
    auto key = [](ValueId v) { return (static_cast<int64_t>(v.kind) << 32) | static_cast<uint32_t>(v.index); };
    auto input_for = [&](ValueId outer) {
      auto it = param.find(key(outer));
      if (it != param.end()) return it->second;
      ValueId v = body.add_input("p" + std::to_string(args.size()), fused.type_of(outer));
      args.push_back(rw.map(outer));
      return param.emplace(key(outer), v).first->second;
    };
    // Copies a function's body into `body`; its reads of the producer's node read `pout`.
    ValueId pout;
    auto copy_body = [&](const Node &f, std::vector<ValueId> &local) -> Status {
      for (const Node &m : f.body->nodes) {
        std::vector<ValueId> in;
        for (ValueId v : m.inputs) {
          if (v.kind == ValueId::Kind::kNode) in.push_back(local[v.index]);
          else if (f.inputs[v.index] == ValueId::node(producer)) in.push_back(pout);
          else in.push_back(input_for(f.inputs[v.index]));
        }
        AT_ASSIGN(nv, body.add_node(m.op, std::move(in), m.attrs, m.origin));
        local.push_back(nv);
      }
      return Status::ok();
    };
    std::vector<ValueId> pnodes, cnodes;
    AT_TRY(copy_body(p, pnodes));
    pout = pnodes[p.body->outputs[0].index];
    AT_TRY(copy_body(c, cnodes));
    body.add_output(cnodes[c.body->outputs[0].index]);
    AT_ASSIGN(fv, rw.builder().add_function(std::make_shared<const Graph>(body.finish()), std::move(args), c.origin));
    rw.replace(ci, fv);
  }
  return rw.finish();
}

std::string partition_json(const std::vector<int> &producers) {
  std::vector<int> sorted = producers;
  std::sort(sorted.begin(), sorted.end());
  return nlohmann::json{{"moves", sorted}}.dump();
}

Expected<Graph> apply_partition(const Graph &fused, const std::string &json) {
  auto j = nlohmann::json::parse(json, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("moves") || !j["moves"].is_array())
    return make_error("partition " + json + ": not {\"moves\": [node, ...]}");
  std::vector<int> producers;
  for (const auto &v : j["moves"]) {
    if (!v.is_number_integer()) return make_error("partition " + json + ": a move is not a node index");
    producers.push_back(v.get<int>());
  }
  std::sort(producers.rbegin(), producers.rend());
  if (std::adjacent_find(producers.begin(), producers.end()) != producers.end()) return make_error("partition " + json + ": a node is named twice");
  Graph g = fused;
  for (int p : producers) {
    AT_ASSIGN(next, apply_move(g, p));
    g = std::move(next);
  }
  return g;
}

}  // namespace autotune
