# Recall (src/recall/): test_ann (the FAISS wrapper: recall vs exact on
# clustered data, add, save/load, bad files) and test_recall (end to end on
# SQLite with models/all-MiniLM-L6-v2: library, `donto-embed recall`, and
# GET /embed/recall) come from tests/CMakeLists.txt (test_*.c). The store
# op they rely on is tested in test_store / store_pg (test_vectors_read).
set_tests_properties(test_ann PROPERTIES TIMEOUT 300 LABELS recall)
set_tests_properties(test_recall PROPERTIES TIMEOUT 300 LABELS recall)
