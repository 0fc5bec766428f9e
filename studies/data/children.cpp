#include "studies/data/children.hpp"

#include <algorithm>
#include <map>
#include <stdexcept>
#include <utility>

#include "studies/common/provenance.hpp"
#include "studies/data/brown.hpp"
#include "studies/data/sha256.hpp"
#include "studies/data/staging.hpp"

namespace roundoff::studies::data {

namespace fs = std::filesystem;

namespace {

[[noreturn]] void fail(const std::string& what) {
  throw std::runtime_error("children: " + what + "; run " + std::string(kChildrenFetchCommand));
}

/// Whitespace within a line ('\r' is removed before lines are split).
bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\v' || c == '\f'; }
bool is_letter(char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'); }

/// The words of `lines` (the paragraph's lines joined by '\n', '_' removed) joined by one space.
std::string join_words(const std::string& lines) {
  std::string out;
  std::size_t i = 0;
  while (i < lines.size()) {
    while (i < lines.size() && (is_blank(lines[i]) || lines[i] == '\n')) ++i;
    std::size_t j = i;
    while (j < lines.size() && !is_blank(lines[j]) && lines[j] != '\n') ++j;
    if (j > i) {
      if (!out.empty()) out += ' ';
      out.append(lines, i, j - i);
    }
    i = j;
  }
  return out;
}

struct Section {
  std::string text;
  std::size_t paragraphs = 0;
};

}  // namespace

std::vector<std::string> children_paragraphs(std::string_view file, std::string_view name) {
  std::string text;
  text.reserve(file.size());
  for (std::size_t k = 0; k < file.size(); ++k) {
    const auto c = static_cast<unsigned char>(file[k]);
    if (c >= 0x80)
      fail(std::string(name) + " is not ASCII (byte 0x" + "0123456789abcdef"[c >> 4] + "0123456789abcdef"[c & 15] +
           " at offset " + std::to_string(k) + ")");
    if (c != '\r' && c != '_') text += static_cast<char>(c);
  }
  // The first line is NLTK's title line "[Title by Author Year]" (its '_', if any, already gone).
  const std::size_t first_end = std::min(text.find('\n'), text.size());
  std::string_view first(text.data(), first_end);
  while (!first.empty() && is_blank(first.back())) first.remove_suffix(1);
  if (first.empty() || first.front() != '[' || first.back() != ']')
    fail(std::string(name) + " does not start with a '[Title by Author]' line (got '" +
         std::string(first.substr(0, 60)) + "')");

  std::vector<std::string> paragraphs;
  std::string lines;  // the current paragraph's lines, '\n'-separated
  auto close = [&] {
    std::string p = join_words(lines);
    lines.clear();
    bool has_letter = false;
    for (char c : p) has_letter = has_letter || is_letter(c);
    if (has_letter) paragraphs.push_back(std::move(p));
  };
  std::size_t pos = first_end + 1;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    const std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    bool blank = true;
    for (char c : line) blank = blank && is_blank(c);
    if (blank) {
      if (!lines.empty()) close();
    } else {
      if (!lines.empty()) lines += '\n';
      lines.append(line);
    }
  }
  if (!lines.empty()) close();
  return paragraphs;
}

nlohmann::json prepare_children(const fs::path& package_dir, const fs::path& out_dir, const ChildrenPin& pin) {
  std::vector<std::vector<Section>> books;
  for (const ChildrenBook& b : pin.books) {
    const fs::path file = package_dir / "gutenberg" / (std::string(b.file) + ".txt");
    if (!fs::is_regular_file(file))
      fail(file.string() + " not found (give --package the extracted " + std::string(kChildrenPackage) +
           " package directory, which holds gutenberg/)");
    std::string raw;
    try {
      raw = read_whole_file(file);
    } catch (const std::runtime_error& e) {
      fail(e.what());
    }
    const std::string got = sha256_hex(raw);
    if (got != b.sha256)
      fail(file.string() + " has sha256 " + got + ", expected " + std::string(b.sha256) + " (" +
           std::string(pin.package) + "; another version or a corrupt file)");
    std::vector<Section> sections(1);
    for (const std::string& p : children_paragraphs(raw, std::string(b.file) + ".txt")) {
      if (sections.back().text.size() >= kChildrenSectionBytes) sections.emplace_back();
      sections.back().text += p;
      sections.back().text += '\n';
      ++sections.back().paragraphs;
    }
    if (sections.back().text.empty()) fail(file.string() + " has no paragraph");
    books.push_back(std::move(sections));
  }

  nlohmann::json manifest;
  manifest["source"] = pin.source;
  manifest["package"] = pin.package;
  manifest["integrity"] = pin.integrity;
  manifest["licence"] =
      "The four books are public domain (Project Gutenberg etexts; the package's LICENSE.md: 'This eBook is for "
      "the use of anyone anywhere at no cost and with almost no restrictions whatsoever. You may copy it, give it "
      "away or re-use it under the terms of the Project Gutenberg License'; package.json licence CC0; the "
      "package's code MIT, Richard Littauer 2014). Selection and title lines: NLTK's gutenberg corpus";
  manifest["preparation"] =
      "per book file: ASCII required, '\\r' removed, the '[Title by Author]' first line dropped; a paragraph is a "
      "maximal run of non-blank lines, '_' removed, words joined by one space, dropped if it has no letter; a "
      "book's paragraphs, each plus a newline, cut into sections that end at the paragraph reaching 8192 bytes; a "
      "split is its sections in book order, each followed by a blank line (docs/data.md)";
  manifest["split_rule"] = "by section, per book in order: i % 10 == 0 val, i % 10 == 5 test, else train";
  manifest["provenance"] = provenance("prepare_children");
  nlohmann::json book_list = nlohmann::json::array();
  for (const ChildrenBook& b : pin.books)
    book_list.push_back({{"file", std::string(b.file) + ".txt"},
                         {"title", b.title},
                         {"author", b.author},
                         {"year", b.year},
                         {"sha256", b.sha256}});
  manifest["books"] = book_list;

  std::map<Split, std::string> split_text;
  std::map<Split, std::size_t> count;
  nlohmann::json listing = nlohmann::json::array();
  for (std::size_t k = 0; k < books.size(); ++k) {
    for (std::size_t i = 0; i < books[k].size(); ++i) {
      const Split s = split_of_index(i);
      std::string& t = split_text[s];
      std::string index = std::to_string(i);
      index.insert(0, index.size() < 3 ? 3 - index.size() : 0, '0');  // 000, 001, ...
      listing.push_back({{"name", std::string(pin.books[k].file) + "/" + index},
                         {"book", pin.books[k].file},
                         {"split", name_of(s)},
                         {"offset", t.size()},
                         {"bytes", books[k][i].text.size()},
                         {"paragraphs", books[k][i].paragraphs}});
      t += books[k][i].text;
      t += '\n';
      ++count[s];
    }
  }
  manifest["files"] = listing;
  return write_split_corpus(out_dir, std::move(manifest), split_text, count);
}

}  // namespace roundoff::studies::data
