# Tests are files: tests/<dir>/test_*.{c,sh,py}. The directory gives the ctest label
# (unit, integration, reference, corpus, gpu); a line "vflow-test: labels=slow timeout=900" in the
# first lines of a test adds labels / sets the timeout (times VFLOW_TEST_TIMEOUT_SCALE). C tests
# link everything (stages register from constructors); scripts get VFLOW_BIN, VFLOW_BUILD,
# VFLOW_SRC.
# Helper programs the script tests drive live in tests/tools/*.c.
set(VF_PY /usr/bin/python3)

# A test's timeout guards against hangs and is sized for optimised code: unoptimised code
# (Debug, -O0) runs the CPU kernels several times slower (the VAE and DiT tests most), so
# there the timeouts scale, and whether a test passes does not depend on the build type.
if(CMAKE_BUILD_TYPE STREQUAL "Debug")
  set(VF_TEST_TIMEOUT_SCALE_DEFAULT 5)
else()
  set(VF_TEST_TIMEOUT_SCALE_DEFAULT 1)
endif()
set(VFLOW_TEST_TIMEOUT_SCALE ${VF_TEST_TIMEOUT_SCALE_DEFAULT} CACHE STRING
    "Factor on every test's timeout (default 5 for Debug builds, else 1)")

function(vf_test_meta file out_labels out_timeout)
  file(STRINGS ${file} meta LIMIT_COUNT 15 REGEX "vflow-test:")
  set(labels "")
  set(timeout 300)
  foreach(line ${meta})
    if(line MATCHES "labels=([a-z,]+)")
      string(REPLACE "," ";" l "${CMAKE_MATCH_1}")
      list(APPEND labels ${l})
    endif()
    if(line MATCHES "timeout=([0-9]+)")
      set(timeout ${CMAKE_MATCH_1})
    endif()
  endforeach()
  math(EXPR timeout "${timeout} * ${VFLOW_TEST_TIMEOUT_SCALE}")
  set(${out_labels} "${labels}" PARENT_SCOPE)
  set(${out_timeout} "${timeout}" PARENT_SCOPE)
endfunction()

set(VF_TEST_ENV "OMP_WAIT_POLICY=PASSIVE;VFLOW_BIN=${CMAKE_BINARY_DIR}/vflow;VFLOW_BUILD=${CMAKE_BINARY_DIR};VFLOW_SRC=${CMAKE_SOURCE_DIR};VFLOW_PY=${VF_PY};VFLOW_REF_PY=/opt/vflow-ref/bin/python;VFLOW_REF35_PY=/opt/vflow-ref35/bin/python")

file(GLOB VF_TOOL_SRC CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/tools/*.c)
foreach(src ${VF_TOOL_SRC})
  get_filename_component(name ${src} NAME_WE)
  add_executable(${name} ${src})
  target_link_libraries(${name} PRIVATE vf_cli vf_stages vf_models)
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tools)
endforeach()

foreach(dir unit integration reference corpus gpu)
  file(GLOB srcs CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/${dir}/test_*.c
       ${CMAKE_SOURCE_DIR}/tests/${dir}/test_*.sh ${CMAKE_SOURCE_DIR}/tests/${dir}/test_*.py)
  if(VFLOW_HAVE_CUDA AND dir STREQUAL "gpu")
    file(GLOB cu CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/gpu/test_*.cu)
    list(APPEND srcs ${cu})
  endif()
  foreach(src ${srcs})
    get_filename_component(name ${src} NAME_WE)
    get_filename_component(ext ${src} LAST_EXT)
    vf_test_meta(${src} extra timeout)
    set(tname "${dir}.${name}")
    if(ext STREQUAL ".c" OR ext STREQUAL ".cu")
      add_executable(${dir}_${name} ${src})
      target_link_libraries(${dir}_${name} PRIVATE vf_cli vf_stages vf_models)
      set_target_properties(${dir}_${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
      add_test(NAME ${tname} COMMAND ${dir}_${name} WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
    elseif(ext STREQUAL ".sh")
      add_test(NAME ${tname} COMMAND bash ${src} WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
    else()
      add_test(NAME ${tname} COMMAND ${VF_PY} ${src} WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
    endif()
    set_tests_properties(${tname} PROPERTIES LABELS "${dir};${extra}" TIMEOUT ${timeout}
                         ENVIRONMENT "${VF_TEST_ENV}" SKIP_RETURN_CODE 77)
  endforeach()
endforeach()

# Fuzz targets (LLVMFuzzerTestOneInput) double as replay tests over their corpus dir;
# with VFLOW_LIBFUZZER they are libFuzzer binaries instead (`make fuzz`, scripts/fuzz.sh).
file(GLOB VF_FUZZ_SRC CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/fuzz/fuzz_*.c)
foreach(src ${VF_FUZZ_SRC})
  get_filename_component(name ${src} NAME_WE)
  if(VFLOW_LIBFUZZER)
    add_executable(${name} ${src})
    target_link_options(${name} PRIVATE -fsanitize=fuzzer)
  else()
    add_executable(${name} ${src} ${CMAKE_SOURCE_DIR}/tests/fuzz/replay_main.c)
  endif()
  target_link_libraries(${name} PRIVATE vf_cli vf_stages vf_models)
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  if(NOT VFLOW_LIBFUZZER)
    add_test(NAME fuzz.${name} COMMAND ${name} ${CMAKE_SOURCE_DIR}/tests/fuzz/corpus/${name})
    math(EXPR timeout "300 * ${VFLOW_TEST_TIMEOUT_SCALE}")
    set_tests_properties(fuzz.${name} PROPERTIES LABELS "fuzz" TIMEOUT ${timeout} ENVIRONMENT "${VF_TEST_ENV}")
  endif()
endforeach()
