#pragma once
// NumPy .npy files (format 1.0-3.0), float32 or int64, little-endian, C order.
#include <string>

#include "ir/Tensor.h"

namespace autotune {

/** Reads a .npy file; errors name the file and what is wrong (dtype, order, truncation). */
Expected<Tensor> read_npy(const std::string &path);

/** Writes a .npy file through a temporary file and a rename, so a failure leaves no partial file. */
Status write_npy(const std::string &path, const Tensor &t);

}  // namespace autotune
