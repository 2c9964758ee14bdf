// FuseOps, after TVM's (relay/transforms/fuse_ops.cc), on this IR.
//
// 1. Forward graph. Each top-level op node is a vertex with its pattern kind (a node that is
//    already a function is Opaque); its out-edges go to its consumers, each edge carrying the
//    consumer's pattern, lowered from Broadcast to ElemWise when the input has the consumer's
//    output shape (a bias add over a conv's full output is elementwise for that input). A graph
//    output is "externally referenced": its value must be materialized, so it never fuses into
//    its consumers (it can still absorb its producers).
// 2. Post-dominator tree. Visiting nodes in reverse topological order, a node's parent is the
//    least common ancestor (in the tree built so far) of all its consumers: the first node every
//    path from it passes through. Climbing to the LCA combines (max) the patterns seen, so each
//    node records the strongest pattern between it and its immediate post-dominator. Nodes whose
//    consumers never reconverge have no parent and keep their output in memory.
// 3. Groups, by union-find, each starting as one node with its pattern (an OutEWiseFusable node
//    is its group's anchor; a group holds at most one anchor). Visiting nodes in topological
//    order, a node fuses into its post-dominator's group when:
//    - phase 0, node is OutEWiseFusable (conv2d, dense, pools): the path pattern to the
//      post-dominator is ElemWise and every group on every path between them is at most
//      Broadcast: the conv takes its bias/ReLU/residual-add epilogue;
//    - any phase, node is ElemWise/Broadcast: the path pattern is at most Injective or is
//      CommReduce, every intermediate group is at most Injective and the post-dominator's group
//      is at most Broadcast, Injective, CommReduce or OutEWiseFusable: elementwise work joins
//      the injective/reduction/anchor group below it;
//    - phase 1, node is Injective: every group on the paths is at most Injective (reshape,
//      transpose, pad and concat chains fuse).
//    TVM's third phase fuses injective producers into intermediate tuples; concatenate takes its
//    inputs directly here (there are no tuple values), so phase 1 already covers it.
//    "Every group on every path" is the path check: fusing into the post-dominator pulls in
//    every node between them, so all of them must be allowed to join. A group may not grow past
//    max_group_size nodes.
// 4. Each group becomes a primitive function node: its body holds the members in topological
//    order, its parameters are the values it reads from outside (graph inputs, weights, other
//    groups' outputs) in first-use order, and its single output is the member used outside the
//    group. Every op, fused or not, ends up inside some function, so each function is one kernel.
#include <algorithm>
#include <unordered_map>

#include "ir/Rewriter.h"
#include "ir/passes/Passes.h"

namespace autotune {
namespace {

OpPattern combine(OpPattern a, OpPattern b) { return static_cast<int>(a) > static_cast<int>(b) ? a : b; }
bool at_most(OpPattern a, OpPattern b) { return static_cast<int>(a) <= static_cast<int>(b); }

struct Edge {
  int node;
  OpPattern pattern;
};

struct Vertex {
  OpPattern pattern = OpPattern::kOpaque;
  std::vector<Edge> outputs;
  bool extern_ref = false;
};

struct DomNode {
  int parent = -1;
  int depth = 1;
  OpPattern pattern = OpPattern::kOpaque;
};

class Partitioner {
 public:
  Partitioner(const Graph &g, int max_group_size) : g_(g), max_size_(max_group_size) {}

  /** The group root of every node after the three phases. */
  std::vector<int> run() {
    build_forward_graph();
    build_post_dominator_tree();
    int n = static_cast<int>(g_.nodes.size());
    parent_.resize(n);
    size_.assign(n, 1);
    group_pattern_.resize(n);
    has_anchor_.resize(n);
    for (int i = 0; i < n; ++i) {
      parent_[i] = i;
      group_pattern_[i] = vertices_[i].pattern;
      has_anchor_[i] = vertices_[i].pattern == OpPattern::kOutEWiseFusable;
    }
    for (int phase = 0; phase < 2; ++phase) run_phase(phase);
    std::vector<int> roots(n);
    for (int i = 0; i < n; ++i) roots[i] = find(i);
    return roots;
  }

