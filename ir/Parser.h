#pragma once
// Reads the text form of Printer.h back into a Graph: print_text(parse_text(t)) == t for any
// printed graph. Every node is type-checked as it is read. Constants whose values were elided
// are filled with seeded random values (the seed is derived from the constant's name), so IR
// written by hand in tests runs on the reference executor deterministically.
#include <string>

#include "ir/Graph.h"

namespace autotune {

/** Parses IR text; errors read "<label>:<line>:<col>: <reason>". */
Expected<Graph> parse_text(const std::string &text, const std::string &label = "<ir>");

}  // namespace autotune
