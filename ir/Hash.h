#pragma once
// The two hash functions of the project, one copy each: FNV-1a names things by content
// (workloads, kernels, elided constants' seeds), splitmix64 drives every seeded generator.
// Both give the same answer on every platform, unlike std::hash and <random>'s distributions.
#include <cstdint>
#include <cstdio>
#include <string>

namespace autotune {

inline uint64_t fnv1a(const std::string &s) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ULL;
  return h;
}

/** fnv1a as 16 hex digits. */
inline std::string fnv1a_hex(const std::string &s) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(fnv1a(s)));
  return buf;
}

/** Advances `state` and returns the next value of the splitmix64 sequence. */
inline uint64_t splitmix64(uint64_t &state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace autotune
