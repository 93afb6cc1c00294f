# In builds with CPOOL_DEBUG_CHECKS, the tests, examples and benchmarks that
# ctest runs ask for the full walks of the debug checks (CPOOL_DEBUG_FULL=1,
# src/support/debug.h), so that none of them loses a check; a run outside
# ctest takes the cheap checks only unless it sets the variable.
# Call at the end of a directory's CMakeLists.txt: it covers the tests added
# there so far, except those that set CPOOL_DEBUG_FULL themselves.
function(cpool_ask_full_debug_checks)
  if(NOT CPOOL_DEBUG_CHECKS)
    return()
  endif()
  get_property(tests DIRECTORY PROPERTY TESTS)
  foreach(test IN LISTS tests)
    get_test_property(${test} ENVIRONMENT env)
    if(NOT env MATCHES "CPOOL_DEBUG_FULL=")
      set_property(TEST ${test} APPEND PROPERTY ENVIRONMENT "CPOOL_DEBUG_FULL=1")
    endif()
  endforeach()
endfunction()
