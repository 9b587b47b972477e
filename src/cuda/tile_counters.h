// The tile counters of the sm90 kernel's dynamic walk (sm90/fwd_producer.cuh): one pair of 32-bit
// device words {claimed, finished} per (device, stream). The kernel leaves its pair zero when it
// ends (the last CTA to finish zeroes it), so launches on one stream -- which the stream orders --
// reuse the pair with no memset between them; launches on different streams may run at once and
// never share one. A pair is zeroed once, on its stream, when it is made.
//
// Bounded: past `max_per_device` streams of a device get() returns nullptr and the caller walks
// statically. Pairs are never freed or handed to another stream: a stream's kernel may still be
// running when its handle is reused by a new stream. Inside a stream capture the backend does not
// use the pool (a graph may be replayed on any stream): it takes a graph-owned pair zeroed by a
// captured memset.
// Pure host logic with an injected allocation function (tests/test_tile_counters.cpp runs it on
// the CPU).
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

namespace fa4::cuda {

class TileCounterPool {
 public:
  // `bytes` of zeroed device memory of device `dev`, zeroed in the order of `stream` (the first
  // kernel that uses it is enqueued there next); nullptr when it cannot be had.
  using AllocZeroedFn = void* (*)(int dev, const void* stream, size_t bytes);

  // bytes: each stream's block (kBytes: the dynamic walk's pair; the sm90 split counters of
  // FA4_SM90_FUSED_COMBINE take a larger block from a pool of their own, kSplitBytes).
  explicit TileCounterPool(AllocZeroedFn alloc, int max_per_device = 64, size_t bytes = kBytes)
      : alloc_(alloc), max_per_device_(max_per_device < 0 ? 0 : max_per_device), bytes_(bytes) {}
  TileCounterPool(const TileCounterPool&) = delete;
  TileCounterPool& operator=(const TileCounterPool&) = delete;

  static constexpr size_t kBytes = 2 * sizeof(uint32_t);
  static constexpr size_t kSplitBytes = 16384 * sizeof(uint32_t);
  size_t bytes() const { return bytes_; }

  // The pair of (dev, key), made on first use -- allocated and zeroed in the order of `stream`,
  // the call's real stream; nullptr past the bound or when allocation fails. key is the stream
  // handle, except for cudaStreamPerThread: one handle, a different stream in each host thread
  // (cuda/backend.cpp stream_key gives each thread its own key; the memset must still go to the
  // handle, which a thread's key is not).
  uint32_t* get(int dev, const void* key, const void* stream);
  uint32_t* get(int dev, const void* stream) { return get(dev, stream, stream); }

  size_t pairs() const;  // for tests: pairs made so far

 private:
  struct Entry {
    int dev;
    const void* key;
    uint32_t* ptr;
  };
  AllocZeroedFn alloc_;
  int max_per_device_;
  size_t bytes_;
  mutable std::mutex mu_;
  std::vector<Entry> entries_;
};

}  // namespace fa4::cuda
