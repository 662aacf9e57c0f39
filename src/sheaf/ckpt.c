/*
 * Sheaf checkpoints as JSON: family, hyperparameters, graph shape + fingerprint,
 * metrics, and every tensor. Floats are written with 9 significant digits, which
 * round-trips float32 exactly (tests/test_sheaf.c checks it bit for bit).
 * Version 2 adds "task" ({"kind": "node"|"edge", "classes", "directed"}: what the output
 * head or the edge decoder was built for; the decoder's tensors are dec.*); version 1
 * files (no "task") are node-task models and still load. Reading refuses (DONTO_E_INVALID) a value
 * that is no finite float, and tensors of another number or size than the hyperparameters make.
 */
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sheaf_int.h"

static const char *const STOP_NAMES[] = {"loss", "acc", "metric", "auto"};

static json_t *hp_json(const donto_sheaf_hp *hp) {
    json_t *o = json_object();
    json_object_set_new(o, "family", json_string(donto_sheaf_family_name(hp->family)));
    json_object_set_new(o, "orth", json_string(hp->orth == DONTO_ORTH_CAYLEY ? "cayley" : "householder"));
    json_object_set_new(o, "d", json_integer(hp->d));
    json_object_set_new(o, "layers", json_integer(hp->layers));
    json_object_set_new(o, "hidden", json_integer(hp->hidden));
    json_object_set_new(o, "add_lp", json_boolean(hp->add_lp));
    json_object_set_new(o, "add_hp", json_boolean(hp->add_hp));
    json_object_set_new(o, "left_weights", json_boolean(hp->left_weights));
    json_object_set_new(o, "right_weights", json_boolean(hp->right_weights));
    json_object_set_new(o, "edge_weights", json_boolean(hp->edge_weights));
    json_object_set_new(o, "second_linear", json_boolean(hp->second_linear));
    json_object_set_new(o, "input_dropout", json_real(hp->input_dropout));
    json_object_set_new(o, "dropout", json_real(hp->dropout));
    json_object_set_new(o, "gen_eps", json_real(hp->gen_eps));
    json_object_set_new(o, "lr", json_real(hp->lr));
    json_object_set_new(o, "weight_decay", json_real(hp->weight_decay));
    json_object_set_new(o, "sheaf_decay", json_real(hp->sheaf_decay));
    json_object_set_new(o, "epochs", json_integer(hp->epochs));
    json_object_set_new(o, "patience", json_integer(hp->patience));
    json_object_set_new(o, "stop", json_string(STOP_NAMES[hp->stop_acc >= 0 && hp->stop_acc <= 3 ? hp->stop_acc : 3]));
    json_object_set_new(o, "seed", json_integer((json_int_t)hp->seed));
    return o;
}

static double jnum(json_t *o, const char *k, double def) {
    json_t *v = json_object_get(o, k);
    return json_is_number(v) ? json_number_value(v) : def;
}
static int jbool(json_t *o, const char *k, int def) {
    json_t *v = json_object_get(o, k);
    return json_is_boolean(v) ? json_is_true(v) : def;
}

static int hp_from_json(json_t *o, donto_sheaf_hp *hp, donto_err *err) {
    donto_sheaf_hp_default(hp);
    const char *fam = json_string_value(json_object_get(o, "family"));
    if (!fam || donto_sheaf_family_parse(fam, &hp->family, &hp->orth))
        return donto_seterrc(err, DONTO_E_INVALID, "checkpoint: unknown family '%s'", fam ? fam : "(none)");
    const char *orth = json_string_value(json_object_get(o, "orth"));
    hp->orth = orth && !strcmp(orth, "cayley") ? DONTO_ORTH_CAYLEY : DONTO_ORTH_HOUSEHOLDER;
    hp->d = (int)jnum(o, "d", hp->d);
    hp->layers = (int)jnum(o, "layers", hp->layers);
    hp->hidden = (int)jnum(o, "hidden", hp->hidden);
    hp->add_lp = jbool(o, "add_lp", 0), hp->add_hp = jbool(o, "add_hp", 0);
    hp->left_weights = jbool(o, "left_weights", 1), hp->right_weights = jbool(o, "right_weights", 1);
    hp->edge_weights = jbool(o, "edge_weights", 1), hp->second_linear = jbool(o, "second_linear", 0);
    hp->input_dropout = (float)jnum(o, "input_dropout", 0), hp->dropout = (float)jnum(o, "dropout", 0);
    hp->gen_eps = jnum(o, "gen_eps", 0);
    hp->lr = (float)jnum(o, "lr", hp->lr), hp->weight_decay = (float)jnum(o, "weight_decay", hp->weight_decay);
    hp->sheaf_decay = (float)jnum(o, "sheaf_decay", hp->sheaf_decay);
    hp->epochs = (int)jnum(o, "epochs", hp->epochs), hp->patience = (int)jnum(o, "patience", hp->patience);
    const char *stop = json_string_value(json_object_get(o, "stop"));
    hp->stop_acc = DONTO_STOP_LOSS; /* version 1: "loss" or "acc" */
    for (int i = 0; stop && i < 4; i++)
        if (!strcmp(stop, STOP_NAMES[i])) hp->stop_acc = i;
    hp->seed = (uint64_t)jnum(o, "seed", (double)hp->seed);
    return 0;
}

