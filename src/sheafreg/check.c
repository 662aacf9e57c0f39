/* donto-accel: the registry's gate (donto_sheaf_registry_check; docs/sheaf-serving.md
 * "The gate"). A checkpoint is refused, before anything is written, unless
 *   1. it parses as JSON with "format": "donto-sheaf-checkpoint" and a version this
 *      build reads (1, 2);
 *   2. it loads into a model for a probe graph of its feature dimension f: the
 *      loader checks every tensor's name and size against the model its
 *      hyperparameters build, and that every weight is finite as float32;
 *   3. our forward (no dropout) on the probe graph agrees with the PyTorch
 *      reference: max |logp_ours - logp_ref| <= DONTO_SHEAF_PARITY_TOL.
 * The probe graph and the reference outputs come from the checkpoint's "probe"
 * member when it has one (docs/sheaf.md "Probe": a graph in the export format
 * and the reference's log-probabilities; a checkpoint trained elsewhere ships
 * them, and one whose weights changed after its probe was recorded fails here).
 * Otherwise the graph is generated from the checkpoint (seeded by a hash of its
 * bytes: the same checkpoint always gets the same probe) and the reference is
 * run as a command on the checkpoint and that graph. The graph goes through the
 * export reader (a temporary file), so ours and the reference read the same
 * float32 features and the same edges. */
#define _POSIX_C_SOURCE 200809L
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "donto/sheaf.h"
#include "donto/sheaf_registry.h"

#ifndef DONTO_SOURCE_DIR
#define DONTO_SOURCE_DIR "."
#endif

/* Probe size when the checkpoint carries none. */
enum { PROBE_NODES = 24, PROBE_EDGES = 48, PROBE_PAIRS = 32 };

void donto_sheaf_check_free(donto_sheaf_check *c) {
    if (!c) return;
    free(c->hparams), free(c->metrics), free(c->export_digest), free(c->parity);
    memset(c, 0, sizeof *c);
}

int donto_sheaf_registry_default_reference(char *out, size_t cap) {
    char py[1024], script[1024];
    snprintf(py, sizeof py, "%s/.venv/bin/python", DONTO_SOURCE_DIR);
    snprintf(script, sizeof script, "%s/tests/ref/sheaf_ref.py", DONTO_SOURCE_DIR);
    if (access(py, X_OK)) return snprintf(out, cap, "%s not found", py), -1;
    if (access(script, R_OK)) return snprintf(out, cap, "%s not found", script), -1;
    snprintf(out, cap, "%s %s infer", py, script);
    return 0;
}

static uint64_t fnv1a(const char *p, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)p[i]) * 1099511628211ull;
    return h;
}

/* A generated probe: a seeded random graph with the checkpoint's f, as an export
 * file (version 2, one task "probe": node labels or pairs of the checkpoint's kind). */
static json_t *probe_graph(int f, int classes, int edge, int directed, uint64_t seed, donto_err *err) {
    donto_graph g;
    if (donto_graph_random(&g, PROBE_NODES, f, edge ? 2 : classes, PROBE_EDGES, seed, err)) return NULL;
    if (edge && donto_graph_random_pairs(&g, PROBE_PAIRS, classes, directed, seed + 1, err)) {
        donto_graph_free(&g);
        return NULL;
    }
    json_t *root = json_object(), *nodes = json_array(), *edges = json_array(), *task = json_object(),
           *cls = json_array();
    json_object_set_new(root, "format", json_string("donto-sheaf-graph"));
    json_object_set_new(root, "version", json_integer(2));
    json_object_set_new(root, "provenance", json_pack("{s:s, s:I}", "source", "donto-sheaf register (generated probe)",
                                                      "seed", (json_int_t)(seed >> 1)));
    json_object_set_new(root, "feature_dim", json_integer(f));
    char id[32];
    for (int v = 0; v < g.n; v++) {
        /* rows of unit L2 norm, the scale of the features models are trained on (sentence
         * embeddings are L2-normalised, geom-gcn rows sum to 1): random features of norm
         * sqrt(f) push log-probabilities far out, where float32 alone costs 1e-5 */
        double nn = 0;
        for (int k = 0; k < f; k++) nn += (double)g.x[(size_t)v * f + k] * g.x[(size_t)v * f + k];
        nn = nn > 0 ? 1 / sqrt(nn) : 0;
        json_t *x = json_array();
        for (int k = 0; k < f; k++) json_array_append_new(x, json_real((float)(g.x[(size_t)v * f + k] * nn)));
        snprintf(id, sizeof id, "p%d", v);
        json_array_append_new(nodes, json_pack("{s:s, s:o}", "id", id, "features", x));
    }
    for (int e = 0; e < g.ne; e++) {
        char a[32], b[32];
        snprintf(a, sizeof a, "p%d", g.eu[e]), snprintf(b, sizeof b, "p%d", g.ev[e]);
        json_array_append_new(edges, json_pack("{s:s, s:s}", "src", a, "dst", b));
    }
    for (int c = 0; c < classes; c++) {
        snprintf(id, sizeof id, "c%d", c);
        json_array_append_new(cls, json_string(id));
    }
    json_object_set_new(task, "name", json_string("probe"));
    json_object_set_new(task, "classes", cls);
    if (edge) {
        json_t *pairs = json_array();
        json_object_set_new(task, "kind", json_string("edge"));
        json_object_set_new(task, "directed", json_boolean(directed));
        for (int p = 0; p < g.npairs; p++) {
            char a[32], b[32];
            snprintf(a, sizeof a, "p%d", g.pu[p]), snprintf(b, sizeof b, "p%d", g.pv[p]);
            json_array_append_new(pairs, json_pack("[s, s, i]", a, b, g.pc[p]));
        }
        json_object_set_new(task, "pairs", pairs);
    } else {
        json_t *labels = json_object();
        for (int v = 0; v < g.n; v++) {
            snprintf(id, sizeof id, "p%d", v);
            if (g.y[v] >= 0 && g.y[v] < classes) json_object_set_new(labels, id, json_integer(g.y[v]));
        }
        json_object_set_new(task, "labels", labels);
    }
    json_object_set_new(root, "nodes", nodes);
    json_object_set_new(root, "edges", edges);
    json_object_set_new(root, "tasks", json_pack("[o]", task));
    donto_graph_free(&g);
    return root;
}

