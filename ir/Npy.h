#pragma once
// NumPy .npy files (format 1.0-3.0), float32 or int64, little-endian, C order.
#include <string>

#include "ir/Tensor.h"

namespace autotune {

/** Reads a .npy file; errors name the file and what is wrong (dtype, order, truncation). */
Expected<Tensor> read_npy(const std::string &path);

/** Parses the bytes of a .npy file; `label` names it in errors (the fuzz target's entry point). */
Expected<Tensor> parse_npy_bytes(const std::string &bytes, const std::string &label);

/** Writes a .npy file with write_file_atomic: a failure or a crash leaves no partial file. */
Status write_npy(const std::string &path, const Tensor &t);

}  // namespace autotune