int donto_sheaf_save(const donto_sheaf_model *m, const donto_graph *g, const donto_sheaf_metrics *met,
                     const char *path, donto_err *err) {
    json_t *root = json_object();
    json_object_set_new(root, "format", json_string("donto-sheaf-checkpoint"));
    json_object_set_new(root, "version", json_integer(2));
    json_object_set_new(root, "family", json_string(donto_sheaf_family_name(m->hp.family)));
    json_object_set_new(root, "hparams", hp_json(&m->hp));
    json_t *gj = json_object();
    json_object_set_new(gj, "name", json_string(g ? g->name : ""));
    json_object_set_new(gj, "n", json_integer(m->n));
    json_object_set_new(gj, "f", json_integer(m->f));
    json_object_set_new(gj, "nclass", json_integer(donto_sheaf_model_classes(m)));
    json_object_set_new(gj, "edges", json_integer(m->ne));
    json_object_set_new(gj, "fingerprint", json_string(g ? g->fingerprint : ""));
    if (g && g->features_from[0]) json_object_set_new(gj, "features", json_string(g->features_from));
    if (g && g->splits_from[0]) { /* what the masks were: shipped, or drawn (--random-splits) */
        json_object_set_new(gj, "splits", json_string(g->splits_from));
        json_object_set_new(gj, "random_splits", json_boolean(g->splits_random));
    }
    if (g && g->inputs_digest[0]) json_object_set_new(gj, "inputs_digest", json_string(g->inputs_digest));
    json_object_set_new(root, "graph", gj);
    json_t *tj = json_object();
    json_object_set_new(tj, "kind", json_string(m->task == DONTO_TASK_EDGE ? "edge" : "node"));
    json_object_set_new(tj, "classes", json_integer(donto_sheaf_model_classes(m)));
    if (g && g->task_name[0]) json_object_set_new(tj, "name", json_string(g->task_name));
    if (g && g->class_names && g->nclass_names == donto_sheaf_model_classes(m)) {
        json_t *names = json_array();
        for (int k = 0; k < g->nclass_names; k++) json_array_append_new(names, json_string(g->class_names[k]));
        json_object_set_new(tj, "class_names", names);
    }
    if (m->task == DONTO_TASK_EDGE) {
        json_object_set_new(tj, "directed", json_boolean(m->directed));
        json_object_set_new(tj, "decoder", json_string(m->directed ? "[h_u*h_v, |h_u-h_v|, h_u, h_v] -> MLP"
                                                                   : "[h_u*h_v, |h_u-h_v|] -> MLP"));
    }
    json_object_set_new(root, "task", tj);
    if (m->origin.split >= 0) { /* the split the weights were trained on */
        json_object_set_new(root, "split", json_integer(m->origin.split));
        json_object_set_new(root, "split_fingerprint", json_string(m->origin.split_fingerprint));
    }
    if (met) {
        json_t *mj = json_object();
        json_object_set_new(mj, "train_acc", json_real(met->train_acc));
        json_object_set_new(mj, "val_acc", json_real(met->val_acc));
        json_object_set_new(mj, "test_acc", json_real(met->test_acc));
        json_object_set_new(mj, "train_loss", json_real(met->train_loss));
        json_object_set_new(mj, "val_loss", json_real(met->val_loss));
        json_object_set_new(mj, "test_loss", json_real(met->test_loss));
        json_object_set_new(mj, "best_epoch", json_integer(met->best_epoch));
        json_object_set_new(mj, "epochs_run", json_integer(met->epochs_run));
        json_object_set_new(root, "metrics", mj);
    }
    json_t *ts = json_array();
    for (int i = 0; i < m->nt; i++) {
        const donto_sheaf_tensor *t = &m->t[i];
        json_t *o = json_object(), *data = json_array();
        json_object_set_new(o, "name", json_string(t->name));
        json_object_set_new(o, "rows", json_integer(t->rows));
        json_object_set_new(o, "cols", json_integer(t->cols));
        for (size_t j = 0; j < t->size; j++) json_array_append_new(data, json_real(m->p[t->off + j]));
        json_object_set_new(o, "data", data);
        json_array_append_new(ts, o);
    }
    json_object_set_new(root, "tensors", ts);
    int rc = json_dump_file(root, path, JSON_COMPACT | JSON_REAL_PRECISION(9));
    json_decref(root);
    if (rc) return donto_seterr(err, "%s: cannot write checkpoint", path);
    return 0;
}

