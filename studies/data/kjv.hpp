#pragma once
/// \file kjv.hpp
/// Preparation of the King James Bible (Debian package `bible-kjv-text` 4.38, file /usr/lib/bible.data;
/// public domain text) into plain-text train / val / test splits, the replication corpus of the AutoANE-gap
/// study. A pure function of the data file's bytes: the prepared splits and their sha256 are the same on every
/// machine.
///
/// The data file (inferred from the file itself; decoding checked against gzip's LZW decoder):
///  * header: "EC02Compressed Data File", zero padded to byte 0x50; big-endian u32 at 0x54 the block size
///    (65536), at 0x58 the block count n, at 0x5c n + 1 offsets; the 3 bytes before the first offset are a
///    `compress` header 1f 9d <flags> (flags 0x80 block mode | max bits);
///  * block i is the LZW code stream (lzw.hpp) in bytes [offset i, offset i+1); each decodes to block-size
///    bytes except the last. The decoded text is a title line, then one line per verse:
///    `<book><chapter>:<verse> <text>`, e.g. `Ge1:1 In the beginning God created the heaven and the earth.`
///
/// Rules (docs/data.md is the reference text):
///  * the title line is dropped; every other line must be a verse of the 66 books in canonical order
///    (kKjvBooks), chapters from 1 in steps of 1, verses from 1 in steps of 1 within a chapter;
///  * a verse's text is its words (whitespace-separated) joined by one space (the reference is dropped);
///  * layout: a chapter is its verses joined by one space, followed by "\n"; a book is its chapters; a split is
///    its books in canonical order, each followed by one more "\n" (a blank line between books);
///  * split: by book, stratified by testament: within each testament the books in canonical order get
///    i = 0, 1, ...; i % 10 == 0 -> val, i % 10 == 5 -> test, otherwise train (split_of_index, Brown's rule).
#include <array>
#include <filesystem>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace roundoff::studies::data {

/// One book: its abbreviation in bible.data, its name and its testament (true: Old).
struct KjvBook {
  std::string_view abbrev, name;
  bool old_testament;
};
/// The 66 books in canonical order, as bible.data abbreviates them.
extern const std::array<KjvBook, 66> kKjvBooks;

/// What a data file must be: its sha256 and the source name the prepared corpus records. prepare_kjv refuses
/// any other file, so a corpus named "kjv-4.38" comes from exactly the pinned package.
struct KjvPin {
  std::string_view source, package, sha256;
};
inline constexpr std::string_view kKjvPackageName = "bible-kjv-text";
inline constexpr std::string_view kKjvPackageVersion = "4.38";
inline constexpr std::string_view kKjvDataFile = "/usr/lib/bible.data";
inline constexpr KjvPin kKjvPin{"kjv-4.38", "bible-kjv-text 4.38 (Debian bookworm)",
                                "6c746c2acc8a34bfded980883ff1701a5d68934a1c853ebf88a07b978fe0ae0e"};
/// The command that (re)creates the prepared KJV corpus; named in every "missing/corrupt" error.
inline constexpr std::string_view kKjvFetchCommand = "./scripts/fetch-corpus --corpus kjv";

/// Decodes a bible.data container (header, offsets, LZW blocks) into its text. Throws std::runtime_error
/// (one line naming what is malformed) on a bad header, offsets or block.
std::string decode_bible_data(std::string_view file);

/// Prepares the KJV from `data_file` (bible.data) into `out_dir`: train.txt, val.txt, test.txt and
/// manifest.json (split sizes and sha256, per-book split/offset/bytes/chapters/verses, rules, provenance).
/// Refuses a file whose sha256 is not `pin.sha256`. Staged in `<out_dir>.tmp` and renamed into place.
/// Throws std::runtime_error (one line, naming the apt-get command or kKjvFetchCommand) when the file is
/// missing, not the pinned one, or malformed. Returns the manifest.
nlohmann::json prepare_kjv(const std::filesystem::path& data_file, const std::filesystem::path& out_dir,
                           const KjvPin& pin = kKjvPin);

}  // namespace roundoff::studies::data
