#include "ir/Parser.h"

#include "ir/Hash.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>
#include <unordered_map>

namespace autotune {
namespace {

enum class Tok { kEnd, kPercent, kAt, kIdent, kInt, kFloat, kString, kPunct };

struct Token {
  Tok kind = Tok::kEnd;
  std::string text;  // name without sigil, literal text, or punctuation
  int line = 1, col = 1;
};

class Lexer {
 public:
  explicit Lexer(const std::string &s) : s_(s) {}

  Expected<Token> next() {
    skip_space_and_comments();
    Token t;
    t.line = line_, t.col = col_;
    if (i_ >= s_.size()) return t;
    char c = s_[i_];
    auto is_name = [](char ch) { return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '.'; };
    if (c == '%' || c == '@') {
      advance();
      size_t start = i_;
      while (i_ < s_.size() && is_name(s_[i_])) advance();
      if (i_ == start) return error(t, std::string("expected a name after '") + c + "'");
      t.kind = c == '%' ? Tok::kPercent : Tok::kAt;
      t.text = s_.substr(start, i_ - start);
      return t;
    }
    if (c == '-' && i_ + 1 < s_.size() && s_[i_ + 1] == '>') {
      advance(), advance();
      t.kind = Tok::kPunct, t.text = "->";
      return t;
    }
    if (std::isdigit(static_cast<unsigned char>(c)) || c == '-' || c == '+') {
      size_t start = i_;
      advance();
      bool is_float = false;
      while (i_ < s_.size()) {
        char d = s_[i_];
        if (std::isdigit(static_cast<unsigned char>(d))) advance();
        else if (d == '.' || d == 'e' || d == 'E') {
          is_float = true;
          advance();
          if ((d == 'e' || d == 'E') && i_ < s_.size() && (s_[i_] == '-' || s_[i_] == '+')) advance();
        } else if (std::isalpha(static_cast<unsigned char>(d))) advance();  // inff, nanf, the f suffix
        else break;
      }
      t.text = s_.substr(start, i_ - start);
      t.kind = (is_float || t.text.back() == 'f') ? Tok::kFloat : Tok::kInt;
      return t;
    }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t start = i_;
      while (i_ < s_.size() && is_name(s_[i_])) advance();
      t.text = s_.substr(start, i_ - start);
      t.kind = (t.text == "inff" || t.text == "nanf") ? Tok::kFloat : Tok::kIdent;
      return t;
    }
    if (c == '"') {
      advance();
      std::string v;
      while (i_ < s_.size() && s_[i_] != '"') {
        if (s_[i_] == '\\' && i_ + 1 < s_.size()) advance();
        v += s_[i_];
        advance();
      }
      if (i_ >= s_.size()) return error(t, "unterminated string");
      advance();
      t.kind = Tok::kString, t.text = v;
      return t;
    }
    if (std::string("()[]{},:;=").find(c) != std::string::npos) {
      advance();
      t.kind = Tok::kPunct, t.text = std::string(1, c);
      return t;
    }
    return error(t, std::string("unexpected character '") + c + "'");
  }

 private:
  Error error(const Token &t, const std::string &why) const {
    return make_error(std::to_string(t.line) + ":" + std::to_string(t.col) + ": " + why);
  }
  void advance() {
    if (s_[i_] == '\n') ++line_, col_ = 1;
    else ++col_;
    ++i_;
  }
  void skip_space_and_comments() {
    while (i_ < s_.size()) {
      if (std::isspace(static_cast<unsigned char>(s_[i_]))) advance();
      else if (s_.compare(i_, 2, "//") == 0) {
        while (i_ < s_.size() && s_[i_] != '\n') advance();
      } else if (s_.compare(i_, 2, "/*") == 0) {
        advance(), advance();
        while (i_ < s_.size() && s_.compare(i_, 2, "*/") != 0) advance();
        if (i_ < s_.size()) advance(), advance();
      } else break;
    }
  }

