#pragma once
// Node attributes: an ordered list of named values. Each op declares a schema (OpDef::attrs);
// normalize_attrs() checks a node's attributes against it, coerces ints written where floats
// are expected, and fills defaults, so every node in a Graph carries all of its attributes in
// schema order and no later code has to know a default.
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "ir/Error.h"

namespace autotune {

using AttrValue = std::variant<int64_t, double, std::vector<int64_t>, std::vector<double>, std::string>;

enum class AttrKind { kInt, kFloat, kInts, kFloats, kString };

struct AttrSpec {
  std::string name;
  AttrKind kind;
  std::optional<AttrValue> default_value;  // nullopt: required
};

class Attrs {
 public:
  Attrs() = default;
  Attrs(std::initializer_list<std::pair<std::string, AttrValue>> items) : items_(items) {}

  void set(const std::string &name, AttrValue v);
  const AttrValue *find(const std::string &name) const;
  const std::vector<std::pair<std::string, AttrValue>> &items() const { return items_; }

  // Typed reads of normalized attributes; a missing or mistyped one is a bug (AT_CHECK).
  int64_t i(const std::string &name) const;
  double f(const std::string &name) const;
  const std::vector<int64_t> &ints(const std::string &name) const;
  const std::vector<double> &floats(const std::string &name) const;
  const std::string &s(const std::string &name) const;

  bool operator==(const Attrs &o) const { return items_ == o.items_; }

 private:
  std::vector<std::pair<std::string, AttrValue>> items_;
};

/** Checks `attrs` against `schema` and returns them complete, in schema order. */
Expected<Attrs> normalize_attrs(const std::vector<AttrSpec> &schema, const Attrs &attrs);

/** The text form: 2, 0.5f, [1, 2], [0.5f], "same". Floats print as the shortest float32 repr. */
std::string attr_value_str(const AttrValue &v);

}  // namespace autotune
