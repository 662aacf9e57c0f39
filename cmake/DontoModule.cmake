# donto_module(): one static library per folder of src/, with walls.
#
#   donto_module(NAME
#                [HEADERS h ...]   public headers it owns, in include/donto/
#                [DEPS m ...]      modules it may use (their public headers and code)
#                [LIBS lib ...]    third-party libraries it links
#                [SOURCES f ...]   its sources (default: every .c/.cpp of src/NAME))
#
# The walls, enforced by the compiler rather than by review:
#   - a module's private headers (src/NAME/*.h) are reachable only from its own
#     sources: they are included by bare file name, which C resolves next to
#     the including file, and src/ itself is on no include path, so
#     "othermodule/x_int.h" does not compile anywhere;
#   - a module sees the public headers of itself and of the modules it names
#     in DEPS (transitively), and no others: each module's headers are linked
#     into a directory of their own under the build tree
#     (include-NAME/donto/h.h -> include/donto/h.h), which is on the include
#     path of that module and of those that depend on it. Including the
#     header of a module that is not a dependency is a compile error.
# Every header in include/donto/ must be owned by exactly one module
# (donto_modules_check() says which are not).
# tests/check_layers.py (CTest `layers`) checks the same rules from the
# sources, as a second line, and the DEPS graph for cycles.

set(DONTO_MODULES "" CACHE INTERNAL "")
set(DONTO_MODULE_TABLE "${PROJECT_BINARY_DIR}/modules.txt")
file(WRITE "${DONTO_MODULE_TABLE}" "# module: deps | headers (written by cmake/DontoModule.cmake)\n")

function(donto_module name)
  cmake_parse_arguments(M "" "TARGET;DIR" "HEADERS;DEPS;LIBS;SOURCES" ${ARGN})
  if(NOT M_TARGET)
    set(M_TARGET ${name})
  endif()
  if(NOT M_DIR)
    set(M_DIR ${name})
  endif()
  set(dir "${PROJECT_SOURCE_DIR}/src/${M_DIR}")
  if(M_SOURCES)
    list(TRANSFORM M_SOURCES PREPEND "${dir}/")
    set(srcs ${M_SOURCES})
  else()
    file(GLOB srcs CONFIGURE_DEPENDS "${dir}/*.c" "${dir}/*.cpp")
  endif()
  set(tgt donto_${M_TARGET})
  add_library(${tgt} STATIC ${srcs})
  # This module's public headers, alone, in a directory of their own.
  set(inc "${PROJECT_BINARY_DIR}/include-${M_TARGET}")
  file(REMOVE_RECURSE "${inc}")
  file(MAKE_DIRECTORY "${inc}/donto")
  foreach(h ${M_HEADERS})
    if(NOT EXISTS "${PROJECT_SOURCE_DIR}/include/donto/${h}")
      message(FATAL_ERROR "module ${name}: include/donto/${h} does not exist")
    endif()
    file(CREATE_LINK "${PROJECT_SOURCE_DIR}/include/donto/${h}" "${inc}/donto/${h}" SYMBOLIC)
    set_property(GLOBAL APPEND PROPERTY DONTO_OWNED_HEADERS ${h})
  endforeach()
  target_include_directories(${tgt} PUBLIC "${inc}")
  list(TRANSFORM M_DEPS PREPEND donto_ OUTPUT_VARIABLE deps)
  target_link_libraries(${tgt} PUBLIC ${deps} ${M_LIBS})
  target_compile_definitions(${tgt} PRIVATE DONTO_VERSION="${PROJECT_VERSION}")
  set_property(TARGET ${tgt} PROPERTY DONTO_MODULE_DIR "${dir}")
  set(DONTO_MODULES ${DONTO_MODULES} ${M_TARGET} CACHE INTERNAL "")
  string(REPLACE ";" " " d "${M_DEPS}")
  string(REPLACE ";" " " hs "${M_HEADERS}")
  file(APPEND "${DONTO_MODULE_TABLE}" "${M_TARGET} ${M_DIR}: ${d} | ${hs}\n")
endfunction()

# White-box tests and benchmarks may read one module's private headers:
# donto_private_headers(test_model model) puts src/model on the test's path.
function(donto_private_headers target module)
  get_target_property(dir donto_${module} DONTO_MODULE_DIR)
  target_include_directories(${target} PRIVATE "${dir}")
  target_link_libraries(${target} PRIVATE donto_${module})
endfunction()

# Every public header is owned by exactly one module.
function(donto_modules_check)
  get_property(owned GLOBAL PROPERTY DONTO_OWNED_HEADERS)
  file(GLOB all RELATIVE "${PROJECT_SOURCE_DIR}/include/donto" "${PROJECT_SOURCE_DIR}/include/donto/*.h")
  foreach(h ${all})
    list(LENGTH owned n0)
    list(FILTER owned EXCLUDE REGEX "^${h}$")
    list(LENGTH owned n1)
    math(EXPR k "${n0} - ${n1}")
    if(NOT k EQUAL 1)
      message(FATAL_ERROR "include/donto/${h} is owned by ${k} modules (exactly one must list it in HEADERS)")
    endif()
  endforeach()
  list(LENGTH owned left)
  if(left)
    message(FATAL_ERROR "headers listed twice or missing: ${owned}")
  endif()
endfunction()
