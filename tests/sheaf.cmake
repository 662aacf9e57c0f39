# Sheaf learning (src/sheaf/): PyTorch parity (label `ref`). tests/sheaf_dump.c writes a model's
# weights (checkpoint JSON), graph, log-probabilities and gradients; tests/ref/sheaf_ref.py
# recomputes them with torch autograd (float64) and compares: logp max abs diff <= 1e-5 and
# every parameter gradient within 1e-4 of the tensor's largest gradient.
add_executable(sheaf_dump ${CMAKE_CURRENT_SOURCE_DIR}/sheaf_dump.c)
target_link_libraries(sheaf_dump PRIVATE donto)

# The geom-gcn graphs the repository carries (data/geom-gcn/README.md). A build directory
# configured when the default was ../shared/data/geom-gcn (outside the repository) moves over.
set(DONTO_GEOM_GCN_DIR "${PROJECT_SOURCE_DIR}/data/geom-gcn" CACHE PATH "geom-gcn benchmark data")
if(DONTO_GEOM_GCN_DIR STREQUAL "${PROJECT_SOURCE_DIR}/../shared/data/geom-gcn")
  set(DONTO_GEOM_GCN_DIR "${PROJECT_SOURCE_DIR}/data/geom-gcn" CACHE PATH "geom-gcn benchmark data" FORCE)
endif()

# name family graph [dump options...]
function(donto_sheaf_parity name family graph)
  add_test(NAME ${name}
    COMMAND ${DONTO_PYTHON} ${PROJECT_SOURCE_DIR}/tests/ref/sheaf_ref.py parity
            --bin $<TARGET_FILE:sheaf_dump> --family ${family} --graph ${graph}
            --data-dir ${DONTO_GEOM_GCN_DIR} -- ${ARGN})
  set_tests_properties(${name} PROPERTIES LABELS ref TIMEOUT 600 RESOURCE_LOCK donto_ref_cpu
                       ENVIRONMENT "OMP_NUM_THREADS=2")
endfunction()

foreach(graph random texas)
  donto_sheaf_parity(sheaf_parity_diag_${graph} diag ${graph} --d 3 --layers 3 --hidden 6 --add-lp --add-hp --second-linear)
  donto_sheaf_parity(sheaf_parity_householder_${graph} orth ${graph} --d 4 --layers 2 --hidden 5 --add-lp)
  donto_sheaf_parity(sheaf_parity_cayley_${graph} cayley ${graph} --d 3 --layers 2 --hidden 5 --add-hp)
  donto_sheaf_parity(sheaf_parity_general_${graph} general ${graph} --d 3 --layers 2 --hidden 5 --add-lp --gen-eps 0.01)
  donto_sheaf_parity(sheaf_parity_gcn_${graph} gcn ${graph} --layers 3 --hidden 16)
endforeach()
donto_sheaf_parity(sheaf_parity_householder_noew_random orth random --d 3 --layers 2 --hidden 4 --no-edge-weights)
# The MLP baseline, and edge tasks: the decoder ([h_u*h_v, |h_u-h_v|], directed + [h_u, h_v]) and
# the class-weighted NLL over every encoder; the C metrics against sklearn's (binary: ROC-AUC, AP).
donto_sheaf_parity(sheaf_parity_mlp_random mlp random --layers 3 --hidden 8)
donto_sheaf_parity(sheaf_parity_edge_diag_random diag random --d 3 --layers 2 --hidden 5 --add-lp --edge directed)
donto_sheaf_parity(sheaf_parity_edge_householder_random orth random --d 3 --layers 2 --hidden 4 --edge undirected --edge-classes 2)
donto_sheaf_parity(sheaf_parity_edge_cayley_random cayley random --d 3 --layers 2 --hidden 4 --edge directed --edge-classes 2)
donto_sheaf_parity(sheaf_parity_edge_general_random general random --d 2 --layers 2 --hidden 4 --edge undirected)
donto_sheaf_parity(sheaf_parity_edge_gcn_random gcn random --layers 2 --hidden 8 --edge directed)
donto_sheaf_parity(sheaf_parity_edge_mlp_random mlp random --layers 2 --hidden 8 --edge undirected --edge-classes 2)
donto_sheaf_parity(sheaf_parity_edge_diag_texas diag texas --d 2 --layers 2 --hidden 6 --edge directed)

