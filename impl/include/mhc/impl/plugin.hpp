// Users' kernels as plug-ins: shared libraries with the C ABI of mhc/plugin/mhc_plugin.h,
// loaded with dlopen and wrapped as Backends named "plugin:PATH".
#pragma once

#include <stdexcept>
#include <string>

#include "mhc/impl/kernels.hpp"

namespace mhc::impl {

// A plug-in that cannot be loaded (the message names the file and what is wrong), or an entry
// point that returned an error (the message is the plug-in's).
struct PluginError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A kernel name "plugin:PATH": a user's kernel, always judged in a worker process.
inline bool is_plugin(const std::string& kernel) {
  return kernel.rfind("plugin:", 0) == 0;
}

// A signal as the harness names a worker's death: "SIGSEGV (Segmentation fault)".
std::string signal_text(int sig);

// Loads PATH once (later calls return the same Backend). Throws PluginError.
const Backend& load_plugin(const std::string& path);

}  // namespace mhc::impl
