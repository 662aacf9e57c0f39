/*
 * donto-accel: command implementations behind the thin mains in cmd/.
 * Each takes the arguments after its subcommand name (argv[0] = the
 * subcommand) and returns the process exit code: 0 ok, 1 error, 2 usage.
 */
#ifndef DONTO_CLI_H
#define DONTO_CLI_H

#ifdef __cplusplus
extern "C" {
#endif

int donto_embed_cmd(int argc, char **argv);
int donto_search_cmd(int argc, char **argv);
/* Recall over the database's vectors (src/cli/recall_cmd.c, logic in src/recall/). */
int donto_recall_cmd(int argc, char **argv);
/* The coordinator (src/cli/serve_cmd.c): serve, migrate, token add|list|revoke. */
int donto_serve_cmd(int argc, char **argv);
int donto_migrate_cmd(int argc, char **argv);
int donto_status_cmd(int argc, char **argv);
int donto_token_cmd(int argc, char **argv);
/* The embedding worker (src/cli/work_cmd.c, logic in src/worker/). */
int donto_work_cmd(int argc, char **argv);
/* The substrate (src/cli/substrate_cmd.c, logic in src/substrate/). */
int donto_load_cmd(int argc, char **argv);
int donto_wordnet_cmd(int argc, char **argv);
int donto_enqueue_cmd(int argc, char **argv);
int donto_retract_cmd(int argc, char **argv);
/* `donto-embed model fetch [options]` (src/cli/fetch_cmd.c, logic in src/fetch/). */
int donto_model_fetch_main(int argc, char **argv);
/* donto-sheaf (src/cli/sheaf_cmd.c): train | eval | infer | sweep; argv[0] = program. */
int donto_sheaf_main(int argc, char **argv);
/* donto-sheaf export | gen-substrate | stamp-history (src/cli/sheafx_cmd.c); argv[0] = the command name. */
int donto_sheaf_export_main(int argc, char **argv);
int donto_sheaf_gen_main(int argc, char **argv);
int donto_sheaf_stamp_main(int argc, char **argv);
/* donto-sheaf register | models (src/cli/sheafreg_cmd.c, logic in src/sheafreg/); argv[0] = the command name. */
int donto_sheaf_register_main(int argc, char **argv);
int donto_sheaf_models_main(int argc, char **argv);
/* donto-sheaf score (src/cli/sscore_cmd.c). */
int donto_sheaf_score_main(int argc, char **argv);

#ifdef __cplusplus
}
#endif
#endif
