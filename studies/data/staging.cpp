#include "studies/data/staging.hpp"

#include <fstream>
#include <sstream>
#include <stdexcept>
#include <system_error>

namespace roundoff::studies::data {

namespace fs = std::filesystem;

StagedDir::StagedDir(const fs::path& out) : out_(out), tmp_(out.string() + ".tmp") {
  fs::create_directories(out.parent_path().empty() ? fs::path(".") : out.parent_path());
  fs::remove_all(tmp_);
  fs::create_directories(tmp_);
}

StagedDir::~StagedDir() {
  std::error_code ec;
  if (!committed_) fs::remove_all(tmp_, ec);
}

void StagedDir::commit() {
  const fs::path old = out_.string() + ".old";
  fs::remove_all(old);
  if (fs::exists(out_)) fs::rename(out_, old);
  fs::rename(tmp_, out_);
  fs::remove_all(old);
  committed_ = true;
}

std::string read_whole_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + p.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace roundoff::studies::data
