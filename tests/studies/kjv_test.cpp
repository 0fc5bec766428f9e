// The KJV replication corpus: the LZW decoder of bible.data's blocks, the container, the preparation rules
// (split by book per testament, whitespace, layout) and its errors, on the synthetic KJV-format sample in
// tests/studies/kjv-sample/ (make-sample.py says how it was made; not the real Bible).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "studies/common/provenance.hpp"
#include "studies/data/corpus.hpp"
#include "studies/data/kjv.hpp"
#include "studies/data/lzw.hpp"
#include "studies/data/sha256.hpp"
#include "tests/studies/data_test_util.hpp"

namespace fs = std::filesystem;
using namespace roundoff::studies::data;
using roundoff::test::expect_error;
using roundoff::test::fresh_dir;
using roundoff::test::read;
using roundoff::test::write;

namespace {

fs::path sample_dir() { return fs::path(roundoff::studies::source_dir()) / "tests" / "studies" / "kjv-sample"; }

/// Codes packed least significant bit first at a fixed width (no width changes: a hand-made stream).
std::string pack(const std::vector<std::uint32_t>& codes, int bits) {
  std::string out;
  std::uint64_t acc = 0;
  int have = 0;
  for (std::uint32_t c : codes) {
    acc |= static_cast<std::uint64_t>(c) << have;
    have += bits;
    while (have >= 8) {
      out += static_cast<char>(acc & 0xff);
      acc >>= 8;
      have -= 8;
    }
  }
  if (have > 0) out += static_cast<char>(acc & 0xff);
  return out;
}

/// A valid 16-bit LZW stream that sends every byte as a literal code, and a clear code after every
/// `clear_every` literals (0: never). The decoder adds a table entry per code after the first, so the width
/// grows at 512, 1024, ... entries; those changes fall on group boundaries here (2^k codes fill whole groups of
/// 8), while a clear code after a count that is not a multiple of 8 is followed by padding to the end of its
/// group, as `compress` writes it. Independent of `compress`.
std::string literal_stream(const std::string& text, std::size_t clear_every = 0) {
  std::string out;
  std::uint64_t pos = 0, start = 0;
  int n = 9;
  std::uint32_t max_code = 511, free_ent = 257;
  auto put = [&](std::uint32_t code) {
    for (int b = 0; b < n; ++b, ++pos) {
      if ((pos >> 3) >= out.size()) out += '\0';
      if ((code >> b) & 1u) out[pos >> 3] = static_cast<char>(out[pos >> 3] | (1 << (pos & 7)));
    }
  };
  auto pad_group = [&] {
    const std::uint64_t group = 8ull * static_cast<std::uint64_t>(n);
    pos = start + (pos - start + group - 1) / group * group;
    start = pos;
    out.resize((pos + 7) >> 3, '\0');
  };
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (free_ent > max_code) {
      pad_group();
      ++n;
      max_code = n == 16 ? 65536u : (1u << n) - 1;
    }
    put(static_cast<unsigned char>(text[i]));
    if (i > 0 && free_ent < 65536u) ++free_ent;
    if (clear_every > 0 && (i + 1) % clear_every == 0 && i + 1 < text.size()) {
      put(256);
      pad_group();
      n = 9;
      max_code = 511;
      free_ent = 256;
    }
  }
  return out;
}

void put_be32(std::string& s, std::uint32_t v) {
  for (int k = 3; k >= 0; --k) s += static_cast<char>((v >> (8 * k)) & 0xff);
}

/// `text` in bible.data's container, blocks of `block` bytes, each a literal_stream.
std::string container(const std::string& text, std::uint32_t block) {
  std::vector<std::string> bodies;
  for (std::size_t i = 0; i < text.size(); i += block) bodies.push_back(literal_stream(text.substr(i, block)));
  std::string f = "EC02Compressed Data File";
  f.resize(0x50, '\0');
  put_be32(f, 0);
  put_be32(f, block);
  put_be32(f, static_cast<std::uint32_t>(bodies.size()));
  std::uint32_t off = 0x5c + 4 * static_cast<std::uint32_t>(bodies.size() + 1) + 3;
  put_be32(f, off);
  for (const auto& b : bodies) put_be32(f, off += static_cast<std::uint32_t>(b.size()));
  f += "\x1f\x9d\x90";
  for (const auto& b : bodies) f += b;
  return f;
}

/// A pin for a test file (KjvPin holds views: the digest is kept here).
KjvPin pin_of(const std::string& file_bytes) {
  static std::string digest;
  digest = sha256_hex(file_bytes);
  return KjvPin{"kjv-sample", "synthetic sample", digest};
}

