// `roundoff tensorcore-fit`: which Accumulation model reproduces a GPU's matrix-multiply-accumulate bit for bit
// (probe dumps from studies/tensorcore/mma_probe.cu; docs/studies/tensorcore.md).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "numerics/accumulate.hpp"
#include "numerics/rounding.hpp"
#include "studies/cli/commands.hpp"
#include "studies/common/provenance.hpp"
#include "studies/tensorcore/tc_fit.hpp"

namespace roundoff::cli {

namespace {

struct Options {
  std::vector<std::string> dumps;
  std::vector<std::string> models;
  std::uint32_t screen = 256;
  std::string out;
  std::uint32_t trim = 0;
  std::size_t show = 1;
  std::string trim_dir;
  std::vector<std::string> gpus;     // peer sets: only these GPUs
  std::vector<std::string> outputs;  // peer sets: only these outputs (fp32, fp16)
};

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char ch : s) q += ch == '"' ? std::string("\"\"") : std::string(1, ch);
  return q + "\"";
}

std::string magic_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[8] = {};
  in.read(magic, 8);
  return in ? std::string(magic, 8) : std::string();
}

/// "SPEC[ c-last ROUNDING][ then ROUNDING]": the accumulation, C added after the products (rounded so), and a
/// final rounding to the output format.
tensorcore::Model parse_model(const std::string& text) {
  if (text == "fp8-mma-sync-sm90") return tensorcore::fp8_mma_sync_sm90_model(32);
  if (text.starts_with("k-pairs ")) {  // the products in sm_90's fp8 mma.sync order (K 32), C first
    tensorcore::Model m = parse_model(text.substr(8));
    m.k_order = tensorcore::fp8_mma_sync_sm90_model(32).k_order;
    return m;
  }
  tensorcore::Model m;
  const auto then = text.find(" then ");
  const auto last = text.find(" c-last ");
  try {
    m.acc = numerics::parse_accumulation(text.substr(0, std::min(then, last)));
    if (last != std::string::npos)
      m.c_last = numerics::parse_rounding(text.substr(last + 8, then == std::string::npos || then < last
                                                                     ? std::string::npos
                                                                     : then - last - 8));
    if (then != std::string::npos)
      m.output = numerics::parse_rounding(text.substr(then + 6, last != std::string::npos && last > then
                                                                    ? last - then - 6
                                                                    : std::string::npos));
  } catch (const std::invalid_argument& e) {
    throw CliError("--model '" + text + "': " + e.what());
  }
  return m;
}

void print_score(const tensorcore::Model& m, const tensorcore::FitScore& s) {
  std::printf("  %-90s %lld of %lld wrong\n", m.text().c_str(), static_cast<long long>(s.mismatches),
              static_cast<long long>(s.outputs));
  for (const std::string& e : s.examples) std::printf("    %s\n", e.c_str());
}

/// A peer operand set (studies/tensorcore/peer_to_bin.py): every GPU and output it holds (or those --gpu and
/// --output name), scored line by line against --model or the candidate grid (screened on the first --screen
/// lines, the survivors on all).
void run_peer(const Options& o, const std::string& path, std::ostringstream& csv, nlohmann::json& side) {
  tensorcore::PeerSet set;
  try {
    set = tensorcore::read_peer(path);
  } catch (const std::exception& e) {
    throw CliError(e.what());
  }
  const std::string fmt = tensorcore::peer_format_name(set.in);
  for (const std::string& g : o.gpus)
    if (std::none_of(set.gpus.begin(), set.gpus.end(), [&](const auto& p) { return p.name == g; })) {
      std::string have;
      for (const auto& p : set.gpus) have += (have.empty() ? "" : ", ") + p.name;
      throw CliError("--gpu " + g + ": " + path + " holds " + have);
    }
  side["dumps"].push_back({{"path", path}, {"format", fmt}, {"k", set.k}, {"lines", set.lines}});
  for (const tensorcore::PeerGpu& gpu : set.gpus) {
    if (!o.gpus.empty() && std::find(o.gpus.begin(), o.gpus.end(), gpu.name) == o.gpus.end()) continue;
    for (const auto& [out, field, d] : {std::tuple{"fp32", tensorcore::kFp32, &gpu.d32},
                                         std::tuple{"fp16", tensorcore::kFp16, &gpu.d16}}) {
      if (d->empty()) continue;
      if (!o.outputs.empty() && std::find(o.outputs.begin(), o.outputs.end(), out) == o.outputs.end()) continue;
      const std::string name = gpu.name + " " + fmt + "->" + out + " (K " + std::to_string(set.k) + ")";
      std::vector<tensorcore::Model> finals;
      if (!o.models.empty()) {
        for (const auto& t : o.models) finals.push_back(parse_model(t));
      } else {
        const std::vector<tensorcore::Model> cands = tensorcore::candidate_models(set.in, field, set.k);
        const std::uint32_t head = std::min(o.screen, set.lines);  // the screen: the first --screen lines
        std::vector<std::pair<std::int64_t, std::size_t>> screened;
        for (std::size_t i = 0; i < cands.size(); ++i)
          screened.emplace_back(tensorcore::score(set, gpu, field, cands[i], 0, head).mismatches, i);
        std::stable_sort(screened.begin(), screened.end());
        std::printf("%s: %zu candidate models screened on %u lines; %lld reproduce all of them\n", name.c_str(),
                    cands.size(), head,
                    static_cast<long long>(std::count_if(screened.begin(), screened.end(),
                                                         [](const auto& p) { return p.first == 0; })));
        for (std::size_t r = 0; r < screened.size(); ++r)
          if (screened[r].first == 0 || r < 3) finals.push_back(cands[screened[r].second]);
      }
      if (!o.models.empty()) std::printf("%s: %u lines\n", name.c_str(), set.lines);
      for (const tensorcore::Model& m : finals) {
        const tensorcore::FitScore s = tensorcore::score(set, gpu, field, m, o.show);
        print_score(m, s);
        csv << csv_field(name) << ',' << csv_field(m.text()) << ',' << set.lines << ',' << s.outputs << ','
            << s.mismatches;
        for (int c = 0; c < 8; ++c) csv << ',';
        csv << ',' << csv_field(s.examples.empty() ? std::string() : s.examples.front()) << '\n';
      }
    }
  }
}

