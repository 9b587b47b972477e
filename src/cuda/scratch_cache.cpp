#include "cuda/scratch_cache.h"

#include <algorithm>

namespace fa4::cuda {

ScratchCache::~ScratchCache() {
  for (const Entry& e : entries_)
    if (e.ptr != nullptr) free_(e.dev, e.ptr);
}

ScratchCache::Lease ScratchCache::get(int dev, const void* stream, size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  ++clock_;
  auto it = std::find_if(entries_.begin(), entries_.end(),
                         [&](const Entry& e) { return !e.retired && e.dev == dev && e.stream == stream; });
  if (it != entries_.end() && it->cap >= bytes) {
    ++it->leases, it->last_use = clock_;
    return Lease(this, it->ptr);
  }
  size_t want = bytes;
  if (it != entries_.end()) {  // outgrown: a larger buffer replaces it
    want = std::max(bytes, it->cap + it->cap / 2);
    if (it->leases > 0) {
      it->retired = true;  // another thread's call still enqueues with it: freed at its lease's end
    } else {
      free_(it->dev, it->ptr);
      entries_.erase(it);
    }
  } else {
    // A new stream: past the per-device bound, the least recently used unleased buffer goes.
    int64_t live = 0;
    auto lru = entries_.end();
    for (auto e = entries_.begin(); e != entries_.end(); ++e) {
      if (e->dev != dev || e->retired) continue;
      ++live;
      if (e->leases == 0 && (lru == entries_.end() || e->last_use < lru->last_use)) lru = e;
    }
    if (live >= max_per_device_ && lru != entries_.end()) {
      free_(lru->dev, lru->ptr);
      entries_.erase(lru);
    }
  }
  void* p = alloc_(dev, want);
  if (p == nullptr) return Lease();
  entries_.push_back(Entry{dev, stream, p, want, 1, clock_, false});
  return Lease(this, p);
}

void ScratchCache::end_lease(void* ptr) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = std::find_if(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.ptr == ptr; });
  if (it == entries_.end()) return;
  --it->leases;
  if (it->retired && it->leases == 0) {
    free_(it->dev, it->ptr);
    entries_.erase(it);
  }
}

size_t ScratchCache::buffers() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

size_t ScratchCache::capacity(int dev, const void* stream) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const Entry& e : entries_)
    if (!e.retired && e.dev == dev && e.stream == stream) return e.cap;
  return 0;
}

}  // namespace fa4::cuda