# The CLI end to end (train/eval/infer, export files, errors) on the in-repo geom-gcn data.
add_test(NAME sheaf_cli COMMAND sh ${PROJECT_SOURCE_DIR}/tests/sheaf_cli.sh $<TARGET_FILE:donto-sheaf>
         ${DONTO_GEOM_GCN_DIR} ${DONTO_TESTDATA}/sheaf_cli)
set_tests_properties(sheaf_cli PROPERTIES TIMEOUT 300)

# The in-repo geom-gcn copy is found from any current directory, and beside the executable.
add_test(NAME sheaf_data COMMAND sh ${PROJECT_SOURCE_DIR}/tests/sheaf_data.sh $<TARGET_FILE:donto-sheaf>
         ${PROJECT_SOURCE_DIR}/data/geom-gcn ${DONTO_TESTDATA}/sheaf_data)
set_tests_properties(sheaf_data PROPERTIES TIMEOUT 120)

# A checkpoint run on another graph or on splits it was not held out from is refused unless forced.
add_test(NAME sheaf_ckpt COMMAND sh ${PROJECT_SOURCE_DIR}/tests/sheaf_ckpt.sh $<TARGET_FILE:donto-sheaf>
         ${DONTO_GEOM_GCN_DIR} ${DONTO_TESTDATA}/sheaf_ckpt)
set_tests_properties(sheaf_ckpt PROPERTIES TIMEOUT 120)

# train fails fast: an unwritable checkpoint before training, nonsense option values at parsing.
add_test(NAME sheaf_train_checks COMMAND sh ${PROJECT_SOURCE_DIR}/tests/sheaf_train_checks.sh $<TARGET_FILE:donto-sheaf>
         ${DONTO_GEOM_GCN_DIR} ${DONTO_TESTDATA}/sheaf_train_checks)
set_tests_properties(sheaf_train_checks PROPERTIES TIMEOUT 120)

# Edge tasks end to end on a synthetic export (tests/sheaf_edge_gen.py, planted communities):
# train/eval/infer/sweep with --task, checkpoints, loader errors, and the behaviour check that a
# graph-aware model beats the features-only MLP on it.
add_test(NAME sheaf_edge COMMAND sh ${PROJECT_SOURCE_DIR}/tests/sheaf_edge.sh $<TARGET_FILE:donto-sheaf>
         ${PROJECT_SOURCE_DIR}/tests/sheaf_edge_gen.py ${DONTO_TESTDATA}/sheaf_edge)
set_tests_properties(sheaf_edge PROPERTIES TIMEOUT 300)
# Loading graphs honestly: no splits is an error unless --random-splits (said and recorded); index-list
# feature files; an .npz with edges and masks on its own (written by numpy: exit 77 without it).
add_test(NAME sheaf_load COMMAND sh ${PROJECT_SOURCE_DIR}/tests/sheaf_load.sh $<TARGET_FILE:donto-sheaf>
         ${DONTO_PYTHON} ${DONTO_TESTDATA}/sheaf_load)
set_tests_properties(sheaf_load PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77
                     ENVIRONMENT "DONTO_GEOM_GCN_DIR=${DONTO_GEOM_GCN_DIR}")

# The export with claims' vectors in donto's donto_vector (--vectors donto,
# issue 20) equals the export with them in vectors, byte for byte.
add_test(NAME sheafx_pg_donto
         COMMAND ${PROJECT_SOURCE_DIR}/scripts/pg-test-server sh ${PROJECT_SOURCE_DIR}/tests/sheafx_donto.sh
                 $<TARGET_FILE:donto-embed> $<TARGET_FILE:donto-sheaf>)
set_tests_properties(sheafx_pg_donto PROPERTIES TIMEOUT 300 LABELS sheaf ENVIRONMENT "PG_TEST_TIMEOUT=240")
