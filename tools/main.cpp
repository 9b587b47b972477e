// fa4: the command-line tool. Dispatches to the subcommands (commands.h).
#include <cstdio>
#include <cstring>
#include <new>
#include <string>

#include "args.h"
#include "commands.h"

namespace {

const char* kMainHelp =
    "usage: fa4 <command> [options]\n"
    "\n"
    "fa4 computes exact attention, forward pass: O = softmax(scale * Q K^T + mask) V.\n"
    "\n"
    "commands:\n"
    "  run     one attention call on random inputs: time, FLOP rate, error vs reference\n"
    "  bench   a sweep of shapes (CPU-scale prefill by default): table, JSON, CSV\n"
    "  info    version, backends and their availability, CPU features, threads\n"
    "  help    fa4 help <command> prints that command's options\n"
    "\n"
    "options:\n"
    "  -h, --help     this help\n"
    "  -V, --version  the fa4 version\n"
    "\n"
    "exit status: 0 ok, 1 --check failed, 2 bad arguments, 3 library error\n";

int help_for(const std::string& cmd) {
  if (cmd == "run") std::fputs(fa4cli::run_help().c_str(), stdout);
  else if (cmd == "bench") std::fputs(fa4cli::bench_help().c_str(), stdout);
  else if (cmd == "info") std::fputs(fa4cli::info_help().c_str(), stdout);
  else if (cmd == "help") std::fputs(kMainHelp, stdout);
  else fa4cli::usage_error(cmd, "unknown command (expected run, bench, info or help)");
  return fa4cli::kExitOk;
}

int dispatch(int argc, char** argv) {
  if (argc < 2) fa4cli::usage_error("", "missing command (run, bench, info, help); see fa4 --help");
  const std::string cmd = argv[1];
  if (cmd == "-h" || cmd == "--help") {
    std::fputs(kMainHelp, stdout);
    return fa4cli::kExitOk;
  }
  if (cmd == "-V" || cmd == "--version" || cmd == "version") {
    std::printf("fa4 %s\n", fa4::version());
    return fa4cli::kExitOk;
  }
  if (cmd == "help") {
    if (argc > 3) fa4cli::usage_error(argv[3], "unexpected argument (fa4 help [command])");
    return argc == 3 ? help_for(argv[2]) : help_for("help");
  }
  if (cmd == "run") return fa4cli::cmd_run(argc, argv, 2);
  if (cmd == "bench") return fa4cli::cmd_bench(argc, argv, 2);
  if (cmd == "info") return fa4cli::cmd_info(argc, argv, 2);
  if (!cmd.empty() && cmd[0] == '-') fa4cli::usage_error(cmd, "unknown option (expected a command first; see fa4 --help)");
  fa4cli::usage_error(cmd, "unknown command (expected run, bench, info or help)");
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return dispatch(argc, argv);
  } catch (const fa4cli::UsageError& e) {
    std::fprintf(stderr, "fa4: %s\n", e.what());
    return fa4cli::kExitUsage;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "fa4: out of host memory (reduce the problem size)\n");
    return fa4cli::kExitFailure;
  }
}
