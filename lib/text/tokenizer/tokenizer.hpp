#pragma once
// The tokenizer.json engine: loads a Hugging Face `tokenizer.json` (and the
// optional `tokenizer_config.json` next to it) and encodes/decodes the way the
// `tokenizers` library does, with the tokenizer_config rules of transformers'
// fast tokenizers (for model-specific tokenizer classes, add_bos_token and
// add_eos_token rebuild the post-processor). Decoding equals `tokenizers`'
// decode (transformers 5 decodes these files identically). Thread-safe.
// See README.md in this folder for the supported components.
//
// Input text is bytes; invalid UTF-8 is read as U+FFFD per maximal invalid
// subpart (the rule of Python's "replace" and Rust's from_utf8_lossy), and
// offsets always index the bytes that were passed in.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace trlx::text {

struct Encoding {
  std::vector<int32_t> ids;
  // [begin, end) byte offsets into the encoded input; (0, 0) for tokens the
  // post-processor added. Like HF `offsets_mapping`, in UTF-8 bytes.
  std::vector<std::pair<size_t, size_t>> offsets;
  // 1 for tokens a post-processor template added (HF special_tokens_mask).
  std::vector<uint8_t> special_mask;
};

// Where transformers' AutoTokenizer does not simply read tokenizer.json.
enum class Compat {
  // tokenizer.json as written: what HF `tokenizers` does, and what
  // transformers 4.x AutoTokenizer does for these files.
  kTokenizerJson,
  // transformers 5.x AutoTokenizer: tokenizer_class LlamaTokenizer[Fast]
  // rebuilds the pipeline (no normalizer; Metaspace pre-tokenizer with
  // prepend_scheme "always" when legacy, else "first"; split off). This
  // differs from SentencePiece on text that starts with a space, also right
  // after a special token.
  kTransformersV5,
};

class Tokenizer {
 public:
  // dir/tokenizer.json, plus dir/tokenizer_config.json when present.
  static Tokenizer from_dir(const std::filesystem::path& dir, Compat compat = Compat::kTokenizerJson);
  static Tokenizer from_files(const std::filesystem::path& tokenizer_json,
                              const std::optional<std::filesystem::path>& tokenizer_config = std::nullopt,
                              Compat compat = Compat::kTokenizerJson);
  // From JSON text; `name` stands for the file in error messages.
  static Tokenizer from_json(std::string_view tokenizer_json, std::string_view name = "tokenizer.json",
                             std::optional<std::string_view> tokenizer_config = std::nullopt,
                             std::string_view config_name = "tokenizer_config.json",
                             Compat compat = Compat::kTokenizerJson);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  Encoding encode(std::string_view text, bool add_special_tokens = true) const;
  std::vector<int32_t> encode_ids(std::string_view text, bool add_special_tokens = true) const;
  // The first `limit` tokens of encode(text) (all of them when it has fewer),
  // tokenizing only a prefix of a long text: memory and time follow `limit`,
  // not the text. The prefix grows by doubling until two successive prefixes
  // agree on those tokens, so a cut inside a word or a normalizer's span
  // never changes them.
  Encoding encode_head(std::string_view text, bool add_special_tokens, size_t limit) const;
  // Unknown ids are skipped, as the reference does.
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  std::string id_to_token(int32_t id) const;  // "" when unknown
  bool is_special(int32_t id) const;
  // The added tokens (tokenizer.json's added_tokens), in id order: id,
  // content and whether it is special.
  struct AddedTokenInfo {
    int32_t id;
    std::string content;
    bool special;
  };
  std::vector<AddedTokenInfo> added_tokens() const;
  size_t vocab_size() const;  // with added tokens, as len(tokenizer) in transformers
  // The largest token id (model vocabulary and added tokens) and its token:
  // what a model's embedding must have rows for.
  std::pair<int32_t, std::string> largest_id() const;

  const std::optional<std::string>& bos_token() const;
  const std::optional<std::string>& eos_token() const;
  const std::optional<std::string>& pad_token() const;
  const std::optional<std::string>& unk_token() const;
  std::optional<int32_t> bos_token_id() const;
  std::optional<int32_t> eos_token_id() const;
  std::optional<int32_t> pad_token_id() const;
  std::optional<int32_t> unk_token_id() const;
  const std::string& chat_template() const;  // the default template, "" if none
  std::optional<int64_t> model_max_length() const;

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  static Tokenizer load(std::string_view tokenizer_json, std::string_view name,
                        std::optional<std::string_view> tokenizer_config, std::string_view config_name, Compat compat);
  std::unique_ptr<Impl> impl_;
};

}  // namespace trlx::text