/// The sample's verse text for book index k, chapter c, verse v (make-sample.py), whitespace-normalised.
std::string verse(const std::string& book, int k, int c, int v) {
  return "And " + book + " spake of chapter " + std::to_string(c) + ", verse " + std::to_string(v) +
         ": behold, the word number " + std::to_string(k * 7 + c * 3 + v) + ".";
}

}  // namespace

TEST(Lzw, HandWorkedStreamWithTheKwKwKCase) {
  // 'A' 'B' 257 259: 257 = "AB" (added after 'B'), 258 = "BA", 259 is being defined as it is used (KwKwK):
  // old "AB" + its first byte 'A' = "ABA". Output A B AB ABA.
  EXPECT_EQ(lzw_decode(pack({65, 66, 257, 259}, 9), 16), "ABABABA");
  // A code beyond the next free entry is corrupt input, and a first code must be a byte.
  expect_error([] { lzw_decode(pack({65, 66, 300}, 9), 16); }, {"lzw", "300", "not defined"});
  expect_error([] { lzw_decode(pack({257}, 9), 16); }, {"lzw", "first code"});
  expect_error([] { lzw_decode("", 17); }, {"max_bits", "9..16"});
}

TEST(Lzw, LiteralStreamsAcrossWidthChangesAndClearCodes) {
  // 70,000 literal codes take the width from 9 to 16 bits and past the full table; with a clear code after
  // every 1,003 literals each clear is followed by padding to its group's end (see literal_stream).
  std::string text;
  for (std::size_t i = 0; i < 70000; ++i) text += static_cast<char>((i * 7919u + i / 13u) & 0xff);
  EXPECT_EQ(lzw_decode(literal_stream(text), 16), text);
  EXPECT_EQ(lzw_decode(literal_stream(text, 1003), 16), text);
}

TEST(Lzw, DecodesCompressOutputWithClearCodes) {
  // lzw-b10.Z: `compress -b10` of sample + 12,000 pseudo-random letters + sample; it holds clear codes and
  // 9/10-bit widths (make-sample.py counted them; gzip -dc decoded it to the same bytes).
  const std::string sample = read(sample_dir() / "sample.txt");
  std::string letters;
  std::uint64_t x = 12345;
  for (int i = 0; i < 12000; ++i) {
    x = (1103515245u * x + 12345u) % (1ull << 31);
    letters += static_cast<char>('a' + (x >> 16) % 26);
  }
  const std::string z = read(sample_dir() / "lzw-b10.Z");
  ASSERT_GT(z.size(), 3u);
  EXPECT_EQ(static_cast<unsigned char>(z[2]), 0x8a);  // block mode, 10 bits
  EXPECT_EQ(lzw_decode(std::string_view(z).substr(3), 10), sample + letters + sample);
}

TEST(Kjv, DecodesTheContainerOfCompressedBlocks) {
  // bible.data of the sample: 10 blocks of 2048 bytes, each compressed by `compress -b16`.
  EXPECT_EQ(decode_bible_data(read(sample_dir() / "bible.data")), read(sample_dir() / "sample.txt"));
  // The same text in literal-code blocks of 777 bytes decodes the same (container independent of compress).
  const std::string text = read(sample_dir() / "sample.txt");
  EXPECT_EQ(decode_bible_data(container(text, 777)), text);
  std::string bad = container(text, 777);
  bad[0x5c + 3] = static_cast<char>(bad[0x5c + 3] + 1);  // first offset off by one
  expect_error([&] { decode_bible_data(bad); }, {"kjv", "offsets", "--corpus kjv"});
  expect_error([] { decode_bible_data("EC01 not a data file"); }, {"kjv", "EC02"});
}

