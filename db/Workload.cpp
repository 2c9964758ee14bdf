#include "db/Workload.h"

#include <cstdio>

#include "ir/Printer.h"

namespace autotune {
namespace {
std::string fnv_hex(const std::string &s) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ULL;
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}
}  // namespace

std::string workload_hash(const Graph &body) { return fnv_hex(print_text(body)); }

std::string model_hash(const Graph &fused) { return fnv_hex(print_text(fused)); }

std::string target_key(const std::string &triple, const std::string &cpu, const std::string &features, int threads) {
  return triple + "/" + cpu + "/" + fnv_hex(features).substr(0, 8) + "/" + std::to_string(threads) + "t";
}

}  // namespace autotune
