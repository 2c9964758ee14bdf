#include "ir/Printer.h"

#include <charconv>
#include <nlohmann/json.hpp>

namespace autotune {
namespace {

std::string values_str(const Tensor &t) {
  std::string s = "[";
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (i) s += ", ";
    s += t.dtype() == DType::kFloat32 ? attr_value_str(static_cast<double>(t.f32()[i])) : std::to_string(t.i64()[i]);
  }
  return s + "]";
}

std::string ref(const Graph &g, ValueId v) { return "%" + g.value_name(v); }

std::string result_types(const Graph &g) {
  if (g.outputs.size() == 1) return type_str(g.type_of(g.outputs[0]));
  std::string s = "(";
  for (size_t i = 0; i < g.outputs.size(); ++i) s += (i ? ", " : "") + type_str(g.type_of(g.outputs[i]));
  return s + ")";
}

}  // namespace

namespace {

/** A graph's signature and body: "(%x: T, ...) -> T {\n ... }" at the given indent. */
void print_function(const Graph &g, const std::string &indent, std::string &s) {
  s += "(";
  for (size_t i = 0; i < g.inputs.size(); ++i)
    s += (i ? ", %" : "%") + g.inputs[i].name + ": " + type_str(g.inputs[i].type);
  s += ") -> " + result_types(g) + " {\n";
  const std::string in = indent + "  ";
  std::vector<bool> printed(g.constants.size(), false);
  auto print_constant = [&](int c) {
    if (printed[c]) return;
    printed[c] = true;
    const GraphConstant &k = g.constants[c];
    s += in + "%" + k.name + " = constant(";
    if (k.value.numel() <= kInlineConstantElements) s += values_str(k.value) + ", ";
    s += type_str(k.value.type()) + ");\n";
  };
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node &n = g.nodes[i];
    for (ValueId v : n.inputs)
      if (v.kind == ValueId::Kind::kConstant) print_constant(v.index);
    s += in + "%" + std::to_string(i) + " = " + n.op;
    if (n.is_function()) {
      s += " ";
      print_function(*n.body, in, s);
    }
    s += "(";
    bool first = true;
    for (ValueId v : n.inputs) {
      s += (first ? "" : ", ") + ref(g, v);
      first = false;
    }
    for (const auto &[name, value] : n.attrs.items()) {
      s += (first ? "" : ", ") + name + "=" + attr_value_str(value);
      first = false;
    }
    s += "); /* ty=" + type_str(n.type) + " */\n";
  }
  for (size_t c = 0; c < g.constants.size(); ++c) print_constant(static_cast<int>(c));
  if (g.outputs.size() == 1) {
    s += in + "return " + ref(g, g.outputs[0]) + ";\n";
  } else {
    s += in + "return (";
    for (size_t i = 0; i < g.outputs.size(); ++i) s += (i ? ", " : "") + ref(g, g.outputs[i]);
    s += ");\n";
  }
  s += indent + "}";
}

}  // namespace

std::string print_text(const Graph &g) {
  std::string s = "def @main";
  print_function(g, "", s);
  return s + "\n";
}

OpPattern function_pattern(const Graph &body) {
  OpPattern p = OpPattern::kElemWise;
  for (const Node &n : body.nodes) {
    OpPattern q = n.is_function() ? function_pattern(*n.body) : find_op(n.op)->pattern;
    p = static_cast<int>(q) > static_cast<int>(p) ? q : p;
  }
  return p;
}

