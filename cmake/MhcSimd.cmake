# The oracle and the CPU kernels spend their time in long dot products: compile them for
# x86-64-v3 (AVX2, FMA) when the build machine runs such code. The binary then needs such a CPU;
# -DMHC_X86_64_V3=OFF builds for the baseline. FMA contraction stays under the FP policy of each
# target (off for the oracle).
include(CheckCXXSourceRuns)
set(CMAKE_REQUIRED_FLAGS "-march=x86-64-v3")
check_cxx_source_runs("
  int main() { return __builtin_cpu_supports(\"avx2\") && __builtin_cpu_supports(\"fma\") ? 0 : 1; }"
  MHC_HOST_X86_64_V3)
unset(CMAKE_REQUIRED_FLAGS)
option(MHC_X86_64_V3 "Compile the oracle and CPU kernels for x86-64-v3" ${MHC_HOST_X86_64_V3})
add_library(mhc_simd INTERFACE)
add_library(mhc::simd ALIAS mhc_simd)
if(MHC_X86_64_V3)
  target_compile_options(mhc_simd INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-march=x86-64-v3>)
endif()
