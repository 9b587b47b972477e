// fa4 public API: the result of every call.
#pragma once

#include <string>
#include <utility>

namespace fa4 {

enum class StatusCode : int {
  ok = 0,
  invalid_argument = 1,     // a rule of the contract is broken; `argument` names the culprit
  unsupported = 2,          // valid, but the chosen backend cannot do it (e.g. fp32 on sm90)
  backend_unavailable = 3,  // e.g. backend=cuda in a build without CUDA or with no GPU
  device_error = 4,         // a CUDA runtime/driver call failed
  out_of_memory = 5,
  internal = 6,
};

const char* status_code_name(StatusCode c);

struct Status {
  StatusCode code = StatusCode::ok;
  std::string argument;  // the offending argument ("q", "cu_seqlens_k", ...), empty if none
  std::string message;   // one line, names the argument and what was expected

  bool ok() const { return code == StatusCode::ok; }
  explicit operator bool() const { return ok(); }

  static Status Ok() { return {}; }
  static Status Invalid(std::string arg, std::string msg) {
    return {StatusCode::invalid_argument, std::move(arg), std::move(msg)};
  }
  static Status Unsupported(std::string arg, std::string msg) {
    return {StatusCode::unsupported, std::move(arg), std::move(msg)};
  }
  static Status Error(StatusCode c, std::string msg) { return {c, {}, std::move(msg)}; }
};

}  // namespace fa4
