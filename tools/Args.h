#pragma once
// Flag parsing for the CLI: `--name value` and `--flag`, each subcommand naming the flags it
// takes, so a typo is an error that says which flags exist instead of being ignored.
#include <map>
#include <set>
#include <string>
#include <vector>

#include "ir/Error.h"

namespace autotune::cli {

struct FlagSpec {
  std::set<std::string> with_value;  // --model M
  std::set<std::string> switches;    // --help
  std::set<std::string> repeatable;  // may appear more than once
};

class Args {
 public:
  static Expected<Args> parse(const std::string &command, const std::vector<std::string> &argv, const FlagSpec &spec);

  bool has(const std::string &flag) const { return values_.count(flag) > 0; }
  std::string get(const std::string &flag, const std::string &def = "") const;
  const std::vector<std::string> &all(const std::string &flag) const;
  Expected<int64_t> get_int(const std::string &flag, int64_t def) const;

 private:
  std::map<std::string, std::vector<std::string>> values_;
};

}  // namespace autotune::cli
