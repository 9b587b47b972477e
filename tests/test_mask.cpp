// The mask value type (src/core/mask.h) that every backend uses to skip and mask tiles:
// visible() against the DESIGN formula, monotone row bounds, exact key ranges and tile classes
// against brute force.
#include "core/mask.h"

#include <sstream>

#include "test_util.h"

namespace fa4test {
namespace {

using fa4::core::Mask;
using fa4::core::SeqMask;
using fa4::core::TileKind;

int64_t fdiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && a < 0) ? q - 1 : q;
}

// DESIGN §1, written independently: window (left, right), chunk C (implies causal).
bool spec_visible(int64_t i, int64_t j, int64_t sq, int64_t sk, int64_t left, int64_t right, int64_t chunk) {
  if (j < 0 || j >= sk) return false;
  const int64_t p = i + sk - sq;
  if (chunk > 0) right = 0;
  if (left >= 0 && j < p - left) return false;
  if (right >= 0 && j > p + right) return false;
  if (chunk > 0 && fdiv(j, chunk) != fdiv(p, chunk)) return false;
  return true;
}

struct RandomMask {
  int64_t sq, sk, left, right, chunk;
  SeqMask sm() const {
    Mask m;
    m.left = left;
    m.right = chunk > 0 ? 0 : right;
    m.chunk = chunk;
    return SeqMask{m, sq, sk};
  }
};

RandomMask random_mask(std::mt19937_64& rng) {
  auto r = [&](int64_t n) { return static_cast<int64_t>(rng() % static_cast<uint64_t>(n)); };
  RandomMask m;
  m.sq = r(40);
  m.sk = r(40);
  m.left = r(3) == 0 ? -1 : r(12);
  m.right = r(3) == 0 ? -1 : r(12);
  m.chunk = r(3) == 0 ? 1 + r(9) : 0;
  return m;
}

TEST(Mask, VisibleMatchesTheDesignFormula) {
  const uint64_t seed = derive_seed(95000);
  FA4_SEED_TRACE(seed);
  std::mt19937_64 rng(seed);
  for (int t = 0; t < 3000; ++t) {
    const RandomMask m = random_mask(rng);
    const SeqMask sm = m.sm();
    for (int64_t i = 0; i < m.sq; ++i)
      for (int64_t j = 0; j < m.sk; ++j)
        ASSERT_EQ(sm.visible(i, j), spec_visible(i, j, m.sq, m.sk, m.left, m.right, m.chunk))
            << "sq=" << m.sq << " sk=" << m.sk << " left=" << m.left << " right=" << m.right << " chunk=" << m.chunk
            << " i=" << i << " j=" << j;
  }
}

TEST(Mask, RowBoundsAreMonotoneAndExact) {
  const uint64_t seed = derive_seed(95001);
  FA4_SEED_TRACE(seed);
  std::mt19937_64 rng(seed);
  for (int t = 0; t < 3000; ++t) {
    const RandomMask m = random_mask(rng);
    const SeqMask sm = m.sm();
    for (int64_t i = 0; i < m.sq; ++i) {
      if (i > 0) {
        ASSERT_LE(sm.row_lo(i - 1), sm.row_lo(i));
        ASSERT_LE(sm.row_hi(i - 1), sm.row_hi(i));
      }
      ASSERT_GE(sm.row_lo(i), 0);
      ASSERT_LE(sm.row_hi(i), m.sk);
      // [row_lo, row_hi) is exactly the visible set (it is an interval).
      for (int64_t j = 0; j < m.sk; ++j)
        ASSERT_EQ(j >= sm.row_lo(i) && j < sm.row_hi(i), spec_visible(i, j, m.sq, m.sk, m.left, m.right, m.chunk));
    }
  }
}

TEST(Mask, KeyRangeAndTileClassesAgreeWithBruteForce) {
  const uint64_t seed = derive_seed(95002);
  FA4_SEED_TRACE(seed);
  std::mt19937_64 rng(seed);
  auto r = [&](int64_t n) { return n <= 0 ? 0 : static_cast<int64_t>(rng() % static_cast<uint64_t>(n)); };
  for (int t = 0; t < 20000; ++t) {
    RandomMask m = random_mask(rng);
    if (m.sq == 0) m.sq = 1;
    const SeqMask sm = m.sm();
    const int64_t i0 = r(m.sq), i1 = i0 + 1 + r(m.sq - i0);
    const int64_t j0 = r(m.sk + 1), j1 = j0 + 1 + r(m.sk + 1 - j0);
    int64_t any_lo = INT64_MAX, any_hi = INT64_MIN;
    bool all = true, none = true;
    for (int64_t i = i0; i < i1; ++i)
      for (int64_t j = 0; j < m.sk; ++j) {
        const bool v = spec_visible(i, j, m.sq, m.sk, m.left, m.right, m.chunk);
        if (v) {
          any_lo = std::min(any_lo, j);
          any_hi = std::max(any_hi, j + 1);
        }
        if (j >= j0 && j < j1) {
          all = all && v;
          none = none && !v;
        }
      }
    if (j1 > m.sk) all = false;  // keys past the sequence are never visible
    int64_t lo, hi;
    sm.key_range(i0, i1, &lo, &hi);
    std::ostringstream where;
    where << "sq=" << m.sq << " sk=" << m.sk << " left=" << m.left << " right=" << m.right << " chunk=" << m.chunk
          << " rows [" << i0 << "," << i1 << ") keys [" << j0 << "," << j1 << ")";
    if (any_lo == INT64_MAX) {
      ASSERT_GE(lo, hi) << where.str() << ": no key visible, range must be empty";
    } else {
      // Every visible key is inside; the range is tight (DESIGN: exact, consecutive rows overlap).
      ASSERT_EQ(lo, any_lo) << where.str();
      ASSERT_EQ(hi, any_hi) << where.str();
    }
    const TileKind k = sm.classify(i0, i1, j0, j1);
    if (none) ASSERT_EQ(k, TileKind::empty) << where.str();
    else if (all) ASSERT_EQ(k, TileKind::full) << where.str();
    else ASSERT_EQ(k, TileKind::partial) << where.str();
  }
}

TEST(Mask, DefaultMaskIsNone) {
  EXPECT_TRUE(Mask{}.is_none());
  Mask m;
  m.right = 0;
  EXPECT_FALSE(m.is_none());
}

}  // namespace
}  // namespace fa4test
