#include "studies/data/bpe.hpp"

#include <algorithm>
#include <queue>
#include <sstream>
#include <stdexcept>

#include "studies/data/sha256.hpp"

namespace roundoff::studies::data {

namespace {

enum class ByteClass { Letter, Digit, Punct, Space, OtherSpace };

ByteClass class_of(char ch) {
  const auto c = static_cast<unsigned char>(ch);
  if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c >= 0x80) return ByteClass::Letter;
  if (c >= '0' && c <= '9') return ByteClass::Digit;
  if (c == ' ') return ByteClass::Space;
  if (c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f') return ByteClass::OtherSpace;
  return ByteClass::Punct;
}

bool is_ws(char c) {
  const ByteClass k = class_of(c);
  return k == ByteClass::Space || k == ByteClass::OtherSpace;
}

std::uint64_t key(Token l, Token r) {
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(l)) << 32) | static_cast<std::uint32_t>(r);
}

/// Replaces every (l, r) in `w`, left to right and non-overlapping, by `id`. Returns whether any was found.
bool merge_in(std::vector<Token>& w, Token l, Token r, Token id) {
  std::size_t out = 0;
  bool found = false;
  for (std::size_t i = 0; i < w.size(); ++i) {
    if (i + 1 < w.size() && w[i] == l && w[i + 1] == r) {
      w[out++] = id;
      ++i;
      found = true;
    } else {
      w[out++] = w[i];
    }
  }
  w.resize(out);
  return found;
}

}  // namespace

std::vector<std::string_view> pretokenise(std::string_view text) {
  std::vector<std::string_view> out;
  const std::size_t n = text.size();
  std::size_t i = 0;
  while (i < n) {
    std::size_t j;
    if (text[i] == ' ' && i + 1 < n && !is_ws(text[i + 1])) {
      const ByteClass k = class_of(text[i + 1]);
      j = i + 2;
      while (j < n && class_of(text[j]) == k) ++j;
    } else if (is_ws(text[i])) {
      j = i + 1;
      while (j < n && is_ws(text[j])) ++j;
      if (j < n && text[j - 1] == ' ' && j - 1 > i) --j;
    } else {
      const ByteClass k = class_of(text[i]);
      j = i + 1;
      while (j < n && class_of(text[j]) == k) ++j;
    }
    out.push_back(text.substr(i, j - i));
    i = j;
  }
  return out;
}

BpeTokenizer BpeTokenizer::train(std::string_view text, std::size_t vocab_size) {
  if (vocab_size < 256 || vocab_size > 65536)
    throw std::invalid_argument("bpe: vocab size " + std::to_string(vocab_size) + " not in [256, 65536]");
  // Unique pieces with their frequencies, in byte order (the order does not affect the result).
  std::unordered_map<std::string_view, std::int64_t> freq_of;
  for (auto p : pretokenise(text)) ++freq_of[p];
  std::vector<std::pair<std::string_view, std::int64_t>> pieces(freq_of.begin(), freq_of.end());
  std::sort(pieces.begin(), pieces.end());
  std::vector<std::vector<Token>> words(pieces.size());
  std::vector<std::int64_t> freq(pieces.size());
  std::unordered_map<std::uint64_t, std::int64_t> pair_count;
  std::unordered_map<std::uint64_t, std::vector<std::uint32_t>> where;
  for (std::size_t w = 0; w < pieces.size(); ++w) {
    for (char c : pieces[w].first) words[w].push_back(static_cast<unsigned char>(c));
    freq[w] = pieces[w].second;
    for (std::size_t i = 0; i + 1 < words[w].size(); ++i) {
      const auto k = key(words[w][i], words[w][i + 1]);
      pair_count[k] += freq[w];
      where[k].push_back(static_cast<std::uint32_t>(w));
    }
  }
  // Candidates (count, key) in a max-heap: highest count first, ties the smallest key. An entry is current
  // while pair_count still holds that count for its key; every count change pushes the new count once per
  // merge, so the first current entry on top is the pair the full scan over pair_count would pick.
  auto lower = [](const std::pair<std::int64_t, std::uint64_t>& a, const std::pair<std::int64_t, std::uint64_t>& b) {
    return a.first < b.first || (a.first == b.first && a.second > b.second);
  };
  std::priority_queue<std::pair<std::int64_t, std::uint64_t>, std::vector<std::pair<std::int64_t, std::uint64_t>>,
                      decltype(lower)>
      heap(lower);
  for (const auto& [k, c] : pair_count) heap.emplace(c, k);
  std::vector<std::uint64_t> touched;
  std::vector<std::pair<Token, Token>> merges;
  std::vector<std::size_t> stamp(words.size(), 0);
  while (256 + merges.size() < vocab_size) {
    std::uint64_t best = 0;
    std::int64_t best_count = 0;
    while (!heap.empty()) {
      const auto [c, k] = heap.top();
      const auto it = pair_count.find(k);
      if (it != pair_count.end() && it->second == c) {
        best = k, best_count = c;
        break;
      }
      heap.pop();
    }
    if (best_count == 0) break;
    touched.clear();
    const auto l = static_cast<Token>(best >> 32), r = static_cast<Token>(best & 0xffffffffu);
    const auto id = static_cast<Token>(256 + merges.size());
    merges.emplace_back(l, r);
    const std::vector<std::uint32_t> list = std::move(where[best]);
    where.erase(best);
    const std::size_t round = merges.size();
    for (std::uint32_t w : list) {
      if (stamp[w] == round) continue;
      stamp[w] = round;
      std::vector<Token> merged = words[w];
      if (!merge_in(merged, l, r, id)) continue;
      for (std::size_t i = 0; i + 1 < words[w].size(); ++i) {
        const auto k = key(words[w][i], words[w][i + 1]);
        if ((pair_count[k] -= freq[w]) == 0) pair_count.erase(k);
        touched.push_back(k);
      }
      for (std::size_t i = 0; i + 1 < merged.size(); ++i) {
        const auto k = key(merged[i], merged[i + 1]);
        pair_count[k] += freq[w];
        touched.push_back(k);
        if (merged[i] == id || merged[i + 1] == id) where[k].push_back(w);
      }
      words[w] = std::move(merged);
    }
    std::sort(touched.begin(), touched.end());
    touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
    for (const std::uint64_t k : touched)
      if (const auto it = pair_count.find(k); it != pair_count.end()) heap.emplace(it->second, k);
  }
  return BpeTokenizer(std::move(merges), sha256_hex(text));
}