TEST(Kjv, PreparesTheSampleSplitByBookPerTestament) {
  const fs::path data = sample_dir() / "bible.data", out = fresh_dir("kjv_prep") / "kjv";
  const std::string bytes = read(data);
  const nlohmann::json m = prepare_kjv(data, out, pin_of(bytes));
  // Within each testament, books in canonical order i = 0, 1, ...: i % 10 == 0 val, 5 test.
  std::vector<std::string> val, test;
  int verses = 0;
  for (const auto& b : m["files"]) {
    if (b["split"] == "val") val.push_back(b["name"]);
    if (b["split"] == "test") test.push_back(b["name"]);
    verses += b["verses"].get<int>();
  }
  EXPECT_EQ(val, (std::vector<std::string>{"Ge", "1Ki", "Eccl", "Obad", "Mat", "Phi", "1Pet"}));
  EXPECT_EQ(test, (std::vector<std::string>{"Josh", "Neh", "Eze", "Zep", "Rom", "2Tim", "Jude"}));
  EXPECT_EQ(verses, 264);
  EXPECT_EQ(m["splits"]["train"]["files"], 52);
  EXPECT_EQ(m["source"], "kjv-sample");
  // Layout: a chapter is its verses joined by one space plus "\n"; each book is followed by a blank line.
  // Genesis (k 0): 1 chapter of 2 verses; 1 Kings (k 10): chapters 1 (3 verses) and 2 (1 verse).
  const std::string ge = verse("Ge", 0, 1, 1) + " " + verse("Ge", 0, 1, 2) + "\n\n";
  const std::string ki = verse("1Ki", 10, 1, 1) + " " + verse("1Ki", 10, 1, 2) + " " + verse("1Ki", 10, 1, 3) +
                         "\n" + verse("1Ki", 10, 2, 1) + "\n\n";
  const std::string val_text = read(out / "val.txt");
  EXPECT_EQ(val_text.substr(0, ge.size() + ki.size()), ge + ki);
  // Numbers (k 3) 1:1 had a doubled and a trailing space in the sample: normalised to single spaces.
  const std::string train_text = read(out / "train.txt");
  EXPECT_NE(train_text.find(verse("Num", 3, 1, 1) + " " + verse("Num", 3, 1, 2)), std::string::npos);
  for (const auto* t : {&train_text, &val_text}) {
    EXPECT_EQ(t->find("  "), std::string::npos);
    EXPECT_EQ(t->find(" \n"), std::string::npos);
    EXPECT_EQ(t->find("Ge1:1"), std::string::npos);  // references dropped
  }
  // The manifest pins every split, and the loader accepts the directory.
  const Corpus c = load_corpus(out);
  EXPECT_EQ(c.source, "kjv-sample");
  EXPECT_EQ(c.val, val_text);
  EXPECT_EQ(m["splits"]["test"]["sha256"], sha256_hex(c.test));
  EXPECT_EQ(c.train.size() + c.val.size() + c.test.size(), m["splits"]["train"]["bytes"].get<std::size_t>() +
                                                                m["splits"]["val"]["bytes"].get<std::size_t>() +
                                                                m["splits"]["test"]["bytes"].get<std::size_t>());
  fs::remove_all(out.parent_path());
}

TEST(Kjv, RefusesAnythingButThePinnedFileAndMalformedText) {
  const fs::path dir = fresh_dir("kjv_errors");
  // Missing: names the package and the apt-get command.
  expect_error([&] { prepare_kjv(dir / "absent.data", dir / "kjv"); },
               {"absent.data", "not found", "apt-get install bible-kjv-text=4.38", "--corpus kjv"});
  // The sample is not the pinned bible.data of bible-kjv-text 4.38.
  expect_error([&] { prepare_kjv(sample_dir() / "bible.data", dir / "kjv"); },
               {"sha256", std::string(kKjvPin.sha256), "bible-kjv-text 4.38"});
  EXPECT_FALSE(fs::exists(dir / "kjv"));
  // Verses out of order, a missing book, a line that is no verse: each a one-line error naming the line.
  const std::string title = "Holy Bible, Authorized (King James) Version.  Textfile 930105.\n";
  auto try_text = [&](const std::string& text, std::initializer_list<std::string> parts) {
    const std::string f = container(text, 4096);
    write(dir / "t.data", f);
    expect_error([&] { prepare_kjv(dir / "t.data", dir / "kjv", pin_of(f)); }, parts);
    EXPECT_FALSE(fs::exists(dir / "kjv"));
    EXPECT_FALSE(fs::exists(dir / "kjv.tmp"));
  };
  try_text(title + "Ge1:1 In the beginning.\nGe1:3 Skipped a verse.\n", {"line 3", "Ge1:3 follows 1:1"});
  try_text(title + "Ge1:1 In the beginning.\nLev1:1 No Exodus.\n", {"line 3", "'Lev'", "'Exo'"});
  try_text(title + "Ge1:1 In the beginning.\nnot a verse\n", {"line 3", "not a verse"});
  try_text(title + "Ge1:1 In the beginning.\n", {"1 of 66 books"});
  try_text("Some other text\nGe1:1 In the beginning.\n", {"does not start with", "Holy Bible"});
  fs::remove_all(dir);
}

TEST(Kjv, CorpusNamesResolveUnderTheDataRoot) {
  const fs::path root = fresh_dir("kjv_root");
  ::setenv("ROUNDOFF_DATA", root.c_str(), 1);
  EXPECT_EQ(resolve_corpus("kjv"), root / "kjv");
  EXPECT_EQ(resolve_corpus("brown"), root / "brown");
  EXPECT_EQ(resolve_corpus("./kjv"), fs::path("./kjv"));
  // Not prepared: the error names the KJV's own command, not Brown's.
  expect_error([] { load_corpus(std::filesystem::path("kjv")); },
               {"kjv", "does not exist", "./scripts/fetch-corpus --corpus kjv"});
  ::unsetenv("ROUNDOFF_DATA");
  fs::remove_all(root);
}
