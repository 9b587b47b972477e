#include "output.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>

#include "args.h"

namespace fa4cli {

std::string json_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '"': o += "\\\""; break;
      case '\\': o += "\\\\"; break;
      case '\n': o += "\\n"; break;
      case '\t': o += "\\t"; break;
      case '\r': o += "\\r"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char b[8];
          std::snprintf(b, sizeof b, "\\u%04x", static_cast<unsigned>(c));
          o += b;
        } else {
          o += c;
        }
    }
  }
  return o;
}

std::string jnum(double v, int digits) {
  if (!std::isfinite(v)) return "null";
  char b[40];
  std::snprintf(b, sizeof b, "%.*g", digits, v);
  return b;
}

std::string command_line(int argc, char** argv) {
  std::string s;
  for (int i = 0; i < argc; ++i) {
    if (i) s += ' ';
    s += argv[i];
  }
  return s;
}

void check_output_path(const std::string& flag, const std::string& path) {
  const size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  if (access(dir.c_str(), W_OK) != 0)
    usage_error(flag, "cannot write '" + path + "': directory '" + dir + "' is missing or not writable");
  if (access(path.c_str(), F_OK) == 0 && access(path.c_str(), W_OK) != 0)
    usage_error(flag, "cannot write '" + path + "': the file is not writable");
}

bool write_file(const std::string& flag, const std::string& path, const std::string& content) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << content;
  f.close();
  if (!f) {
    std::fprintf(stderr, "fa4: %s: could not write '%s'\n", flag.c_str(), path.c_str());
    return false;
  }
  return true;
}

}  // namespace fa4cli
