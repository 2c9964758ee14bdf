#include "codegen/ThreadRows.h"

#include <algorithm>
#include <deque>
#include <limits>

#include "codegen/Schedule.h"
#include "ir/Ops.h"

namespace autotune {

namespace {

/** Whether parameter `k` of `body` is the data input of a conv of one group, directly or through one op before it. */
bool reads_every_channel(const Graph &body, int k) {
  ValueId param = ValueId::input(k);
  for (const Node &n : body.nodes) {
    if (!is_conv_op(n.op) || n.attrs.i("groups") != 1) continue;
    ValueId data = n.inputs[0];
    if (data == param) return true;
    if (data.kind == ValueId::Kind::kNode)
      for (const ValueId &in : body.nodes[data.index].inputs)
        if (in == param) return true;
  }
  return false;
}

/**
 * The bytes of the weights of `body`'s convs whose weight is a parameter: what each thread reads
 * in full when it splits rows. A Winograd conv2d_nchwc reads its transformed weight, (m + 2)^2 / 9
 * times the 3x3 one.
 */
int64_t weight_bytes(const Graph &body) {
  int64_t bytes = 0;
  for (const Node &n : body.nodes) {
    if (!is_conv_op(n.op) || n.inputs[1].kind != ValueId::Kind::kInput) continue;
    int64_t w = static_cast<int64_t>(body.type_of(n.inputs[1]).nbytes());
    if (conv_block(n) > 0 && winograd_eligible(body, n)) {
      int64_t a = default_winograd_tile(n) + 2;
      w = w * a * a / 9;
    }
    bytes += w;
  }
  return bytes;
}

/** An input edge of the fused graph: group `reader` reads `bytes` that group `writer` wrote. */
struct Edge {
  int reader, writer;
  int64_t bytes;
  bool every_channel;
};

std::vector<Edge> edges_of(const Graph &model) {
  std::vector<Edge> edges;
  for (size_t i = 0; i < model.nodes.size(); ++i) {
    const Node &n = model.nodes[i];
    if (!n.body) continue;
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      ValueId v = n.inputs[k];
      if (v.kind != ValueId::Kind::kNode || !model.nodes[v.index].body) continue;
      edges.push_back({static_cast<int>(i), v.index, static_cast<int64_t>(model.nodes[v.index].type.nbytes()),
                       reads_every_channel(*n.body, static_cast<int>(k))});
    }
  }
  return edges;
}

/** The cost of one edge for the reader's and the writer's labels (thread_split_cost's first item). */
int64_t edge_cost(const Edge &e, bool reader_rows, bool writer_rows) {
  if (e.every_channel) return reader_rows && writer_rows ? 0 : e.bytes / 2;
  return reader_rows == writer_rows ? 0 : e.bytes / 2;
}

/**
 * The minimum s-t cut of a graph of `n` vertices given as a capacity matrix: which vertices stay
 * on the source's side (reachable from `s` in the residual graph of a maximum flow).
 * Edmonds-Karp: shortest augmenting paths, O(V E^2); a model has a few hundred groups.
 */
std::vector<bool> source_side(std::vector<std::vector<int64_t>> cap, int s, int t) {
  int n = static_cast<int>(cap.size());
  auto reach = [&](std::vector<int> &parent) {
    parent.assign(n, -1);
    parent[s] = s;
    std::deque<int> queue{s};
    while (!queue.empty()) {
      int u = queue.front();
      queue.pop_front();
      for (int v = 0; v < n; ++v)
        if (parent[v] < 0 && cap[u][v] > 0) parent[v] = u, queue.push_back(v);
    }
    return parent[t] >= 0;
  };
  std::vector<int> parent;
  while (reach(parent)) {
    int64_t flow = std::numeric_limits<int64_t>::max();
    for (int v = t; v != s; v = parent[v]) flow = std::min(flow, cap[parent[v]][v]);
    for (int v = t; v != s; v = parent[v]) cap[parent[v]][v] -= flow, cap[v][parent[v]] += flow;
  }
  std::vector<bool> side(n);
  for (int v = 0; v < n; ++v) side[v] = parent[v] >= 0;
  return side;
}

}  // namespace

int64_t thread_split_cost(const Graph &model, const std::vector<bool> &rows) {
  int64_t cost = 0;
  for (const Edge &e : edges_of(model)) cost += edge_cost(e, rows[e.reader], rows[e.writer]);
  for (size_t i = 0; i < model.nodes.size(); ++i)
    if (rows[i] && model.nodes[i].body) cost += weight_bytes(*model.nodes[i].body) / 2;
  return cost;
}

std::vector<bool> rows_by_thread(const Graph &model, int threads, const std::vector<bool> &rows_already, const std::vector<bool> &fixed) {
  int n = static_cast<int>(model.nodes.size());
  std::vector<bool> rows(rows_already.begin(), rows_already.end());
  rows.resize(n, false);
  if (threads < 2) return rows;
  // Vertex i is group i; on the source's side it splits channels (x = 0), on the sink's rows (x =
  // 1). A term a * x is an edge s -> i of capacity a (cut when i splits rows) or, when a is
  // negative, i -> t of -a and the constant a; a term w * (1 - x_i) * x_j is an edge i -> j of w
  // (cut when i splits channels and j rows).
  int s = n, t = n + 1;
  const int64_t kFixed = std::numeric_limits<int64_t>::max() / 4;
  std::vector<std::vector<int64_t>> cap(n + 2, std::vector<int64_t>(n + 2, 0));
  std::vector<int64_t> linear(n, 0);
  for (int i = 0; i < n; ++i) {
    const Node &g = model.nodes[i];
    bool free = g.body && !rows[i] && (fixed.empty() || !fixed[i]) && can_split_rows(*g.body, threads);
    if (rows[i]) cap[i][t] = kFixed;       // its channel default already splits rows
    else if (!free) cap[s][i] = kFixed;    // it keeps channels
    else linear[i] += weight_bytes(*g.body) / 2 + 1;  // + 1: a tie keeps channels
  }
  for (const Edge &e : edges_of(model)) {
    // E(reader r, writer w) = A + (C - A) x_r + (D - C) x_w + (B + C - A - D) (1 - x_r) x_w, with
    // A = E(0, 0), B = E(0, 1), C = E(1, 0), D = E(1, 1); B + C - A - D >= 0 for both kinds of edge.
    int64_t a = edge_cost(e, false, false), b = edge_cost(e, false, true), c = edge_cost(e, true, false), d = edge_cost(e, true, true);
    linear[e.reader] += c - a, linear[e.writer] += d - c;
    cap[e.reader][e.writer] += b + c - a - d;
  }
  for (int i = 0; i < n; ++i) {
    if (linear[i] > 0) cap[s][i] = std::min(kFixed, cap[s][i] + linear[i]);
    if (linear[i] < 0) cap[i][t] = std::min(kFixed, cap[i][t] - linear[i]);
  }
  std::vector<bool> channels = source_side(std::move(cap), s, t);
  for (int i = 0; i < n; ++i) rows[i] = !channels[i];
  return rows;
}

}  // namespace autotune
