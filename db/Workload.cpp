#include "db/Workload.h"

#include "ir/Hash.h"
#include "ir/Printer.h"

namespace autotune {
std::string workload_hash(const Graph &body) { return fnv1a_hex(print_text(body)); }

std::string model_hash(const Graph &fused) { return fnv1a_hex(print_text(fused)); }



}  // namespace autotune
