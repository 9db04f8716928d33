// libFuzzer target with two modes chosen by the first byte:
//  '{'  the bytes are loaded as a tokenizer.json (loading may only fail with
//       trlx::InputError) and the result encodes and decodes a fixed text;
//  else the bytes are text, encoded and decoded by a fixed valid tokenizer
//       that uses every component family; offsets must stay in bounds.
// Set TRLX_FUZZ_WRITE_SEED=<path> to write that valid tokenizer as a seed.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "core/error.hpp"
#include "core/log.hpp"
#include "text/tokenizer/tokenizer.hpp"

namespace {

const char* kValid = R"({
 "version": "1.0",
 "added_tokens": [
  {"id": 7, "content": "<s>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
  {"id": 8, "content": "xy", "single_word": true, "lstrip": true, "rstrip": true, "normalized": true, "special": false}],
 "normalizer": {"type": "Sequence", "normalizers": [{"type": "NFKC"}, {"type": "Lowercase"},
   {"type": "Replace", "pattern": {"Regex": "\\s{2,}"}, "content": " "}, {"type": "Prepend", "prepend": "_"}]},
 "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
   {"type": "Split", "pattern": {"Regex": "(?i:'s|'t)|\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"}, "behavior": "Isolated", "invert": false},
   {"type": "Digits", "individual_digits": true}, {"type": "Punctuation"},
   {"type": "Metaspace", "replacement": "_", "prepend_scheme": "first", "split": true},
   {"type": "ByteLevel", "add_prefix_space": true, "use_regex": false}]},
 "post_processor": {"type": "Sequence", "processors": [{"type": "ByteLevel", "trim_offsets": true, "add_prefix_space": true},
   {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
    "pair": [], "special_tokens": {"<s>": {"id": "<s>", "ids": [7], "tokens": ["<s>"]}}}]},
 "decoder": {"type": "Sequence", "decoders": [{"type": "ByteLevel"}, {"type": "ByteFallback"}, {"type": "Metaspace", "replacement": "_", "prepend_scheme": "always"},
   {"type": "Strip", "content": " ", "start": 1, "stop": 3}, {"type": "Fuse"}]},
 "model": {"type": "BPE", "unk_token": "<unk>", "byte_fallback": true, "fuse_unk": true,
   "vocab": {"<unk>": 0, "a": 1, "b": 2, "ab": 3, "<0x41>": 4, "\u0120": 5, "\u0120a": 6, "<s>": 7},
   "merges": ["a b", "\u0120 a"]}
})";

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  trlx::log::init(0, 1, "off");  // the loader's warnings would flood the output
  if (const char* p = std::getenv("TRLX_FUZZ_WRITE_SEED")) {
    if (FILE* f = std::fopen(p, "wb")) {
      std::fputs(kValid, f);
      std::fclose(f);
    }
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  if (size == 0 || data[0] != '{') {
    // Longer texts add time, not paths: keep executions fast.
    if (size > 4096) return 0;
    static const trlx::text::Tokenizer valid = trlx::text::Tokenizer::from_json(kValid);
    for (bool special : {true, false}) {
      const auto enc = valid.encode(input, special);
      for (auto [b, e] : enc.offsets) {
        if (b > e || e > size) __builtin_trap();
      }
      (void)valid.decode(enc.ids, special);
    }
    return 0;
  }
  try {
    const auto tok = trlx::text::Tokenizer::from_json(input, "fuzz.json");
    const auto e2 = tok.encode("Hello  world 123 <s> héllo\n\txy", true);
    (void)tok.decode(e2.ids, false);
  } catch (const trlx::InputError&) {
  }
  return 0;
}
