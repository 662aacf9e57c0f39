# Option checks of every command (include/donto/opt.h) through the real binaries
# (tests/cli_opts.sh): bad values, unknown options and missing values exit 2 with one
# clear line, before any database, model or dataset is touched; --help exits 0.
add_test(NAME cli_opts COMMAND sh ${PROJECT_SOURCE_DIR}/tests/cli_opts.sh $<TARGET_FILE:donto-embed>
         $<TARGET_FILE:donto-sheaf> ${DONTO_TESTDATA}/cli_opts)
set_tests_properties(cli_opts PROPERTIES TIMEOUT 60)
