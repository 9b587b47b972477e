// Running a built problem: timing on its backend and the error check against `reference`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "device.h"
#include "fa4/fa4.h"
#include "problem_builder.h"

namespace fa4cli {

struct Timing {
  std::vector<double> seconds;  // one per timed rep
  double median = 0.0, min = 0.0;
};

// Runs `warmup` untimed and `reps` timed calls of hp on `dev` (outputs poisoned first); with
// `plan`, also what the library chose for the call (fa4::describe_plan).
fa4::Status time_problem(HostProblem& hp, Device& dev, int reps, int warmup, Timing* t, fa4::PlanInfo* plan = nullptr);

// DESIGN.md section 4.
struct Tolerance {
  double rel_l2 = 0, max_abs = 0;  // max_abs < 0: not checked
  double min_cosine = -2;          // > -2: checked
  double lse_abs = 1e-3;
};
Tolerance tolerance_for(fa4::DType inputs);

struct ErrorStats {
  double out_rel_l2 = 0, out_max_abs = 0, out_cosine = 1;
  // max over elements of |out - ref| less one unit in the last place of the output dtype at ref:
  // both results are rounded to that dtype (half an ulp each), so this is the error beyond the
  // roundings, what the max-abs tolerance bounds (as the test suite's compare_runs). Without it
  // the rounding alone of an output of magnitude >= 16 (bf16, outlier inputs) is 0.0625 > 5e-2.
  double out_max_abs_beyond = 0;
  int64_t out_unwritten = 0;  // elements still holding the poison (NaN) where reference has a value
  bool has_lse = false;
  double lse_rel_l2 = 0, lse_max_abs = 0;  // over entries; both -inf counts as equal
  int64_t lse_unwritten = 0;
  Tolerance tol;
  bool pass = true;
  std::string failures;  // "out rel-L2, lse max-abs" ...
};

// Fetches hp's outputs from `dev`, restores the cache (append), recomputes with the reference
// backend on the host buffers and compares. Leaves the reference result in hp's buffers.
fa4::Status check_against_reference(HostProblem& hp, Device& dev, ErrorStats* e);

// "1.23 ms", "456 us", "2.5 s"
std::string format_time(double seconds);
// "12.3 GFLOP/s"
std::string format_rate(double flops_per_second);

}  // namespace fa4cli
