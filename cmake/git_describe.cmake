# Run at every build (not only at configure time): writes OUT with the tree's `git describe`, and rewrites it
# only when that changes, so a new commit recompiles build_info.cpp alone and a stale description never ships.
execute_process(COMMAND git describe --always --dirty --tags WORKING_DIRECTORY "${SRC}"
                OUTPUT_VARIABLE d OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
if(NOT d)
  set(d "unknown")
endif()
set(text "#define KVTAX_GIT_DESCRIBE \"${d}\"\n")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
endif()
if(NOT "${old}" STREQUAL "${text}")
  file(WRITE "${OUT}" "${text}")
endif()
