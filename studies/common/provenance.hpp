#pragma once
/// \file provenance.hpp
/// Provenance of every written result (git revision, build flags, compiler, time, command line) and atomic
/// file writes (temporary file in the same directory, then rename), so nothing half-written is ever left.
#include <filesystem>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace roundoff::studies {

/// Git revision the binary was configured from ("unknown" outside a checkout).
std::string_view git_revision();
/// Compiler and flags the numerics were built with.
std::string_view build_flags();
/// The source tree the binary was built from (used to find shipped data when run from elsewhere).
std::string_view source_dir();
/// Records the process's whole argument list (main() calls it once); from then on provenance() reports it,
/// each argument shell-quoted when it needs to be, as "command", so a result says exactly how it was made.
void record_command_line(int argc, const char* const* argv);
/// The recorded argument list as one shell-quoted line ("" when none was recorded).
const std::string& recorded_command_line();
/// {"git_revision", "build_flags", "created_utc", "command"}: merge into every JSON sidecar. "command" is the
/// recorded argument list when there is one, else `command` (library callers such as tests).
nlohmann::json provenance(std::string_view command = {});

/// Writes `contents` to `path` atomically (temp file + fsync + rename); creates parent directories.
void write_file_atomic(const std::filesystem::path& path, std::string_view contents);
/// Writes JSON (2-space indent, trailing newline) atomically.
void write_json_atomic(const std::filesystem::path& path, const nlohmann::json& j);

}  // namespace roundoff::studies
