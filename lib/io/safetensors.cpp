// safetensors checkpoints as LibTorch tensors: single files and sharded directories, memory-mapped on read.
#include "io/safetensors.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <cstring>
#include <set>

#include "core/error.hpp"
#include "core/log.hpp"
#include "io/atomic_write.hpp"

namespace trlx::io {

namespace fs = std::filesystem;

c10::ScalarType to_torch_dtype(Dtype d) {
  switch (d) {
    case Dtype::F32: return torch::kFloat32;
    case Dtype::F16: return torch::kFloat16;
    case Dtype::BF16: return torch::kBFloat16;
    case Dtype::F64: return torch::kFloat64;
    case Dtype::I64: return torch::kInt64;
    case Dtype::I32: return torch::kInt32;
    case Dtype::I16: return torch::kInt16;
    case Dtype::I8: return torch::kInt8;
    case Dtype::U8: return torch::kUInt8;
    case Dtype::BOOL: return torch::kBool;
    default:
      fail_input("unsupported safetensors dtype {} (trlx reads {})", dtype_name(d), supported_dtypes_text());
  }
}

Dtype to_safetensors_dtype(c10::ScalarType t, const std::string& name) {
  switch (t) {
    case torch::kFloat32: return Dtype::F32;
    case torch::kFloat16: return Dtype::F16;
    case torch::kBFloat16: return Dtype::BF16;
    case torch::kFloat64: return Dtype::F64;
    case torch::kInt64: return Dtype::I64;
    case torch::kInt32: return Dtype::I32;
    case torch::kInt16: return Dtype::I16;
    case torch::kInt8: return Dtype::I8;
    case torch::kUInt8: return Dtype::U8;
    case torch::kBool: return Dtype::BOOL;
    default:
      fail_input("tensor `{}`: dtype {} cannot be saved (trlx writes {})", name, c10::toString(t),
                 supported_dtypes_text());
  }
}

// ---- SafetensorsFile -----------------------------------------------------

SafetensorsFile SafetensorsFile::open(const fs::path& path) {
  SafetensorsFile f;
  auto [map, header] = open_safetensors(path);
  f.map_ = std::move(map);
  f.header_ = std::move(header);
  f.index_.reserve(f.header_.tensors.size());
  for (size_t i = 0; i < f.header_.tensors.size(); ++i) f.index_.emplace(f.header_.tensors[i].name, i);
  return f;
}

const fs::path& SafetensorsFile::path() const { return map_->path(); }

size_t SafetensorsFile::index_of(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) fail_input("{}: no tensor `{}`", path().string(), name);
  return it->second;
}

const TensorInfo& SafetensorsFile::info(const std::string& name) const { return header_.tensors[index_of(name)]; }

at::Tensor SafetensorsFile::get(const std::string& name, bool copy) const { return get(info(name), copy); }

at::Tensor SafetensorsFile::get(const TensorInfo& info, bool copy) const {
  const auto dtype = to_torch_dtype(info.dtype);
  const auto options = torch::TensorOptions().dtype(dtype).device(torch::kCPU);
  uint8_t* ptr = map_->data() + header_.data_start() + info.begin;
  const size_t elem = dtype_bits(info.dtype) / 8;
  const bool aligned = reinterpret_cast<uintptr_t>(ptr) % elem == 0;
  if (copy || !aligned || info.nbytes() == 0) {
    at::Tensor t = torch::empty(info.shape, options);
    if (info.nbytes()) map_->read(t.data_ptr(), header_.data_start() + info.begin, info.nbytes());
    return t;
  }
  auto keep = map_;
  return torch::from_blob(ptr, info.shape, [keep](void*) mutable { keep.reset(); }, options);
}

// ---- Checkpoint ----------------------------------------------------------

const Checkpoint::Where& Checkpoint::find(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) fail_input("{}: checkpoint has no tensor `{}`", source_.string(), name);
  return it->second;
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  out.reserve(where_.size());
  for (const auto& [k, v] : where_) out.push_back(k);
  return out;
}

TensorInfo Checkpoint::info(const std::string& name) const {
  const auto& w = find(name);
  return files_[w.file].tensors()[w.tensor];
}

fs::path Checkpoint::file_of(const std::string& name) const { return files_[find(name).file].path(); }

at::Tensor Checkpoint::get(const std::string& name, bool copy) const {
  const auto& w = find(name);
  return files_[w.file].get(files_[w.file].tensors()[w.tensor], copy);
}

Checkpoint Checkpoint::open(const fs::path& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) return open_dir(path);
  if (path.extension() != ".json") {
    Checkpoint c;
    c.source_ = path;
    c.files_.push_back(SafetensorsFile::open(path));
    for (size_t i = 0; i < c.files_[0].tensors().size(); ++i)
      c.where_.emplace(c.files_[0].tensors()[i].name, Where{0, i});
    return c;
  }
  // An index file.
  Checkpoint c;
  c.source_ = path;
  c.sharded_ = true;
  const std::string label = path.string();
  if (!fs::exists(path, ec)) fail_input("{}: no such file", label);
  const ShardIndex idx = parse_index(read_text_file(path), label);
  const fs::path dir = path.parent_path();
  std::map<std::string, size_t> file_ids;
  for (const auto& [name, file] : idx.weight_map) {
    auto [it, fresh] = file_ids.emplace(file, c.files_.size());
    if (fresh) {
      const fs::path shard = dir / file;
      if (!fs::is_regular_file(shard, ec))
        fail_input("{}: weight_map names `{}` (for tensor `{}`), but {} does not exist", label, file, name,
                   shard.string());
      c.files_.push_back(SafetensorsFile::open(shard));
    }
    const SafetensorsFile& f = c.files_[it->second];
    if (!f.contains(name))
      fail_input("{}: tensor `{}` is mapped to `{}`, but that file has no such tensor", label, name, file);
    c.where_.emplace(name, Where{it->second, f.index_of(name)});
  }
  for (const auto& f : c.files_)
    for (const auto& t : f.tensors())
      if (!c.where_.count(t.name))
        log::debug("{}: tensor `{}` is not in {}; ignored", f.path().string(), t.name, label);
  return c;
}

