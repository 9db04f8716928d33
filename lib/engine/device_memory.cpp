// The GPU memory a run used, read from the CUDA caching allocator (nothing on CPU).
#include "engine/device_memory.hpp"

#include <fstream>
#include <string>

// A LibTorch with c10d NCCL is a CUDA build, whose c10_cuda trlx links.
#if defined(USE_C10D_NCCL)
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace trlx::engine {

std::optional<int64_t> peak_device_bytes(const c10::Device& device) {
#if defined(USE_C10D_NCCL)
  if (!device.is_cuda()) return std::nullopt;
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
  return stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].peak;
#else
  (void)device;
  return std::nullopt;
#endif
}

void empty_device_cache(const c10::Device& device) {
#if defined(USE_C10D_NCCL)
  if (device.is_cuda()) c10::cuda::CUDACachingAllocator::emptyCache();
#else
  (void)device;
#endif
}

std::optional<int64_t> peak_resident_bytes() {
  std::ifstream in("/proc/self/status");
  std::string key;
  while (in >> key) {
    if (key == "VmHWM:") {
      int64_t kib = 0;
      if (in >> kib) return kib * 1024;
      return std::nullopt;
    }
    in.ignore(1 << 12, '\n');
  }
  return std::nullopt;
}

}  // namespace trlx::engine
