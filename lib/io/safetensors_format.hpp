#pragma once
// The safetensors file format without LibTorch: header parsing and validation,
// header encoding, the shard plan and index file of sharded checkpoints, and
// memory-mapped files. Everything here works on plain bytes so that the
// libFuzzer target (tests/fuzz/fuzz_safetensors.cpp) needs no LibTorch.
//
// The rules are those of the reference reader and writer (the Rust
// `safetensors` crate, as used by `safetensors.torch`) and of transformers'
// `save_pretrained` for sharding; where trlx is stricter it says so.
//
// Every problem with a file is reported as trlx::InputError naming the file
// (the `label` argument) and the tensor or key.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace trlx::io {

// Element types the format knows, in the reference's declaration order: the
// writer puts tensors of later (wider) types first, so this order decides the
// byte layout of every file written.
enum class Dtype : uint8_t {
  BOOL, F4, F6_E2M3, F6_E3M2, U8, I8, F8_E5M2, F8_E4M3, F8_E8M0, F8_E4M3FNUZ, F8_E5M2FNUZ,
  I16, U16, F16, BF16, I32, U32, F32, C64, F64, I64, U64,
};

std::string_view dtype_name(Dtype d);
std::optional<Dtype> parse_dtype(std::string_view name);
size_t dtype_bits(Dtype d);
// The types trlx turns into tensors: F32, F16, BF16, F64, I64, I32, I16, I8, U8, BOOL.
bool dtype_supported(Dtype d);
std::string supported_dtypes_text();

// The format's limit on the JSON header (reader and writer).
inline constexpr uint64_t kMaxHeaderSize = 100'000'000;

struct TensorInfo {
  std::string name;
  Dtype dtype = Dtype::F32;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // byte offsets within the data section (after the header)
  uint64_t end = 0;
  uint64_t nbytes() const { return end - begin; }
  int64_t numel() const;
  std::string_view dtype_str() const { return dtype_name(dtype); }
};

struct Header {
  std::map<std::string, std::string> metadata;  // `__metadata__`
  bool has_metadata = false;
  std::vector<TensorInfo> tensors;  // in data order (by offsets)
  uint64_t header_size = 0;         // the JSON part, as in the 8-byte prefix
  uint64_t data_start() const { return 8 + header_size; }
  uint64_t data_size = 0;           // bytes after the header
};

// Parses and validates a whole safetensors file held in `data[0, size)`.
// Checks, in the reference reader's order: the 8-byte little-endian length,
// the 100 MB limit, the header lying inside the file, UTF-8, JSON, a JSON
// object, `__metadata__` a string-to-string map, each tensor's dtype / shape /
// data_offsets, offsets tiling the data section from 0 without gaps or
// overlaps, each tensor's byte size against dtype x shape (overflow-checked),
// and the file ending exactly where the last tensor does.
// Stricter than the reference: a key given twice anywhere in the header is an
// error (the reference keeps the last of duplicate tensor names), and shapes
// must fit int64 (torch's size type).
Header parse_header(const uint8_t* data, size_t size, std::string_view label);

// What the writer needs about one tensor.
struct TensorSpec {
  std::string name;
  Dtype dtype = Dtype::F32;
  std::vector<int64_t> shape;
};

struct EncodedHeader {
  std::string bytes;                 // 8-byte length + JSON padded with spaces to a multiple of 8
  std::vector<size_t> order;         // indices into the input, in data order
  std::vector<uint64_t> begin;       // data offset of each input tensor (input order)
  uint64_t data_size = 0;
};

// Encodes a header exactly as the reference writer does: tensors sorted by
// dtype (widest first, in Dtype order) then by name (bytewise), offsets laid
// out in that order, compact JSON with `__metadata__` first, then the tensors
// with keys dtype, shape, data_offsets, padded with spaces to a multiple of 8
// bytes. An empty `metadata` writes no `__metadata__` (the reference's
// metadata=None). The reference keeps metadata in a hash map, so with more than
// one key its order is arbitrary; here keys are sorted.
// Errors (InputError): duplicate or invalid UTF-8 names, the name
// `__metadata__`, negative dimensions, size overflow, a header over 100 MB.
EncodedHeader encode_header(const std::vector<TensorSpec>& tensors,
                            const std::map<std::string, std::string>& metadata, std::string_view label);

