# tests/install_smoke.cmake -- `cmake --install` into a fresh prefix, then the installed fa-bench must start
# with nothing but its own RPATH to find libflash.so.1 (no LD_LIBRARY_PATH, no ldconfig).
#   cmake -DBUILD_DIR=<build> -DPREFIX=<empty dir to create> -P install_smoke.cmake
file(REMOVE_RECURSE "${PREFIX}")
execute_process(COMMAND "${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${PREFIX}"
                RESULT_VARIABLE rc OUTPUT_QUIET ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cmake --install failed (${rc}): ${err}")
endif()
set(exe "${PREFIX}/bin/fa-bench")
if(NOT EXISTS "${exe}")
  message(FATAL_ERROR "${exe} was not installed")
endif()
foreach(sub IN ITEMS "--help" "devices")
  execute_process(COMMAND env -u LD_LIBRARY_PATH "${exe}" ${sub}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "installed `fa-bench ${sub}` exited ${rc}: ${err}${out}")
  endif()
endforeach()
message(STATUS "installed fa-bench runs: ${out}")
file(REMOVE_RECURSE "${PREFIX}")
