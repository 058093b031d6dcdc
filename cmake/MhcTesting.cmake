# One Catch2 main for every test executable.
add_library(mhc_catch_main STATIC ${PROJECT_SOURCE_DIR}/cmake/catch_main.cpp)
add_library(mhc::catch_main ALIAS mhc_catch_main)
target_link_libraries(mhc_catch_main PUBLIC Catch2::Catch2)
