/* donto-embed: the embedding fabric's command line. Subcommands live in the
 * library (include/donto/cli.h); this file only dispatches. */
#include <stdio.h>
#include <string.h>

#include "donto/cli.h"
#include "donto/encoder.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: donto-embed <command> [options]\n"
            "\n"
            "commands:\n"
            "  embed          embed texts (JSONL or lines) into vectors\n"
            "  search         exact semantic search over vectors written by embed\n"
            "  recall         semantic search over the vectors in the database (exact or ANN)\n"
            "  model fetch    download the model from the Hugging Face hub (SHA-256 checked)\n"
            "  serve          the coordinator: the embedding work queue over HTTP\n"
            "  migrate        apply the work queue's database migrations\n"
            "  status         queue and coverage figures per target, straight from the database\n"
            "  token          add, list or revoke the coordinator's bearer tokens\n"
            "  work           the worker: lease texts, embed them, submit the vectors\n"
            "  load           load N-Quads or JSONL into the substrate (claims, chunks, ...)\n"
            "  wordnet        import WordNet (synsets, relations, glosses) into the substrate\n"
            "  enqueue        queue every live substrate item that has no vector yet\n"
            "  retract        retract statements (and drop their queue entries)\n"
            "  version        print the version\n"
            "\n"
            "`donto-embed <command> --help` describes each command.\n");
}

int main(int argc, char **argv) {
    /* OpenBLAS's kernels for this CPU (may re-exec; docs/engine.md "OpenBLAS") */
    donto_blas_steer(argv);
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "embed")) return donto_embed_cmd(argc - 1, argv + 1);
    if (!strcmp(cmd, "search")) return donto_search_cmd(argc - 1, argv + 1);
    if (!strcmp(cmd, "recall")) return donto_recall_cmd(argc - 1, argv + 1);
    if (!strcmp(cmd, "serve")) return donto_serve_cmd(argc - 1, argv + 1);
    if (!strcmp(cmd, "migrate")) return donto_migrate_cmd(argc - 1, argv + 1);
    if (!strcmp(cmd, "status")) return donto_status_cmd(argc - 1, argv + 1);
    if (!strcmp(cmd, "token")) return donto_token_cmd(argc - 1, argv + 1);
    if (!strcmp(cmd, "work")) return donto_work_cmd(argc - 1, argv + 1);
    if (!strcmp(cmd, "load")) return donto_load_cmd(argc - 1, argv + 1);
    if (!strcmp(cmd, "wordnet")) return donto_wordnet_cmd(argc - 1, argv + 1);
    if (!strcmp(cmd, "enqueue")) return donto_enqueue_cmd(argc - 1, argv + 1);
    if (!strcmp(cmd, "retract")) return donto_retract_cmd(argc - 1, argv + 1);
    if (!strcmp(cmd, "model")) {
        if (argc >= 3 && !strcmp(argv[2], "fetch")) return donto_model_fetch_main(argc - 2, argv + 2);
        fprintf(stderr, "usage: donto-embed model fetch [--dir D] [--help]\n");
        return 2;
    }
    if (!strcmp(cmd, "version") || !strcmp(cmd, "--version")) {
        printf("donto-embed %s\n", DONTO_VERSION);
        return 0;
    }
    fprintf(stderr, "donto-embed: unknown command '%s'\n", cmd);
    usage(stderr);
    return 2;
}
