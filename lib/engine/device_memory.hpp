#pragma once
// The GPU memory a run used: the peak of what the caching allocator handed
// out on the run's device. Nothing on CPU, or in a build without CUDA.
#include <cstdint>
#include <optional>

#include <c10/core/Device.h>

namespace trlx::engine {

std::optional<int64_t> peak_device_bytes(const c10::Device& device);

// Returns the memory the caching allocator holds unused on `device` to the
// driver (torch.cuda.empty_cache); nothing on CPU.
void empty_device_cache(const c10::Device& device);

// The most memory this process has held resident so far (Linux's VmHWM:
// private memory plus the mapped file pages it read, such as a
// checkpoint's); nothing where /proc does not say.
std::optional<int64_t> peak_resident_bytes();

}  // namespace trlx::engine
