#pragma once
/// \file corpus.hpp
/// Loading the prepared train / val / test text (see brown.hpp for how it is made). The full corpus lives
/// outside git in the data directory; the committed excerpt (studies/data/excerpt/) is the offline fallback.
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace roundoff::studies::data {

/// The three splits as raw bytes, plus where they came from.
struct Corpus {
  std::string train, val, test;
  std::string source;         ///< "brown-1.9.80" (full prepared corpus) or "excerpt"
  nlohmann::json manifest;    ///< the manifest.json the splits were checked against
  std::filesystem::path dir;  ///< directory the splits were read from
};

/// The data root: $ROUNDOFF_DATA if set, else <source tree>/data (git-ignored).
std::filesystem::path data_root();
/// Where the prepared full Brown corpus lives: data_root()/brown.
std::filesystem::path default_corpus_dir();
/// The prepared corpora known by name: "brown" (docs/data.md), "kjv" (the replication corpus) and "children"
/// (the simple-English corpus, children.hpp).
inline constexpr std::string_view kCorpusNames = "brown, kjv, children";
/// Whether `name` is one of kCorpusNames.
bool is_corpus_name(std::string_view name);
/// A corpus argument (train --corpus, the sweep's grids): a known name ("brown", "kjv", "children") means
/// data_root()/<name>; anything else is a directory path (write ./kjv for a directory named kjv here).
std::filesystem::path resolve_corpus(const std::string& name_or_dir);
/// The command that prepares the corpus in `dir`, named in its errors: ./scripts/fetch-corpus, with
/// --corpus kjv (children) for a directory named kjv (children).
std::string fetch_command_for(const std::filesystem::path& dir);
/// The committed excerpt: <source tree>/studies/data/excerpt.
std::filesystem::path excerpt_dir();

/// Reads train.txt, val.txt, test.txt of `dir` and checks each against the sha256 and size in its
/// manifest.json. Throws std::runtime_error (one line naming the directory, what is wrong and the command
/// ./scripts/fetch-corpus) if the manifest or a split is missing, or a split's hash does not match.
Corpus load_prepared(const std::filesystem::path& dir);

/// With `dir`: load_prepared(resolve_corpus(dir)). Without: the full corpus from default_corpus_dir() if it has
/// been prepared (a present but corrupt one is an error, never silently replaced); if it is absent, the
/// committed excerpt, after one line on stderr saying so and naming ./scripts/fetch-corpus.
Corpus load_corpus(const std::optional<std::filesystem::path>& dir = std::nullopt);

}  // namespace roundoff::studies::data