/* logp rows x cols from a JSON array of arrays; -1 when the shape differs. */
static int read_logp(json_t *a, int rows, int cols, double *out) {
    if (!json_is_array(a) || (int)json_array_size(a) != rows) return -1;
    for (int i = 0; i < rows; i++) {
        json_t *r = json_array_get(a, i);
        if (!json_is_array(r) || (int)json_array_size(r) != cols) return -1;
        for (int k = 0; k < cols; k++) {
            json_t *v = json_array_get(r, k);
            if (!json_is_number(v)) return -1;
            out[(size_t)i * cols + k] = json_number_value(v);
        }
    }
    return 0;
}

static int write_file(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = fwrite(p, 1, n, f);
    return fclose(f) || w != n ? -1 : 0;
}

/* The last non-empty line of a file (the reference's error), into out. */
static void last_line(const char *path, char *out, size_t cap) {
    out[0] = 0;
    FILE *f = fopen(path, "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        size_t l = strlen(line);
        while (l && (line[l - 1] == '\n' || line[l - 1] == '\r')) line[--l] = 0;
        if (l) snprintf(out, cap, "%s", line);
    }
    fclose(f);
}

static void iso_now(char out[32]) {
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(out, 32, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

int donto_sheaf_registry_check(const char *buf, size_t len, const donto_sheaf_check_opts *o, donto_sheaf_check *out,
                               donto_err *err) {
    memset(out, 0, sizeof *out);
    const char *label = o && o->label ? o->label : "checkpoint";
    json_error_t je;
    json_t *root = json_loadb(buf, len, 0, &je);
    if (!root)
        return donto_seterrc(err, DONTO_E_INVALID, "%s: not a checkpoint: not valid JSON at line %d (%s)%s", label,
                             je.line, je.text, je.position >= (int)len - 1 ? "; truncated?" : "");
    int rc = -1;
    char dir[] = "/tmp/donto-sheafreg.XXXXXX";
    int have_dir = 0;
    donto_graph g;
    int have_g = 0;
    donto_sheaf_model *m = NULL;
    double *ref = NULL;
    json_t *pj = NULL, *refj = NULL;
    const char *fmt = json_string_value(json_object_get(root, "format"));
    if (!json_is_object(root) || !fmt || strcmp(fmt, "donto-sheaf-checkpoint")) {
        donto_seterrc(err, DONTO_E_INVALID, "%s: not a donto-sheaf checkpoint (no \"format\": \"donto-sheaf-checkpoint\")",
                      label);
        goto out;
    }
    json_t *ver = json_object_get(root, "version");
    if (!json_is_integer(ver) || json_integer_value(ver) < 1 || json_integer_value(ver) > 2) {
        donto_seterrc(err, DONTO_E_INVALID, "%s: checkpoint version %s is not one this build reads (1, 2)", label,
                      json_is_integer(ver) ? "other" : "missing");
        if (json_is_integer(ver))
            donto_seterrc(err, DONTO_E_INVALID, "%s: checkpoint version %lld is not one this build reads (1, 2)", label,
                          (long long)json_integer_value(ver));
        goto out;
    }
    json_t *gj = json_object_get(root, "graph"), *tj = json_object_get(root, "task"), *hp = json_object_get(root, "hparams");
    const char *kind = json_string_value(json_object_get(tj, "kind"));
    int edge = kind && !strcmp(kind, "edge"), directed = json_is_true(json_object_get(tj, "directed"));
    json_t *fj = json_object_get(gj, "f"), *kj = json_object_get(tj, "classes");
    if (!json_is_integer(kj)) kj = json_object_get(gj, "nclass");
    if (!json_is_object(hp) || !json_is_integer(fj) || json_integer_value(fj) < 1 || json_integer_value(fj) > 1000000 ||
        !json_is_integer(kj) || json_integer_value(kj) < 1 || json_integer_value(kj) > 100000) {
        donto_seterrc(err, DONTO_E_INVALID, "%s: checkpoint lacks \"hparams\", \"graph\".\"f\" or the class count", label);
        goto out;
    }
    out->f = (int)json_integer_value(fj), out->classes = (int)json_integer_value(kj);
    snprintf(out->task_kind, sizeof out->task_kind, "%s", edge ? "edge" : "node");
    const char *tn = json_string_value(json_object_get(tj, "name"));
    snprintf(out->task, sizeof out->task, "%s", tn ? tn : "");
    const char *fam = json_string_value(json_object_get(hp, "family"));
    const char *orth = json_string_value(json_object_get(hp, "orth"));
    snprintf(out->family, sizeof out->family, "%s", !fam ? "?" : !strcmp(fam, "orth") && orth && !strcmp(orth, "cayley") ? "cayley" : fam);
    out->hparams = json_dumps(hp, JSON_COMPACT | JSON_SORT_KEYS);
    json_t *mj = json_object_get(root, "metrics");
    out->metrics = json_is_object(mj) ? json_dumps(mj, JSON_COMPACT | JSON_REAL_PRECISION(9)) : strdup("{}");
    const char *dg = json_string_value(json_object_get(gj, "inputs_digest"));
    out->export_digest = dg && *dg ? strdup(dg) : NULL;

    /* the probe graph */
    if (!mkdtemp(dir)) {
        donto_seterrc(err, DONTO_E_UNAVAILABLE, "cannot make a temporary directory under /tmp");
        goto out;
    }
    have_dir = 1;
    char gpath[64], ckpath[64], refpath[64], errpath[64];
    snprintf(gpath, sizeof gpath, "%s/probe.json", dir);
    snprintf(ckpath, sizeof ckpath, "%s/ckpt.json", dir);
    snprintf(refpath, sizeof refpath, "%s/ref.json", dir);
    snprintf(errpath, sizeof errpath, "%s/ref.err", dir);
    json_t *probe = json_object_get(root, "probe");
    json_t *pgraph = json_object_get(probe, "graph"), *plogp = json_object_get(probe, "logp");
    if (probe && (!json_is_object(pgraph) || !json_is_array(plogp))) {
        donto_seterrc(err, DONTO_E_INVALID, "%s: \"probe\" needs a \"graph\" object and a \"logp\" array (docs/sheaf.md \"Probe\")",
                      label);
        goto out;
    }
    if (probe) {
        snprintf(out->probe_source, sizeof out->probe_source, "checkpoint");
        pj = json_incref(pgraph);
    } else {
        snprintf(out->probe_source, sizeof out->probe_source, "generated");
        pj = probe_graph(out->f, out->classes, edge, directed, fnv1a(buf, len) | 1, err);
        if (!pj) goto out;
    }
    if (json_dump_file(pj, gpath, JSON_COMPACT | JSON_REAL_PRECISION(9))) {
        donto_seterrc(err, DONTO_E_UNAVAILABLE, "cannot write %s", gpath);
        goto out;
    }
    donto_graph_opts go = {0};
    go.splits = DONTO_SPLITS_OPTIONAL;
    char why[sizeof err->msg];
    if (donto_graph_load_opts(&g, gpath, &go, err)) {
        snprintf(why, sizeof why, "%s", err->msg);
        donto_seterrc(err, DONTO_E_INVALID, "%s: probe graph: %s", label, why);
        goto out;
    }
    have_g = 1;
    /* shapes and finiteness: the loader builds the model the hyperparameters say */
    m = donto_sheaf_load_buffer(buf, len, label, &g, NULL, err);
    if (!m) {
        snprintf(why, sizeof why, "%s", err->msg);
        donto_seterrc(err, DONTO_E_INVALID, "%s", why);
        goto out;
    }
    const float *lp;
    donto_sheaf_forward(m, &g, 0, 0, NULL, &lp);
    int K = donto_sheaf_model_classes(m), rows = g.task_kind == DONTO_TASK_EDGE ? g.npairs : g.n;
    out->probe_nodes = g.n, out->probe_rows = rows;
    if (!(ref = malloc((size_t)rows * K * sizeof *ref))) {
        donto_seterrc(err, DONTO_E_NOMEM, "out of memory");
        goto out;
    }
    /* the reference's outputs */
    if (probe) {
        const char *who = json_string_value(json_object_get(probe, "reference"));
        snprintf(out->reference, sizeof out->reference, "%s (recorded in the checkpoint)", who ? who : "unnamed reference");
        if (read_logp(plogp, rows, K, ref)) {
            donto_seterrc(err, DONTO_E_INVALID, "%s: probe \"logp\" is not %d rows of %d numbers", label, rows, K);
            goto out;
        }
    } else {
        if (!o || !o->reference || !*o->reference) {
            donto_sheaf_registry_default_reference(why, sizeof why);
            donto_seterrc(err, DONTO_E_INVALID,
                          "%s: no reference to check parity against: the checkpoint carries no \"probe\" outputs and no "
                          "--reference was given (the repository's default: %s). Give --reference 'PYTHON "
                          "tests/ref/sheaf_ref.py infer' (needs torch), or add a probe with `sheaf_ref.py probe`",
                          label, why);
            goto out;
        }
        if (write_file(ckpath, buf, len)) {
            donto_seterrc(err, DONTO_E_UNAVAILABLE, "cannot write %s", ckpath);
            goto out;
        }
        size_t cl = strlen(o->reference) + 512;
        char *cmd = malloc(cl);
        snprintf(cmd, cl, "%s --checkpoint %s --graph %s --out %s >%s 2>&1 </dev/null", o->reference, ckpath, gpath,
                 refpath, errpath);
        int st = system(cmd);
        free(cmd);
        if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            char line[512];
            last_line(errpath, line, sizeof line);
            donto_seterrc(err, DONTO_E_INVALID, "%s: the reference failed (exit %d): %s [reference: %s]", label,
                          st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1, line[0] ? line : "no output", o->reference);
            goto out;
        }
        refj = json_load_file(refpath, 0, &je);
        const char *who = json_string_value(json_object_get(refj, "reference"));
        snprintf(out->reference, sizeof out->reference, "%s", who ? who : o->reference);
        if (!refj || read_logp(json_object_get(refj, "logp"), rows, K, ref)) {
            donto_seterrc(err, DONTO_E_INVALID, "%s: the reference wrote no %d x %d \"logp\" to %s [reference: %s]", label,
                          rows, K, refpath, o->reference);
            goto out;
        }
    }
    /* the gate */
    double worst = 0;
    int wi = 0, wk = 0;
    for (int i = 0; i < rows; i++)
        for (int k = 0; k < K; k++) {
            double d = fabs((double)lp[(size_t)i * K + k] - ref[(size_t)i * K + k]);
            if (!(d <= worst)) worst = d, wi = i, wk = k; /* NaN is worst */
        }
    out->max_abs = worst;
    char when[32];
    iso_now(when);
    json_t *par = json_pack("{s:f, s:f, s:{s:s, s:i, s:i, s:i, s:s}, s:s, s:s}", "max_abs", isfinite(worst) ? worst : 1e308,
                            "tol", DONTO_SHEAF_PARITY_TOL, "probe", "source", out->probe_source, "nodes", g.n, "rows", rows,
                            "classes", K, "kind", out->task_kind, "reference", out->reference, "checked_at", when);
    out->parity = json_dumps(par, JSON_COMPACT | JSON_REAL_PRECISION(6));
    json_decref(par);
    if (!(worst <= DONTO_SHEAF_PARITY_TOL)) {
        donto_seterrc(err, DONTO_E_INVALID,
                      "%s: parity gate failed: max abs diff of log-probabilities %.3e > %.0e on the %s probe (%d %s x %d "
                      "classes; worst at %s %d class %d: ours %.9g, reference %.9g) [reference: %s]",
                      label, worst, DONTO_SHEAF_PARITY_TOL, out->probe_source, rows, edge ? "pairs" : "nodes", K,
                      edge ? "pair" : "node", wi, wk, (double)lp[(size_t)wi * K + wk], ref[(size_t)wi * K + wk],
                      out->reference);
        goto out;
    }
    rc = 0;
out:
    if (have_dir) {
        unlink(gpath), unlink(ckpath), unlink(refpath), unlink(errpath);
        rmdir(dir);
    }
    if (m) donto_sheaf_model_free(m);
    if (have_g) donto_graph_free(&g);
    free(ref);
    json_decref(pj), json_decref(refj), json_decref(root);
    return rc;
}
