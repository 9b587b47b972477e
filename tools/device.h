// Where the tool's tensors live while a backend runs.
//
// The problem builder always fills host buffers. The reference and cpu backends read them in
// place (HostDevice). The cuda backend needs device memory: a CudaDevice would allocate device
// copies in bind(), copy outputs (and an appended cache) back in fetch_outputs() and wait on
// the stream in synchronize(). The tool does not link CUDA yet, so open_device() reports
// backend_unavailable (or unsupported, in a CUDA build) through the library's Status.
#pragma once

#include <memory>

#include "fa4/fa4.h"
#include "problem_builder.h"

namespace fa4cli {

class Device {
 public:
  virtual ~Device() = default;
  virtual const char* name() const = 0;
  // Fills *out with hp.params whose tensors live on this device.
  virtual fa4::Status bind(HostProblem& hp, fa4::AttentionParams* out) = 0;
  // Makes the host buffers of out, lse (and k, v after an append) hold the last results.
  virtual fa4::Status fetch_outputs(HostProblem& hp) = 0;
  // Waits until all work submitted so far has finished (for timing).
  virtual fa4::Status synchronize() = 0;
};

// The device that `backend` computes on. automatic resolves as the library does for host
// tensors (cpu).
fa4::Status open_device(fa4::Backend backend, std::unique_ptr<Device>* out);

// The backend a run with `requested` uses: automatic -> cpu (the tool's tensors are host memory).
fa4::Backend resolve_backend(fa4::Backend requested);

}  // namespace fa4cli
