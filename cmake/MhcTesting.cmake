# One Catch2 main for every test executable: Debian's prebuilt one, so no build tree compiles
# Catch2's implementation.
add_library(mhc_catch_main INTERFACE)
add_library(mhc::catch_main ALIAS mhc_catch_main)
target_link_libraries(mhc_catch_main INTERFACE Catch2::Catch2WithMain)
