# Finds NCCL for the test and the example that call it (the library itself
# loads NCCL at run time and needs none of this): NCCL_ROOT, the NCCL of
# Python's nvidia-nccl package, or the system's. Sets CPOOL_NCCL_FOUND,
# CPOOL_NCCL_INCLUDE_DIR and CPOOL_NCCL_LIBRARY.
set(CPOOL_NCCL_FOUND OFF)
if(CPOOL_HAVE_CUDA)
  set(_cpool_nccl_hints $ENV{NCCL_ROOT})
  find_package(Python3 COMPONENTS Interpreter QUIET)
  if(Python3_Interpreter_FOUND)
    execute_process(COMMAND ${Python3_EXECUTABLE} -c "import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])"
                    OUTPUT_VARIABLE _cpool_py_nccl OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    list(APPEND _cpool_nccl_hints ${_cpool_py_nccl})
  endif()
  find_path(CPOOL_NCCL_INCLUDE_DIR nccl.h HINTS ${_cpool_nccl_hints} PATH_SUFFIXES include)
  find_library(CPOOL_NCCL_LIBRARY NAMES nccl libnccl.so.2 HINTS ${_cpool_nccl_hints} PATH_SUFFIXES lib lib64)
  if(CPOOL_NCCL_INCLUDE_DIR AND CPOOL_NCCL_LIBRARY)
    set(CPOOL_NCCL_FOUND ON)
  endif()
endif()
message(STATUS "capturepool: NCCL for its test and example: ${CPOOL_NCCL_FOUND}")