void run(const Options& o) {
  std::ostringstream csv;
  csv << "shape,model,tiles,outputs,mismatches";
  for (int c = 0; c < 8; ++c) csv << ",mismatches_" << tensorcore::class_name(c);
  csv << ",first_mismatch\n";
  nlohmann::json side = studies::provenance();
  side["dumps"] = nlohmann::json::array();
  for (const std::string& path : o.dumps) {
    if (magic_of(path) == "RTCPEER1") {
      run_peer(o, path, csv, side);
      continue;
    }
    if (magic_of(path) == "RTCWGMMA") {
      if (o.models.empty()) throw CliError(path + " is a wgmma dump: name the models to score with --model");
      tensorcore::WgmmaDump w;
      try {
        w = tensorcore::read_wgmma(path);
      } catch (const std::exception& e) {
        throw CliError(e.what());
      }
      std::printf("%s: wgmma, K %d, %u tiles\n", path.c_str(), w.k, w.tiles);
      for (const auto& t : o.models) {
        const tensorcore::Model m = parse_model(t);
        const tensorcore::FitScore s = tensorcore::score(w, m, o.show);
        std::printf("  %-90s %lld of %lld wrong\n", m.text().c_str(), static_cast<long long>(s.mismatches),
                    static_cast<long long>(s.outputs));
        for (const std::string& e : s.examples) std::printf("    %s\n", e.c_str());
      }
      continue;
    }
    tensorcore::ProbeDump dump;
    try {
      dump = tensorcore::read_probe(path);
      tensorcore::check_operands(dump);
    } catch (const std::exception& e) {
      throw CliError(e.what());
    }
    const tensorcore::Geometry g = tensorcore::geometry(dump.shape);
    side["dumps"].push_back({{"path", path}, {"shape", g.name}, {"tiles", dump.tiles}, {"seed", dump.seed}});
    if (o.trim > 0) {
      if (o.trim > dump.tiles) throw CliError("--trim " + std::to_string(o.trim) + ": " + path + " holds only " +
                                              std::to_string(dump.tiles) + " tiles");
      std::filesystem::create_directories(o.trim_dir);
      const std::string to = o.trim_dir + "/tc-" + g.name + ".bin";
      std::error_code ec;
      for (const std::string& source : o.dumps)
        if (std::filesystem::equivalent(to, source, ec))
          throw CliError("--trim-dir " + o.trim_dir + ": the trimmed dump " + to + " would overwrite the source dump " +
                         source + "; choose a --trim-dir that holds none of the dumps");
      tensorcore::write_probe(to, dump, o.trim);
      std::printf("%s: first %u tiles written to %s\n", g.name, o.trim, to.c_str());
      continue;
    }
    std::vector<tensorcore::Model> finals;
    if (!o.models.empty()) {
      for (const auto& t : o.models) finals.push_back(parse_model(t));
    } else {
      const std::vector<tensorcore::Model> cands = tensorcore::candidate_models(dump.shape);
      std::vector<std::pair<std::int64_t, std::size_t>> screened;
      for (std::size_t i = 0; i < cands.size(); ++i)
        screened.emplace_back(tensorcore::score(dump, cands[i], o.screen).mismatches, i);
      std::stable_sort(screened.begin(), screened.end());
      std::printf("%s: %zu candidate models screened on %u tiles; %lld reproduce all of them\n", g.name, cands.size(),
                  std::min(o.screen, dump.tiles),
                  static_cast<long long>(std::count_if(screened.begin(), screened.end(),
                                                       [](const auto& p) { return p.first == 0; })));
      for (std::size_t r = 0; r < screened.size(); ++r)
        if (screened[r].first == 0 || r < 3) finals.push_back(cands[screened[r].second]);
    }
    for (const tensorcore::Model& m : finals) {
      const tensorcore::FitScore s = tensorcore::score(dump, m, 0, o.show);
      std::printf("  %-90s %lld of %lld wrong", m.text().c_str(), static_cast<long long>(s.mismatches),
                  static_cast<long long>(s.outputs));
      if (s.mismatches > 0) {
        std::printf(" [");
        for (int c = 0; c < 8; ++c)
          if (s.class_mismatches[static_cast<std::size_t>(c)] > 0)
            std::printf(" %s %lld", tensorcore::class_name(c),
                        static_cast<long long>(s.class_mismatches[static_cast<std::size_t>(c)]));
        std::printf(" ]");
        for (const std::string& e : s.examples) std::printf("\n    %s", e.c_str());
      }
      std::printf("\n");
      csv << g.name << ',' << csv_field(m.text()) << ',' << dump.tiles << ',' << s.outputs << ',' << s.mismatches;
      for (auto n : s.class_mismatches) csv << ',' << n;
      csv << ',' << csv_field(s.examples.empty() ? std::string() : s.examples.front()) << '\n';
    }
  }
  if (!o.out.empty() && o.trim == 0) {
    studies::write_file_atomic(std::filesystem::path(o.out) / "fit.csv", csv.str());
    studies::write_json_atomic(std::filesystem::path(o.out) / "fit.json", side);
    std::printf("wrote %s/fit.csv and fit.json\n", o.out.c_str());
  }
}

}  // namespace