Checkpoint Checkpoint::open_dir(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) fail_input("{}: not a directory", dir.string());
  if (fs::exists(dir / kSingleFileName, ec)) return open(dir / kSingleFileName);
  if (fs::exists(dir / kIndexFileName, ec)) return open(dir / kIndexFileName);
  fail_input("{}: no {} or {} (not a safetensors checkpoint, or a save was interrupted)", dir.string(),
             kSingleFileName, kIndexFileName);
}

// ---- writing -------------------------------------------------------------

namespace {

struct Prepared {
  std::vector<TensorSpec> specs;
  std::vector<uint64_t> sizes;
};

Prepared prepare(const NamedTensors& tensors, const std::string& label) {
  Prepared p;
  for (const auto& [name, t] : tensors) {
    if (!t.defined()) fail_input("{}: tensor `{}` is undefined", label, name);
    if (t.layout() != torch::kStrided) fail_input("{}: tensor `{}` is not dense", label, name);
    TensorSpec s;
    s.name = name;
    s.dtype = to_safetensors_dtype(t.scalar_type(), name);
    s.shape = t.sizes().vec();
    p.sizes.push_back(static_cast<uint64_t>(t.numel()) * t.element_size());
    p.specs.push_back(std::move(s));
  }
  return p;
}

// Writes one file's bytes into `out` for the tensors at `which`.
void write_file(AtomicFile& out, const NamedTensors& tensors, const std::vector<size_t>& which,
                const std::vector<TensorSpec>& all_specs, const std::map<std::string, std::string>& metadata,
                const BeforeWrite& before_write, const Resolve& resolve = {}) {
  std::vector<TensorSpec> specs;
  specs.reserve(which.size());
  for (size_t i : which) specs.push_back(all_specs[i]);
  const EncodedHeader enc = encode_header(specs, metadata, out.target().string());
  out.write(enc.bytes);
  for (size_t k : enc.order) {
    const at::Tensor& t = tensors[which[k]].second;
    if (t.numel() == 0) continue;
    if (before_write) before_write(t);
    at::Tensor c = resolve ? resolve(t) : t;
    if (!c.device().is_cpu()) c = c.to(torch::kCPU);
    c = c.contiguous();
    out.write(c.data_ptr(), static_cast<size_t>(c.numel()) * c.element_size());
  }
}

}  // namespace

void save_safetensors(const fs::path& file, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata, const BeforeWrite& before_write) {
  const Prepared p = prepare(tensors, file.string());
  std::vector<size_t> all(tensors.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  AtomicFile out(file);
  write_file(out, tensors, all, p.specs, metadata, before_write);
  out.commit();
}

void save_checkpoint(const fs::path& dir, const NamedTensors& tensors, uint64_t max_shard_size_bytes) {
  SaveOptions o;
  o.max_shard_size = max_shard_size_bytes;
  save_checkpoint(dir, tensors, o);
}

void save_checkpoint(const fs::path& dir, const NamedTensors& tensors, const SaveOptions& options) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) fail("{}: cannot create directory: {}", dir.string(), ec.message());
  const Prepared p = prepare(tensors, dir.string());
  // Encode every header before writing anything, so that bad input (a
  // duplicate name, say) fails with the directory untouched.
  const ShardPlan plan = plan_shards(p.sizes, options.max_shard_size);
  const size_t n = std::max<size_t>(plan.shards.size(), 1);
  {
    std::set<std::string> seen;
    for (const auto& s : p.specs)
      if (!seen.insert(s.name).second) fail_input("{}: tensor `{}` is given twice", dir.string(), s.name);
  }

  std::set<std::string> new_files;
  std::vector<AtomicFile> outs;
  outs.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const std::string name = shard_file_name(i, n);
    new_files.insert(name);
    outs.emplace_back(dir / name);
    static const std::vector<size_t> none;
    write_file(outs.back(), tensors, plan.shards.empty() ? none : plan.shards[i], p.specs, options.metadata,
               options.before_write, options.resolve);
    outs.back().finish();
  }

  auto remove_stale_shards = [&] {
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      const std::string name = e.path().filename().string();
      if (is_shard_file_name(name) && !new_files.count(name)) remove_file(e.path());
    }
  };

  if (n == 1) {
    outs[0].commit();  // replaces model.safetensors atomically
    // open_dir prefers model.safetensors, so an old index left by a crash here is never read.
    remove_file(dir / kIndexFileName);
    remove_stale_shards();
    fsync_directory(dir);
    return;
  }

  std::vector<std::pair<std::string, std::string>> weight_map;
  for (size_t i = 0; i < n; ++i)
    for (size_t t : plan.shards[i]) weight_map.emplace_back(p.specs[t].name, shard_file_name(i, n));
  uint64_t params = 0;
  for (const auto& [name, t] : tensors) params += static_cast<uint64_t>(t.numel());
  AtomicFile index(dir / kIndexFileName);
  index.write(encode_index(weight_map, plan.total_size, options.total_parameters.value_or(params)));
  index.finish();

  // No entry point while the shards are swapped, so that a crash cannot pair
  // an old index with new shards (or the reverse).
  remove_file(dir / kSingleFileName);
  remove_file(dir / kIndexFileName);
  fsync_directory(dir);
  for (auto& o : outs) o.commit();
  index.commit();
  remove_stale_shards();
  fsync_directory(dir);
}

}  // namespace trlx::io
