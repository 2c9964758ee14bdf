#include "db/Workload.h"

#include "ir/Hash.h"
#include "ir/Printer.h"

namespace autotune {
std::string workload_hash(const Graph &body) { return fnv1a_hex(print_text(body)); }

std::string model_hash(const Graph &fused) { return fnv1a_hex(print_text(fused)); }

std::string target_key(const std::string &triple, const std::string &cpu, const std::string &features, int threads) {
  return triple + "/" + cpu + "/" + fnv1a_hex(features).substr(0, 8) + "/" + std::to_string(threads) + "t";
}

}  // namespace autotune
