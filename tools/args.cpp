#include "args.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <sstream>

namespace fa4cli {

void usage_error(const std::string& flag, const std::string& message) {
  throw UsageError(flag.empty() ? message : flag + ": " + message);
}

namespace {

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t pos = s.find(sep, start);
    out.push_back(s.substr(start, pos == std::string::npos ? std::string::npos : pos - start));
    if (pos == std::string::npos) break;
    start = pos + 1;
  }
  return out;
}

std::string range_text(int64_t lo, int64_t hi) {
  std::ostringstream s;
  s << "[" << lo << ", " << hi << "]";
  return s.str();
}

std::string choices_text(const char* choices) {
  std::string c = choices ? choices : "";
  std::string out;
  for (const std::string& w : split(c, '|')) out += (out.empty() ? "" : ", ") + w;
  return out;
}

bool is_choice(const char* choices, const std::string& v) {
  for (const std::string& w : split(choices ? choices : "", '|'))
    if (w == v) return true;
  return false;
}

// Checks `raw` against the spec; throws UsageError naming the option.
void validate(const OptSpec& o, const std::string& raw) {
  const std::string name = o.name;
  switch (o.kind) {
    case ArgKind::flag: break;
    case ArgKind::integer: parse_int(name, raw, o.imin, o.imax); break;
    case ArgKind::real: parse_real(name, raw, o.rmin, o.rmax); break;
    case ArgKind::choice:
      if (!is_choice(o.choices, raw))
        usage_error(name, "expected one of " + choices_text(o.choices) + ", got '" + raw + "'");
      break;
    case ArgKind::int_list: {
      if (raw.empty()) usage_error(name, "expected a comma-separated list of integers in " + range_text(o.imin, o.imax) + ", got ''");
      for (const std::string& w : split(raw, ',')) {
        try {
          parse_int(name, w, o.imin, o.imax);
        } catch (const UsageError&) {
          usage_error(name, "expected a comma-separated list of integers in " + range_text(o.imin, o.imax) + ", got '" + raw + "'");
        }
      }
      break;
    }
    case ArgKind::choice_list:
      for (const std::string& w : split(raw, ','))
        if (!is_choice(o.choices, w))
          usage_error(name, "expected a comma-separated list of " + choices_text(o.choices) + ", got '" + raw + "'");
      break;
    case ArgKind::int_pair: {
      const std::vector<std::string> w = split(raw, ',');
      bool ok = w.size() == 2;
      if (ok) {
        try {
          parse_int(name, w[0], o.imin, o.imax);
          parse_int(name, w[1], o.imin, o.imax);
        } catch (const UsageError&) {
          ok = false;
        }
      }
      if (!ok) usage_error(name, std::string("expected ") + o.metavar + " (two integers in " + range_text(o.imin, o.imax) + "), got '" + raw + "'");
      break;
    }
    case ArgKind::text:
      if (raw.empty()) usage_error(name, "expected a non-empty value");
      break;
  }
}

}  // namespace

int64_t parse_int(const std::string& flag, const std::string& text, int64_t lo, int64_t hi) {
  const std::string expected = "expected an integer in " + range_text(lo, hi) + ", got '" + text + "'";
  if (text.empty() || std::isspace(static_cast<unsigned char>(text[0]))) usage_error(flag, expected);
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (errno == ERANGE || end == text.c_str() || *end != '\0' || v < lo || v > hi) usage_error(flag, expected);
  return v;
}

double parse_real(const std::string& flag, const std::string& text, double lo, double hi) {
  std::ostringstream e;
  e << "expected a number in [" << lo << ", " << hi << "], got '" << text << "'";
  if (text.empty() || std::isspace(static_cast<unsigned char>(text[0]))) usage_error(flag, e.str());
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (errno == ERANGE || end == text.c_str() || *end != '\0' || !std::isfinite(v) || v < lo || v > hi)
    usage_error(flag, e.str());
  return v;
}

