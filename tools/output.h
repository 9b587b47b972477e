// Writing result files (JSON, CSV) for the fa4 tool: checked before the work starts, written
// in one piece after it, so a bad argument never leaves a file behind.
#pragma once

#include <string>

namespace fa4cli {

std::string json_escape(const std::string& s);
// A double as a JSON number ("null" for NaN / inf), `digits` significant digits.
std::string jnum(double v, int digits = 6);
// The command line as one string (for records).
std::string command_line(int argc, char** argv);

// The directory of `path` must exist and be writable (and the file, if it exists); throws
// UsageError naming `flag` otherwise.
void check_output_path(const std::string& flag, const std::string& path);

// Writes `content` to `path`; on failure prints "fa4: FLAG: could not write 'PATH'" and
// returns false.
bool write_file(const std::string& flag, const std::string& path, const std::string& content);

}  // namespace fa4cli
