# Benchmarks: bench/bench_*.c (built, run by `make bench`) and bench/bench_*.sh|py.
file(GLOB VF_BENCH_SRC CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/bench/bench_*.c)
foreach(src ${VF_BENCH_SRC})
  get_filename_component(name ${src} NAME_WE)
  add_executable(${name} ${src})
  target_link_libraries(${name} PRIVATE vf_stages vf_models)
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bench)
endforeach()
