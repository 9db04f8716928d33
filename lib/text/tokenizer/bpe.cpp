// The BPE model: byte-level merges with a word cache, byte fallback and unknown tokens, and its loading.
#include "text/tokenizer/pipeline.hpp"

#include <cstdio>

namespace trlx::text::pipeline {

void Bpe::index_bmp() {
  bmp_ids.assign(0x10000, -1);
  for (const auto& [tok, id] : vocab) {
    if (tok.empty() || tok.size() > 3 || !uni::is_valid_utf8(tok)) continue;
    uint32_t len;
    const char32_t cp = uni::decode_valid(tok, 0, &len);
    if (len == tok.size()) bmp_ids[cp] = id;
  }
}

void Bpe::tokenize(std::string_view w, std::vector<WordPiece>& out) const {
  if (w.empty()) return;
  if (ignore_merges) {
    auto it = vocab.find(w);
    if (it != vocab.end()) {
      out.push_back({it->second, static_cast<uint32_t>(w.size())});
      return;
    }
  }
  CacheShard* shard = nullptr;
  if (w.size() < 256) {
    shard = &cache_[SvHash{}(w) % kCacheShards];
    std::lock_guard<std::mutex> lock(shard->mu);
    auto it = shard->words.find(w);
    if (it != shard->words.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t before = out.size();
  merge_word(w, out);
  if (shard) {
    std::lock_guard<std::mutex> lock(shard->mu);
    if (shard->words.size() < 10000 / kCacheShards)
      shard->words.emplace(std::string(w), std::vector<WordPiece>(out.begin() + static_cast<std::ptrdiff_t>(before), out.end()));
  }
}

void Bpe::merge_word(std::string_view w, std::vector<WordPiece>& res) const {
  thread_local std::vector<Sym> syms;
  thread_local std::vector<Cand> heap;
  syms.clear();
  heap.clear();
  syms.reserve(w.size());
  std::optional<std::pair<int32_t, uint32_t>> pending_unk;
  auto add = [&](int32_t id, uint32_t len) {
    const auto n = static_cast<int32_t>(syms.size());
    syms.push_back({id, n - 1, n + 1, len});
  };
  std::string buf;
  for (size_t i = 0; i < w.size();) {
    const uint32_t l = std::min<uint32_t>(uni::seq_len(static_cast<unsigned char>(w[i])), static_cast<uint32_t>(w.size() - i));
    const bool first = i == 0, last = i + l >= w.size();
    std::string_view piece = w.substr(i, l);
    const bool affixed = (!first && has_prefix) || (last && has_suffix);
    if (!affixed && l < 4 && l == uni::seq_len(static_cast<unsigned char>(piece[0])) && !bmp_ids.empty()) {
      uint32_t len;
      const char32_t cp = uni::decode_valid(piece, 0, &len);
      const int32_t id = bmp_ids[cp];
      if (id >= 0) {
        if (pending_unk) {
          add(pending_unk->first, pending_unk->second);
          pending_unk.reset();
        }
        add(id, l);
        i += l;
        continue;
      }
    }
    if (affixed) {
      buf.clear();
      if (!first && has_prefix) buf += prefix;
      buf += piece;
      if (last && has_suffix) buf += suffix;
      piece = buf;
    }
    auto it = vocab.find(piece);
    if (it != vocab.end()) {
      if (pending_unk) {
        add(pending_unk->first, pending_unk->second);
        pending_unk.reset();
      }
      add(it->second, l);
    } else {
      bool done = false;
      if (byte_fallback) {
        bool ok = true;
        for (unsigned char c : piece) ok = ok && byte_ids[c] >= 0;
        if (ok) {
          // the fallback covers the looked-up piece byte by byte
          for (unsigned char c : piece) add(byte_ids[c], 1);
          done = true;
        }
      }
      if (!done && unk_id) {
        if (pending_unk && fuse_unk) {
          pending_unk->second += l;
        } else {
          if (pending_unk) add(pending_unk->first, pending_unk->second);
          pending_unk = std::make_pair(*unk_id, l);
        }
      }
    }
    i += l;
  }
  if (pending_unk) add(pending_unk->first, pending_unk->second);
  if (!syms.empty()) syms.back().next = -1;

  auto push = [&](Cand c) {
    heap.push_back(c);
    std::push_heap(heap.begin(), heap.end());
  };
  for (size_t i = 0; i + 1 < syms.size(); ++i) {
    const MergeTable::Value* m = merges.find(MergeTable::key(syms[i].id, syms[i + 1].id));
    if (m) heap.push_back({m->rank, static_cast<int32_t>(i), m->id});
  }
  std::make_heap(heap.begin(), heap.end());
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end());
    const Cand top = heap.back();
    heap.pop_back();
    Sym& cur = syms[top.pos];
    if (cur.len == 0 || cur.next == -1) continue;
    const Sym right = syms[cur.next];
    const MergeTable::Value* it = merges.find(MergeTable::key(cur.id, right.id));
    if (!it || it->id != top.new_id) continue;
    cur.id = top.new_id;
    cur.len += right.len;
    syms[cur.next].len = 0;
    cur.next = right.next;
    if (right.next >= 0 && static_cast<size_t>(right.next) < syms.size()) syms[right.next].prev = top.pos;
    if (cur.prev >= 0) {
      const MergeTable::Value* p = merges.find(MergeTable::key(syms[cur.prev].id, cur.id));
      if (p) push({p->rank, cur.prev, p->id});
    }
    if (cur.next >= 0) {
      const MergeTable::Value* p = merges.find(MergeTable::key(cur.id, syms[cur.next].id));
      if (p) push({p->rank, top.pos, p->id});
    }
  }
  for (const Sym& s : syms)
    if (s.len) res.push_back({s.id, s.len});
}

std::unique_ptr<Bpe> make_bpe(const Node& n) {
  n.object();
  const std::string t = n.has("type") ? n.at("type").str() : (n.has("merges") ? "BPE" : "");
  if (t != "BPE") {
    if (t.empty()) fail_input("{}: key `{}` is missing", n.file, n.sub("type"));
    fail_input("{}: key `{}`: unsupported model type \"{}\" (trlx supports BPE)", n.file, n.sub("type"), t);
  }
  auto m = std::make_unique<Bpe>();
  const Node v = n.at("vocab");
  v.object();
  m->vocab.reserve(v.j.size());
  int32_t max_id = -1;
  for (auto it = v.j.begin(); it != v.j.end(); ++it) {
    const Node idn{it.value(), n.file, v.path + "." + it.key()};
    const int64_t id = idn.integer();
    if (id < 0 || id > std::numeric_limits<int32_t>::max())
      fail_input("{}: key `{}`: expected a token id >= 0, found {}", n.file, idn.path, id);
    m->vocab[it.key()] = static_cast<int32_t>(id);
    max_id = std::max(max_id, static_cast<int32_t>(id));
  }
  if (static_cast<size_t>(max_id) <= 4 * m->vocab.size() + 65536) {
    m->vocab_r.assign(static_cast<size_t>(max_id + 1), nullptr);
    for (const auto& [tok, id] : m->vocab) m->vocab_r[static_cast<size_t>(id)] = &tok;
  } else {
    for (const auto& [tok, id] : m->vocab) m->vocab_r_sparse[id] = &tok;
  }
  if (n.has("unk_token")) {
    m->unk = n.at("unk_token").str();
    auto it = m->vocab.find(*m->unk);
    if (it != m->vocab.end()) m->unk_id = it->second;
  }
  if (n.has("continuing_subword_prefix")) {
    m->prefix = n.at("continuing_subword_prefix").str();
    m->has_prefix = true;
  }
  if (n.has("end_of_word_suffix")) {
    m->suffix = n.at("end_of_word_suffix").str();
    m->has_suffix = true;
  }
  m->fuse_unk = n.bool_or("fuse_unk", false);
  m->byte_fallback = n.bool_or("byte_fallback", false);
  m->ignore_merges = n.bool_or("ignore_merges", false);
  if (n.has("dropout") && !n.at("dropout").j.is_number())
    fail_input("{}: key `{}`: expected a number or null", n.file, n.sub("dropout"));
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    auto it = m->vocab.find(std::string_view(name));
    m->byte_ids[b] = it == m->vocab.end() ? -1 : it->second;
  }
  const Node merges = n.at("merges");
  const json& arr = merges.array();
  m->merges.reserve(arr.size());
  std::string merged;
  for (size_t i = 0; i < arr.size(); ++i) {
    std::string a, b;
    const json& e = arr[i];
    if (e.is_string()) {
      const std::string s = e.get<std::string>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
        fail_input("{}: key `{}[{}]`: expected \"<left> <right>\", found \"{}\"", n.file, merges.path, i, s);
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      a = e[0].get<std::string>();
      b = e[1].get<std::string>();
    } else {
      fail_input("{}: key `{}[{}]`: expected a string or a pair of strings, found {}", n.file, merges.path, i, Node::kind(e));
    }
    auto ia = m->vocab.find(a), ib = m->vocab.find(b);
    if (ia == m->vocab.end() || ib == m->vocab.end())
      fail_input("{}: key `{}[{}]`: merge token \"{}\" is not in the vocab", n.file, merges.path, i,
                 ia == m->vocab.end() ? a : b);
    const size_t pl = m->prefix.size();
    merged = a;
    merged.append(b, std::min(pl, b.size()), std::string::npos);
    auto in = m->vocab.find(merged);
    if (in == m->vocab.end())
      fail_input("{}: key `{}[{}]`: merged token \"{}\" is not in the vocab", n.file, merges.path, i, merged);
    m->merges.set(MergeTable::key(ia->second, ib->second), {static_cast<uint32_t>(i), in->second});
  }
  m->index_bmp();
  return m;
}

}  // namespace trlx::text::pipeline
