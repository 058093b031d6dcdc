# `cmake --install`: the CLI (cli/), the Python package (python/), and for other projects the
# headers, the libraries and a package config, in two export sets:
#   mhc_verify-headers: mhc::plugin (the plug-in's C header) and mhc::reference (the semantics,
#     header-only); they need nothing else, so a plug-in's project needs no -dev package;
#   mhc_verify-library: the judging library (mhc::runner and what it links), loaded when its
#     dependencies are found (Boost, MPFR, MPFI, GMP, HDF5, nlohmann-json, and CUDA when built with
#     it); `find_package(mhc_verify CONFIG REQUIRED COMPONENTS library)` requires them.
# Install components, one Debian package each (cmake/MhcPackage.cmake): cli (the CLI, the header
# targets and the package config), python, dev (the library).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)
set(MHC_CMAKE_INSTALL_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/mhc_verify)

foreach(room reference impl/plugin)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${room}/include/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
          COMPONENT cli)
endforeach()
foreach(room oracles fixtures reports runner impl)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${room}/include/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
          COMPONENT dev)
endforeach()

# Exported as mhc::NAME, the names the project itself links by.
foreach(t mhc_plugin mhc_reference mhc_fp_strict mhc_oracles mhc_impl mhc_fixtures mhc_reports
          mhc_runner mhc_warnings mhc_simd mhc_fp_kernel)
  string(REPLACE "mhc_" "" _name ${t})
  set_target_properties(${t} PROPERTIES EXPORT_NAME ${_name})
endforeach()
if(MHC_CUDA)
  set_target_properties(mhc_fp_cuda PROPERTIES EXPORT_NAME fp_cuda)
endif()

install(TARGETS mhc_plugin mhc_reference mhc_fp_strict EXPORT mhc_verify-headers COMPONENT cli
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT mhc_verify-headers NAMESPACE mhc:: DESTINATION ${MHC_CMAKE_INSTALL_DIR} COMPONENT cli)

set(_libs mhc_oracles mhc_impl mhc_fixtures mhc_reports mhc_runner mhc_warnings mhc_simd mhc_fp_kernel)
if(MHC_CUDA)
  list(APPEND _libs mhc_fp_cuda)
endif()
install(TARGETS ${_libs} EXPORT mhc_verify-library
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT mhc_verify-library NAMESPACE mhc:: DESTINATION ${MHC_CMAKE_INSTALL_DIR} COMPONENT dev)

configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/mhc_verify-config.cmake.in
  ${PROJECT_BINARY_DIR}/mhc_verify-config.cmake INSTALL_DESTINATION ${MHC_CMAKE_INSTALL_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/mhc_verify-config-version.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/mhc_verify-config.cmake
              ${PROJECT_BINARY_DIR}/mhc_verify-config-version.cmake
        DESTINATION ${MHC_CMAKE_INSTALL_DIR} COMPONENT cli)

if(BUILD_TESTING)
  add_test(NAME install.find_package COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/tests/install.sh
    ${PROJECT_BINARY_DIR} ${PROJECT_SOURCE_DIR})
  set_tests_properties(install.find_package PROPERTIES LABELS "unit;install")
endif()
