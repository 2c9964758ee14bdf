#include "ir/Attrs.h"

#include <charconv>
#include <cmath>

namespace autotune {

void Attrs::set(const std::string &name, AttrValue v) {
  for (auto &[k, val] : items_)
    if (k == name) {
      val = std::move(v);
      return;
    }
  items_.emplace_back(name, std::move(v));
}

const AttrValue *Attrs::find(const std::string &name) const {
  for (const auto &[k, v] : items_)
    if (k == name) return &v;
  return nullptr;
}

namespace {
template <typename T>
const T &get(const Attrs &a, const std::string &name) {
  const AttrValue *v = a.find(name);
  AT_CHECK(v != nullptr, "attribute '" + name + "' missing (attributes are normalized at graph construction)");
  const T *p = std::get_if<T>(v);
  AT_CHECK(p != nullptr, "attribute '" + name + "' has another kind");
  return *p;
}

const char *kind_name(AttrKind k) {
  switch (k) {
    case AttrKind::kInt: return "an integer";
    case AttrKind::kFloat: return "a float";
    case AttrKind::kInts: return "a list of integers";
    case AttrKind::kFloats: return "a list of floats";
    case AttrKind::kString: return "a string";
  }
  return "?";
}

/** Converts v to the kind the schema asks for where that loses nothing (int -> float, [] -> any list). */
std::optional<AttrValue> coerce(const AttrValue &v, AttrKind kind) {
  switch (kind) {
    case AttrKind::kInt:
      if (auto p = std::get_if<int64_t>(&v)) return *p;
      return std::nullopt;
    case AttrKind::kFloat:
      if (auto p = std::get_if<double>(&v)) return *p;
      if (auto p = std::get_if<int64_t>(&v)) return static_cast<double>(*p);
      return std::nullopt;
    case AttrKind::kInts:
      if (auto p = std::get_if<std::vector<int64_t>>(&v)) return *p;
      if (auto p = std::get_if<std::vector<double>>(&v); p && p->empty()) return std::vector<int64_t>{};
      return std::nullopt;
    case AttrKind::kFloats:
      if (auto p = std::get_if<std::vector<double>>(&v)) return *p;
      if (auto p = std::get_if<std::vector<int64_t>>(&v)) return std::vector<double>(p->begin(), p->end());
      return std::nullopt;
    case AttrKind::kString:
      if (auto p = std::get_if<std::string>(&v)) return *p;
      return std::nullopt;
  }
  return std::nullopt;
}

std::string float_str(double d) {
  float f = static_cast<float>(d);
  if (std::isnan(f)) return "nanf";
  if (std::isinf(f)) return f > 0 ? "inff" : "-inff";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), f);
  std::string s(buf, end);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s + "f";
}
}  // namespace

int64_t Attrs::i(const std::string &name) const { return get<int64_t>(*this, name); }
double Attrs::f(const std::string &name) const { return get<double>(*this, name); }
const std::vector<int64_t> &Attrs::ints(const std::string &name) const { return get<std::vector<int64_t>>(*this, name); }
const std::vector<double> &Attrs::floats(const std::string &name) const { return get<std::vector<double>>(*this, name); }
const std::string &Attrs::s(const std::string &name) const { return get<std::string>(*this, name); }

Expected<Attrs> normalize_attrs(const std::vector<AttrSpec> &schema, const Attrs &attrs) {
  for (const auto &[name, v] : attrs.items()) {
    bool known = false;
    for (const auto &spec : schema) known |= spec.name == name;
    if (!known) return make_error("unknown attribute '" + name + "'");
  }
  Attrs out;
  for (const auto &spec : schema) {
    const AttrValue *v = attrs.find(spec.name);
    if (!v) {
      if (!spec.default_value) return make_error("missing attribute '" + spec.name + "'");
      out.set(spec.name, *spec.default_value);
      continue;
    }
    auto c = coerce(*v, spec.kind);
    if (!c) return make_error("attribute '" + spec.name + "' must be " + kind_name(spec.kind));
    // NaN is no value: no op means anything by it, and it would make equal nodes compare unequal.
    bool nan = false;
    if (const auto *d = std::get_if<double>(&*c)) nan = std::isnan(*d);
    if (const auto *ds = std::get_if<std::vector<double>>(&*c))
      for (double d : *ds) nan |= std::isnan(d);
    if (nan) return make_error("attribute '" + spec.name + "' is NaN");
    out.set(spec.name, std::move(*c));
  }
  return out;
}

std::string attr_value_str(const AttrValue &v) {
  struct Visitor {
    std::string operator()(int64_t i) const { return std::to_string(i); }
    std::string operator()(double d) const { return float_str(d); }
    std::string operator()(const std::vector<int64_t> &xs) const {
      std::string s = "[";
      for (size_t i = 0; i < xs.size(); ++i) s += (i ? ", " : "") + std::to_string(xs[i]);
      return s + "]";
    }
    std::string operator()(const std::vector<double> &xs) const {
      std::string s = "[";
      for (size_t i = 0; i < xs.size(); ++i) s += (i ? ", " : "") + float_str(xs[i]);
      return s + "]";
    }
    std::string operator()(const std::string &str) const {
      std::string s = "\"";
      for (char c : str) {
        if (c == '"' || c == '\\') s += '\\';
        s += c;
      }
      return s + "\"";
    }
  };
  return std::visit(Visitor{}, v);
}

}  // namespace autotune