 private:
  void build_forward_graph() {
    int n = static_cast<int>(g_.nodes.size());
    vertices_.resize(n);
    for (int i = 0; i < n; ++i) {
      const Node &node = g_.nodes[i];
      OpPattern p = node.is_function() ? OpPattern::kOpaque : find_op(node.op)->pattern;
      vertices_[i].pattern = p;
      for (ValueId v : node.inputs) {
        if (v.kind != ValueId::Kind::kNode) continue;
        OpPattern edge = p;
        if (edge == OpPattern::kBroadcast && g_.type_of(v).shape == node.type.shape) edge = OpPattern::kElemWise;
        vertices_[v.index].outputs.push_back({i, edge});
      }
    }
    for (ValueId v : g_.outputs)
      if (v.kind == ValueId::Kind::kNode) vertices_[v.index].extern_ref = true;
  }

  int lca(int a, int b, OpPattern &pattern) const {
    while (a != b) {
      if (a < 0 || b < 0) return -1;
      if (dom_[a].depth < dom_[b].depth) {
        pattern = combine(pattern, dom_[b].pattern);
        b = dom_[b].parent;
      } else if (dom_[b].depth < dom_[a].depth) {
        pattern = combine(pattern, dom_[a].pattern);
        a = dom_[a].parent;
      } else {
        pattern = combine(pattern, combine(dom_[a].pattern, dom_[b].pattern));
        a = dom_[a].parent;
        b = dom_[b].parent;
      }
    }
    return a;
  }

  void build_post_dominator_tree() {
    int n = static_cast<int>(g_.nodes.size());
    dom_.resize(n);
    for (int i = n - 1; i >= 0; --i) {
      const Vertex &v = vertices_[i];
      DomNode &d = dom_[i];
      if (v.extern_ref || v.outputs.empty()) continue;  // no parent, Opaque
      OpPattern pattern = combine(OpPattern::kElemWise, v.outputs[0].pattern);
      int parent = v.outputs[0].node;
      for (size_t k = 1; k < v.outputs.size(); ++k) {
        parent = lca(parent, v.outputs[k].node, pattern);
        pattern = combine(pattern, v.outputs[k].pattern);
      }
      d.parent = parent;
      d.depth = parent >= 0 ? dom_[parent].depth + 1 : 1;
      d.pattern = pattern;
    }
  }

  int find(int i) {
    while (parent_[i] != i) i = parent_[i] = parent_[parent_[i]];
    return i;
  }

  /** Does `fcond(group pattern, is_sink)` hold for every node on every path from src to sink? */
  template <typename F>
  bool check_path(int src, int sink, F fcond) {
    visited_.assign(g_.nodes.size(), false);
    for (const Edge &e : vertices_[src].outputs)
      if (!check_path_from(e.node, sink, fcond)) return false;
    return true;
  }
  template <typename F>
  bool check_path_from(int v, int sink, F fcond) {
    if (visited_[v]) return true;
    visited_[v] = true;
    if (!fcond(group_pattern_[find(v)], v == sink)) return false;
    if (v == sink) return true;
    for (const Edge &e : vertices_[v].outputs)
      if (!check_path_from(e.node, sink, fcond)) return false;
    return true;
  }

  /** Calls f(v) once for every node on the paths from src up to (not including) sink. */
  template <typename F>
  void for_each_on_paths(int src, int sink, F f) {
    visited_.assign(g_.nodes.size(), false);
    std::vector<int> stack{src};
    while (!stack.empty()) {
      int v = stack.back();
      stack.pop_back();
      if (v == sink || visited_[v]) continue;
      visited_[v] = true;
      f(v);
      for (const Edge &e : vertices_[v].outputs) stack.push_back(e.node);
    }
  }

  /** Nodes the fused group would hold: the sink's group plus every group on the paths to it. */
  int count_fused(int src, int sink) {
    std::vector<bool> counted(g_.nodes.size(), false);
    int total = size_[find(sink)];
    counted[find(sink)] = true;
    for_each_on_paths(src, sink, [&](int v) {
      int r = find(v);
      if (!counted[r]) total += size_[r], counted[r] = true;
    });
    return total;
  }

  void merge(int child, int into) {
    child = find(child);
    into = find(into);
    if (child == into) return;
    AT_CHECK(!(has_anchor_[child] && has_anchor_[into]), "fuse-ops: two anchors in one group");
    size_[into] += size_[child];
    parent_[child] = into;
    if (has_anchor_[child]) {
      has_anchor_[into] = true;
      group_pattern_[into] = combine(group_pattern_[child], group_pattern_[into]);
    }
  }

  /** Merges every node on the paths from src to sink into sink's group. */
  void commit(int src, int sink) {
    for_each_on_paths(src, sink, [&](int v) { merge(v, sink); });
  }

