#include <gtest/gtest.h>

#include <cmath>

#include "ir/Attrs.h"

namespace autotune {
namespace {

const std::vector<AttrSpec> kSchema = {
    {"strides", AttrKind::kInts, std::vector<int64_t>{1, 1}},
    {"alpha", AttrKind::kFloat, 0.5},
    {"axis", AttrKind::kInt, std::nullopt},
};

TEST(Attrs, NormalizeFillsDefaultsInSchemaOrder) {
  auto a = normalize_attrs(kSchema, Attrs{{"axis", int64_t{2}}});
  ASSERT_TRUE(static_cast<bool>(a)) << a.error().message;
  ASSERT_EQ(a->items().size(), 3u);
  EXPECT_EQ(a->items()[0].first, "strides");
  EXPECT_EQ(a->ints("strides"), (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(a->f("alpha"), 0.5);
  EXPECT_EQ(a->i("axis"), 2);
}

TEST(Attrs, NormalizeCoercesIntToFloat) {
  auto a = normalize_attrs(kSchema, Attrs{{"axis", int64_t{0}}, {"alpha", int64_t{3}}});
  ASSERT_TRUE(static_cast<bool>(a));
  EXPECT_EQ(a->f("alpha"), 3.0);
}

TEST(Attrs, NormalizeRejectsUnknownMissingAndMistyped) {
  EXPECT_EQ(normalize_attrs(kSchema, Attrs{{"axis", int64_t{0}}, {"beta", 1.0}}).error().message, "unknown attribute 'beta'");
  EXPECT_EQ(normalize_attrs(kSchema, Attrs{}).error().message, "missing attribute 'axis'");
  EXPECT_EQ(normalize_attrs(kSchema, Attrs{{"axis", 1.5}}).error().message, "attribute 'axis' must be an integer");
}

TEST(Attrs, FloatsPrintAsShortestFloat32WithSuffix) {
  EXPECT_EQ(attr_value_str(0.1), "0.1f");
  EXPECT_EQ(attr_value_str(static_cast<double>(0.1f)), "0.1f");
  EXPECT_EQ(attr_value_str(2.0), "2.0f");
  EXPECT_EQ(attr_value_str(1e-5), "1e-05f");
  EXPECT_EQ(attr_value_str(-INFINITY), "-inff");
  EXPECT_EQ(attr_value_str(std::vector<int64_t>{3, -1}), "[3, -1]");
  EXPECT_EQ(attr_value_str(std::string("a\"b")), "\"a\\\"b\"");
}

}  // namespace
}  // namespace autotune
