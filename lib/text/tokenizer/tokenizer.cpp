// A Tokenizer at work: added tokens split out, the pipeline run over the rest, ids decoded back to text.
#include "text/tokenizer/pipeline.hpp"
#include <algorithm>

namespace trlx::text {
namespace {

size_t last_char_start(std::string_view s) {
  size_t p = s.size() - 1;
  while (p > 0 && (static_cast<unsigned char>(s[p]) & 0xC0) == 0x80) --p;
  return p;
}

Encoding to_encoding(const std::vector<Tok>& toks, size_t limit) {
  const size_t n = std::min(limit, toks.size());
  Encoding e;
  e.ids.reserve(n);
  e.offsets.reserve(n);
  e.special_mask.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    e.ids.push_back(toks[i].id);
    e.offsets.emplace_back(toks[i].b, toks[i].e);
    e.special_mask.push_back(toks[i].special);
  }
  return e;
}

bool same_head(const std::vector<Tok>& a, const std::vector<Tok>& b, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (a[i].id != b[i].id || a[i].b != b[i].b || a[i].e != b[i].e || a[i].special != b[i].special) return false;
  return true;
}

// The largest UTF-8 character start at or before `p`.
size_t char_start_at_or_before(std::string_view s, size_t p) {
  if (p >= s.size()) return s.size();
  while (p > 0 && (static_cast<unsigned char>(s[p]) & 0xC0) == 0x80) --p;
  return p;
}

}  // namespace

void Tokenizer::Impl::split_added(NStr& n, const Trie& trie, std::vector<std::pair<NStr, int32_t>>& out) const {
  const std::string& s = n.s;
  if (s.empty()) return;
  if (trie.empty()) {
    out.emplace_back(std::move(n), -1);
    return;
  }
  size_t start_offset = 0;
  for (size_t i = 0; i < s.size();) {
    auto [len, idx] = trie.longest_at(s, i);
    if (len == 0) {
      ++i;
      continue;
    }
    size_t start = i, stop = i + len;
    i = stop;
    const AddedToken& t = added[static_cast<size_t>(idx)];
    if (t.single_word) {
      bool start_space = true, stop_space = true;
      if (start > 0) {
        uint32_t l;
        start_space = !uni::is_word(uni::decode_valid(s, last_char_start(s.substr(0, start)), &l));
      }
      if (stop < s.size()) {
        uint32_t l;
        stop_space = !uni::is_word(uni::decode_valid(s, stop, &l));
      }
      if (!start_space || !stop_space) continue;
    }
    if (t.lstrip) {
      size_t ns = start;
      while (ns > 0) {
        const size_t p = last_char_start(s.substr(0, ns));
        uint32_t l;
        if (!uni::is_whitespace(uni::decode_valid(s, p, &l))) break;
        ns = p;
      }
      start = std::max(ns, start_offset);
    }
    if (t.rstrip) {
      while (stop < s.size()) {
        uint32_t l;
        if (!uni::is_whitespace(uni::decode_valid(s, stop, &l))) break;
        stop += l;
      }
    }
    if (start_offset < start) out.emplace_back(n.slice(start_offset, start), -1);
    if (start < stop) out.emplace_back(n.slice(start, stop), t.id);
    start_offset = stop;
  }
  if (start_offset < s.size()) out.emplace_back(n.slice(start_offset, s.size()), -1);
}

std::vector<Tok> Tokenizer::Impl::run(std::string_view text, bool add_special) const {
  std::vector<Tok> toks;
  NStr root = NStr::from_input(text);
  std::vector<std::pair<NStr, int32_t>> first, second;
  split_added(root, raw_trie, first);
  std::vector<NStr> words;
  for (auto& [piece, id] : first) {
    if (id >= 0) {
      second.emplace_back(std::move(piece), id);
      continue;
    }
    if (normalizer) normalizer->apply(piece);
    split_added(piece, norm_trie, second);
  }
  std::vector<WordPiece> wp;
  for (auto& [piece, id] : second) {
    if (id >= 0) {
      const Align a = piece.original(0, piece.s.size());
      toks.push_back({id, a.first, a.second, 0});
      continue;
    }
    words.clear();
    if (pre) {
      pre->split(piece, words);
    } else {
      words.push_back(std::move(piece));
    }
    for (const NStr& w : words) {
      if (w.s.empty()) continue;
      wp.clear();
      model->tokenize(w.s, wp);
      size_t pos = 0;
      for (const WordPiece& p : wp) {
        const Align a = w.original(pos, pos + p.len);
        toks.push_back({p.id, a.first, a.second, 0});
        pos += p.len;
      }
    }
  }
  if (post) {
    post->process(toks, add_special, [this](int32_t id) {
      const std::string* s = id_to_token(id);
      return s ? *s : std::string();
    }, text);
  }
  return toks;
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Encoding Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  const std::vector<Tok> toks = impl_->run(text, add_special_tokens);
  return to_encoding(toks, toks.size());
}


