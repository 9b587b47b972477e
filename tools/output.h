// Writing result files (JSON, CSV) for the fa4 tool: checked before the work starts, written
// in one piece after it, so a bad argument never leaves a file behind.
#pragma once

#include <string>
#include <vector>

#include "args.h"

namespace fa4cli {

std::string json_escape(const std::string& s);
// A double as a JSON number ("null" for NaN / inf), `digits` significant digits.
std::string jnum(double v, int digits = 6);
// The command line as one string (for records).
std::string command_line(int argc, char** argv);

// `path` must be writable as a file: not empty, not a directory, an existing file writable, else
// its directory existing and writable; throws UsageError naming `flag` otherwise.
void check_output_path(const std::string& flag, const std::string& path);

// The output files of `flags` ("" for a flag not given), each checked by check_output_path, no
// two naming the same file. Call before any work, so a bad path never costs a run.
std::vector<std::string> output_paths(const ParsedArgs& a, const std::vector<std::string>& flags);

// Writes `content` to `path`; on failure prints "fa4: FLAG: could not write 'PATH'" and
// returns false.
bool write_file(const std::string& flag, const std::string& path, const std::string& content);

}  // namespace fa4cli
