#include "tools/Args.h"

#include <charconv>

namespace autotune::cli {

Expected<Args> Args::parse(const std::string &command, const std::vector<std::string> &argv, const FlagSpec &spec) {
  Args a;
  for (size_t i = 0; i < argv.size(); ++i) {
    std::string flag = argv[i], value;
    if (flag.rfind("--", 0) != 0) return make_error(command + ": unexpected argument '" + flag + "' (see --help)");
    flag = flag.substr(2);
    if (auto eq = flag.find('='); eq != std::string::npos) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
      if (!spec.with_value.count(flag)) return make_error(command + ": --" + flag + " takes no value");
    } else if (spec.with_value.count(flag)) {
      if (i + 1 >= argv.size()) return make_error(command + ": --" + flag + " needs a value");
      value = argv[++i];
    } else if (!spec.switches.count(flag)) {
      return make_error(command + ": unknown option --" + flag + " (see 'autotune " + command + " --help')");
    }
    if (a.values_.count(flag) && !spec.repeatable.count(flag))
      return make_error(command + ": --" + flag + " given twice");
    a.values_[flag].push_back(value);
  }
  return a;
}

std::string Args::get(const std::string &flag, const std::string &def) const {
  auto it = values_.find(flag);
  return it == values_.end() ? def : it->second.back();
}

const std::vector<std::string> &Args::all(const std::string &flag) const {
  static const std::vector<std::string> kNone;
  auto it = values_.find(flag);
  return it == values_.end() ? kNone : it->second;
}

Expected<int64_t> Args::get_int(const std::string &flag, int64_t def) const {
  if (!has(flag)) return def;
  std::string s = get(flag);
  int64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size()) return make_error("--" + flag + " expects an integer, got '" + s + "'");
  return v;
}

}  // namespace autotune::cli