  void run_phase(int phase) {
    for (int i = 0; i < static_cast<int>(g_.nodes.size()); ++i) {
      OpPattern pattern = group_pattern_[find(i)];
      const DomNode &d = dom_[i];
      if (pattern == OpPattern::kOpaque || d.parent < 0) continue;
      int sink = d.parent;
      if (find(i) == find(sink)) continue;
      if (count_fused(i, sink) > max_size_) continue;
      if (pattern == OpPattern::kOutEWiseFusable) {
        if (phase != 0 || d.pattern != OpPattern::kElemWise) continue;
        if (check_path(i, sink, [](OpPattern k, bool) { return at_most(k, OpPattern::kBroadcast); })) commit(i, sink);
      } else if (at_most(pattern, OpPattern::kBroadcast)) {
        if (!(at_most(d.pattern, OpPattern::kInjective) || d.pattern == OpPattern::kCommReduce)) continue;
        auto fcond = [](OpPattern k, bool is_sink) {
          if (!is_sink) return at_most(k, OpPattern::kInjective);
          return at_most(k, OpPattern::kBroadcast) || k == OpPattern::kCommReduce || k == OpPattern::kInjective ||
                 k == OpPattern::kOutEWiseFusable;
        };
        if (check_path(i, sink, fcond)) commit(i, sink);
      } else if (pattern == OpPattern::kInjective) {
        if (phase != 1) continue;
        if (check_path(i, sink, [](OpPattern k, bool) { return at_most(k, OpPattern::kInjective); })) commit(i, sink);
      }
      // CommReduce groups take no further producers-into-consumer step (as in TVM).
    }
  }

  const Graph &g_;
  int max_size_;
  std::vector<Vertex> vertices_;
  std::vector<DomNode> dom_;
  std::vector<int> parent_, size_;
  std::vector<OpPattern> group_pattern_;
  std::vector<bool> has_anchor_;
  std::vector<bool> visited_;
};

}  // namespace

Expected<Graph> fuse_ops(const Graph &g, const FuseOptions &options) {
  std::vector<int> root = Partitioner(g, options.max_group_size).run();
  int n = static_cast<int>(g.nodes.size());
  std::unordered_map<int, std::vector<int>> members;  // root -> members in topological order
  for (int i = 0; i < n; ++i) members[root[i]].push_back(i);
  Uses uses = find_uses(g);

  Rewriter rw(g);
  for (int i = 0; i < n; ++i) {
    const std::vector<int> &group = members[root[i]];
    if (group.back() != i) continue;  // a group is emitted where its last member stands
    if (g.nodes[i].is_function()) {   // already a function: keep it as it is
      AT_TRY(rw.copy(i));
      continue;
    }
    // The group's output: its one member used outside it (the last member, by construction).
    for (int m : group) {
      bool escapes = uses.is_output[m];
      for (int c : uses.consumers[m]) escapes |= root[c] != root[i];
      AT_CHECK(!escapes || m == i, "fuse-ops: member %" + std::to_string(m) + " of group %" + std::to_string(i) +
                                       " is used outside the group");
    }
    GraphBuilder body;
    std::vector<ValueId> args;                   // outer values passed in
    std::unordered_map<int64_t, ValueId> local;  // outer value key -> body value
    auto key = [](ValueId v) { return (static_cast<int64_t>(v.kind) << 32) | static_cast<uint32_t>(v.index); };
    for (int m : group) {
      const Node &node = g.nodes[m];
      std::vector<ValueId> inputs;
      for (ValueId v : node.inputs) {
        if (v.kind == ValueId::Kind::kNode && root[v.index] == root[i]) {
          inputs.push_back(local.at(key(v)));
          continue;
        }
        auto it = local.find(key(v));
        if (it == local.end()) {
          ValueId p = body.add_input("p" + std::to_string(args.size()), g.type_of(v));
          args.push_back(rw.map(v));
          it = local.emplace(key(v), p).first;
        }
        inputs.push_back(it->second);
      }
      AT_ASSIGN(bv, body.add_node(node.op, std::move(inputs), node.attrs, node.origin));
      local[key(ValueId::node(m))] = bv;
    }
    body.add_output(local.at(key(ValueId::node(i))));
    AT_ASSIGN(fv, rw.builder().add_function(std::make_shared<const Graph>(body.finish()), std::move(args), g.nodes[i].origin));
    rw.replace(i, fv);
  }
  return rw.finish();
}

}  // namespace autotune