std::string print_dot(const Graph &g) {
  // The DOT id of the node that produces value v (a function's body output for fused groups).
  auto producer = [&g](ValueId v) -> std::string {
    if (v.kind == ValueId::Kind::kInput) return "in" + std::to_string(v.index);
    const Node &n = g.nodes[v.index];
    if (!n.is_function()) return "n" + std::to_string(v.index);
    return "n" + std::to_string(v.index) + "_" + std::to_string(n.body->outputs[0].index);
  };
  auto label = [](const Node &n, int weights) {
    return n.op + "\\n" + shape_str(n.type.shape) +
           (weights ? "\\n(" + std::to_string(weights) + " constant" + (weights > 1 ? "s" : "") + ")" : "");
  };
  std::string s = "digraph main {\n  rankdir=TB;\n  node [shape=box, fontname=\"monospace\", fontsize=10];\n";
  for (size_t i = 0; i < g.inputs.size(); ++i)
    s += "  in" + std::to_string(i) + " [shape=ellipse, label=\"%" + g.inputs[i].name + "\\n" +
         shape_str(g.inputs[i].type.shape) + "\"];\n";
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node &n = g.nodes[i];
    std::string id = "n" + std::to_string(i);
    if (!n.is_function()) {
      int weights = 0;
      for (ValueId v : n.inputs) weights += v.kind == ValueId::Kind::kConstant;
      s += "  " + id + " [label=\"%" + std::to_string(i) + " = " + label(n, weights) + "\"];\n";
      for (ValueId v : n.inputs)
        if (v.kind != ValueId::Kind::kConstant) s += "  " + producer(v) + " -> " + id + ";\n";
      continue;
    }
    const Graph &body = *n.body;
    s += "  subgraph cluster_" + std::to_string(i) + " {\n    style=rounded; color=gray40; label=\"%" + std::to_string(i) +
         " = fn (" + pattern_name(function_pattern(body)) + ")\";\n";
    std::string edges;
    for (size_t j = 0; j < body.nodes.size(); ++j) {
      const Node &m = body.nodes[j];
      std::string mid = id + "_" + std::to_string(j);
      int weights = 0;
      for (ValueId v : m.inputs) {
        if (v.kind == ValueId::Kind::kNode) {
          s += "    " + id + "_" + std::to_string(v.index) + " -> " + mid + ";\n";
          continue;
        }
        ValueId arg = n.inputs[v.index];  // a parameter: the value passed in
        if (arg.kind == ValueId::Kind::kConstant) ++weights;
        else edges += "  " + producer(arg) + " -> " + mid + ";\n";
      }
      s += "    " + mid + " [label=\"" + label(m, weights) + "\"];\n";
    }
    s += "  }\n" + edges;
  }
  for (size_t i = 0; i < g.outputs.size(); ++i) {
    s += "  out" + std::to_string(i) + " [shape=ellipse, label=\"output " + std::to_string(i) + "\"];\n";
    if (g.outputs[i].kind != ValueId::Kind::kConstant) s += "  " + producer(g.outputs[i]) + " -> out" + std::to_string(i) + ";\n";
  }
  return s + "}\n";
}

std::string print_json(const Graph &g) {
  using nlohmann::json;
  auto type_json = [](const TensorType &t) { return json{{"shape", t.shape}, {"dtype", dtype_name(t.dtype)}}; };
  auto names = [&g](const std::vector<ValueId> &vs) {
    json a = json::array();
    for (ValueId v : vs) a.push_back("%" + g.value_name(v));
    return a;
  };
  json j;
  j["inputs"] = json::array();
  for (const auto &in : g.inputs) {
    json e = type_json(in.type);
    e["name"] = "%" + in.name;
    j["inputs"].push_back(e);
  }
  j["constants"] = json::array();
  for (const auto &c : g.constants) {
    json e = type_json(c.value.type());
    e["name"] = "%" + c.name;
    j["constants"].push_back(e);
  }
  j["nodes"] = json::array();
  json groups = json::array();
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node &n = g.nodes[i];
    std::string id = "%" + std::to_string(i);
    json e = type_json(n.type);
    e["id"] = id;
    e["op"] = n.op;
    e["inputs"] = names(n.inputs);
    if (n.is_function()) {
      json ops = json::array();
      for (const Node &m : n.body->nodes) ops.push_back(m.op);
      e["pattern"] = pattern_name(function_pattern(*n.body));
      e["ops"] = ops;
      groups.push_back({{"id", id}, {"ops", ops}, {"pattern", e["pattern"]}, {"inputs", e["inputs"]},
                        {"outputs", json::array({id})}, {"shape", n.type.shape}});
    } else {
      e["pattern"] = pattern_name(find_op(n.op)->pattern);
      json attrs = json::object();
      for (const auto &[name, value] : n.attrs.items())
        std::visit([&](const auto &x) { attrs[name] = x; }, value);
      e["attrs"] = attrs;
    }
    if (!n.origin.empty()) e["origin"] = n.origin;
    j["nodes"].push_back(e);
  }
  if (!groups.empty()) j["groups"] = groups;
  j["outputs"] = names(g.outputs);
  return j.dump(2) + "\n";
}

}  // namespace autotune
