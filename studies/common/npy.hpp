#pragma once
/// \file npy.hpp
/// NumPy files at the edge of the CLI: reading a float32/float64 .npy (format versions 1.0-3.0, C order,
/// little endian) and writing an .npz (a zip archive of .npy members, STORED, CRC-32, fixed 1980-01-01
/// timestamps so equal contents give equal bytes). The zip comment names the writer, so a later run can tell
/// an archive it wrote from a user's file (npz_written_by).
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace roundoff::studies {

/// A float array read from an .npy: the values widened to double (exact), the shape, and the file's dtype.
struct NpyArray {
  std::vector<double> values;
  std::vector<std::size_t> shape;
  bool float32 = false;
  std::string dtype;  ///< "float16", "float32" or "float64"
};

/// Reads `path`. Throws std::invalid_argument (one line naming the file, what is wrong and what is valid) for
/// a path that is not a regular file, a file over `max_bytes`, a bad magic/header, Fortran order, a dtype
/// other than '<f4'/'<f8' ('<f2' too when allow_float16), a 0-d array, or a data size that does not match the
/// shape.
NpyArray read_npy(const std::filesystem::path& path, std::uintmax_t max_bytes, bool allow_float16 = false);

/// One .npy member of an .npz: `descr` is a NumPy dtype string ('<f4', '|u1', '<u2'), `data` its
/// little-endian C-order bytes.
struct NpyMember {
  std::string name;  ///< without ".npy"
  std::string descr;
  std::vector<std::size_t> shape;
  std::string data;
};

/// The bytes of an .npy file (format 1.0, header padded to 64 bytes).
std::string npy_bytes(const NpyMember& m);
/// The bytes of an .npz holding `members` (NAME.npy each), with zip comment `comment`.
std::string npz_bytes(const std::vector<NpyMember>& members, std::string_view comment);
/// True when `path` is a regular file ending in a zip end-of-central-directory record whose comment is
/// `comment`.
bool npz_written_by(const std::filesystem::path& path, std::string_view comment);

/// CRC-32 (ISO-HDLC, the zip polynomial 0xEDB88320).
std::uint32_t crc32(std::string_view bytes);

}  // namespace roundoff::studies
