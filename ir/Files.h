#pragma once
#include <string>

#include "ir/Error.h"

namespace autotune {

/** Reads a whole file, or an error naming it and the system's reason. */
Expected<std::string> read_file(const std::string &path);

/**
 * Writes `bytes` to `path` so that readers see the old file or the whole new one, never a part:
 * the data goes to an unnamed file in the same folder (O_TMPFILE), every write is checked, and
 * only then is it linked in and renamed over `path`. A process killed mid-way leaves nothing
 * behind (where the filesystem has no O_TMPFILE, a named temporary is used and removed on error).
 */
Status write_file_atomic(const std::string &path, const std::string &bytes);

}  // namespace autotune
