#include "studies/data/tokenizer.hpp"

#include <cmath>
#include <fstream>
#include <numbers>
#include <sstream>
#include <stdexcept>

#include "studies/common/provenance.hpp"
#include "studies/data/bpe.hpp"

namespace roundoff::studies::data {

std::string Tokenizer::decode(std::span<const Token> tokens) const {
  std::string out;
  out.reserve(tokens.size());
  for (Token t : tokens) out += token_bytes(t);
  return out;
}

void Tokenizer::save(const std::filesystem::path& path) const { write_file_atomic(path, serialise()); }

ByteTokenizer::ByteTokenizer() : bytes_(256, '\0') {
  for (int i = 0; i < 256; ++i) bytes_[static_cast<std::size_t>(i)] = static_cast<char>(i);
}

std::vector<Token> ByteTokenizer::encode(std::string_view text) const {
  std::vector<Token> out(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) out[i] = static_cast<unsigned char>(text[i]);
  return out;
}

std::string_view ByteTokenizer::token_bytes(Token t) const {
  if (t < 0 || t >= 256) throw std::out_of_range("byte tokenizer: token id " + std::to_string(t) + " not in [0, 256)");
  return std::string_view(bytes_).substr(static_cast<std::size_t>(t), 1);
}

std::string ByteTokenizer::serialise() const { return "roundoff-tokenizer bytes v1\n"; }

std::unique_ptr<Tokenizer> parse_tokenizer(std::string_view text, const std::string& origin) {
  std::istringstream in{std::string(text)};
  std::string line;
  auto bad = [&](const std::string& what) -> std::runtime_error {
    return std::runtime_error("tokenizer file " + origin + ": " + what +
                              " (expected a file written by roundoff's Tokenizer::save)");
  };
  if (!std::getline(in, line)) throw bad("empty");
  if (line == "roundoff-tokenizer bytes v1") return std::make_unique<ByteTokenizer>();
  if (line != "roundoff-tokenizer bpe v1") throw bad("unknown header '" + line + "'");
  std::string key, sha;
  std::size_t vocab = 0, n = 0;
  if (!(in >> key >> vocab) || key != "vocab_size") throw bad("missing 'vocab_size V'");
  if (!(in >> key >> sha) || key != "trained_on_sha256") throw bad("missing 'trained_on_sha256 H'");
  if (!(in >> key >> n) || key != "merges") throw bad("missing 'merges M'");
  if (vocab != 256 + n) throw bad("vocab_size " + std::to_string(vocab) + " != 256 + merges");
  std::vector<std::pair<Token, Token>> merges(n);
  for (auto& [l, r] : merges)
    if (!(in >> l >> r)) throw bad("truncated merge list");
  if (in >> key) throw bad("trailing text after the merge list");
  try {
    return std::make_unique<BpeTokenizer>(std::move(merges), sha == "-" ? std::string() : sha);
  } catch (const std::invalid_argument& e) {
    throw bad(e.what());
  }
}

std::unique_ptr<Tokenizer> load_tokenizer(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("tokenizer file " + path.string() + ": cannot be read");
  std::ostringstream ss;
  ss << in.rdbuf();
  return parse_tokenizer(ss.str(), path.string());
}

std::size_t byte_count(const Tokenizer& tok, std::span<const Token> tokens) {
  std::size_t n = 0;
  for (Token t : tokens) n += tok.token_bytes(t).size();
  return n;
}

double bytes_per_token(const Tokenizer& tok, std::string_view text) {
  const auto n = tok.encode(text).size();
  if (n == 0) throw std::invalid_argument("bytes_per_token: empty text");
  return static_cast<double>(text.size()) / static_cast<double>(n);
}

double bits_per_byte(double nats_per_token, double bytes_per_tok) {
  return nats_per_token / (std::numbers::ln2 * bytes_per_tok);
}

}  // namespace roundoff::studies::data