  const std::string &s_;
  size_t i_ = 0;
  int line_ = 1, col_ = 1;
};

Expected<double> parse_float(const std::string &text) {
  std::string t = text;
  if (!t.empty() && t.back() == 'f') t.pop_back();
  if (t == "inf") return std::numeric_limits<double>::infinity();
  if (t == "-inf") return -std::numeric_limits<double>::infinity();
  if (t == "nan") return std::numeric_limits<double>::quiet_NaN();
  float v = 0;
  const char *b = t.data() + (!t.empty() && t[0] == '+'), *e = t.data() + t.size();
  auto [p, ec] = std::from_chars(b, e, v);
  if (ec != std::errc() || p != e) return make_error("bad float literal '" + text + "'");
  return static_cast<double>(v);
}

Expected<int64_t> parse_int(const std::string &text) {
  int64_t v = 0;
  const char *b = text.data() + (!text.empty() && text[0] == '+'), *e = text.data() + text.size();
  auto [p, ec] = std::from_chars(b, e, v);
  if (ec != std::errc() || p != e) return make_error("bad integer literal '" + text + "'");
  return v;
}

class Parser {
 public:
  Parser(const std::string &text, std::string label) : lex_(text), label_(std::move(label)) {}

  Expected<Graph> parse() {
    AT_TRY(advance());
    AT_TRY(expect_ident("def"));
    if (tok_.kind != Tok::kAt) return fail("expected '@main'");
    AT_TRY(advance());
    Scope top;
    AT_TRY(parse_function(top));
    if (tok_.kind != Tok::kEnd) return fail("unexpected text after the closing '}'");
    return top.b.finish();
  }

 private:
  Error fail(const std::string &why) const { return fail_at(tok_, why); }
  Error fail_at(const Token &at, const std::string &why) const {
    return make_error(label_ + ":" + std::to_string(at.line) + ":" + std::to_string(at.col) + ": " + why);
  }
  Status advance() {
    auto t = lex_.next();
    if (!t) return make_error(label_ + ":" + t.error().message);
    tok_ = t.take();
    return Status::ok();
  }
  bool is(const char *punct) const { return tok_.kind == Tok::kPunct && tok_.text == punct; }
  Status expect(const char *punct) {
    if (!is(punct)) return fail(std::string("expected '") + punct + "'" + (tok_.text.empty() ? "" : ", got '" + tok_.text + "'"));
    return advance();
  }
  Status expect_ident(const char *word) {
    if (tok_.kind != Tok::kIdent || tok_.text != word) return fail(std::string("expected '") + word + "'");
    return advance();
  }
  Status define(const std::string &name, ValueId v) {
    if (!scope_->names.emplace(name, v).second) return fail("%" + name + " is defined twice");
    return Status::ok();
  }

  /** Values in scope while one function body is read; @main and each fn body have their own. */
  struct Scope {
    GraphBuilder b;
    std::unordered_map<std::string, ValueId> names;
  };

  /** "(%x: T, ...) -> T { statements return v; }" into `scope`. */
  Status parse_function(Scope &scope) {
    Scope *outer = scope_;
    scope_ = &scope;
    Status st = parse_function_in_scope();
    scope_ = outer;
    return st;
  }

