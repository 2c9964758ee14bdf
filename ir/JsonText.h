#pragma once
// Compact JSON text written directly, byte for byte as nlohmann::json's dump() writes the same
// value (an object's members sorted by key, no spaces, strings escaped alike), for the values
// schedules hold: strings, integers, booleans, arrays of them and objects. A schedule's JSON is
// its identity (the database's records, the search's pools, its kernel cache), so it must not
// change; writing it through nlohmann's tree (and a step list's text parsed back into it) cost
// 29 us a point, and the model-guided search writes one for every point it makes, duplicates of
// its pool included. Text is read back with nlohmann's parser.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "ir/Error.h"

namespace autotune::json {

/** `s` as a JSON string: quoted, escaped as nlohmann's dump escapes it (bytes from 0x7f up passed through). */
inline std::string quoted(const std::string &s) {
  std::string out;
  out.reserve(s.size() + 2);
  out += '"';
  for (char ch : s) {
    auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c <= 0x1f) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += ch;
        }
    }
  }
  out += '"';
  return out;
}

/** A JSON array of values already written as JSON text. */
inline std::string array_of(const std::vector<std::string> &texts) {
  std::string out = "[";
  for (size_t i = 0; i < texts.size(); ++i) {
    if (i) out += ',';
    out += texts[i];
  }
  return out + "]";
}

inline std::string array_of_strings(const std::vector<std::string> &v) {
  std::vector<std::string> texts;
  texts.reserve(v.size());
  for (const std::string &s : v) texts.push_back(json::quoted(s));
  return array_of(texts);
}

inline std::string array_of_ints(const std::vector<int64_t> &v) {
  std::vector<std::string> texts;
  texts.reserve(v.size());
  for (int64_t x : v) texts.push_back(std::to_string(x));
  return array_of(texts);
}

/** An object's members, added in any order; text() writes them sorted by key, as nlohmann's std::map holds them. */
class Object {
 public:
  Object &raw(std::string key, std::string json_text) {
    members_.emplace_back(std::move(key), std::move(json_text));
    return *this;
  }
  Object &str(std::string key, const std::string &value) { return raw(std::move(key), quoted(value)); }
  Object &num(std::string key, int64_t value) { return raw(std::move(key), std::to_string(value)); }
  Object &boolean(std::string key, bool value) { return raw(std::move(key), value ? "true" : "false"); }

  std::string text() {
    std::sort(members_.begin(), members_.end(), [](const auto &a, const auto &b) { return a.first < b.first; });
    std::string out = "{";
    for (size_t i = 0; i < members_.size(); ++i) {
      AT_CHECK(i == 0 || members_[i].first != members_[i - 1].first, "JSON object with the key '" + members_[i].first + "' twice");
      if (i) out += ',';
      out += json::quoted(members_[i].first);
      out += ':';
      out += members_[i].second;
    }
    return out + "}";
  }

 private:
  std::vector<std::pair<std::string, std::string>> members_;
};

}  // namespace autotune::json
