# Installs the build tree's library component into a fresh prefix under WORK, then configures,
# builds and runs the outside project consumer/ against it with find_package(Meganeura).
# Arguments (-D): BUILD (the build tree), WORK (scratch folder), CXX and CC (the C++ and C
# compilers), GENERATOR, LAUNCHER (optional compiler launcher, e.g. ccache), PROGRAM (the program
# JSON the C consumer runs: the C API test's, tests/capi/make_program.cpp).
foreach(arg BUILD WORK CXX CC GENERATOR PROGRAM)
  if(NOT DEFINED ${arg})
    message(FATAL_ERROR "run_install_test.cmake: -D${arg}=... is required")
  endif()
endforeach()
file(REMOVE_RECURSE ${WORK})
set(prefix ${WORK}/prefix)

function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "install test: ${what} failed (${rc})")
  endif()
endfunction()

run("cmake --install" ${CMAKE_COMMAND} --install ${BUILD} --prefix ${prefix} --component devel)
# Only the public headers: nothing from the source tree's src/.
foreach(header graph.h session.h train.h meganeura.h op_list.inc op_builders.inc)
  if(NOT EXISTS ${prefix}/include/meganeura/${header})
    message(FATAL_ERROR "install test: include/meganeura/${header} was not installed")
  endif()
endforeach()
if(EXISTS ${prefix}/include/graph OR EXISTS ${prefix}/include/backend)
  message(FATAL_ERROR "install test: internal headers were installed")
endif()
set(launcher)
if(LAUNCHER)
  set(launcher -DCMAKE_CXX_COMPILER_LAUNCHER=${LAUNCHER} -DCMAKE_C_COMPILER_LAUNCHER=${LAUNCHER})
endif()
run("configuring the outside project" ${CMAKE_COMMAND} -S ${CMAKE_CURRENT_LIST_DIR}/consumer -B ${WORK}/consumer
    -G ${GENERATOR} -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=${CXX} -DCMAKE_C_COMPILER=${CC} ${launcher} -DCMAKE_PREFIX_PATH=${prefix})
run("building the outside project" ${CMAKE_COMMAND} --build ${WORK}/consumer)
run("running the outside project" ${WORK}/consumer/consumer)
# The C API, from the installed tree alone (its RUNPATH finds libmeganeura_glsl.so beside it).
run("running the C consumer" ${WORK}/consumer/consumer_c ${PROGRAM})