  Status parse_function_in_scope() {
    AT_TRY(expect("("));
    while (!is(")")) {
      if (tok_.kind != Tok::kPercent) return fail("expected a parameter like %x: Tensor[...]");
      Token at = tok_;
      std::string name = tok_.text;
      AT_TRY(advance());
      AT_TRY(expect(":"));
      AT_ASSIGN(type, parse_type());
      if (scope_->names.count(name)) return fail_at(at, "%" + name + " is defined twice");
      ValueId v = scope_->b.add_input(name, type);
      if (scope_->b.graph().inputs.back().name != name) return fail_at(at, "%" + name + " is not a plain name");
      AT_TRY(define(name, v));
      if (!is(")")) AT_TRY(expect(","));
    }
    AT_TRY(advance());
    AT_TRY(expect("->"));
    std::vector<TensorType> declared;
    if (is("(")) {
      AT_TRY(advance());
      while (!is(")")) {
        AT_ASSIGN(t, parse_type());
        declared.push_back(t);
        if (!is(")")) AT_TRY(expect(","));
      }
      AT_TRY(advance());
    } else {
      AT_ASSIGN(t, parse_type());
      declared.push_back(t);
    }
    AT_TRY(expect("{"));
    while (!(tok_.kind == Tok::kIdent && tok_.text == "return")) {
      if (tok_.kind == Tok::kEnd) return fail("missing 'return'");
      AT_TRY(parse_statement());
    }
    Token return_at = tok_;
    AT_TRY(advance());
    std::vector<ValueId> outs;
    if (is("(")) {
      AT_TRY(advance());
      while (!is(")")) {
        AT_ASSIGN(v, parse_ref());
        outs.push_back(v);
        if (!is(")")) AT_TRY(expect(","));
      }
      AT_TRY(advance());
    } else {
      AT_ASSIGN(v, parse_ref());
      outs.push_back(v);
    }
    AT_TRY(expect(";"));
    AT_TRY(expect("}"));
    if (outs.size() != declared.size())
      return fail_at(return_at, "returns " + std::to_string(outs.size()) + " values but declares " + std::to_string(declared.size()));
    for (size_t i = 0; i < outs.size(); ++i) {
      const TensorType &actual = scope_->b.graph().type_of(outs[i]);
      if (actual != declared[i])
        return fail_at(return_at, "return value " + std::to_string(i) + " is " + type_str(actual) + " but declared " +
                                      type_str(declared[i]));
      scope_->b.add_output(outs[i]);
    }
    return Status::ok();
  }

  Expected<TensorType> parse_type() {
    AT_TRY(expect_ident("Tensor"));
    AT_TRY(expect("["));
    AT_TRY(expect("("));
    Shape s;
    while (!is(")")) {
      if (tok_.kind != Tok::kInt) return fail("expected a dimension");
      AT_ASSIGN(d, parse_int(tok_.text));
      s.push_back(d);
      AT_TRY(advance());
      if (!is(")")) AT_TRY(expect(","));
    }
    AT_TRY(advance());
    AT_TRY(expect(","));
    if (tok_.kind != Tok::kIdent) return fail("expected a dtype");
    auto dtype = parse_dtype(tok_.text);
    if (!dtype) return fail(dtype.error().message);
    AT_TRY(advance());
    AT_TRY(expect("]"));
    auto t = make_type(*dtype, s);
    if (!t) return fail(t.error().message);
    return t;
  }

  Expected<ValueId> parse_ref() {
    if (tok_.kind != Tok::kPercent) return fail("expected a value like %x");
    auto it = scope_->names.find(tok_.text);
    if (it == scope_->names.end()) return fail("%" + tok_.text + " is not defined");
    ValueId v = it->second;
    AT_TRY(advance());
    return v;
  }

  Expected<AttrValue> parse_attr_value() {
    if (tok_.kind == Tok::kInt || tok_.kind == Tok::kFloat) {
      AttrValue v;
      if (tok_.kind == Tok::kInt) {
        auto i = parse_int(tok_.text);
        if (!i) return fail(i.error().message);
        v = *i;
      } else {
        auto f = parse_float(tok_.text);
        if (!f) return fail(f.error().message);
        v = *f;
      }
      AT_TRY(advance());
      return v;
    }
    if (tok_.kind == Tok::kString) {
      AttrValue v = tok_.text;
      AT_TRY(advance());
      return v;
    }
    if (!is("[")) return fail("expected an attribute value");
    AT_TRY(advance());
    std::vector<int64_t> ints;
    std::vector<double> floats;
    bool any_float = false;
    while (!is("]")) {
      if (tok_.kind == Tok::kInt) {
        auto i = parse_int(tok_.text);
        if (!i) return fail(i.error().message);
        ints.push_back(*i);
        floats.push_back(static_cast<double>(*i));
      } else if (tok_.kind == Tok::kFloat) {
        auto f = parse_float(tok_.text);
        if (!f) return fail(f.error().message);
        any_float = true;
        floats.push_back(*f);
      } else {
        return fail("expected a number in the list");
      }
      AT_TRY(advance());
      if (!is("]")) AT_TRY(expect(","));
    }
    AT_TRY(advance());
    if (any_float) return AttrValue(floats);
    return AttrValue(ints);
  }

