// Built without CUDA: the CUDA backends exist and say so when called (a typed NotCompiled).
#include "mhc/impl/cuda.hpp"

namespace mhc::impl {
namespace {
[[noreturn]] void absent() {
  throw NotCompiled("built without CUDA (MHC_CUDA=OFF)");
}
Backend make(const char* name) {
  Backend b;
  b.name = name;
  b.description = "CUDA (not compiled in this build)";
  b.mixes = [](const KernelConfig&, std::size_t, const float*, const float*, float*) { absent(); };
  b.split_sinkhorn = [](const KernelConfig&, std::size_t, const float*, const float*, const float*,
                        float*, float*, float*) { absent(); };
  b.hc_pre = [](const KernelConfig&, std::size_t, const float*, const float*, float*) { absent(); };
  b.hc_post = [](const KernelConfig&, std::size_t, const float*, const float*, const float*,
                 const float*, float*) { absent(); };
  b.rmsnorm = [](const KernelConfig&, std::size_t, const float*, const float*, float*) {
    absent();
  };
  b.boundary = [](const KernelConfig&, std::size_t, const BoundaryIn&, const BoundaryOut&) {
    absent();
  };
  return b;
}
}  // namespace

int cuda_device_count() {
  return 0;
}
bool cuda_in_use() {
  return false;
}
void* cuda_alloc(std::size_t) {
  absent();
}
void cuda_free(void*) noexcept {}
void cuda_copy_to_device(void*, const void*, std::size_t) {
  absent();
}
void cuda_copy_to_host(void*, const void*, std::size_t) {
  absent();
}
std::string cuda_device_name() {
  return "built without CUDA";
}
const Backend& cuda() {
  static const Backend b = make("cuda");
  return b;
}
const Backend& cuda_fused() {
  static const Backend b = make("cuda-fused");
  return b;
}
void cuda_mma_tf32(const float*, const float*, const float*, float*) {
  absent();
}
void cuda_fused_splits(int) {}
void cuda_fused_tensor_copies(int) {}
void cuda_fused_poison_sums(bool) {}
void cuda_split_backward_one_thread(bool) {}
std::vector<std::string> cuda_fused_tensor_copy_shapes() {
  return {};
}
Sublayers cuda_sublayers() {
  Sublayers s;
  s.attention = [](const KernelConfig&, const BlockShape&, const BlockKnobs&, std::size_t,
                   std::size_t, const float*, const BlockWeights&, float*) { absent(); };
  s.moe = [](const KernelConfig&, const BlockShape&, const BlockKnobs&, std::size_t, const float*,
             const BlockWeights&, float*, float*) { absent(); };
  return s;
}

}  // namespace mhc::impl
