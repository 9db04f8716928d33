#pragma once
// Reading and writing safetensors checkpoints as LibTorch tensors: single
// files, and sharded directories with model.safetensors.index.json, byte for
// byte as the reference library (`safetensors`) and transformers'
// save_pretrained write them. The format rules live in safetensors_format.hpp.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "io/safetensors_format.hpp"

namespace trlx::io {

// One .safetensors file, memory-mapped. Opening validates the whole header
// (see parse_header) and reads no tensor data.
class SafetensorsFile {
 public:
  static SafetensorsFile open(const std::filesystem::path& path);

  const std::filesystem::path& path() const;
  // In data order (by offset).
  const std::vector<TensorInfo>& tensors() const { return header_.tensors; }
  const std::map<std::string, std::string>& metadata() const { return header_.metadata; }
  bool contains(const std::string& name) const { return index_.count(name) != 0; }
  // InputError naming the file when absent.
  const TensorInfo& info(const std::string& name) const;
  size_t index_of(const std::string& name) const;

  // A CPU tensor. By default a view of the mapping (no copy; it keeps the
  // mapping alive, and views of the same tensor share memory; writing to one
  // changes memory only, never the file). The data is copied when
  // `copy` is set, or when it is not aligned for its dtype within the file.
  at::Tensor get(const std::string& name, bool copy = false) const;
  at::Tensor get(const TensorInfo& info, bool copy = false) const;

 private:
  std::shared_ptr<MappedFile> map_;
  Header header_;
  std::unordered_map<std::string, size_t> index_;
};

// A checkpoint: a directory holding model.safetensors or a sharded
// model.safetensors.index.json, or a single file.
class Checkpoint {
 public:
  // A directory: model.safetensors if present (transformers' preference),
  // else model.safetensors.index.json. Every shard named by the index must
  // exist and hold the tensors the index gives it; all shard headers are
  // validated here.
  static Checkpoint open_dir(const std::filesystem::path& dir);
  // A directory, a .safetensors file, or an index .json file.
  static Checkpoint open(const std::filesystem::path& path);

  bool sharded() const { return sharded_; }
  // Sorted.
  std::vector<std::string> names() const;
  bool contains(const std::string& name) const { return where_.count(name) != 0; }
  TensorInfo info(const std::string& name) const;
  std::filesystem::path file_of(const std::string& name) const;
  at::Tensor get(const std::string& name, bool copy = false) const;
  const std::vector<SafetensorsFile>& files() const { return files_; }

 private:
  struct Where {
    size_t file;
    size_t tensor;  // index into files_[file].tensors()
  };
  const Where& find(const std::string& name) const;
  std::filesystem::path source_;
  bool sharded_ = false;
  std::vector<SafetensorsFile> files_;
  std::map<std::string, Where> where_;
};

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

// The safetensors dtype of a torch dtype; InputError for types the format
// (or trlx) cannot store.
Dtype to_safetensors_dtype(c10::ScalarType t, const std::string& name);
c10::ScalarType to_torch_dtype(Dtype d);

// Writes one file as safetensors.torch.save_file does (same bytes), through
// an AtomicFile. Tensors may live on any device and be non-contiguous: each is
// copied to contiguous CPU memory as it is written. An empty `metadata` map
// writes no `__metadata__`.
// Called with each tensor right before its bytes are read for writing (a
// sharded model gathers the tensor's parameters there).
using BeforeWrite = std::function<void(const at::Tensor&)>;
// Gives the tensor whose bytes are written for an entry (after BeforeWrite):
// a writer may list tensors on the meta device (shape and dtype only) and
// make their values only when they are written.
using Resolve = std::function<at::Tensor(const at::Tensor&)>;

void save_safetensors(const std::filesystem::path& file, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata = {{"format", "pt"}},
                      const BeforeWrite& before_write = {});

struct SaveOptions {
  // 0: one file. Otherwise shard as save_pretrained(max_shard_size=...) does.
  uint64_t max_shard_size = 0;
  // Written as metadata.total_parameters of the index (transformers writes
  // model.num_parameters()); by default the sum of the tensors' element counts.
  std::optional<uint64_t> total_parameters;
  std::map<std::string, std::string> metadata{{"format", "pt"}};
  BeforeWrite before_write;
  Resolve resolve;
};

// Writes a checkpoint directory as transformers' save_pretrained does: one
// model.safetensors when everything fits one shard, else
// model-0000i-of-0000n.safetensors plus model.safetensors.index.json.
//
// Crash safety: every new file is first written and fsynced under a temporary
// name. A single file then atomically replaces model.safetensors. A sharded
// save first removes the old entry points (model.safetensors and the index),
// renames the shards into place and renames the index last. Then stale shards
// and the other form's entry point are removed. A crash leaves either the old
// checkpoint, the new one, or (mid-way through a sharded save) a directory
// with no entry point that open_dir rejects — never a mix of old and new
// tensors. Leftover temporaries are hidden files ".model*.tmp-*".
void save_checkpoint(const std::filesystem::path& dir, const NamedTensors& tensors, const SaveOptions& options);
void save_checkpoint(const std::filesystem::path& dir, const NamedTensors& tensors,
                     uint64_t max_shard_size_bytes = 0);

}  // namespace trlx::io