Encoding Tokenizer::encode_head(std::string_view text, bool add_special_tokens, size_t limit) const {
  // Tokens kept beyond `limit` in each prefix: the last words of a prefix and
  // the post-processor's closing tokens may differ from the whole text's, and
  // must lie past the tokens returned.
  constexpr size_t kMargin = 16;
  // A text this short is tokenized whole: no token spans more bytes than this
  // per token kept, so the whole is cheap either way.
  const size_t first = std::max<size_t>(size_t{1} << 14, (limit + kMargin) * 16);
  if (text.size() <= 2 * first) return to_encoding(impl_->run(text, add_special_tokens), limit);
  std::vector<Tok> previous;
  for (size_t len = first;; len *= 2) {
    const size_t cut = char_start_at_or_before(text, len);
    std::vector<Tok> toks = impl_->run(text.substr(0, cut), add_special_tokens);
    if (cut == text.size()) return to_encoding(toks, limit);
    if (previous.size() >= limit + kMargin && toks.size() >= limit + kMargin && same_head(previous, toks, limit))
      return to_encoding(toks, limit);
    previous = std::move(toks);
  }
}

std::vector<int32_t> Tokenizer::encode_ids(std::string_view text, bool add_special_tokens) const {
  const std::vector<Tok> toks = impl_->run(text, add_special_tokens);
  std::vector<int32_t> ids;
  ids.reserve(toks.size());
  for (const Tok& t : toks) ids.push_back(t.id);
  return ids;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  std::vector<std::string> toks;
  toks.reserve(ids.size());
  for (int32_t id : ids) {
    const std::string* s = impl_->id_to_token(id);
    if (!s) continue;
    if (skip_special_tokens && is_special(id)) continue;
    toks.push_back(*s);
  }
  if (!impl_->decoder) {
    std::string out;
    for (size_t i = 0; i < toks.size(); ++i) {
      if (i) out += ' ';
      out += toks[i];
    }
    return out;
  }
  impl_->decoder->chain(toks);
  std::string out;
  for (const auto& t : toks) out += t;
  return out;
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const { return impl_->token_to_id(token); }
std::string Tokenizer::id_to_token(int32_t id) const {
  const std::string* s = impl_->id_to_token(id);
  return s ? *s : std::string();
}
bool Tokenizer::is_special(int32_t id) const {
  auto it = impl_->added_by_id.find(id);
  return it != impl_->added_by_id.end() && impl_->added[it->second].special;
}
std::vector<Tokenizer::AddedTokenInfo> Tokenizer::added_tokens() const {
  std::vector<AddedTokenInfo> out;
  for (const auto& t : impl_->added) out.push_back({t.id, t.content, t.special});
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
  return out;
}
size_t Tokenizer::vocab_size() const { return impl_->vocab_size; }
std::pair<int32_t, std::string> Tokenizer::largest_id() const {
  std::pair<int32_t, std::string> best{-1, ""};
  for (const auto& [token, id] : impl_->model->vocab)
    if (id > best.first) best = {id, token};
  for (const auto& t : impl_->added)
    if (t.id > best.first) best = {t.id, t.content};
  return best;
}
const std::optional<std::string>& Tokenizer::bos_token() const { return impl_->bos; }
const std::optional<std::string>& Tokenizer::eos_token() const { return impl_->eos; }
const std::optional<std::string>& Tokenizer::pad_token() const { return impl_->pad; }
const std::optional<std::string>& Tokenizer::unk_token() const { return impl_->unk; }
std::optional<int32_t> Tokenizer::bos_token_id() const { return impl_->bos ? token_to_id(*impl_->bos) : std::nullopt; }
std::optional<int32_t> Tokenizer::eos_token_id() const { return impl_->eos ? token_to_id(*impl_->eos) : std::nullopt; }
std::optional<int32_t> Tokenizer::pad_token_id() const { return impl_->pad ? token_to_id(*impl_->pad) : std::nullopt; }
std::optional<int32_t> Tokenizer::unk_token_id() const { return impl_->unk ? token_to_id(*impl_->unk) : std::nullopt; }
const std::string& Tokenizer::chat_template() const { return impl_->chat_template; }
std::optional<int64_t> Tokenizer::model_max_length() const { return impl_->max_length; }

}  // namespace trlx::text
