#include "tests/ir/TestUtil.h"

#include <sys/wait.h>

#include <cstdio>

namespace autotune::testing {

int run_command(const std::string &cmd, std::string *out) {
  out->clear();
  FILE *p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return -1;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out->append(buf, n);
  int status = pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace autotune::testing
