#include "device.h"

namespace fa4cli {
namespace {

class HostDevice final : public Device {
 public:
  const char* name() const override { return "host"; }
  fa4::Status bind(HostProblem& hp, fa4::AttentionParams* out) override {
    *out = hp.params;
    return fa4::Status::Ok();
  }
  fa4::Status fetch_outputs(HostProblem&) override { return fa4::Status::Ok(); }
  fa4::Status synchronize() override { return fa4::Status::Ok(); }
};

}  // namespace

fa4::Backend resolve_backend(fa4::Backend requested) {
  return requested == fa4::Backend::automatic ? fa4::Backend::cpu : requested;
}

fa4::Status open_device(fa4::Backend backend, std::unique_ptr<Device>* out) {
  switch (resolve_backend(backend)) {
    case fa4::Backend::reference:
    case fa4::Backend::cpu:
      *out = std::make_unique<HostDevice>();
      return fa4::Status::Ok();
    case fa4::Backend::cuda: {
      if (!fa4::backend_available(fa4::Backend::cuda)) {
        std::string detail;
        for (const fa4::BackendInfo& i : fa4::backend_info())
          if (i.backend == fa4::Backend::cuda) detail = i.detail;
        return fa4::Status{fa4::StatusCode::backend_unavailable, "backend",
                           "backend cuda is not available in this build" + (detail.empty() ? "" : " (" + detail + ")")};
      }
      return fa4::Status::Unsupported("backend",
                                      "backend cuda: the fa4 tool cannot place tensors on the GPU yet (host backends only)");
    }
    default: break;
  }
  return fa4::Status::Invalid("backend", "backend: unknown value");
}

}  // namespace fa4cli