donto_sheaf_model *donto_sheaf_load(const char *path, const donto_graph *g, donto_sheaf_hp *hp_out, donto_err *err) {
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (!root) return donto_seterrc(err, DONTO_E_INVALID, "%s:%d: %s", path, je.line, je.text), NULL;
    donto_sheaf_model *m = sheaf_ckpt_model(root, path, g, hp_out, err);
    json_decref(root);
    return m;
}

donto_sheaf_model *sheaf_ckpt_model(json_t *root, const char *path, const donto_graph *g, donto_sheaf_hp *hp_out,
                                    donto_err *err) {
    donto_sheaf_model *m = NULL;
    const char *fmt = json_string_value(json_object_get(root, "format"));
    donto_sheaf_hp hp;
    if (!fmt || strcmp(fmt, "donto-sheaf-checkpoint")) {
        donto_seterrc(err, DONTO_E_INVALID, "%s: not a donto-sheaf checkpoint", path);
        goto out;
    }
    json_int_t version = json_integer_value(json_object_get(root, "version"));
    if (version > 2) {
        donto_seterrc(err, DONTO_E_INVALID, "%s: checkpoint version %d is newer than this reader (1 and 2)", path, (int)version);
        goto out;
    }
    if (hp_from_json(json_object_get(root, "hparams"), &hp, err)) goto out;
    json_t *gj = json_object_get(root, "graph"), *tj = json_object_get(root, "task");
    const char *kind = json_string_value(json_object_get(tj, "kind"));
    int edge = kind && !strcmp(kind, "edge");
    if (edge != (g->task_kind == DONTO_TASK_EDGE)) {
        donto_seterrc(err, DONTO_E_INVALID, "%s: a model for an %s task, but the graph's task is an %s task (--task?)", path,
                     edge ? "edge" : "node", g->task_kind == DONTO_TASK_EDGE ? "edge" : "node");
        goto out;
    }
    if (edge && jbool(tj, "directed", 0) != (g->directed != 0)) {
        donto_seterrc(err, DONTO_E_INVALID, "%s: a model for a %s edge task, the graph's is %s", path,
                     jbool(tj, "directed", 0) ? "directed" : "undirected", g->directed ? "directed" : "undirected");
        goto out;
    }
    int f = (int)jnum(gj, "f", -1), K = (int)jnum(gj, "nclass", -1);
    if (f != g->f) {
        donto_seterrc(err, DONTO_E_INVALID, "%s: trained on %d features, the graph has %d", path, f, g->f);
        goto out;
    }
    if (K != g->nclass) {
        if (K < g->nclass) {
            donto_seterrc(err, DONTO_E_INVALID, "%s: trained for %d classes, the graph has labels up to %d", path, K, g->nclass - 1);
            goto out;
        }
    }
    donto_graph gg = *g;
    gg.nclass = K; /* unlabelled inference graphs may name fewer classes */
    m = donto_sheaf_model_new(&hp, &gg, err);
    if (!m) goto out;
    json_t *ts = json_object_get(root, "tensors");
    if (!json_is_array(ts) || (int)json_array_size(ts) != m->nt) {
        donto_seterrc(err, DONTO_E_INVALID, "%s: %zu tensors, the model has %d", path, json_array_size(ts), m->nt);
        goto fail;
    }
    for (int i = 0; i < m->nt; i++) {
        json_t *o = json_array_get(ts, i), *data = json_object_get(o, "data");
        const char *name = json_string_value(json_object_get(o, "name"));
        if (!name || strcmp(name, m->t[i].name) || json_array_size(data) != m->t[i].size) {
            donto_seterrc(err, DONTO_E_INVALID, "%s: tensor %d is '%s' with %zu values, expected '%s' with %zu", path, i, name ? name : "?",
                         json_array_size(data), m->t[i].name, m->t[i].size);
            goto fail;
        }
        for (size_t j = 0; j < m->t[i].size; j++) {
            json_t *v = json_array_get(data, j);
            double x = json_is_number(v) ? json_number_value(v) : NAN;
            /* finite as a float: below FLT_MAX + half an ulp (what rounds to FLT_MAX) */
            if (!json_is_number(v) || !(fabs(x) < 0x1.ffffffp127)) {
                donto_seterrc(err, DONTO_E_INVALID, "%s: tensor '%s' value %zu is %s", path, name, j,
                              json_is_number(v) ? "not a finite float" : "not a number");
                goto fail;
            }
            m->p[m->t[i].off + j] = (float)x;
        }
    }
    const char *gname = json_string_value(json_object_get(gj, "name"));
    const char *gfp = json_string_value(json_object_get(gj, "fingerprint"));
    const char *sfp = json_string_value(json_object_get(root, "split_fingerprint"));
    json_t *sp = json_object_get(root, "split");
    snprintf(m->origin.graph, sizeof m->origin.graph, "%s", gname ? gname : "");
    snprintf(m->origin.fingerprint, sizeof m->origin.fingerprint, "%s", gfp ? gfp : "");
    m->origin.split = json_is_integer(sp) && json_integer_value(sp) >= 0 && json_integer_value(sp) < INT_MAX
                          ? (int)json_integer_value(sp) : -1;
    snprintf(m->origin.split_fingerprint, sizeof m->origin.split_fingerprint, "%s", sfp ? sfp : "");
    /* the edge loss's class weights are the trained split's (training set them) */
    if (m->origin.split >= 0 && m->origin.split < g->nsplits) donto_sheaf_set_class_weights(m, g, m->origin.split);
    if (hp_out) *hp_out = m->hp;
    goto out;
fail:
    donto_sheaf_model_free(m);
    m = NULL;
out:
    return m;
}

