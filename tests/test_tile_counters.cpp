// cuda::TileCounterPool: the sm90 dynamic walk's counter pairs per (device, stream), with a fake
// allocation function (no GPU). What must hold: a stream keeps its pair; different streams and
// devices never share one; every pair is zeroed on the stream that first asked for it; past the
// per-device bound (and on allocation failure) the answer is nullptr, and a failure is retried.
#include "cuda/tile_counters.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

namespace {

using fa4::cuda::TileCounterPool;

struct FakeDevice {
  std::mutex mu;
  int allocs = 0;
  bool fail = false;
  std::vector<std::pair<const void*, void*>> zeroed_on;  // (stream, pointer)
  ~FakeDevice() {  // the pool never frees (fa4's lives as long as the process)
    for (const auto& e : zeroed_on) std::free(e.second);
  }
};
FakeDevice* g_dev = nullptr;

void* fake_alloc_zeroed(int, const void* stream, size_t bytes) {
  std::lock_guard<std::mutex> lock(g_dev->mu);
  if (g_dev->fail) return nullptr;
  void* p = std::malloc(bytes);
  std::memset(p, 0xAB, bytes);  // what the kernel would see unzeroed
  std::memset(p, 0, bytes);
  ++g_dev->allocs;
  g_dev->zeroed_on.emplace_back(stream, p);
  return p;
}

const void* stream_id(int i) { return reinterpret_cast<const void*>(static_cast<uintptr_t>(0x1000 + 16 * i)); }

TEST(TileCounterPool, OnePairPerDeviceAndStream) {
  FakeDevice dev;
  g_dev = &dev;
  TileCounterPool pool(fake_alloc_zeroed, 8);
  uint32_t* a = pool.get(0, stream_id(0));
  uint32_t* b = pool.get(0, stream_id(1));
  uint32_t* c = pool.get(1, stream_id(0));
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  ASSERT_NE(c, nullptr);
  EXPECT_NE(a, b);
  EXPECT_NE(a, c);
  EXPECT_EQ(pool.get(0, stream_id(0)), a) << "a stream keeps its pair";
  EXPECT_EQ(pool.get(0, nullptr), pool.get(0, nullptr)) << "the default stream too";
  EXPECT_EQ(a[0], 0u);
  EXPECT_EQ(a[1], 0u);
  EXPECT_EQ(dev.allocs, 4);
  EXPECT_EQ(pool.pairs(), 4u);
  for (const auto& [s, p] : dev.zeroed_on) {
    if (p == a) {
      EXPECT_EQ(s, stream_id(0)) << "zeroed in the order of the stream that uses it";
    }
  }
}

TEST(TileCounterPool, BoundedPerDeviceNeverReassigned) {
  FakeDevice dev;
  g_dev = &dev;
  TileCounterPool pool(fake_alloc_zeroed, 3);
  std::set<uint32_t*> seen;
  for (int i = 0; i < 3; ++i) {
    uint32_t* p = pool.get(0, stream_id(i));
    ASSERT_NE(p, nullptr);
    EXPECT_TRUE(seen.insert(p).second);
  }
  EXPECT_EQ(pool.get(0, stream_id(3)), nullptr) << "past the bound: walk statically";
  EXPECT_NE(pool.get(1, stream_id(3)), nullptr) << "the bound is per device";
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(seen.count(pool.get(0, stream_id(i))) == 1) << "old streams keep theirs";
  TileCounterPool none(fake_alloc_zeroed, 0);
  EXPECT_EQ(none.get(0, stream_id(0)), nullptr);
}

TEST(TileCounterPool, AllocationFailureIsNullAndRetried) {
  FakeDevice dev;
  g_dev = &dev;
  TileCounterPool pool(fake_alloc_zeroed, 4);
  dev.fail = true;
  EXPECT_EQ(pool.get(0, stream_id(0)), nullptr);
  EXPECT_EQ(pool.pairs(), 0u);
  dev.fail = false;
  EXPECT_NE(pool.get(0, stream_id(0)), nullptr);
  EXPECT_EQ(pool.pairs(), 1u);
}

TEST(TileCounterPool, ThreadsOnDifferentStreamsGetDifferentPairs) {
  FakeDevice dev;
  g_dev = &dev;
  TileCounterPool pool(fake_alloc_zeroed, 64);
  std::vector<uint32_t*> got(16);
  std::vector<std::thread> ts;
  for (int i = 0; i < 16; ++i)
    ts.emplace_back([&, i] {
      for (int k = 0; k < 100; ++k) {
        uint32_t* p = pool.get(0, stream_id(i));
        if (k == 0) got[static_cast<size_t>(i)] = p;
        EXPECT_EQ(p, got[static_cast<size_t>(i)]);
      }
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(std::set<uint32_t*>(got.begin(), got.end()).size(), 16u);
  EXPECT_EQ(dev.allocs, 16);
}

// cudaStreamPerThread: one handle, a stream per host thread. Each thread's key (cuda/backend.cpp
// stream_key: the address of a thread_local) keeps its own block, and the block is zeroed on the
// handle the call passed -- never on the key, which is no stream (a memset there was undefined;
// on the H100 it failed, so the per-thread split calls lost their in-kernel merge, 2026-12-05).
TEST(TileCounterPool, PerThreadKeysZeroOnTheCallersStream) {
  FakeDevice dev;
  g_dev = &dev;
  TileCounterPool pool(fake_alloc_zeroed, 8);
  const void* handle = stream_id(7);
  int key_a = 0, key_b = 0;
  uint32_t* a = pool.get(0, &key_a, handle);
  uint32_t* b = pool.get(0, &key_b, handle);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_NE(a, b) << "two threads' streams never share a block";
  EXPECT_EQ(pool.get(0, &key_a, handle), a);
  ASSERT_EQ(dev.zeroed_on.size(), 2u);
  for (const auto& [s, p] : dev.zeroed_on) EXPECT_EQ(s, handle) << "zeroed on the handle, not on the key";
}

}  // namespace
