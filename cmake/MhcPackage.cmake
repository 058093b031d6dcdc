# Debian packages (`scripts/package`: cpack -G DEB in build/), one per install component:
#   mhc-verify         the CLI, the plug-in header and reference headers, the package config
#   python3-mhc-verify the mhc_verify Python package
#   mhc-verify-dev     the judging library's headers and static libraries
# Run-time dependencies come from the binaries (dpkg-shlibdeps); the rest are declared by their
# Debian names. Built for the Debian release and CPU of the build machine (the CLI may need
# x86-64-v3: MHC_X86_64_V3).
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME mhc-verify)
set(CPACK_PACKAGE_VENDOR "mhc-verify")
set(CPACK_PACKAGE_CONTACT "mhc-verify maintainers <mhc-verify@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "numerical verification of multi-stream Hyper-Connection (mHC) kernels")
set(CPACK_PACKAGE_DESCRIPTION
    "Judges fp32/tf32/bf16 kernels of DeepSeek V4.1's mHC against an oracle evaluated in double
and multiprecision, with derived error bounds: check, compare, fuzz, mutants, gate.")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL cli dev)
if(TARGET mhc_verify_core)
  list(APPEND CPACK_COMPONENTS_ALL python)
endif()
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)  # NAME_VERSION_ARCH.deb
set(CPACK_DEBIAN_PACKAGE_SECTION devel)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)

set(CPACK_DEBIAN_CLI_PACKAGE_NAME mhc-verify)
set(CPACK_DEBIAN_PYTHON_PACKAGE_NAME python3-mhc-verify)
set(CPACK_DEBIAN_PYTHON_PACKAGE_SECTION python)
# The extension is built for this interpreter's ABI; numpy is what it hands arrays to.
if(TARGET mhc_verify_core)
  set(_py ${MHC_PYTHON_VERSION_MAJOR}.${MHC_PYTHON_VERSION_MINOR})
  math(EXPR _next_minor "${MHC_PYTHON_VERSION_MINOR} + 1")
  set(CPACK_DEBIAN_PYTHON_PACKAGE_DEPENDS "python3 (>= ${_py}), \
python3 (<< ${MHC_PYTHON_VERSION_MAJOR}.${_next_minor}), python3-numpy, mhc-verify (= ${PROJECT_VERSION})")
endif()
set(CPACK_DEBIAN_DEV_PACKAGE_NAME mhc-verify-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS
    "mhc-verify (= ${PROJECT_VERSION}), libboost-dev, libmpfr-dev, libmpfi-dev, libgmp-dev, libhdf5-dev, nlohmann-json3-dev, pkg-config")
include(CPack)

if(BUILD_TESTING)
  add_test(NAME package.ci_examples COMMAND /usr/bin/python3
    ${PROJECT_SOURCE_DIR}/gate/examples/test_examples.py ${PROJECT_BINARY_DIR} ${PROJECT_SOURCE_DIR})
  set_tests_properties(package.ci_examples PROPERTIES LABELS "unit;install")
endif()