void add_tensorcore_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "tensorcore-fit",
      "Which Accumulation model reproduces a GPU's mma output bits: regenerates each probe dump's operands, "
      "screens the candidate models (multi-term adders: group, extra bits, alignment and normalisation rounding, "
      "carry bits) on the first tiles, then scores the survivors on every tile.");
  static Options o;
  cmd->add_option("dumps", o.dumps,
                  "Probe dumps: tc-<shape>.bin from studies/tensorcore/mma_probe.cu, wgmma dumps from "
                  "studies/tensorcore/wgmma_to_bin.py (these need --model), or peer operand sets of measured bits "
                  "from studies/tensorcore/peer_to_bin.py (tests/fixtures/tensorcore-peer/*.bin)")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--model", o.models,
                  "Score only these models: an accumulation spec (see `roundoff dot --help`), optionally followed "
                  "by ' then ROUNDING' for a final rounding to the accumulator format");
  cmd->add_option("--gpu", o.gpus, "Peer operand sets: score only these GPUs (e.g. A100)");
  cmd->add_option("--output", o.outputs, "Peer operand sets: score only these outputs")
      ->check(CLI::IsMember({"fp32", "fp16"}));
  cmd->add_option("--screen", o.screen, "Tiles (peer sets: lines) to screen the candidates on (default 256)")
      ->check(CLI::Range(1, 1 << 30));
  cmd->add_option("--show", o.show, "Mismatches to describe per model (default 1)");
  cmd->add_option("--out", o.out, "Directory for fit.csv and fit.json (provenance)");
  cmd->add_option("--trim", o.trim, "Instead of fitting, write each dump's first N tiles to --trim-dir")
      ->check(CLI::Range(1, 1 << 30));
  cmd->add_option("--trim-dir", o.trim_dir,
                  "Directory for --trim (refused when a trimmed dump tc-<shape>.bin would replace one of the dumps "
                  "read)");
  cmd->footer(
      "Examples:\n  roundoff tensorcore-fit out/tc/tc-f16-f32.bin --out out/tc-fit\n"
      "  roundoff tensorcore-fit tc-f16-f32.bin --model 'acc=fp32:nearest-even,order=seq,fused,group=16,extra=3'\n"
      "  roundoff tensorcore-fit tests/fixtures/tensorcore-peer/fp16-k8.bin --gpu A100 --output fp32 --model tc-a100");
  cmd->callback([] {
    if (o.trim > 0 && o.trim_dir.empty()) throw CliError("--trim needs --trim-dir");
    for (const std::string& path : o.dumps) {  // a FIFO or device would block the reader (or never end)
      std::error_code ec;
      const auto type = std::filesystem::status(path, ec).type();
      if (type != std::filesystem::file_type::regular)
        throw CliError(path + " is not a regular file (a probe dump or wgmma dump file is needed)");
    }
    run(o);
  });
}

}  // namespace roundoff::cli
