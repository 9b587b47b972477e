// The fa4 tool's subcommands. Each takes the words after its name and returns the exit code:
//   0 ok, 1 --check beyond tolerance, 2 bad arguments (including the library's
//   invalid_argument), 3 the library failed otherwise (backend unavailable, unsupported, ...).
// Bad arguments are thrown as UsageError (args.h) and reported by main().
#pragma once

#include <string>

#include "fa4/fa4.h"
#include "problem_builder.h"

namespace fa4cli {

class ParsedArgs;

constexpr int kExitOk = 0, kExitCheckFailed = 1, kExitUsage = 2, kExitFailure = 3;

int cmd_run(int argc, char** argv, int first);
int cmd_bench(int argc, char** argv, int first);
int cmd_info(int argc, char** argv, int first);

std::string run_help();
std::string bench_help();
std::string info_help();

// True if argv[first..) asks for help (-h / --help).
bool wants_help(int argc, char** argv, int first);

// Prints a failed library Status as one line on stderr, naming the tool flag that corresponds
// to Status::argument when there is one; returns the exit code (2 for invalid_argument).
int report_status(const fa4::Status& st);

// Command-line names <-> library enums (the parser has already checked the names).
// Every spelling --dtype / --dtypes accept: f32 fp32 float32, f16 fp16 float16 half, bf16
// bfloat16, e4m3 fp8 float8_e4m3 float8_e4m3fn (outputs always print the short name).
#define FA4_CLI_DTYPES "f32|fp32|float32|f16|fp16|float16|half|bf16|bfloat16|e4m3|fp8|float8_e4m3|float8_e4m3fn"
fa4::DType dtype_from_name(const std::string& s);        // any spelling in FA4_CLI_DTYPES
// --kv-dtype / --kv-scale into s (after s->dtype is set): an fp8 KV cache for --kv-dtype e4m3
// with a 16-bit --dtype; --kv-dtype equal to --dtype is the default (usage errors otherwise).
void set_kv_dtype(const ParsedArgs& a, ProblemSpec* s);
fa4::Backend backend_from_name(const std::string& s);    // auto reference cpu cuda
Dist dist_from_name(const std::string& s);               // normal uniform outliers

}  // namespace fa4cli
