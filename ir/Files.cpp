#include "ir/Files.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace autotune {

Expected<std::string> read_file(const std::string &path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return make_error(path + ": cannot open file (" + std::strerror(errno) + ")");
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad()) return make_error(path + ": read error");
  return ss.str();
}

}  // namespace autotune