BpeTokenizer::BpeTokenizer(std::vector<std::pair<Token, Token>> merges, std::string trained_on_sha256)
    : merges_(std::move(merges)), trained_on_(std::move(trained_on_sha256)) {
  if (merges_.size() > 65536 - 256) throw std::invalid_argument("bpe: more than 65280 merges");
  vocab_.reserve(256 + merges_.size());
  for (int b = 0; b < 256; ++b) vocab_.emplace_back(1, static_cast<char>(b));
  for (std::size_t k = 0; k < merges_.size(); ++k) {
    const auto [l, r] = merges_[k];
    const auto limit = static_cast<Token>(256 + k);
    if (l < 0 || r < 0 || l >= limit || r >= limit)
      throw std::invalid_argument("bpe: merge " + std::to_string(k) + " uses a token id that does not exist yet");
    if (!rank_.emplace(key(l, r), limit).second)
      throw std::invalid_argument("bpe: merge " + std::to_string(k) + " repeats an earlier pair");
    vocab_.push_back(vocab_[static_cast<std::size_t>(l)] + vocab_[static_cast<std::size_t>(r)]);
  }
}

void BpeTokenizer::encode_piece(std::string_view piece, std::vector<Token>& out) const {
  std::vector<Token> w(piece.size());
  for (std::size_t i = 0; i < piece.size(); ++i) w[i] = static_cast<unsigned char>(piece[i]);
  while (w.size() > 1) {
    Token best = -1;
    std::size_t at = 0;
    for (std::size_t i = 0; i + 1 < w.size(); ++i) {
      const auto it = rank_.find(key(w[i], w[i + 1]));
      if (it != rank_.end() && (best < 0 || it->second < best)) best = it->second, at = i;
    }
    if (best < 0) break;
    merge_in(w, w[at], w[at + 1], best);
  }
  out.insert(out.end(), w.begin(), w.end());
}

std::vector<Token> BpeTokenizer::encode(std::string_view text) const {
  std::vector<Token> out;
  out.reserve(text.size() / 2);
  std::unordered_map<std::string_view, std::vector<Token>> cache;
  std::vector<Token> tmp;
  for (auto piece : pretokenise(text)) {
    auto it = cache.find(piece);
    if (it == cache.end()) {
      tmp.clear();
      encode_piece(piece, tmp);
      it = cache.emplace(piece, tmp).first;
    }
    out.insert(out.end(), it->second.begin(), it->second.end());
  }
  return out;
}

std::string_view BpeTokenizer::token_bytes(Token t) const {
  if (t < 0 || static_cast<std::size_t>(t) >= vocab_.size())
    throw std::out_of_range("bpe tokenizer: token id " + std::to_string(t) + " not in [0, " +
                            std::to_string(vocab_.size()) + ")");
  return vocab_[static_cast<std::size_t>(t)];
}

std::unique_ptr<Tokenizer> make_tokenizer(std::string_view spec, std::string_view train_text) {
  if (spec == "bytes") return std::make_unique<ByteTokenizer>();
  const std::string_view prefix = "bpe-";
  if (spec.substr(0, prefix.size()) == prefix && spec.size() > prefix.size() && spec.size() <= prefix.size() + 5 &&
      std::all_of(spec.begin() + static_cast<std::ptrdiff_t>(prefix.size()), spec.end(),
                  [](char c) { return c >= '0' && c <= '9'; })) {
    const std::size_t v = std::stoul(std::string(spec.substr(prefix.size())));
    if (v >= 256 && v <= 65536) return std::make_unique<BpeTokenizer>(BpeTokenizer::train(train_text, v));
  }
  throw std::invalid_argument("unknown tokenizer '" + std::string(spec) +
                              "' (valid: bytes, bpe-<V> with 256 <= V <= 65536, e.g. bpe-512)");
}

std::string BpeTokenizer::serialise() const {
  std::ostringstream s;
  s << "roundoff-tokenizer bpe v1\nvocab_size " << vocab_size() << "\ntrained_on_sha256 "
    << (trained_on_.empty() ? "-" : trained_on_) << "\nmerges " << merges_.size() << "\n";
  for (const auto& [l, r] : merges_) s << l << ' ' << r << '\n';
  return s.str();
}

}  // namespace roundoff::studies::data
