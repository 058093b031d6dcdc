# Warnings and floating-point policy, as INTERFACE targets that each room links.

add_library(mhc_warnings INTERFACE)
add_library(mhc::warnings ALIAS mhc_warnings)
target_compile_options(mhc_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wconversion -Wdouble-promotion -Wshadow>
  $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CXX_COMPILER_ID:GNU>>:-Wno-psabi>
  # clang (the sanitizer and fuzz builds) reads -Wconversion and -Wshadow more widely than gcc;
  # keep its warnings to what gcc's policy asks.
  $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CXX_COMPILER_ID:Clang>>:-Wno-sign-conversion
    -Wno-shadow-field-in-constructor -Wno-psabi>
  # .cu files: the same warnings for the host compiler's pass (through nvcc), and nvcc's own.
  $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra,-Wconversion,-Wdouble-promotion,-Wshadow,-Wno-psabi
    --Wreorder --Wext-lambda-captures-this>)

# The oracle's numbers must be the ones the source says: no contraction of a*b+c into an FMA
# (that changes rounding), no fast-math reassociation.
add_library(mhc_fp_strict INTERFACE)
add_library(mhc::fp_strict ALIAS mhc_fp_strict)
target_compile_options(mhc_fp_strict INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-ffp-contract=off -fno-fast-math>)

# Kernels under test state their own policy (the fp32 CPU kernels may vectorise and contract).
add_library(mhc_fp_kernel INTERFACE)
add_library(mhc::fp_kernel ALIAS mhc_fp_kernel)
target_compile_options(mhc_fp_kernel INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-fno-fast-math>)
