# The module walls, proven by the compiler: each probe in tests/walls/ is
# compiled with exactly the include path of one module (an object library
# linked to that module sees what the module sees), and must fail, or in the
# control's case succeed, for the stated reason. RUN_SERIAL: each test runs a
# build in this build tree. tests/check_layers.py (test `layers`) is the
# second line, from the sources.
function(donto_wall_probe name module expect)
  add_library(wall_${name} OBJECT EXCLUDE_FROM_ALL ${CMAKE_CURRENT_SOURCE_DIR}/walls/${name}.c)
  target_link_libraries(wall_${name} PRIVATE donto_${module})
  add_test(NAME walls_${name}
           COMMAND ${CMAKE_COMMAND} --build ${PROJECT_BINARY_DIR} --target wall_${name})
  set_tests_properties(walls_${name} PROPERTIES LABELS walls RUN_SERIAL TRUE
                       PASS_REGULAR_EXPRESSION "${expect}")
endfunction()
donto_wall_probe(private_other substrate "store_int\\.h: No such file")
donto_wall_probe(private_path substrate "store/store_int\\.h: No such file")
donto_wall_probe(public_nondep text "donto/store\\.h: No such file")
donto_wall_probe(public_dep substrate "Built target wall_public_dep")
donto_wall_probe(sheafx_no_learner sheaf_export "donto/sheaf\\.h: No such file")

find_program(DONTO_LAYERS_PYTHON python3)
add_test(NAME layers COMMAND ${DONTO_LAYERS_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/check_layers.py
         ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR}/modules.txt)
set_tests_properties(layers PROPERTIES LABELS walls)
