// fa4's own device scratch (split-KV partials, staged row copies) when the caller passes neither
// a workspace nor an allocator hook: one cached buffer per (device, stream), so calls enqueued on
// different streams -- concurrently, from any threads -- never share scratch (one buffer per
// device did: two streams' kernels raced on it). Calls on the same stream may share: the stream
// orders their kernels.
//
// Lifetime: get() hands out a Lease; while any lease of a buffer is held (from the lookup until
// the call's launches are enqueued) the buffer is not freed. A buffer outgrown while leased is
// retired and freed when its last lease ends; entries beyond `max_per_device` streams evict the
// least recently used unleased one. Freeing goes through the FreeFn, which for device memory is
// cudaFree: it waits for the device, so kernels enqueued earlier with the buffer have finished.
// Pure host logic with injected allocation functions (tests/test_scratch_cache.cpp runs it on
// the CPU).
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

namespace fa4::cuda {

class ScratchCache {
 public:
  using AllocFn = void* (*)(int dev, size_t bytes);  // nullptr when the memory cannot be had
  using FreeFn = void (*)(int dev, void* ptr);

  class Lease {
   public:
    Lease() = default;
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    Lease(Lease&& o) noexcept : cache_(o.cache_), ptr_(o.ptr_) { o.cache_ = nullptr, o.ptr_ = nullptr; }
    Lease& operator=(Lease&& o) noexcept {
      if (this != &o) {
        release();
        cache_ = o.cache_, ptr_ = o.ptr_;
        o.cache_ = nullptr, o.ptr_ = nullptr;
      }
      return *this;
    }
    ~Lease() { release(); }
    void* get() const { return ptr_; }

   private:
    friend class ScratchCache;
    Lease(ScratchCache* c, void* p) : cache_(c), ptr_(p) {}
    void release() {
      if (cache_ != nullptr) cache_->end_lease(ptr_);
      cache_ = nullptr, ptr_ = nullptr;
    }
    ScratchCache* cache_ = nullptr;
    void* ptr_ = nullptr;
  };

  ScratchCache(AllocFn alloc, FreeFn free, int max_per_device = 16)
      : alloc_(alloc), free_(free), max_per_device_(max_per_device < 1 ? 1 : max_per_device) {}
  ScratchCache(const ScratchCache&) = delete;
  ScratchCache& operator=(const ScratchCache&) = delete;
  ~ScratchCache();  // frees every buffer (no lease may be alive)

  // A buffer of at least `bytes` for work on `stream` of device `dev`; an empty lease (get() ==
  // nullptr) when the allocation failed. Grows by at least 1.5x, so a sequence of growing calls
  // reallocates O(log) times.
  Lease get(int dev, const void* stream, size_t bytes);

  // For tests: buffers held (cached + retired) and the capacity cached for (dev, stream), 0 if none.
  size_t buffers() const;
  size_t capacity(int dev, const void* stream) const;

 private:
  struct Entry {
    int dev;
    const void* stream;
    void* ptr;
    size_t cap;
    int leases;
    uint64_t last_use;
    bool retired;  // outgrown while leased: freed at its last lease's end, never handed out again
  };
  void end_lease(void* ptr);

  AllocFn alloc_;
  FreeFn free_;
  int max_per_device_;
  mutable std::mutex mu_;
  std::vector<Entry> entries_;
  uint64_t clock_ = 0;
};

}  // namespace fa4::cuda
