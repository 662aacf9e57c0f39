# The sheaf inference operator (include/donto/sheaf_op.h; test_sheaf_op.c is the C side) from
# Python through ctypes: docs/sheaf-operator.md's example (tests/ffi_sheaf_op.py) against
# build/libdonto_sheaf_op.so, checked against `donto-sheaf infer`. Not under the sanitizers: an
# ASan library cannot be loaded into an uninstrumented Python.
if(NOT DONTO_SANITIZE)
  add_test(NAME sheaf_op_ffi COMMAND sh ${PROJECT_SOURCE_DIR}/tests/sheaf_op_ffi.sh $<TARGET_FILE:donto-sheaf>
           $<TARGET_FILE:donto_sheaf_op> ${DONTO_PYTHON} ${PROJECT_SOURCE_DIR} ${DONTO_TESTDATA}/sheaf_op_ffi)
  set_tests_properties(sheaf_op_ffi PROPERTIES TIMEOUT 300)
endif()
