#include "output.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
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
  // Everything that would make the write after the run fail is caught here, before any work:
  // an existing directory (issue 12: `--json somedir` used to run, then exit 3), a parent that
  // is missing or a file, a file or directory without write permission.
  if (path.empty()) usage_error(flag, "expected a file name, got ''");
  struct stat st {};
  if (path.back() == '/' || (stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)))
    usage_error(flag, "cannot write '" + path + "': it is a directory (give a file name)");
  if (stat(path.c_str(), &st) == 0) {
    // An existing file (or device such as /dev/null) is rewritten in place: only it must be writable.
    if (access(path.c_str(), W_OK) != 0) usage_error(flag, "cannot write '" + path + "': the file is not writable");
    return;
  }
  const size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  if (stat(dir.c_str(), &st) != 0)
    usage_error(flag, "cannot write '" + path + "': directory '" + dir + "' does not exist");
  if (!S_ISDIR(st.st_mode)) usage_error(flag, "cannot write '" + path + "': '" + dir + "' is not a directory");
  if (access(dir.c_str(), W_OK | X_OK) != 0)
    usage_error(flag, "cannot write '" + path + "': directory '" + dir + "' is not writable");
}

// The file `path` (checked by check_output_path) names, as one string: the resolved directory
// plus the base name, so that "a.json" and "./a.json" compare equal before either exists.
std::string file_key(const std::string& path) {
  if (char* r = realpath(path.c_str(), nullptr)) {  // the file exists
    std::string k = r;
    std::free(r);
    return k;
  }
  const size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  char* r = realpath(dir.c_str(), nullptr);
  std::string k = (r ? std::string(r) : dir) + "/" + base;
  std::free(r);
  return k;
}

std::vector<std::string> output_paths(const ParsedArgs& a, const std::vector<std::string>& flags) {
  std::vector<std::string> paths, keys;
  for (const std::string& flag : flags) {
    // A flag given with an empty value is an error (not "no file"): the caller asked for output.
    std::string path = a.has(flag) ? a.get_str(flag, "") : "";
    std::string key;
    if (a.has(flag)) {
      check_output_path(flag, path);
      key = file_key(path);
      // Two flags naming one file: the second would overwrite the first after the run.
      for (size_t i = 0; i < keys.size(); ++i)
        if (!keys[i].empty() && keys[i] == key)
          usage_error(flag, "cannot write '" + path + "': the same file as " + flags[i] + " '" + paths[i] + "'");
    }
    paths.push_back(std::move(path));
    keys.push_back(std::move(key));
  }
  return paths;
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
