// Plain driver for the fa4 fuzz target (no libFuzzer needed): replays corpus files so the
// regression seeds run in the ordinary CTest suite (and under ASan/UBSan in build-asan), and can
// run a fixed-seed batch of structured random inputs.
//
//   fuzz_replay FILE|DIR...          run every file (directories: their regular files, sorted)
//   fuzz_replay --print FILE...      print each input as a text seed (e.g. to turn a libFuzzer
//                                    crash-* file into a readable corpus entry)
//   fuzz_replay --random N [SEED]    run N pseudo-random inputs (deterministic for a SEED)
//
// A finding aborts with the reproducer printed; a hang is cut off after FA4_FUZZ_INPUT_TIMEOUT
// seconds per input (default 60), naming the file.
#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
std::string fa4fuzz_describe(const uint8_t* data, size_t size);
void fa4fuzz_set_file(const char* f);

namespace {

char g_current[1024];

void on_alarm(int) {
  // Only async-signal-safe calls here.
  const char a[] = "\n==== fa4-fuzz FINDING: input timed out: ";
  ssize_t r = write(2, a, sizeof a - 1);
  r = write(2, g_current, strlen(g_current));
  r = write(2, "\n", 1);
  (void)r;
  _exit(3);
}

bool read_file(const std::string& path, std::vector<uint8_t>* out) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return false;
  out->clear();
  uint8_t buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out->insert(out->end(), buf, buf + n);
  std::fclose(f);
  return true;
}

void collect(const std::string& path, std::vector<std::string>* files) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    std::fprintf(stderr, "fuzz_replay: cannot open %s\n", path.c_str());
    std::exit(2);
  }
  if (!S_ISDIR(st.st_mode)) {
    files->push_back(path);
    return;
  }
  std::vector<std::string> names;
  if (DIR* d = opendir(path.c_str())) {
    while (dirent* e = readdir(d))
      if (e->d_name[0] != '.') names.push_back(e->d_name);
    closedir(d);
  }
  std::sort(names.begin(), names.end());
  for (const std::string& n : names) {
    const std::string p = path + "/" + n;
    if (stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && n != "README.md") files->push_back(p);
  }
}

uint64_t mix(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

int main(int argc, char** argv) {
  const char* t = std::getenv("FA4_FUZZ_INPUT_TIMEOUT");
  const unsigned timeout = t ? static_cast<unsigned>(std::atoi(t)) : 60;
  signal(SIGALRM, on_alarm);
  if (argc >= 3 && std::strcmp(argv[1], "--random") == 0) {
    const long n = std::atol(argv[2]);
    uint64_t seed = argc >= 4 ? std::strtoull(argv[3], nullptr, 0) : 12;
    std::vector<uint8_t> buf;
    for (long i = 0; i < n; ++i) {
      buf.resize(8 + mix(seed) % 120);
      for (auto& b : buf) b = static_cast<uint8_t>(mix(seed));
      std::snprintf(g_current, sizeof g_current, "--random input %ld", i);
      fa4fuzz_set_file(g_current);
      alarm(timeout);
      LLVMFuzzerTestOneInput(buf.data(), buf.size());
      alarm(0);
    }
    std::printf("fuzz_replay: %ld random inputs, no finding\n", n);
    return 0;
  }
  const bool print = argc >= 2 && std::strcmp(argv[1], "--print") == 0;
  std::vector<std::string> files;
  for (int i = print ? 2 : 1; i < argc; ++i) collect(argv[i], &files);
  if (files.empty()) {
    std::fprintf(stderr, "usage: fuzz_replay [--print] FILE|DIR... | --random N [SEED]\n");
    return 2;
  }
  std::vector<uint8_t> data;
  for (const std::string& f : files) {
    if (!read_file(f, &data)) {
      std::fprintf(stderr, "fuzz_replay: cannot read %s\n", f.c_str());
      return 2;
    }
    if (print) {
      std::printf("# %s\n%s\n", f.c_str(), fa4fuzz_describe(data.data(), data.size()).c_str());
      continue;
    }
    std::snprintf(g_current, sizeof g_current, "%s", f.c_str());
    fa4fuzz_set_file(g_current);
    std::fprintf(stderr, "fuzz_replay: %s\n", f.c_str());
    alarm(timeout);
    LLVMFuzzerTestOneInput(data.data(), data.size());
    alarm(0);
  }
  if (!print) std::printf("fuzz_replay: %zu inputs, no finding\n", files.size());
  return 0;
}