donto_sheaf_model *donto_sheaf_load_buffer(const char *buf, size_t len, const char *label, const donto_graph *g,
                                           donto_sheaf_hp *hp_out, donto_err *err) {
    json_error_t je;
    if (!label) label = "checkpoint";
    json_t *root = json_loadb(buf, len, 0, &je);
    if (!root) return donto_seterrc(err, DONTO_E_INVALID, "%s:%d: %s", label, je.line, je.text), NULL;
    donto_sheaf_model *m = sheaf_ckpt_model(root, label, g, hp_out, err);
    json_decref(root);
    return m;
}

/* ------------------------------------------------------------------ */
/* which graph and split a model belongs to                            */

int donto_sheaf_check_graph(const donto_sheaf_model *m, const donto_graph *g, donto_err *err) {
    const donto_sheaf_origin *o = &m->origin;
    if (o->fingerprint[0] && !strcmp(o->fingerprint, g->fingerprint)) return 0;
    if (!o->fingerprint[0])
        return donto_seterr(err, "records no graph fingerprint, so it cannot be told trained on '%s' (fingerprint %.16s)",
                            g->name[0] ? g->name : "(unnamed)", g->fingerprint);
    return donto_seterr(err, "trained on graph '%s' (fingerprint %.16s), not on '%s' (fingerprint %.16s)",
                        o->graph[0] ? o->graph : "(unnamed)", o->fingerprint, g->name[0] ? g->name : "(unnamed)",
                        g->fingerprint);
}

int donto_sheaf_held_out(const donto_sheaf_model *m, const donto_graph *g, int split) {
    const donto_sheaf_origin *o = &m->origin;
    if (o->split < 0 || split != o->split || !o->fingerprint[0] || strcmp(o->fingerprint, g->fingerprint)) return 0;
    char sfp[65];
    donto_graph_split_fingerprint(g, split, sfp);
    return sfp[0] && !strcmp(sfp, o->split_fingerprint);
}