ParsedArgs parse_args(const std::vector<OptSpec>& table, int argc, char** argv, int first,
                      size_t max_positional) {
  ParsedArgs out;
  bool options_done = false;
  for (int i = first; i < argc; ++i) {
    const std::string a = argv[i];
    if (options_done || a.size() < 2 || a[0] != '-' || (a[1] != '-' && std::isdigit(static_cast<unsigned char>(a[1])))) {
      if (out.positional.size() >= max_positional) usage_error(a, "unexpected argument (see --help)");
      out.positional.push_back(a);
      continue;
    }
    if (a == "--") {
      options_done = true;
      continue;
    }
    const OptSpec* spec = nullptr;
    std::string value;
    bool has_value = false;
    if (a[1] == '-') {
      const size_t eq = a.find('=');
      const std::string name = a.substr(0, eq);
      if (eq != std::string::npos) {
        value = a.substr(eq + 1);
        has_value = true;
      }
      for (const OptSpec& o : table)
        if (name == o.name) spec = &o;
      if (!spec) usage_error(name, "unknown option (see --help)");
    } else {
      for (const OptSpec& o : table)
        if (o.short_name != 0 && a[1] == o.short_name) spec = &o;
      if (!spec) usage_error(a.substr(0, 2), "unknown option (see --help)");
      if (a.size() > 2) {
        value = a.substr(a[2] == '=' ? 3 : 2);
        has_value = true;
      }
    }
    if (spec->kind == ArgKind::flag) {
      if (has_value) usage_error(spec->name, "takes no value, got '" + value + "'");
      out.set(spec->name, "");
      continue;
    }
    if (!has_value) {
      if (i + 1 >= argc) usage_error(spec->name, std::string("missing value (expected ") + spec->metavar + ")");
      value = argv[++i];
    }
    validate(*spec, value);
    out.set(spec->name, value);
  }
  return out;
}

int64_t ParsedArgs::get_int(const std::string& name, int64_t def) const {
  auto it = values_.find(name);
  return it == values_.end() ? def : std::strtoll(it->second.c_str(), nullptr, 10);
}

double ParsedArgs::get_real(const std::string& name, double def) const {
  auto it = values_.find(name);
  return it == values_.end() ? def : std::strtod(it->second.c_str(), nullptr);
}

std::string ParsedArgs::get_str(const std::string& name, const std::string& def) const {
  auto it = values_.find(name);
  return it == values_.end() ? def : it->second;
}

std::vector<int64_t> ParsedArgs::get_int_list(const std::string& name, const std::vector<int64_t>& def) const {
  auto it = values_.find(name);
  if (it == values_.end()) return def;
  std::vector<int64_t> out;
  for (const std::string& w : split(it->second, ',')) out.push_back(std::strtoll(w.c_str(), nullptr, 10));
  return out;
}

std::vector<std::string> ParsedArgs::get_str_list(const std::string& name, const std::vector<std::string>& def) const {
  auto it = values_.find(name);
  return it == values_.end() ? def : split(it->second, ',');
}

std::pair<int64_t, int64_t> ParsedArgs::get_pair(const std::string& name, std::pair<int64_t, int64_t> def) const {
  auto it = values_.find(name);
  if (it == values_.end()) return def;
  const std::vector<std::string> w = split(it->second, ',');
  return {std::strtoll(w[0].c_str(), nullptr, 10), std::strtoll(w[1].c_str(), nullptr, 10)};
}

std::string format_options(const std::vector<OptSpec>& table) {
  std::vector<std::pair<std::string, std::string>> rows;
  size_t width = 0;
  for (const OptSpec& o : table) {
    std::string left = o.short_name ? std::string("-") + o.short_name + ", " : "    ";
    left += o.name;
    if (o.kind != ArgKind::flag) left += std::string(" ") + o.metavar;
    width = std::max(width, left.size());
    rows.push_back({left, o.help});
  }
  std::string out;
  for (const auto& [l, h] : rows) out += "  " + l + std::string(width - l.size() + 2, ' ') + h + "\n";
  return out;
}

}  // namespace fa4cli
