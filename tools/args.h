// A small table-driven command-line parser for the fa4 tool.
//
// Each subcommand declares a table of OptSpec rows (name, kind, range or choices, help). parse()
// checks every value against its row as it reads it, so every error names the argument:
//   fa4: --head-dim: expected an integer in [1, 256], got 'abc'
// Errors are thrown as UsageError; main() prints the one line and exits with status 2.
#pragma once

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace fa4cli {

// A bad command line. what() is the whole message without the "fa4: " prefix.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// "--flag: message" as a UsageError.
[[noreturn]] void usage_error(const std::string& flag, const std::string& message);

enum class ArgKind {
  flag,         // no value
  integer,      // int64 in [imin, imax]
  real,         // finite double in [rmin, rmax]
  choice,       // one of `choices` ("a|b|c")
  int_list,     // comma-separated integers, each in [imin, imax]
  choice_list,  // comma-separated values from `choices`
  int_pair,     // "A,B", each in [imin, imax]
  text,         // any non-empty string (a path, ...)
};

struct OptSpec {
  const char* name;       // "--head-dim"
  char short_name;        // 'b' for -b, 0 if none
  ArgKind kind;
  const char* metavar;    // "D", "L,R", ... (ignored for flags)
  const char* help;       // one line; "(default ...)" included by the caller when it matters
  int64_t imin = 0, imax = 0;
  double rmin = 0, rmax = 0;
  const char* choices = nullptr;  // "f32|f16|bf16|e4m3"
};

// The values given on one command line, already checked against their OptSpec.
class ParsedArgs {
 public:
  bool has(const std::string& name) const { return values_.count(name) != 0; }
  bool flag(const std::string& name) const { return has(name); }
  int64_t get_int(const std::string& name, int64_t def) const;
  double get_real(const std::string& name, double def) const;
  std::string get_str(const std::string& name, const std::string& def) const;
  std::vector<int64_t> get_int_list(const std::string& name, const std::vector<int64_t>& def) const;
  std::vector<std::string> get_str_list(const std::string& name, const std::vector<std::string>& def) const;
  std::pair<int64_t, int64_t> get_pair(const std::string& name, std::pair<int64_t, int64_t> def) const;

  std::vector<std::string> positional;  // non-option words, in order
  void set(const std::string& name, const std::string& raw) { values_[name] = raw; }

 private:
  std::map<std::string, std::string> values_;  // validated raw text, last occurrence wins
};

// Parses argv[first..argc) against `table`. "--name value", "--name=value", "-x value" and
// "-xVALUE" are accepted; "--" ends the options. Positional words are allowed only when
// `max_positional` > 0. Throws UsageError.
ParsedArgs parse_args(const std::vector<OptSpec>& table, int argc, char** argv, int first,
                      size_t max_positional = 0);

// The options section of a help text, generated from the table.
std::string format_options(const std::vector<OptSpec>& table);

// Parsing helpers shared with commands that check combinations (they throw UsageError).
int64_t parse_int(const std::string& flag, const std::string& text, int64_t lo, int64_t hi);
double parse_real(const std::string& flag, const std::string& text, double lo, double hi);

}  // namespace fa4cli
