#include "studies/data/corpus.hpp"

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>

#include "studies/common/provenance.hpp"
#include "studies/data/brown.hpp"
#include "studies/data/children.hpp"
#include "studies/data/kjv.hpp"
#include "studies/data/sha256.hpp"

namespace roundoff::studies::data {

namespace fs = std::filesystem;

namespace {

/// Whether `dir` is where ./scripts/fetch-corpus prepares a corpus (data_root()/brown, /kjv or /children, or a
/// directory of that name) or the committed excerpt; any other directory is the user's own.
bool fetched_location(const fs::path& dir) {
  fs::path name = dir.filename();
  if (name.empty()) name = dir.parent_path().filename();
  std::error_code ec;
  return is_corpus_name(name.string()) || fs::equivalent(dir, excerpt_dir(), ec);
}

[[noreturn]] void fail(const fs::path& dir, const std::string& what) {
  if (fetched_location(dir))
    throw std::runtime_error("data: corpus at " + dir.string() + ": " + what + "; run " + fetch_command_for(dir));
  // A directory of the user's own: ./scripts/fetch-corpus would not prepare it.
  throw std::runtime_error("data: corpus at " + dir.string() + ": " + what +
                           "; a prepared corpus is a directory holding manifest.json and the train/val/test files it "
                           "names, as `roundoff data prepare --out DIR` writes (or give --corpus NAME, one of " +
                           std::string(kCorpusNames) + ")");
}

std::string read_or_fail(const fs::path& dir, const std::string& file) {
  std::ifstream in(dir / file, std::ios::binary);
  if (!in) fail(dir, file + " is missing");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

fs::path data_root() {
  if (const char* root = std::getenv("ROUNDOFF_DATA"); root != nullptr && *root != '\0') return fs::path(root);
  return fs::path(source_dir()) / "data";
}

fs::path default_corpus_dir() { return data_root() / "brown"; }

bool is_corpus_name(std::string_view name) { return name == "brown" || name == "kjv" || name == "children"; }

fs::path resolve_corpus(const std::string& name_or_dir) {
  if (is_corpus_name(name_or_dir)) return data_root() / name_or_dir;
  return fs::path(name_or_dir);
}

std::string fetch_command_for(const fs::path& dir) {
  fs::path name = dir.filename();
  if (name.empty()) name = dir.parent_path().filename();  // "data/kjv/"
  if (name == "kjv") return std::string(kKjvFetchCommand);
  if (name == "children") return std::string(kChildrenFetchCommand);
  return std::string(kFetchCommand);
}

fs::path excerpt_dir() { return fs::path(source_dir()) / "studies" / "data" / "excerpt"; }

Corpus load_prepared(const fs::path& dir) {
  if (!fs::is_directory(dir)) fail(dir, fs::exists(dir) ? "is not a directory" : "directory does not exist");
  Corpus c;
  c.dir = dir;
  try {
    c.manifest = nlohmann::json::parse(read_or_fail(dir, "manifest.json"));
  } catch (const nlohmann::json::exception& e) {
    fail(dir, std::string("manifest.json is not valid JSON (") + e.what() + ")");
  }
  const auto& splits = c.manifest.value("splits", nlohmann::json::object());
  const std::pair<const char*, std::string*> targets[] = {{"train", &c.train}, {"val", &c.val}, {"test", &c.test}};
  for (const auto& [name, target] : targets) {
    if (!splits.contains(name) || !splits[name].contains("sha256") || !splits[name].contains("file"))
      fail(dir, std::string("manifest.json has no entry for split '") + name + "'");
    *target = read_or_fail(dir, splits[name]["file"].get<std::string>());
    const std::string got = sha256_hex(*target);
    if (got != splits[name]["sha256"].get<std::string>())
      fail(dir, splits[name]["file"].get<std::string>() + " has sha256 " + got + " but the manifest records " +
                    splits[name]["sha256"].get<std::string>() + " (corrupt or edited)");
  }
  c.source = c.manifest.value("source", "");
  if (c.source.empty()) fail(dir, "manifest.json names no source");
  return c;
}

Corpus load_corpus(const std::optional<fs::path>& dir) {
  if (dir) return load_prepared(resolve_corpus(dir->string()));
  const fs::path full = default_corpus_dir();
  if (fs::exists(full)) return load_prepared(full);
  std::cerr << "data: full Brown corpus not found at " << full.string() << " (run " << kFetchCommand
            << "); using the committed excerpt " << excerpt_dir().string() << "\n";
  return load_prepared(excerpt_dir());
}

}  // namespace roundoff::studies::data