  Status parse_statement() {
    if (tok_.kind != Tok::kPercent) return fail("expected a statement like %0 = op(...) or 'return'");
    Token stmt = tok_;
    std::string name = tok_.text;
    AT_TRY(advance());
    AT_TRY(expect("="));
    if (tok_.kind != Tok::kIdent) return fail("expected an op name");
    Token op_at = tok_;
    std::string op = tok_.text;
    AT_TRY(advance());
    bool numbered = !name.empty() && std::all_of(name.begin(), name.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
    size_t index = scope_->b.graph().nodes.size();
    if (op != "constant" && (!numbered || name != std::to_string(index)))
      return fail_at(stmt, "node results are numbered in order: expected %" + std::to_string(index) + ", got %" + name);
    std::shared_ptr<Graph> body;
    if (op == kFunctionOp) {
      Scope inner;
      AT_TRY(parse_function(inner));
      body = std::make_shared<Graph>(inner.b.finish());
    }
    AT_TRY(expect("("));
    if (op == "constant") return parse_constant(name);
    std::vector<ValueId> args;
    Attrs attrs;
    while (!is(")")) {
      if (tok_.kind == Tok::kPercent) {
        AT_ASSIGN(v, parse_ref());
        args.push_back(v);
      } else if (tok_.kind == Tok::kIdent) {
        std::string key = tok_.text;
        AT_TRY(advance());
        AT_TRY(expect("="));
        if (attrs.find(key)) return fail("attribute '" + key + "' given twice");
        AT_ASSIGN(v, parse_attr_value());
        attrs.set(key, v);
      } else {
        return fail("expected an argument or attribute");
      }
      if (!is(")")) AT_TRY(expect(","));
    }
    AT_TRY(advance());
    AT_TRY(expect(";"));
    if (body && !attrs.items().empty()) return fail_at(op_at, "a function takes no attributes");
    auto v = body ? scope_->b.add_function(std::move(body), std::move(args)) : scope_->b.add_node(op, std::move(args), std::move(attrs));
    if (!v) return fail_at(op_at, "%" + name + ": " + v.error().message);
    return define(name, *v);
  }

  Status parse_constant(const std::string &name) {
    std::vector<double> values;
    bool inline_values = is("[");
    if (inline_values) {
      AT_TRY(advance());
      while (!is("]")) {
        if (tok_.kind != Tok::kInt && tok_.kind != Tok::kFloat) return fail("expected a number");
        auto f = parse_float(tok_.text);
        if (!f) return fail(f.error().message);
        values.push_back(*f);
        AT_TRY(advance());
        if (!is("]")) AT_TRY(expect(","));
      }
      AT_TRY(advance());
      AT_TRY(expect(","));
    }
    AT_ASSIGN(type, parse_type());
    AT_TRY(expect(")"));
    AT_TRY(expect(";"));
    if (scope_->names.count(name)) return fail("%" + name + " is defined twice");
    Tensor t;
    if (inline_values) {
      if (static_cast<int64_t>(values.size()) != type.numel())
        return fail("constant %" + name + " has " + std::to_string(values.size()) + " values for " + type_str(type));
      t = Tensor(type);
      for (size_t i = 0; i < values.size(); ++i) {
        if (type.dtype == DType::kFloat32) t.f32()[i] = static_cast<float>(values[i]);
        else t.i64()[i] = static_cast<int64_t>(values[i]);
      }
    } else {
      t = type.dtype == DType::kFloat32 ? random_tensor(type, fnv1a(name)) : random_tensor(type, fnv1a(name), 0, 2);
    }
    ValueId v = scope_->b.add_constant(name, t);
    if (scope_->b.graph().constants.back().name != name) return fail("constant name %" + name + " is not a plain name");
    return define(name, v);
  }

  Lexer lex_;
  std::string label_;
  Token tok_;
  Scope *scope_ = nullptr;
};

}  // namespace

Expected<Graph> parse_text(const std::string &text, const std::string &label) {
  return Parser(text, label).parse();
}

}  // namespace autotune