// Bytes a tensor of this dtype and shape takes; InputError on overflow,
// negative dimensions or sub-byte sizes.
uint64_t tensor_nbytes(Dtype dtype, const std::vector<int64_t>& shape, std::string_view label,
                       std::string_view name);

// ---- sharded checkpoints -------------------------------------------------

inline constexpr const char* kSingleFileName = "model.safetensors";
inline constexpr const char* kIndexFileName = "model.safetensors.index.json";

// "5GB" -> 5'000'000'000, as huggingface_hub's parse_size_to_int (decimal
// units KB, MB, GB, TB, case-insensitive, a decimal number before the unit;
// the result truncated like Python's int()). A plain integer is a byte count.
// Errors are InputError.
uint64_t parse_size(std::string_view text);

// Shards as huggingface_hub's split_torch_state_dict_into_shards (which
// transformers' save_pretrained uses): tensors are taken in the given order; a
// tensor larger than the limit gets a shard of its own at once (the shard being
// filled stays open); otherwise a tensor that would take the current shard over
// the limit closes it. max_shard_size 0 means one shard.
struct ShardPlan {
  std::vector<std::vector<size_t>> shards;  // tensor indices, each shard in input order
  uint64_t total_size = 0;
};
ShardPlan plan_shards(const std::vector<uint64_t>& sizes, uint64_t max_shard_size);

// "model-00001-of-00003.safetensors"; "model.safetensors" when there is one shard.
std::string shard_file_name(size_t index, size_t count);
// Whether `name` looks like a shard file of a sharded checkpoint.
bool is_shard_file_name(std::string_view name);

// model.safetensors.index.json as transformers writes it: json.dumps(indent=2,
// sort_keys=True, ensure_ascii=True) + "\n" of
// {"metadata": {"total_parameters": P, "total_size": S}, "weight_map": {...}}.
std::string encode_index(const std::vector<std::pair<std::string, std::string>>& weight_map,
                         uint64_t total_size, std::optional<uint64_t> total_parameters);

struct ShardIndex {
  std::vector<std::pair<std::string, std::string>> weight_map;  // tensor -> file, sorted by tensor
  std::optional<uint64_t> total_size;
};
// Parses an index file's text: a JSON object whose `weight_map` maps tensor
// names to file names (a tensor listed twice is an error); file names must be
// relative and stay inside the checkpoint directory.
ShardIndex parse_index(std::string_view text, std::string_view label);

// ---- files ---------------------------------------------------------------

// A read-only view of a whole file, memory-mapped privately (copy-on-write:
// writes through a view change memory, never the file). Shared by every
// tensor taken from it.
class MappedFile {
 public:
  static std::shared_ptr<MappedFile> open(const std::filesystem::path& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::filesystem::path& path() const { return path_; }
  // Copies bytes [offset, offset + n) of the file into `dst` with pread: for
  // copies this beats faulting the mapping in page by page.
  void read(void* dst, uint64_t offset, size_t n) const;
  // Gives back the resident pages that lie wholly inside [p, p + n) when that
  // range is inside a live mapping (madvise MADV_DONTNEED), for a caller
  // that will not read those bytes again (a weight quantized and released):
  // touched again, they read as the file's bytes. False, and nothing done,
  // for memory that is not a mapping.
  static bool release(const void* p, size_t n);

 private:
  MappedFile() = default;
  int fd_ = -1;
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::filesystem::path path_;
};

// Maps a safetensors file and validates its header (parse_header), and also
// that every tensor's dtype is one trlx reads. Touches no tensor data.
std::pair<std::shared_ptr<MappedFile>, Header> open_safetensors(const std::filesystem::path& path);

std::string read_text_file(const std::filesystem::path& path);

}  // namespace trlx::io
