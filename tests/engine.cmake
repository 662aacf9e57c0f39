# The CPU engine's environment through the real binary.
#
#   blas_steer   OpenBLAS steering (src/model/blas_steer.c, tests/blas_steer.py): the default
#                run never keeps kernels weaker than the CPU; the user's OPENBLAS_CORETYPE is
#                kept (with a warning); DONTO_BLAS_STEER=<core> re-executes onto that core; a
#                steered core that fails its check (fault injected, or SIGILL on a CPU that
#                lacks its instructions) is undone; vectors equal the plain run's in every case.
#                Exit 77 (skipped) on a CPU without AVX2.
add_test(NAME blas_steer
         COMMAND ${DONTO_PYTHON} ${PROJECT_SOURCE_DIR}/tests/blas_steer.py $<TARGET_FILE:donto-embed>
                 ${PROJECT_SOURCE_DIR}/models/all-MiniLM-L6-v2 ${DONTO_TESTDATA}/blas_steer)
set_tests_properties(blas_steer PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77)
