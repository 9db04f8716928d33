// libFuzzer target: the safetensors header parser/validator and the shard
// index parser (lib/io/safetensors_format.cpp), without LibTorch.
// Bad input must end in trlx::InputError; anything else (another exception,
// a sanitizer report, a broken invariant below) is a bug.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "core/error.hpp"
#include "io/safetensors_format.hpp"

using namespace trlx::io;

namespace {

void require(bool ok) {
  if (!ok) __builtin_trap();
}

// A header that validated must describe its file exactly, and encoding the
// same tensors again must give a header that validates to the same tensors.
void check_header(const Header& h, size_t size) {
  require(h.data_start() + h.data_size == size);
  uint64_t at = 0;
  std::vector<TensorSpec> specs;
  for (const auto& t : h.tensors) {
    require(t.begin == at && t.end >= t.begin);
    at = t.end;
    uint64_t n = 1;
    for (int64_t d : t.shape) {
      require(d >= 0);
      n *= static_cast<uint64_t>(d);
    }
    require(n * dtype_bits(t.dtype) / 8 == t.nbytes());
    specs.push_back({t.name, t.dtype, t.shape});
  }
  require(at == h.data_size);
  EncodedHeader enc;
  try {
    enc = encode_header(specs, h.metadata, "<re-encoded>");
  } catch (const trlx::InputError&) {
    require(false);
  }
  require(enc.data_size == h.data_size);
  require((enc.bytes.size() - 8) % 8 == 0);
  std::string file = enc.bytes;
  file.append(enc.data_size, '\0');
  const Header again = parse_header(reinterpret_cast<const uint8_t*>(file.data()), file.size(), "<again>");
  require(again.tensors.size() == h.tensors.size());
  require(again.metadata == h.metadata);
  for (size_t k = 0; k < enc.order.size(); ++k) {
    const auto& want = specs[enc.order[k]];
    const auto& got = again.tensors[k];
    require(got.name == want.name && got.dtype == want.dtype && got.shape == want.shape);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const Header h = parse_header(data, size, "<fuzz>");
    check_header(h, size);
  } catch (const trlx::InputError&) {
  }
  // The header text alone, behind a correct length prefix, reaches the JSON
  // and tensor checks far more often than raw bytes do.
  {
    std::string file(8, '\0');
    const uint64_t n = size;
    std::memcpy(file.data(), &n, 8);
    file.append(reinterpret_cast<const char*>(data), size);
    try {
      const Header h = parse_header(reinterpret_cast<const uint8_t*>(file.data()), file.size(), "<fuzz+len>");
      check_header(h, file.size());
    } catch (const trlx::InputError&) {
    }
  }
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const ShardIndex idx = parse_index(text, "<index>");
    for (const auto& [name, file] : idx.weight_map) require(!file.empty());
  } catch (const trlx::InputError&) {
  }
  if (size < 64) {
    try {
      (void)parse_size(text);
    } catch (const trlx::InputError&) {
    }
  }
  return 0;
}
