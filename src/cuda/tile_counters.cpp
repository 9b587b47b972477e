#include "cuda/tile_counters.h"

#include <algorithm>

namespace fa4::cuda {

uint32_t* TileCounterPool::get(int dev, const void* key, const void* stream) {
  std::lock_guard<std::mutex> lock(mu_);
  int on_dev = 0;
  for (const Entry& e : entries_) {
    if (e.dev != dev) continue;
    if (e.key == key) return e.ptr;
    ++on_dev;
  }
  if (on_dev >= max_per_device_) return nullptr;
  auto* p = static_cast<uint32_t*>(alloc_(dev, stream, bytes_));
  if (p == nullptr) return nullptr;  // not remembered: a later call may succeed
  entries_.push_back(Entry{dev, key, p});
  return p;
}

size_t TileCounterPool::pairs() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

}  // namespace fa4::cuda
