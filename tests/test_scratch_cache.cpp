// cuda::ScratchCache: fa4's own scratch per (device, stream), with fake allocation functions that
// record every allocation and free (no GPU). What must hold: different streams never share a
// buffer; a buffer is never freed while leased; outgrown buffers are freed exactly once; the
// per-device bound evicts only unleased buffers; an allocation failure is an empty lease.
#include "cuda/scratch_cache.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <thread>
#include <vector>

namespace {

using fa4::cuda::ScratchCache;

struct Heap {
  std::map<void*, size_t> live;
  int allocs = 0, frees = 0, bad_frees = 0;
  size_t fail_above = SIZE_MAX;
};
Heap* g_heap = nullptr;
std::mutex g_mu;

void* fake_alloc(int, size_t bytes) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (bytes > g_heap->fail_above) return nullptr;
  void* p = std::malloc(bytes == 0 ? 1 : bytes);
  g_heap->live[p] = bytes;
  ++g_heap->allocs;
  return p;
}
void fake_free(int, void* p) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_heap->live.erase(p) == 0) ++g_heap->bad_frees;
  ++g_heap->frees;
  std::free(p);
}

class ScratchCacheTest : public ::testing::Test {
 protected:
  void SetUp() override { g_heap = &heap; }
  void TearDown() override { g_heap = nullptr; }
  Heap heap;
  const void* s(int i) { return reinterpret_cast<const void*>(static_cast<uintptr_t>(0x1000 * (i + 1))); }
};

TEST_F(ScratchCacheTest, StreamsNeverShareAndSameStreamReuses) {
  {
    ScratchCache c(fake_alloc, fake_free);
    void *a, *b;
    {
      ScratchCache::Lease la = c.get(0, s(0), 100), lb = c.get(0, s(1), 100);
      a = la.get(), b = lb.get();
      ASSERT_NE(a, nullptr);
      ASSERT_NE(b, nullptr);
      EXPECT_NE(a, b);  // two streams, two buffers, even while both are leased at once
      ScratchCache::Lease lc = c.get(1, s(0), 100);  // same stream handle, other device
      EXPECT_NE(lc.get(), a);
    }
    ScratchCache::Lease again = c.get(0, s(0), 80);  // smaller: the cached one
    EXPECT_EQ(again.get(), a);
    EXPECT_EQ(heap.allocs, 3);
    EXPECT_EQ(c.buffers(), 3u);
  }
  EXPECT_EQ(heap.frees, 3);  // the destructor frees everything
  EXPECT_EQ(heap.bad_frees, 0);
  EXPECT_TRUE(heap.live.empty());
}

TEST_F(ScratchCacheTest, GrowthRetiresALeasedBufferUntilItsLeaseEnds) {
  ScratchCache c(fake_alloc, fake_free);
  ScratchCache::Lease first = c.get(0, s(0), 100);
  void* old = first.get();
  ScratchCache::Lease bigger = c.get(0, s(0), 120);  // another call on the stream, larger
  EXPECT_NE(bigger.get(), old);
  EXPECT_EQ(heap.live.count(old), 1u) << "freed while still leased";
  EXPECT_GE(c.capacity(0, s(0)), 150u);  // at least 1.5x
  first = ScratchCache::Lease();          // the first call finished enqueuing
  EXPECT_EQ(heap.live.count(old), 0u) << "the retired buffer outlived its last lease";
  EXPECT_EQ(c.buffers(), 1u);
  // unleased growth frees at once
  bigger = ScratchCache::Lease();
  void* cur = c.get(0, s(0), 10).get();
  ScratchCache::Lease huge = c.get(0, s(0), 1000);
  EXPECT_EQ(heap.live.count(cur), 0u);
  EXPECT_EQ(c.capacity(0, s(0)), 1000u);
  EXPECT_EQ(heap.bad_frees, 0);
}

TEST_F(ScratchCacheTest, PerDeviceBoundEvictsTheLeastRecentlyUsedUnleased) {
  ScratchCache c(fake_alloc, fake_free, /*max_per_device=*/3);
  for (int i = 0; i < 3; ++i) c.get(0, s(i), 64);
  c.get(0, s(0), 64);  // s(0) used again: s(1) is now the least recent
  ScratchCache::Lease held = c.get(0, s(2), 64);
  c.get(0, s(3), 64);  // a fourth stream: s(1) goes
  EXPECT_EQ(c.capacity(0, s(1)), 0u);
  EXPECT_NE(c.capacity(0, s(0)), 0u);
  EXPECT_NE(c.capacity(0, s(2)), 0u);
  EXPECT_EQ(c.buffers(), 3u);
  c.get(1, s(9), 64);  // other devices have their own bound
  EXPECT_EQ(c.buffers(), 4u);
  // every buffer of the device leased: the bound yields (bounded by the calls in flight)
  ScratchCache::Lease l0 = c.get(0, s(0), 64), l3 = c.get(0, s(3), 64);
  ScratchCache::Lease l4 = c.get(0, s(4), 64);
  EXPECT_NE(l4.get(), nullptr);
  EXPECT_EQ(c.buffers(), 5u);
  EXPECT_EQ(heap.bad_frees, 0);
}

TEST_F(ScratchCacheTest, AllocationFailureIsAnEmptyLeaseAndKeepsNothing) {
  ScratchCache c(fake_alloc, fake_free);
  heap.fail_above = 1000;
  ScratchCache::Lease l = c.get(0, s(0), 5000);
  EXPECT_EQ(l.get(), nullptr);
  EXPECT_EQ(c.buffers(), 0u);
  ScratchCache::Lease ok = c.get(0, s(0), 500);
  EXPECT_NE(ok.get(), nullptr);
  ok = ScratchCache::Lease();
  EXPECT_EQ(c.get(0, s(0), 5000).get(), nullptr);  // growth failing: the old buffer was freed, none kept
  EXPECT_EQ(c.capacity(0, s(0)), 0u);
  EXPECT_EQ(heap.bad_frees, 0);
}

TEST_F(ScratchCacheTest, ConcurrentThreadsOnTheirOwnStreams) {
  ScratchCache c(fake_alloc, fake_free, 4);
  std::vector<std::thread> th;
  std::vector<int> clashes(8, 0);
  for (int t = 0; t < 8; ++t)
    th.emplace_back([&, t] {
      for (int i = 0; i < 2000; ++i) {
        ScratchCache::Lease l = c.get(0, s(t), 64 + (i % 7) * 64);
        // the buffer is this thread's for the lease: write and read back its own tag
        auto* p = static_cast<volatile int*>(l.get());
        if (p == nullptr) continue;
        *p = t;
        for (int k = 0; k < 20; ++k)
          if (*p != t) ++clashes[t];
      }
    });
  for (auto& x : th) x.join();
  for (int t = 0; t < 8; ++t) EXPECT_EQ(clashes[t], 0) << "thread " << t << " saw another stream's writes";
  EXPECT_EQ(heap.bad_frees, 0);
  EXPECT_LE(c.buffers(), 8u);
}

}  // namespace
