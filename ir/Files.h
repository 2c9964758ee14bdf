#pragma once
#include <string>

#include "ir/Error.h"

namespace autotune {

/** Reads a whole file, or an error naming it and the system's reason. */
Expected<std::string> read_file(const std::string &path);

}  // namespace autotune
