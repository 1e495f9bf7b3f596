# ctest install_consumer: installs the build tree into WORK_DIR/prefix, checks what the
# package holds, then configures, builds and runs two user projects against it with
# find_package(rill) only:
#   rill_only/  rill::rill, configured with cpprestsdk and OpenSSL hidden
#   kafka/      COMPONENTS kafka, rill::kafka (constructs a producer; no broker)
# and checks that asking for the cpprest component with cpprestsdk hidden fails, so the
# hiding is real.
# Arguments: BUILD_DIR, SOURCE_DIR (tests/consumer), WORK_DIR, CXX, LAUNCHER.
file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)

function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc}):\n${out}\n${err}")
  endif()
  set(run_out "${out}" PARENT_SCOPE)
endfunction()

run("install" ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})

# --- the installed tree ---
file(GLOB_RECURSE headers RELATIVE ${prefix}/include ${prefix}/include/*)
list(LENGTH headers n)
if(n LESS 20)
  message(FATAL_ERROR "only ${n} headers installed: ${headers}")
endif()
foreach(h IN LISTS headers)
  if(h MATCHES "(^|/)detail/")
    message(FATAL_ERROR "internal header installed: include/${h}")
  endif()
  file(STRINGS ${prefix}/include/${h} internal REGEX "class ack_inbox")
  if(internal)
    message(FATAL_ERROR "include/${h} holds the Kafka ack internals (ack_inbox)")
  endif()
endforeach()
foreach(h rill/rill.hpp rill/pcap.hpp rill/operators/http_client.hpp rill/connectors/kafka_source.hpp)
  if(NOT EXISTS ${prefix}/include/${h})
    message(FATAL_ERROR "public header missing: include/${h}")
  endif()
endforeach()
file(GLOB_RECURSE exports ${prefix}/*/cmake/rill/*.cmake)
foreach(f IN LISTS exports)
  file(STRINGS ${f} bad REGEX "rill::rill_")
  if(bad)
    message(FATAL_ERROR "${f} exports an in-tree name: ${bad}")
  endif()
endforeach()
# <rill/rill.hpp> is the DSL: no packet, capture, Kafka or HTTP header
file(STRINGS ${prefix}/include/rill/rill.hpp domain REGEX "#include .*(packet|pcap|kafka|http)")
if(domain)
  message(FATAL_ERROR "<rill/rill.hpp> includes a domain connector: ${domain}")
endif()

set(common -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=${prefix}
           -DCMAKE_CXX_COMPILER=${CXX})
if(LAUNCHER)
  list(APPEND common -DCMAKE_CXX_COMPILER_LAUNCHER=${LAUNCHER})
endif()

# --- rill::rill only, cpprestsdk / OpenSSL hidden ---
set(b ${WORK_DIR}/rill_only)
run("configure rill_only" ${CMAKE_COMMAND} -S ${SOURCE_DIR}/rill_only -B ${b} ${common}
    -DCMAKE_DISABLE_FIND_PACKAGE_cpprestsdk=ON -DCMAKE_DISABLE_FIND_PACKAGE_OpenSSL=ON)
file(STRINGS ${b}/CMakeCache.txt found REGEX "^(cpprestsdk_DIR|RDKAFKA_FOUND|OpenSSL_DIR)")
if(found)
  message(FATAL_ERROR "the rill::rill consumer looked for an optional dependency: ${found}")
endif()
run("build rill_only" ${CMAKE_COMMAND} --build ${b})
run("run rill_only" ${b}/consumer)
if(NOT run_out STREQUAL "ann 0 100\nann 10 12\nbob 0 21\nbob 20 300\n")
  message(FATAL_ERROR "rill_only printed:\n${run_out}")
endif()

# --- rill::kafka ---
set(b ${WORK_DIR}/kafka)
run("configure kafka" ${CMAKE_COMMAND} -S ${SOURCE_DIR}/kafka -B ${b} ${common}
    -DCMAKE_DISABLE_FIND_PACKAGE_cpprestsdk=ON)
run("build kafka" ${CMAKE_COMMAND} --build ${b})
run("run kafka" ${b}/kafka_consumer)
if(NOT run_out STREQUAL "ok\n")
  message(FATAL_ERROR "kafka consumer printed:\n${run_out}")
endif()

# --- the hiding is real: COMPONENTS cpprest with cpprestsdk hidden must not configure ---
set(s ${WORK_DIR}/cpprest_src)
file(WRITE ${s}/CMakeLists.txt "cmake_minimum_required(VERSION 3.25)\nproject(c LANGUAGES CXX)\n"
                               "find_package(rill 0.1 REQUIRED COMPONENTS cpprest)\n")
execute_process(COMMAND ${CMAKE_COMMAND} -S ${s} -B ${WORK_DIR}/cpprest ${common}
                        -DCMAKE_DISABLE_FIND_PACKAGE_cpprestsdk=ON
                RESULT_VARIABLE rc OUTPUT_QUIET ERROR_VARIABLE err)
if(rc EQUAL 0 OR NOT err MATCHES "cpprestsdk")
  message(FATAL_ERROR "COMPONENTS cpprest configured without cpprestsdk (${rc}): ${err}")
endif()
message(STATUS "install_consumer: ${n} headers, no detail/; rill_only and kafka consumers ran")
