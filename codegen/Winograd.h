#pragma once
// The matrices of Winograd's minimal filtering F(m x m, 3 x 3) (Lavin and Gray 2016), for m = 2
// (4x4 input tiles, 16 multiplies per output tile and channel pair instead of 36) and m = 4 (6x6
// tiles, 36 instead of 144; interpolation points 0, +-1, +-2). Y = A^T [(G g G^T) . (B^T d B)] A.
// Used by the weight packing (G, at load time) and the conv template (B^T, A^T).
#include <vector>

namespace autotune {

struct WinogradMatrices {
  int m = 2;                               // outputs per tile side
  int a = 4;                               // inputs per tile side: m + 2
  std::vector<std::vector<double>> bt;     // a x a: B^T
  std::vector<std::vector<double>> g;      // a x 3: G
  std::vector<std::vector<double>> at;     // m x a: A^T
};

inline const WinogradMatrices &winograd_matrices(int m) {
  static const WinogradMatrices f2{2, 4,
                                   {{1, 0, -1, 0}, {0, 1, 1, 0}, {0, -1, 1, 0}, {0, 1, 0, -1}},
                                   {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}},
                                   {{1, 1, 1, 0}, {0, 1, -1, -1}}};
  static const WinogradMatrices f4{4, 6,
                                   {{4, 0, -5, 0, 1, 0},
                                    {0, -4, -4, 1, 1, 0},
                                    {0, 4, -4, -1, 1, 0},
                                    {0, -2, -1, 2, 1, 0},
                                    {0, 2, -1, -2, 1, 0},
                                    {0, 4, 0, -5, 0, 1}},
                                   {{1.0 / 4, 0, 0},
                                    {-1.0 / 6, -1.0 / 6, -1.0 / 6},
                                    {-1.0 / 6, 1.0 / 6, -1.0 / 6},
                                    {1.0 / 24, 1.0 / 12, 1.0 / 6},
                                    {1.0 / 24, -1.0 / 12, 1.0 / 6},
                                    {0, 0, 1}},
                                   {{1, 1, 1, 1, 1, 0}, {0, 1, -1, 2, -2, 0}, {0, 1, 1, 4, 4, 0}, {0, 1, -1, 8, -8, 1}}};
  return m == 4 ? f4 : f2;
}

}  // namespace autotune
