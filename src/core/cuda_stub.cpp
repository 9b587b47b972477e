// The cuda entry points of a build without CUDA (FA4_CUDA=OFF or no nvcc): every call reports
// that the backend is unavailable, so the CPU library never needs a GPU driver.
#include "core/backends.h"

namespace fa4::core {

bool cuda_available() { return false; }
std::string cuda_info() { return "not built: this build has no CUDA support (configure with -DFA4_CUDA=ON)"; }
Status cuda_check(const Problem&) { return Status::Error(StatusCode::backend_unavailable, "cuda backend not built"); }
Status cuda_forward(const Problem&) { return Status::Error(StatusCode::backend_unavailable, "cuda backend not built"); }
Status cuda_combine(const CombineParams&) { return Status::Error(StatusCode::backend_unavailable, "cuda backend not built"); }
size_t cuda_workspace_size(const Problem&) { return 0; }
void cuda_describe(const Problem&, PlanInfo*) {}  // unreachable: cuda_available() is false

}  // namespace fa4::core
