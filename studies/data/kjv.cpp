#include "studies/data/kjv.hpp"

#include <cstdint>
#include <map>
#include <stdexcept>
#include <utility>
#include <vector>

#include "studies/common/provenance.hpp"
#include "studies/data/brown.hpp"
#include "studies/data/lzw.hpp"
#include "studies/data/sha256.hpp"
#include "studies/data/staging.hpp"

namespace roundoff::studies::data {

namespace fs = std::filesystem;

const std::array<KjvBook, 66> kKjvBooks{{
    {"Ge", "Genesis", true},          {"Exo", "Exodus", true},         {"Lev", "Leviticus", true},
    {"Num", "Numbers", true},         {"Deu", "Deuteronomy", true},    {"Josh", "Joshua", true},
    {"Jdgs", "Judges", true},         {"Ruth", "Ruth", true},          {"1Sm", "1 Samuel", true},
    {"2Sm", "2 Samuel", true},        {"1Ki", "1 Kings", true},        {"2Ki", "2 Kings", true},
    {"1Chr", "1 Chronicles", true},   {"2Chr", "2 Chronicles", true},  {"Ezra", "Ezra", true},
    {"Neh", "Nehemiah", true},        {"Est", "Esther", true},         {"Job", "Job", true},
    {"Psa", "Psalms", true},          {"Prv", "Proverbs", true},       {"Eccl", "Ecclesiastes", true},
    {"SSol", "Song of Solomon", true}, {"Isa", "Isaiah", true},        {"Jer", "Jeremiah", true},
    {"Lam", "Lamentations", true},    {"Eze", "Ezekiel", true},        {"Dan", "Daniel", true},
    {"Hos", "Hosea", true},           {"Joel", "Joel", true},          {"Amos", "Amos", true},
    {"Obad", "Obadiah", true},        {"Jonah", "Jonah", true},        {"Mic", "Micah", true},
    {"Nahum", "Nahum", true},         {"Hab", "Habakkuk", true},       {"Zep", "Zephaniah", true},
    {"Hag", "Haggai", true},          {"Zec", "Zechariah", true},      {"Mal", "Malachi", true},
    {"Mat", "Matthew", false},        {"Mark", "Mark", false},         {"Luke", "Luke", false},
    {"John", "John", false},          {"Acts", "Acts", false},         {"Rom", "Romans", false},
    {"1Cor", "1 Corinthians", false}, {"2Cor", "2 Corinthians", false}, {"Gal", "Galatians", false},
    {"Eph", "Ephesians", false},      {"Phi", "Philippians", false},   {"Col", "Colossians", false},
    {"1Th", "1 Thessalonians", false}, {"2Th", "2 Thessalonians", false}, {"1Tim", "1 Timothy", false},
    {"2Tim", "2 Timothy", false},     {"Titus", "Titus", false},       {"Phmn", "Philemon", false},
    {"Heb", "Hebrews", false},        {"Jas", "James", false},         {"1Pet", "1 Peter", false},
    {"2Pet", "2 Peter", false},       {"1Jn", "1 John", false},        {"2Jn", "2 John", false},
    {"3Jn", "3 John", false},         {"Jude", "Jude", false},         {"Rev", "Revelation", false},
}};

namespace {

[[noreturn]] void fail(const std::string& what) {
  throw std::runtime_error("kjv: " + what + "; run " + std::string(kKjvFetchCommand));
}

constexpr std::string_view kMagic = "EC02Compressed Data File";
constexpr std::string_view kTitle = "Holy Bible, Authorized (King James) Version.";

std::uint32_t be32(std::string_view f, std::size_t at) {
  if (at + 4 > f.size()) fail("bible.data is truncated (header ends at byte " + std::to_string(f.size()) + ")");
  std::uint32_t v = 0;
  for (std::size_t i = 0; i < 4; ++i) v = (v << 8) | static_cast<unsigned char>(f[at + i]);
  return v;
}

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

/// "Ge1:1 In the beginning ..." -> book "Ge", chapter 1, verse 1, words joined by one space.
struct Verse {
  std::string_view book;
  int chapter = 0, verse = 0;
  std::string text;
};

bool parse_number(std::string_view s, std::size_t& i, int& out) {
  const std::size_t start = i;
  out = 0;
  while (i < s.size() && is_digit(s[i]) && i - start < 4) out = out * 10 + (s[i++] - '0');
  return i > start && (i == s.size() || !is_digit(s[i]));
}

Verse parse_verse(std::string_view line, std::size_t line_no) {
  auto bad = [&](const std::string& why) {
    fail("line " + std::to_string(line_no) + " of the decoded text is not a verse (" + why + "): '" +
         std::string(line.substr(0, 60)) + "'");
  };
  Verse v;
  std::size_t i = 0;
  if (i < line.size() && line[i] >= '1' && line[i] <= '3') ++i;  // 1Sm, 2Ki, 3Jn
  while (i < line.size() && ((line[i] >= 'A' && line[i] <= 'Z') || (line[i] >= 'a' && line[i] <= 'z'))) ++i;
  v.book = line.substr(0, i);
  if (v.book.empty() || !(v.book.back() >= 'A')) bad("no book abbreviation");
  if (!parse_number(line, i, v.chapter) || i >= line.size() || line[i] != ':') bad("no <chapter>:");
  ++i;
  if (!parse_number(line, i, v.verse)) bad("no verse number");
  if (i >= line.size() || line[i] != ' ') bad("no space after the reference");
  for (; i < line.size();) {
    while (i < line.size() && is_space(line[i])) ++i;
    std::size_t j = i;
    while (j < line.size() && !is_space(line[j])) ++j;
    if (j > i) {
      if (!v.text.empty()) v.text += ' ';
      v.text.append(line.substr(i, j - i));
    }
    i = j;
  }
  if (v.text.empty()) bad("empty verse");
  return v;
}

struct BookText {
  std::string text;
  int chapters = 0, verses = 0;
};

}  // namespace

std::string decode_bible_data(std::string_view f) {
  if (f.substr(0, kMagic.size()) != kMagic) fail("bible.data does not start with '" + std::string(kMagic) + "'");
  const std::uint32_t block_size = be32(f, 0x54), n = be32(f, 0x58);
  if (block_size == 0 || n == 0 || n > 4096)
    fail("bible.data header: block size " + std::to_string(block_size) + ", " + std::to_string(n) + " blocks");
  std::vector<std::uint32_t> offsets(n + 1);
  for (std::uint32_t i = 0; i <= n; ++i) offsets[i] = be32(f, 0x5c + 4 * static_cast<std::size_t>(i));
  const std::size_t header_end = 0x5c + 4 * (static_cast<std::size_t>(n) + 1);
  if (offsets[0] != header_end + 3 || offsets[n] != f.size())
    fail("bible.data offsets: first " + std::to_string(offsets[0]) + " (expected " + std::to_string(header_end + 3) +
         "), last " + std::to_string(offsets[n]) + " (file size " + std::to_string(f.size()) + ")");
  const auto z0 = static_cast<unsigned char>(f[header_end]), z1 = static_cast<unsigned char>(f[header_end + 1]),
             flags = static_cast<unsigned char>(f[header_end + 2]);
  if (z0 != 0x1f || z1 != 0x9d || (flags & 0x80) == 0)
    fail("bible.data: no compress block-mode header (1f 9d 8x) before the first block");
  const int max_bits = flags & 0x1f;
  std::string text;
  for (std::uint32_t i = 0; i < n; ++i) {
    if (offsets[i + 1] < offsets[i]) fail("bible.data offsets decrease at block " + std::to_string(i));
    std::string block;
    try {
      block = lzw_decode(f.substr(offsets[i], offsets[i + 1] - offsets[i]), max_bits);
    } catch (const std::runtime_error& e) {
      fail("bible.data block " + std::to_string(i) + ": " + e.what());
    }
    if (i + 1 < n ? block.size() != block_size : block.size() > block_size || block.empty())
      fail("bible.data block " + std::to_string(i) + " decodes to " + std::to_string(block.size()) +
           " bytes (block size " + std::to_string(block_size) + ")");
    text += block;
  }
  return text;
}

nlohmann::json prepare_kjv(const fs::path& data_file, const fs::path& out_dir, const KjvPin& pin) {
  if (!fs::is_regular_file(data_file))
    throw std::runtime_error("kjv: " + data_file.string() + " not found: install it with `apt-get install " +
                             std::string(kKjvPackageName) + "=" + std::string(kKjvPackageVersion) +
                             "` (as root), then run " + std::string(kKjvFetchCommand));
  std::string raw;
  try {
    raw = read_whole_file(data_file);
  } catch (const std::runtime_error& e) {
    fail(e.what());
  }
  const std::string got = sha256_hex(raw);
  if (got != pin.sha256)
    fail(data_file.string() + " has sha256 " + got + ", expected " + std::string(pin.sha256) + " (" +
         std::string(pin.package) + "; another version or a corrupt file)");
  const std::string text = decode_bible_data(raw);
  for (char c : text)
    if (static_cast<unsigned char>(c) >= 0x80) fail("the decoded text is not ASCII");

  std::vector<BookText> books(kKjvBooks.size());
  std::size_t book = 0, line_no = 0, pos = 0;
  int chapter = 0, verse = 0;
  bool started = false;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    const std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (line_no == 1) {
      if (line.substr(0, kTitle.size()) != kTitle) fail("the decoded text does not start with '" + std::string(kTitle) + "'");
      continue;
    }
    const Verse v = parse_verse(line, line_no);
    if (!started || v.book != kKjvBooks[book].abbrev) {
      const std::size_t next = started ? book + 1 : 0;
      if (next >= kKjvBooks.size() || v.book != kKjvBooks[next].abbrev)
        fail("line " + std::to_string(line_no) + ": book '" + std::string(v.book) + "' where '" +
             (next < kKjvBooks.size() ? std::string(kKjvBooks[next].abbrev) : std::string("end of text")) +
             "' was expected (books in canonical order)");
      book = next;
      started = true;
      chapter = 0;
    }
    BookText& b = books[book];
    if (v.chapter == chapter + 1 && v.verse == 1) {
      if (chapter > 0) b.text += '\n';
      ++chapter;
      ++b.chapters;
      verse = 1;
    } else if (v.chapter == chapter && v.verse == verse + 1) {
      b.text += ' ';
      ++verse;
    } else {
      fail("line " + std::to_string(line_no) + ": " + std::string(v.book) + std::to_string(v.chapter) + ":" +
           std::to_string(v.verse) + " follows " + std::to_string(chapter) + ":" + std::to_string(verse) +
           " (chapters and verses must count up from 1)");
    }
    b.text += v.text;
    ++b.verses;
  }
  if (!started || book + 1 != kKjvBooks.size())
    fail("the decoded text ends after " + std::to_string(started ? book + 1 : 0) + " of 66 books");
  for (auto& b : books) b.text += '\n';

