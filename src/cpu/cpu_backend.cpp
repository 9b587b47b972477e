// PLACEHOLDER until the tiled cpu backend lands: forwards to the reference.
#include "core/backends.h"
namespace fa4::core {
Status cpu_forward(const Problem& pb) { return reference_forward(pb); }
Status cpu_combine(const CombineParams& c) { return reference_combine(c); }
std::string cpu_info() { return "placeholder"; }
}  // namespace fa4::core
