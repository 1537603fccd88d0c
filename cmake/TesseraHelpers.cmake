# Warning flags and the tessera_add_library() / tessera_add_test() helpers.

# Designated initializers that leave members at their defaults are the point of config structs.
# GCC 12 reports false -Wrestrict positives inside std::string concatenation (GCC bug 105329).
set(TSR_WARNINGS -Wall -Wextra -Wpedantic -Wno-unused-parameter -Wno-psabi -Wno-missing-field-initializers
    $<$<CXX_COMPILER_ID:GNU>:-Wno-restrict>)
if(TSR_WERROR)
  list(APPEND TSR_WARNINGS -Werror)
endif()

# Portable baseline: the binary runs on any x86-64-v3 machine; AVX-512 kernels live in
# files compiled with extra flags and are only called after a CPUID check.
set(TSR_BASELINE_FLAGS -march=x86-64-v3 -mtune=znver3)
set(TSR_AVX512_FLAGS -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512bf16 -mavx512vnni)
set(TSR_AMX_FLAGS ${TSR_AVX512_FLAGS} -mamx-tile -mamx-bf16)

# tessera_add_library(name SOURCES ... DEPS ...)
function(tessera_add_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR}/src)
  target_compile_options(${name} PRIVATE ${TSR_WARNINGS} ${TSR_BASELINE_FLAGS})
  target_link_libraries(${name} PUBLIC ${ARG_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
endfunction()

# tessera_add_test(name SOURCES ... DEPS ... [LABELS ...])
function(tessera_add_test name)
  if(NOT TSR_BUILD_TESTS)
    return()
  endif()
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_compile_options(${name} PRIVATE ${TSR_WARNINGS} ${TSR_BASELINE_FLAGS})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gtest_main)
  set(labels unit)
  if(ARG_LABELS)
    set(labels ${ARG_LABELS})
  endif()
  gtest_discover_tests(${name} PROPERTIES LABELS "${labels}" DISCOVERY_TIMEOUT 60)
endfunction()