  nlohmann::json manifest;
  manifest["source"] = pin.source;
  manifest["package"] = pin.package;
  manifest["data_file_sha256"] = pin.sha256;
  manifest["licence"] =
      "King James Version (1611), public domain (copyright expired). Debian's bible-kjv-text: 'This file is "
      "provided for unrestricted use provided that this legend is included on all tape media and as a part of the "
      "software program in whole or part. Users may copy, modify or distribute this file at will.' -- Chip "
      "Chapin, Bible Retrieval System, 1989";
  manifest["preparation"] =
      "bible.data decoded (EC02 container, LZW blocks); title line dropped; per verse the reference dropped and "
      "the words joined by one space; a chapter is its verses joined by one space plus a newline; a book is its "
      "chapters; a split is its books in canonical order, each followed by a blank line (docs/data.md)";
  manifest["split_rule"] =
      "by book, per testament in canonical order: i % 10 == 0 val, i % 10 == 5 test, else train";
  manifest["provenance"] = provenance("prepare_kjv");
  std::map<Split, std::string> split_text;
  std::map<Split, std::size_t> count;
  nlohmann::json listing = nlohmann::json::array();
  std::size_t index_in_testament = 0;
  for (std::size_t k = 0; k < kKjvBooks.size(); ++k) {
    if (k > 0 && kKjvBooks[k].old_testament != kKjvBooks[k - 1].old_testament) index_in_testament = 0;
    const Split s = split_of_index(index_in_testament++);
    std::string& t = split_text[s];
    listing.push_back({{"name", kKjvBooks[k].abbrev},
                       {"title", kKjvBooks[k].name},
                       {"testament", kKjvBooks[k].old_testament ? "old" : "new"},
                       {"split", name_of(s)},
                       {"offset", t.size()},
                       {"bytes", books[k].text.size()},
                       {"chapters", books[k].chapters},
                       {"verses", books[k].verses}});
    t += books[k].text;
    t += '\n';
    ++count[s];
  }
  manifest["files"] = listing;
  return write_split_corpus(out_dir, std::move(manifest), split_text, count);
}

}  // namespace roundoff::studies::data
