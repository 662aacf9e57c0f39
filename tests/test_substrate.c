/* The substrate: text builders (once), then one suite run against every
 * backend: SQLite (a temp file) always, PostgreSQL when DONTO_TEST_PG_URL is
 * set (tests/substrate.cmake starts a throwaway cluster for that). `test_substrate
 * pg` runs PostgreSQL only and fails when no URL is given. */
#define _POSIX_C_SOURCE 200809L
#include <libpq-fe.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "sqlq.h"
#include "donto/store.h"
#include "donto/substrate.h"
#include "donto/tokenizer.h"

static const char *g_backend;
static const char *g_pg_url;
static char g_tmpdir[256];
static int g_case;
static char g_url[512];

static donto_store *fresh(void) {
    donto_err err = {0};
    if (strcmp(g_backend, "pg") == 0) {
        PGconn *c = PQconnectdb(g_pg_url);
        PGresult *r = PQexec(c, "SET client_min_messages = warning; DROP SCHEMA public CASCADE; CREATE SCHEMA public");
        if (PQresultStatus(r) != PGRES_COMMAND_OK) {
            fprintf(stderr, "pg reset: %s", PQerrorMessage(c));
            exit(1);
        }
        PQclear(r);
        PQfinish(c);
        snprintf(g_url, sizeof g_url, "%s", g_pg_url);
    } else {
        snprintf(g_url, sizeof g_url, "%s/case%d.db", g_tmpdir, ++g_case);
    }
    donto_store *s = NULL;
    if (donto_store_open(g_url, &s, &err) || donto_substrate_migrate(s, &err)) {
        fprintf(stderr, "%s: open/migrate %s: %s\n", g_backend, g_url, err.msg);
        exit(1);
    }
    return s;
}

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        exit(1);
    }
    fputs(text, f);
    fclose(f);
}

#define STR_EQ(a, b)                                                                   \
    do {                                                                               \
        const char *a_ = (a), *b_ = (b);                                               \
        CHECK(a_ && b_ && strcmp(a_, b_) == 0, "'%s' != '%s'", a_ ? a_ : "(null)",     \
              b_ ? b_ : "(null)");                                                     \
    } while (0)

/* ---- builders (no database) ------------------------------------------------ */

static void hum(const char *iri, const char *want) {
    char *h = donto_humanize_iri(iri);
    STR_EQ(h, want);
    free(h);
}

static void test_builders(void) {
    hum("http://example.org/ns#hasPart", "has part");
    hum("http://example.org/ns/birth_date", "birth date");
    hum("http://example.org/HTTPServer", "HTTP server");
    hum("http://example.org/things/Thing/", "Thing");
    hum("ex:isPartOf", "is part of");
    hum("ex:PartOf", "Part of");
    hum("wn:hypernym", "hypernym");
    hum("urn:x:part%20of", "part of");
    hum("http://example.org/a--b__c", "a b c");
    hum("plain", "plain");
    hum("http://example.org/v2Release", "v2 release");
    hum("", "");

    char *t = donto_render_claim("ex:dog", "dog", "ex:isA", NULL, "ex:Animal", NULL, NULL);
    STR_EQ(t, "dog - is a - Animal");
    free(t);
    t = donto_render_claim("ex:paris", NULL, "ex:name", "has the name", NULL, NULL,
                           "{\"lang\":\"fr\",\"v\":\"Paris\"}");
    STR_EQ(t, "paris - has the name - Paris");
    free(t);
    t = donto_render_claim("ex:x", "", "ex:count", NULL, NULL, NULL, "{\"v\":42}");
    STR_EQ(t, "x - count - 42");
    free(t);
    t = donto_render_claim("ex:x", NULL, "ex:p", NULL, NULL, NULL, "\"bare\"");
    STR_EQ(t, "x - p - bare");
    free(t);
    t = donto_render_predicate("wn:hypernym", "is a kind of", "WordNet relation hypernym");
    STR_EQ(t, "is a kind of: WordNet relation hypernym");
    free(t);
    t = donto_render_predicate("ex:hasPart", NULL, NULL);
    STR_EQ(t, "has part");
    free(t);
    t = donto_render_entity("wn:02084071-n", "dog, domestic dog", "noun");
    STR_EQ(t, "dog, domestic dog (noun)");
    free(t);
    t = donto_render_entity("ex:SomeThing", NULL, NULL);
    STR_EQ(t, "Some thing");
    free(t);

    /* Chunk cap, whitespace approximation: a word = 1 token (+1 per
     * punctuation character), [CLS] and [SEP] count. */
    char words[4000] = "";
    for (int i = 0; i < 400; i++) strcat(words, i ? " w" : "w");
    t = donto_render_chunk(words, NULL, 300);
    CHECK_EQ_INT(strlen(t), 298 * 2 - 1); /* 298 words, 297 spaces */
    free(t);
    t = donto_render_chunk("short text.", NULL, 300);
    STR_EQ(t, "short text.");
    free(t);
    t = donto_render_chunk("a, b. c d", NULL, 6); /* 2 + "a,"(2) + "b."(2) = 6 */
    STR_EQ(t, "a, b.");
    free(t);
    t = donto_render_chunk("  lead  space", NULL, 300);
    STR_EQ(t, "  lead  space");
    free(t);

    /* Chunk cap with a WordPiece vocabulary. */
    char vocab[300];
    snprintf(vocab, sizeof vocab, "%s/vocab.txt", g_tmpdir);
    write_file(vocab, "[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\nworld\n##s\n,\n.\n");
    donto_tokenizer *tok = NULL;
    donto_err err = {0};
    CHECK(donto_tokenizer_open(vocab, NULL, &tok, &err) == 0, "%s", err.msg);
    if (tok) {
        /* hello | world ##s , | hello | world . -> 7 pieces + 2 */
        t = donto_render_chunk("hello worlds, hello world.", tok, 6);
        STR_EQ(t, "hello worlds,");
        free(t);
        t = donto_render_chunk("hello worlds, hello world.", tok, 9);
        STR_EQ(t, "hello worlds, hello world.");
        free(t);
        t = donto_render_chunk("hello worlds, hello world.", tok, 8);
        STR_EQ(t, "hello worlds, hello");
        free(t);
        donto_tokenizer_close(tok);
    }

    /* ids */
    char a[37], b[37];
    donto_statement_id("c000001", a);
    donto_statement_id("c000001", b);
    STR_EQ(a, b);
    CHECK(donto_is_uuid(a), "%s is not a uuid", a);
    CHECK(a[14] == '8', "version nibble of %s", a);
    donto_statement_id("c000002", b);
    CHECK(strcmp(a, b) != 0, "different names, same id %s", a);
    donto_statement_id("0F1E2D3C-4B5A-6978-8796-A5B4C3D2E1F0", b);
    STR_EQ(b, "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0");
    CHECK(!donto_is_uuid("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f"), "short uuid accepted");
    CHECK(!donto_is_uuid("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0x"), "long uuid accepted");
    CHECK(!donto_is_uuid("0f1e2d3c04b5a-6978-8796-a5b4c3d2e1f0"), "bad dash accepted");
    STR_EQ(donto_wordnet_phrase("hypernym"), "is a kind of");
    STR_EQ(donto_wordnet_phrase("attribute"), "is an attribute with the value");
    CHECK(donto_wordnet_phrase("nope") == NULL, "unknown relation has a phrase");
    STR_EQ(donto_wordnet_pos_name("02084071-n"), "noun");
    STR_EQ(donto_wordnet_pos_name("01601592-s"), "adjective");
    CHECK(donto_wordnet_pos_name("02084071") == NULL, "no suffix, a part of speech");
    CHECK(donto_wordnet_pos_name("02084071-x") == NULL, "bad suffix, a part of speech");
}

/* ---- helpers for the suite ---------------------------------------------------- */

static void counts(donto_store *s, int64_t out[DONTO_TARGET_N]) {
    donto_err err = {0};
    CHECK(donto_substrate_counts(s, out, &err) == 0, "%s counts: %s", g_backend, err.msg);
}

static int64_t pending(donto_store *s, donto_target t) {
    donto_target_stats st[DONTO_TARGET_N];
    donto_err err = {0};
    CHECK(donto_store_stats(s, 0, st, &err) == 0, "%s stats: %s", g_backend, err.msg);
    return st[t].pending + st[t].leased;
}

static int load(donto_store *s, const char *name, const char *text, donto_load_format f,
                donto_load_stats *st, donto_err *err) {
    return donto_load_buffer(s, name, text, strlen(text), f, st, err);
}

static const char NQ[] =
    "# a comment\n"
    "<http://ex.org/dog> <http://ex.org/isA> <http://ex.org/Animal> .\n"
    "\n"
    "<http://ex.org/dog> <http://www.w3.org/2000/01/rdf-schema#label> \"dog\"@en .\n"
    "<http://ex.org/dog> <http://ex.org/weight> \"30\"^^<http://www.w3.org/2001/XMLSchema#int> <http://ex.org/g1> .\n"
    "_:b1 <http://ex.org/says> \"tab\\there \\\"quoted\\\" \\u00e9\" .  # trailing comment\n"
    "<http://ex.org/cat> <http://ex.org/isA> <http://ex.org/Animal> <http://ex.org/g1> .\n";

static void test_nquads(void) {
    donto_err err = {0};
    donto_store *s = fresh();
    donto_load_stats st;
    CHECK(load(s, "a.nq", NQ, DONTO_FORMAT_NQUADS, &st, &err) == 0, "%s load: %s", g_backend, err.msg);
    CHECK_EQ_INT(st.lines, 7);
    CHECK_EQ_INT(st.statements, 5);
    CHECK_EQ_INT(st.predicates, 4);
    int64_t c[DONTO_TARGET_N];
    counts(s, c);
    CHECK_EQ_INT(c[DONTO_TARGET_CLAIM], 5);
    CHECK_EQ_INT(c[DONTO_TARGET_PREDICATE], 4);
    CHECK_EQ_INT(c[DONTO_TARGET_ENTITY], 4); /* dog, Animal, _:b1, cat */
    /* Duplicate load: nothing new. */
    CHECK(load(s, "a.nq", NQ, DONTO_FORMAT_NQUADS, &st, &err) == 0, "%s reload: %s", g_backend, err.msg);
    CHECK_EQ_INT(st.statements + st.predicates + st.entities, 0);
    counts(s, c);
    CHECK_EQ_INT(c[DONTO_TARGET_CLAIM], 5);

    /* Texts: the label names the dog; literals read as their value. */
    size_t added = 0;
    CHECK(donto_substrate_enqueue(s, DONTO_TARGET_CLAIM, "m", NULL, 2, NULL, NULL, &added, &err) == 0,
          "%s enqueue: %s", g_backend, err.msg);
    CHECK_EQ_INT(added, 5);
    donto_lease_batch b = {0};
    CHECK(donto_store_lease(s, "w", 100, DONTO_TARGET_CLAIM, 0, 1000, &b, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(b.n, 5);
    int seen_dog = 0, seen_esc = 0, seen_w = 0;
    for (size_t i = 0; i < b.n; i++) {
        if (!strcmp(b.items[i].text, "dog - is a - Animal")) seen_dog++;
        if (!strcmp(b.items[i].text, "b1 - says - tab\there \"quoted\" \xc3\xa9")) seen_esc++;
        if (!strcmp(b.items[i].text, "dog - weight - 30")) seen_w++;
        /* the queued text is the display text */
        char *tx = NULL;
        const char *id = b.items[i].item_id;
        CHECK(donto_substrate_texts(s, DONTO_TARGET_CLAIM, &id, 1, &tx, &err) == 0, "%s", err.msg);
        STR_EQ(tx, b.items[i].text);
        free(tx);
    }
    CHECK(seen_dog == 1 && seen_esc == 1 && seen_w == 1, "%s claim texts: dog %d esc %d weight %d",
          g_backend, seen_dog, seen_esc, seen_w);
    donto_lease_batch_free(&b);

    /* Bad lines: the error names the line; nothing of the file is kept. */
    static const struct {
        const char *text, *where, *why;
    } BAD[] = {
        {"<http://ex.org/new1> <http://ex.org/p> <http://ex.org/o> .\n\n<http://ex.org/a> <http://ex.org/b> .\n",
         "bad.nq:3:", "expected an IRI, blank node or literal"},
        {"<http://ex.org/a> <http://ex.org/b> <http://ex.org/c\n", "bad.nq:1:", "unterminated IRI"},
        {"<http://ex.org/new1> <http://ex.org/p> <http://ex.org/o> .\n<http://ex.org/a> \"lit\" <http://ex.org/c> .\n",
         "bad.nq:2:", "expected an IRI or blank node"},
        {"<http://ex.org/a> <http://ex.org/b> <http://ex.org/c>\n", "bad.nq:1:", "expected '.'"},
        {"<http://ex.org/a> <http://ex.org/b> \"x\\q\" .\n", "bad.nq:1:", "bad escape"},
        {"<http://ex.org/a> <http://ex.org/b> <http://ex.org/c> . junk\n", "bad.nq:1:", "after '.'"},
    };
    for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
        memset(&err, 0, sizeof err);
        CHECK(load(s, "bad.nq", BAD[i].text, DONTO_FORMAT_NQUADS, &st, &err) == -1,
              "%s bad line %zu accepted", g_backend, i);
        CHECK_STR_CONTAINS(err.msg, BAD[i].where);
        CHECK_STR_CONTAINS(err.msg, BAD[i].why);
        CHECK_EQ_INT(st.statements, 0);
    }
    counts(s, c);
    CHECK_EQ_INT(c[DONTO_TARGET_CLAIM], 5); /* new1 from the bad files was not kept */
    CHECK_EQ_INT(c[DONTO_TARGET_ENTITY], 4);
    donto_store_close(s);
}

static const char JL[] =
    "{\"id\": \"c1\", \"text\": \"ignored\", \"subject\": \"megabyte, M, MB\", \"predicate\": \"part_holonym\", "
    "\"object\": \"gigabyte, G, GB\", \"subject_synset\": \"13628246-n\", \"object_synset\": \"13628955-n\"}\n"
    "{\"id\": \"c2\", \"subject\": \"http://ex.org/dog\", \"predicate\": \"http://ex.org/hasPart\", "
    "\"object\": \"http://ex.org/tail\"}\n"
    "{\"subject\": \"http://ex.org/dog\", \"predicate\": \"http://ex.org/name\", \"object_lit\": \"Rex\"}\n"
    "{\"id\": \"k1\", \"text\": \"a gloss chunk about dogs\"}\n"
    "{\"kind\": \"predicate\", \"iri\": \"http://ex.org/hasPart\", \"label\": \"has the part\", "
    "\"description\": \"whole to part\"}\n"
    "{\"kind\": \"entity\", \"iri\": \"http://ex.org/dog\", \"label\": \"dog\", \"entity_kind\": \"animal\"}\n"
    "{\"kind\": \"argument\", \"source\": \"c1\", \"target\": \"c2\", \"relation\": \"rebuts\", \"strength\": 0.5}\n";

static void test_jsonl_enqueue_retract(void) {
    donto_err err = {0};
    donto_store *s = fresh();
    donto_load_stats st;
    CHECK(load(s, "a.jsonl", JL, DONTO_FORMAT_JSONL, &st, &err) == 0, "%s load: %s", g_backend, err.msg);
    CHECK_EQ_INT(st.statements, 3);
    CHECK_EQ_INT(st.chunks, 1);
    CHECK_EQ_INT(st.arguments, 1);
    int64_t c[DONTO_TARGET_N];
    counts(s, c);
    CHECK_EQ_INT(c[DONTO_TARGET_CLAIM], 3);
    CHECK_EQ_INT(c[DONTO_TARGET_PREDICATE], 3);
    CHECK_EQ_INT(c[DONTO_TARGET_ENTITY], 4); /* 2 synsets, dog, tail */
    CHECK_EQ_INT(c[DONTO_TARGET_MEMORY_CHUNK], 1);
    CHECK(load(s, "a.jsonl", JL, DONTO_FORMAT_JSONL, &st, &err) == 0, "%s reload: %s", g_backend, err.msg);
    CHECK_EQ_INT(st.statements + st.chunks + st.arguments + st.entities + st.predicates, 0);

    /* Texts per target; unknown and non-uuid claim ids give NULL. */
    char c1[37], c2[37];
    donto_statement_id("c1", c1);
    donto_statement_id("c2", c2);
    const char *ids[4] = {c1, "not-a-uuid", c2, "00000000-0000-8000-8000-000000000000"};
    char *tx[4];
    CHECK(donto_substrate_texts(s, DONTO_TARGET_CLAIM, ids, 4, tx, &err) == 0, "%s texts: %s", g_backend, err.msg);
    STR_EQ(tx[0], "megabyte, M, MB - is a part of - gigabyte, G, GB");
    CHECK(tx[1] == NULL, "non-uuid claim id has a text");
    STR_EQ(tx[2], "dog - has the part - tail");
    CHECK(tx[3] == NULL, "unknown claim has a text");
    for (int i = 0; i < 4; i++) free(tx[i]);
    const char *pe[2] = {"http://ex.org/hasPart", "nope"};
    CHECK(donto_substrate_texts(s, DONTO_TARGET_PREDICATE, pe, 2, tx, &err) == 0, "%s", err.msg);
    STR_EQ(tx[0], "has the part: whole to part");
    CHECK(tx[1] == NULL, "unknown predicate has a text");
    free(tx[0]);
    free(tx[1]);
    const char *en[1] = {"http://ex.org/dog"};
    CHECK(donto_substrate_texts(s, DONTO_TARGET_ENTITY, en, 1, tx, &err) == 0, "%s", err.msg);
    STR_EQ(tx[0], "dog (animal)");
    free(tx[0]);
    const char *syn[1] = {"wn:13628246-n"};
    CHECK(donto_substrate_texts(s, DONTO_TARGET_ENTITY, syn, 1, tx, &err) == 0, "%s", err.msg);
    STR_EQ(tx[0], "megabyte, M, MB (noun)");
    free(tx[0]);
    const char *ch[1] = {"k1"};
    CHECK(donto_substrate_texts(s, DONTO_TARGET_MEMORY_CHUNK, ch, 1, tx, &err) == 0, "%s", err.msg);
    STR_EQ(tx[0], "a gloss chunk about dogs");
    free(tx[0]);

    /* Enqueue all targets; again adds nothing; another model gets all again. */
    size_t added = 0, total = 3 + 3 + 4 + 1;
    CHECK(donto_substrate_enqueue(s, -1, "m", NULL, 0, NULL, NULL, &added, &err) == 0, "%s: %s", g_backend, err.msg);
    CHECK_EQ_INT(added, total);
    CHECK(donto_substrate_enqueue(s, -1, "m", NULL, 0, NULL, NULL, &added, &err) == 0, "%s: %s", g_backend, err.msg);
    CHECK_EQ_INT(added, 0);
    CHECK(donto_substrate_enqueue(s, DONTO_TARGET_CLAIM, "m2", NULL, 1, NULL, NULL, &added, &err) == 0,
          "%s: %s", g_backend, err.msg);
    CHECK_EQ_INT(added, 3);

    /* Embedded items are not queued again: lease and submit every m item. */
    donto_lease_batch b = {0};
    CHECK(donto_store_lease(s, "w", 100, -1, 0, 1000, &b, &err) == 0, "%s", err.msg);
    static const float V[4] = {0.5f, 0.5f, 0.5f, 0.5f};
    size_t nm = 0;
    donto_submit_item *si = calloc(b.n ? b.n : 1, sizeof *si);
    for (size_t i = 0; i < b.n; i++) {
        if (strcmp(b.items[i].model, "m")) continue;
        si[nm++] = (donto_submit_item){.target = b.items[i].target, .item_id = b.items[i].item_id,
                                       .lease_id = b.items[i].lease_id, .vector = V, .dims = 4,
                                       .model = "m"};
    }
    CHECK_EQ_INT(nm, total);
    donto_reject *rj = calloc(nm ? nm : 1, sizeof *rj);
    donto_submit_result res = {.reject = rj};
    CHECK(donto_store_submit(s, "w", si, nm, 10, &res, &err) == 0, "%s submit: %s", g_backend, err.msg);
    CHECK_EQ_INT(res.upserted, nm);
    free(rj);
    free(si);
    donto_lease_batch_free(&b);
    CHECK(donto_substrate_enqueue(s, -1, "m", NULL, 0, NULL, NULL, &added, &err) == 0, "%s: %s", g_backend, err.msg);
    CHECK_EQ_INT(added, 0);

    /* Retract: the m2 queue entry of c2 goes, the text goes, a second
     * retraction and a re-enqueue change nothing. */
    int64_t before = pending(s, DONTO_TARGET_CLAIM); /* the 3 m2 items, leased above */
    CHECK_EQ_INT(before, 3);
    size_t got = 0;
    const char *r1[2] = {"c2", "never-loaded"};
    CHECK(donto_substrate_retract(s, r1, 2, &got, &err) == 0, "%s retract: %s", g_backend, err.msg);
    CHECK_EQ_INT(got, 1);
    CHECK_EQ_INT(pending(s, DONTO_TARGET_CLAIM), 2);
    CHECK(donto_substrate_retract(s, r1, 1, &got, &err) == 0, "%s retract again: %s", g_backend, err.msg);
    CHECK_EQ_INT(got, 0);
    const char *c2p = c2;
    CHECK(donto_substrate_texts(s, DONTO_TARGET_CLAIM, &c2p, 1, tx, &err) == 0, "%s", err.msg);
    CHECK(tx[0] == NULL, "retracted claim still has a text: %s", tx[0]);
    free(tx[0]);
    CHECK(donto_substrate_enqueue(s, -1, "m2", NULL, 0, NULL, NULL, &added, &err) == 0, "%s: %s", g_backend, err.msg);
    /* predicates 3, entities 4, chunk 1; the claims c1 and lit are queued for
     * m2 already and c2 is retracted */
    CHECK_EQ_INT(added, 8);
    counts(s, c);
    CHECK_EQ_INT(c[DONTO_TARGET_CLAIM], 2);
    /* A reload does not bring a retracted statement back. */
    CHECK(load(s, "a.jsonl", JL, DONTO_FORMAT_JSONL, &st, &err) == 0, "%s reload: %s", g_backend, err.msg);
    CHECK_EQ_INT(st.statements, 0);
    counts(s, c);
    CHECK_EQ_INT(c[DONTO_TARGET_CLAIM], 2);

    /* The loader's retraction: a JSONL line, after a statement of the same file. */
    const char *jr = "{\"id\": \"c9\", \"subject\": \"ex:a\", \"predicate\": \"ex:p\", \"object\": \"ex:b\"}\n"
                     "{\"retract\": [\"c9\", \"c1\"]}\n";
    CHECK(load(s, "r.jsonl", jr, DONTO_FORMAT_JSONL, &st, &err) == 0, "%s: %s", g_backend, err.msg);
    CHECK_EQ_INT(st.statements, 1);
    CHECK_EQ_INT(st.retracted, 2);
    counts(s, c);
    CHECK_EQ_INT(c[DONTO_TARGET_CLAIM], 1);
    CHECK_EQ_INT(pending(s, DONTO_TARGET_CLAIM), 1); /* c1's m2 entry went with it */

    donto_store_close(s);
}

static void test_jsonl_errors(void) {
    donto_err err = {0};
    donto_store *s = fresh();
    donto_load_stats st;
    static const struct {
        const char *text, *where, *why;
    } BAD[] = {
        {"{\"subject\": \"ex:a\", \"predicate\": \"ex:p\", \"object\": \"ex:b\"}\n{not json\n", "b.jsonl:2:", "bad JSON"},
        {"[1,2]\n", "b.jsonl:1:", "JSON object"},
        {"{\"subject\": \"ex:a\", \"predicate\": \"ex:p\"}\n", "b.jsonl:1:", "object_lit"},
        {"{\"kind\": \"bogus\"}\n", "b.jsonl:1:", "unknown \"kind\""},
        {"{\"statement_id\": \"xyz\", \"subject\": \"ex:a\", \"predicate\": \"ex:p\", \"object\": \"ex:b\"}\n",
         "b.jsonl:1:", "not a uuid"},
        {"\n\n{\"kind\": \"argument\", \"source\": \"a\", \"target\": \"b\", \"relation\": \"likes\"}\n",
         "b.jsonl:3:", "unknown argument relation"},
        {"{\"retract\": 5}\n", "b.jsonl:1:", "retract"},
        {"{\"foo\": 1}\n", "b.jsonl:1:", "cannot tell"},
    };
    for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
        memset(&err, 0, sizeof err);
        CHECK(load(s, "b.jsonl", BAD[i].text, DONTO_FORMAT_JSONL, &st, &err) == -1,
              "%s bad jsonl %zu accepted", g_backend, i);
        CHECK_STR_CONTAINS(err.msg, BAD[i].where);
        CHECK_STR_CONTAINS(err.msg, BAD[i].why);
    }
    /* An argument naming statements that do not exist: the database refuses. */
    memset(&err, 0, sizeof err);
    CHECK(load(s, "b.jsonl",
               "{\"kind\": \"argument\", \"source\": \"a\", \"target\": \"b\", \"relation\": \"supports\"}\n",
               DONTO_FORMAT_JSONL, &st, &err) == -1,
          "%s dangling argument accepted", g_backend);
    CHECK(err.msg[0] != 0, "no message");
    int64_t c[DONTO_TARGET_N];
    counts(s, c);
    CHECK_EQ_INT(c[DONTO_TARGET_CLAIM], 0);
    /* A missing file. */
    CHECK(donto_load_file(s, "/nonexistent/x.nq", DONTO_FORMAT_NQUADS, NULL, NULL, &st, &err) == -1, "missing file");
    CHECK_STR_CONTAINS(err.msg, "/nonexistent/x.nq");
    donto_store_close(s);
}

/* A tiny WordNet in the database-file format: 3 nouns (entity, thing with an
 * antonym pair hot/cold as adjectives), 1 verb. */
static void make_wordnet(const char *dir) {
    mkdir(dir, 0700);
    char p[400];
    snprintf(p, sizeof p, "%s/data.noun", dir);
    write_file(p,
               "  1 This software and database is being provided\n"
               "00001740 03 n 01 entity 0 001 ~ 00002137 n 0000 | that which exists\n"
               "00002137 03 n 02 thing 0 physical_thing 0 002 @ 00001740 n 0000 + 00003000 v 0101 | a separate entity\n");
    snprintf(p, sizeof p, "%s/data.verb", dir);
    write_file(p, "00003000 29 v 01 exist 0 001 + 00002137 n 0101 01 + 02 00 | have an existence\n");
    snprintf(p, sizeof p, "%s/data.adj", dir);
    write_file(p,
               "00004000 00 a 01 hot 0 002 ! 00004100 a 0101 & 00004200 s 0000 | high temperature\n"
               "00004100 00 a 01 cold 0 001 ! 00004000 a 0101 | low temperature\n"
               "00004200 00 s 01 red-hot(a) 0 001 & 00004000 a 0000 | extremely hot\n");
    snprintf(p, sizeof p, "%s/data.adv", dir);
    write_file(p, "00005000 02 r 01 hotly 0 001 \\ 00004000 a 0101 | in a hot manner\n");
}

/* Rows of one query as "a|b|c" lines, concatenated (for small checks). */
static void collect_row(int ncols, const char *const *vals, const int *lens, void *u) {
    (void)lens;
    char *acc = u;
    for (int i = 0; i < ncols; i++) {
        strncat(acc, vals[i] ? vals[i] : "NULL", 2000 - strlen(acc) - 2);
        strncat(acc, i + 1 < ncols ? "|" : "\n", 2000 - strlen(acc) - 2);
    }
}

/* WordNet pointers -> arguments between the synsets' defining (hypernym)
 * claims: antonymy rebuts (one per pair), entailment and cause support;
 * a synset with no hypernym gives none. */
static void test_wordnet_arguments(void) {
    donto_err err = {0};
    char dir[300], p[400];
    snprintf(dir, sizeof dir, "%s/wn2", g_tmpdir);
    mkdir(dir, 0755);
    snprintf(p, sizeof p, "%s/data.noun", dir);
    write_file(p,
               "00001740 03 n 01 entity 0 000 | that which exists\n"
               "00006000 18 n 01 man 0 002 @ 00001740 n 0000 ! 00006100 n 0101 | an adult male\n"
               "00006100 18 n 01 woman 0 002 @ 00001740 n 0000 ! 00006000 n 0101 | an adult female\n");
    snprintf(p, sizeof p, "%s/data.verb", dir);
    write_file(p,
               "00007000 29 v 01 snore 0 003 @ 00007200 v 0000 * 00007100 v 0000 > 00007300 v 0000 | breathe noisily\n"
               "00007100 29 v 01 sleep 0 001 @ 00007300 v 0000 | be asleep\n"
               "00007200 29 v 01 breathe 0 000 | draw air\n"
               "00007300 29 v 01 rest 0 000 | be at rest\n");
    snprintf(p, sizeof p, "%s/data.adj", dir);
    write_file(p, "");
    snprintf(p, sizeof p, "%s/data.adv", dir);
    write_file(p, "");
    donto_store *s = fresh();
    donto_load_stats st;
    CHECK(donto_import_wordnet(s, dir, NULL, 0, NULL, NULL, &st, &err) == 0, "%s wordnet: %s", g_backend, err.msg);
    /* rebuts between the antonym statements (as before), rebuts man's
     * defining claim -> woman's, supports snore's -> sleep's (entailment);
     * cause snore -> rest gives none: rest has no hypernym. */
    CHECK_EQ_INT(st.arguments, 3);
    char got[2000] = "";
    CHECK(sqlq(g_url,
               "SELECT a.relation, s.subject, s.predicate, t.subject, t.predicate, a.context FROM donto_argument a"
               " JOIN donto_statement s ON s.statement_id = a.source_statement_id"
               " JOIN donto_statement t ON t.statement_id = a.target_statement_id ORDER BY 1, 2, 3",
               collect_row, got) == 0, "query");
    const char *want = "rebuts|wn:00006000-n|wn:antonym|wn:00006100-n|wn:antonym|donto:default\n"
                       "rebuts|wn:00006000-n|wn:hypernym|wn:00006100-n|wn:hypernym|donto:default\n"
                       "supports|wn:00007000-v|wn:hypernym|wn:00007100-v|wn:hypernym|donto:default\n";
    CHECK(!strcmp(got, want), "%s wordnet arguments:\n%s", g_backend, got);
    donto_store_close(s);

    /* pos: the verbs alone (4 synsets, snore's entailment); "v,n" with a
     * limit of 5 reads the verbs first, then one noun; bad lists refused. */
    s = fresh();
    CHECK(donto_import_wordnet(s, dir, "v", 0, NULL, NULL, &st, &err) == 0, "%s wordnet v: %s", g_backend, err.msg);
    CHECK_EQ_INT(st.entities, 4);
    CHECK_EQ_INT(st.arguments, 1);
    donto_store_close(s);
    s = fresh();
    CHECK(donto_import_wordnet(s, dir, "v,n", 5, NULL, NULL, &st, &err) == 0, "%s wordnet v,n: %s", g_backend, err.msg);
    CHECK_EQ_INT(st.entities, 5);
    got[0] = 0;
    CHECK(sqlq(g_url, "SELECT count(*) FROM donto_entity_symbol WHERE iri LIKE '%-n'", collect_row, got) == 0, "query");
    CHECK(!strcmp(got, "1\n"), "%s nouns after the verbs: %s", g_backend, got);
    CHECK(donto_import_wordnet(s, dir, "x", 0, NULL, NULL, &st, &err) == -1 && donto_err_code(&err) == DONTO_E_INVALID,
          "unknown part of speech accepted");
    CHECK_STR_CONTAINS(err.msg, "unknown part of speech 'x'");
    CHECK(donto_import_wordnet(s, dir, "n,n", 0, NULL, NULL, &st, &err) == -1, "a part of speech twice accepted");
    CHECK(donto_import_wordnet(s, dir, ",", 0, NULL, NULL, &st, &err) == -1, "an empty list accepted");
    donto_store_close(s);
}

/* Arguments carry a context (migration 2); JSONL may give one. */
static void test_argument_context(void) {
    donto_err err = {0};
    donto_store *s = fresh();
    const char *jl = "{\"id\":\"a1\",\"subject\":\"ex:a\",\"predicate\":\"p\",\"object\":\"ex:b\"}\n"
                     "{\"id\":\"a2\",\"subject\":\"ex:b\",\"predicate\":\"p\",\"object\":\"ex:c\"}\n"
                     "{\"kind\":\"argument\",\"source\":\"a1\",\"target\":\"a2\",\"relation\":\"supports\"}\n"
                     "{\"kind\":\"argument\",\"source\":\"a2\",\"target\":\"a1\",\"relation\":\"rebuts\","
                     "\"context\":\"sheaf:run-1\"}\n";
    donto_load_stats st;
    CHECK(donto_load_buffer(s, "ctx.jsonl", jl, strlen(jl), DONTO_FORMAT_JSONL, &st, &err) == 0, "%s load: %s", g_backend, err.msg);
    CHECK_EQ_INT(st.arguments, 2);
    char got[2000] = "";
    CHECK(sqlq(g_url, "SELECT relation, context FROM donto_argument ORDER BY relation", collect_row, got) == 0, "query");
    CHECK(!strcmp(got, "rebuts|sheaf:run-1\nsupports|donto:default\n"), "%s argument contexts:\n%s", g_backend, got);
    donto_store_close(s);
}

static void test_wordnet(void) {
    donto_err err = {0};
    char dir[300];
    snprintf(dir, sizeof dir, "%s/wn", g_tmpdir);
    make_wordnet(dir);
    donto_store *s = fresh();
    donto_load_stats st;
    CHECK(donto_import_wordnet(s, dir, NULL, 0, NULL, NULL, &st, &err) == 0, "%s wordnet: %s", g_backend, err.msg);
    CHECK_EQ_INT(st.lines, 7);
    CHECK_EQ_INT(st.entities, 7);
    CHECK_EQ_INT(st.chunks, 7);
    /* ~ @ + + ! & ! & \ : 9 pointers, the antonyms are one pair (2 statements) */
    CHECK_EQ_INT(st.statements, 9);
    CHECK_EQ_INT(st.arguments, 1);
    CHECK(st.predicates >= 27, "predicates %zu", st.predicates);
    CHECK(donto_import_wordnet(s, dir, NULL, 0, NULL, NULL, &st, &err) == 0, "%s wordnet again: %s", g_backend, err.msg);
    CHECK_EQ_INT(st.statements + st.entities + st.chunks + st.arguments + st.predicates, 0);
    const char *ids[3] = {"wn:00002137-n", "wn:00004200-a", "wn:00005000-r"};
    char *tx[3];
    CHECK(donto_substrate_texts(s, DONTO_TARGET_ENTITY, ids, 3, tx, &err) == 0, "%s", err.msg);
    STR_EQ(tx[0], "thing, physical thing (noun)");
    STR_EQ(tx[1], "red-hot (adjective)");
    STR_EQ(tx[2], "hotly (adverb)");
    for (int i = 0; i < 3; i++) free(tx[i]);
    const char *chk[1] = {"wn:00004100-a/gloss"};
    CHECK(donto_substrate_texts(s, DONTO_TARGET_MEMORY_CHUNK, chk, 1, tx, &err) == 0, "%s", err.msg);
    STR_EQ(tx[0], "cold: low temperature");
    free(tx[0]);
    /* Claim texts as the corpus renders them. */
    size_t added = 0;
    CHECK(donto_substrate_enqueue(s, DONTO_TARGET_CLAIM, "m", NULL, 0, NULL, NULL, &added, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(added, 9);
    donto_lease_batch b = {0};
    CHECK(donto_store_lease(s, "w", 100, DONTO_TARGET_CLAIM, 0, 1000, &b, &err) == 0, "%s", err.msg);
    int kind = 0, opp = 0, pert = 0;
    for (size_t i = 0; i < b.n; i++) {
        kind += !strcmp(b.items[i].text, "thing, physical thing - is a kind of - entity");
        opp += !strcmp(b.items[i].text, "hot - is the opposite of - cold");
        pert += !strcmp(b.items[i].text, "hotly - is derived from the adjective - hot");
    }
    CHECK(kind == 1 && opp == 1 && pert == 1, "%s wordnet texts: %d %d %d", g_backend, kind, opp, pert);
    donto_lease_batch_free(&b);
    donto_store_close(s);

    /* --limit: the first 2 synsets and the pointers between them only. */
    s = fresh();
    CHECK(donto_import_wordnet(s, dir, NULL, 2, NULL, NULL, &st, &err) == 0, "%s wordnet limit: %s", g_backend, err.msg);
    CHECK_EQ_INT(st.entities, 2);
    CHECK_EQ_INT(st.statements, 2); /* ~ and @ between entity and thing */
    CHECK_EQ_INT(st.arguments, 0);
    /* A broken file: named with its line. */
    char p[400];
    snprintf(p, sizeof p, "%s/data.verb", dir);
    write_file(p, "00003000 29 v zz exist\n");
    CHECK(donto_import_wordnet(s, dir, NULL, 0, NULL, NULL, &st, &err) == -1, "%s broken wordnet accepted", g_backend);
    CHECK_STR_CONTAINS(err.msg, "data.verb:1:");
    CHECK(donto_import_wordnet(s, "/nonexistent", NULL, 0, NULL, NULL, &st, &err) == -1, "missing dir accepted");
    CHECK_STR_CONTAINS(err.msg, "/nonexistent/data.noun");
    donto_store_close(s);
}

/* Load n claims "s<i> p o<i % 7>" (N-Quads): n claims, n + 7 entities, one predicate. */
static void load_many(donto_store *s, size_t n) {
    donto_err err = {0};
    size_t cap = n * 90 + 1, len = 0;
    char *buf = malloc(cap);
    for (size_t i = 0; i < n; i++)
        len += (size_t)snprintf(buf + len, cap - len, "<http://ex.org/s%zu> <http://ex.org/p> <http://ex.org/o%zu> .\n", i, i % 7);
    donto_load_stats st;
    CHECK(load(s, "many.nq", buf, DONTO_FORMAT_NQUADS, &st, &err) == 0, "%s: %s", g_backend, err.msg);
    CHECK_EQ_INT(st.statements, n);
    free(buf);
}

/* Keyset batches: many items in small batches, and an interrupted run (a
 * partial enqueue of one target) resumed by a full one. */
static void test_enqueue_batches(void) {
    donto_err err = {0};
    donto_store *s = fresh();
    size_t n = 2500;
    load_many(s, n);
    size_t added = 0;
    CHECK(donto_substrate_enqueue(s, DONTO_TARGET_PREDICATE, "m", NULL, 7, NULL, NULL, &added, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(added, 1);
    /* An earlier, interrupted run left some claims queued (with its text):
     * the next run adds only the others and leaves those rows alone. */
    donto_enqueue_item pre[3];
    char pre_ids[3][37];
    {
        donto_lease_batch lb = {0};
        CHECK(donto_substrate_enqueue(s, DONTO_TARGET_CLAIM, "m", NULL, 64, NULL, NULL, &added, &err) == 0, "%s", err.msg);
        CHECK_EQ_INT(added, n);
        /* take 3 queued claims' ids, empty the claim queue, re-queue those 3 by hand */
        CHECK(donto_store_lease(s, "w", 3, DONTO_TARGET_CLAIM, 0, 1, &lb, &err) == 0, "%s", err.msg);
        CHECK_EQ_INT(lb.n, 3);
        for (size_t i = 0; i < lb.n && i < 3; i++) {
            snprintf(pre_ids[i], sizeof pre_ids[i], "%s", lb.items[i].item_id);
            pre[i] = (donto_enqueue_item){.target = DONTO_TARGET_CLAIM, .item_id = pre_ids[i],
                                          .text = "earlier run", .model = "m2"};
        }
        donto_lease_batch_free(&lb);
        size_t a2 = 0;
        CHECK(donto_store_enqueue(s, pre, 3, &a2, &err) == 0, "%s", err.msg);
        CHECK_EQ_INT(a2, 3);
        CHECK(donto_substrate_enqueue(s, DONTO_TARGET_CLAIM, "m2", NULL, 500, NULL, NULL, &added, &err) == 0, "%s", err.msg);
        CHECK_EQ_INT(added, n - 3);
        const char *one = pre_ids[0];
        char *tx = NULL;
        CHECK(donto_substrate_texts(s, DONTO_TARGET_CLAIM, &one, 1, &tx, &err) == 0, "%s", err.msg);
        CHECK(tx && strstr(tx, " - p - o"), "%s text of a pre-queued claim: %s", g_backend, tx ? tx : "(null)");
        free(tx);
        /* A leased claim that is retracted: the worker's submit is refused. */
        CHECK(donto_store_lease(s, "w9", 1, DONTO_TARGET_CLAIM, 10, 100000, &lb, &err) == 0, "%s", err.msg);
        CHECK_EQ_INT(lb.n, 1);
        if (lb.n == 1) {
            size_t got = 0;
            const char *rid = lb.items[0].item_id;
            CHECK(donto_substrate_retract(s, &rid, 1, &got, &err) == 0, "%s", err.msg);
            CHECK_EQ_INT(got, 1);
            static const float V[4] = {0.5f, 0.5f, 0.5f, 0.5f};
            donto_submit_item si = {.target = DONTO_TARGET_CLAIM, .item_id = rid,
                                    .lease_id = lb.items[0].lease_id, .vector = V, .dims = 4};
            donto_reject rj[1];
            donto_submit_result res = {.reject = rj};
            CHECK(donto_store_submit(s, "w9", &si, 1, 20, &res, &err) == 0, "%s", err.msg);
            CHECK_EQ_INT(res.upserted, 0);
            CHECK_EQ_INT(rj[0], DONTO_REJECT_UNKNOWN_ITEM);
        }
        donto_lease_batch_free(&lb);
    }
    /* The rest on a clean database. */
    donto_store_close(s);
    s = fresh();
    load_many(s, n);
    CHECK(donto_substrate_enqueue(s, DONTO_TARGET_PREDICATE, "m", NULL, 7, NULL, NULL, &added, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(added, 1);
    CHECK(donto_substrate_enqueue(s, -1, "m", NULL, 97, NULL, NULL, &added, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(added, n + (n + 7)); /* claims + entities (s*, o*) */
    CHECK_EQ_INT(pending(s, DONTO_TARGET_CLAIM), n);
    CHECK(donto_substrate_enqueue(s, -1, "m", NULL, 1000, NULL, NULL, &added, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(added, 0);
    donto_store_close(s);
}

/* PostgreSQL: enqueue's writers insert without ON CONFLICT (the cursor left
 * out what was queued in its snapshot). Items queued by someone else after
 * that snapshot make a batch fail with unique_violation; the batch must go
 * again with ON CONFLICT DO NOTHING. Here the first progress report (after
 * the first committed batch) queues every claim through another connection,
 * so every later batch conflicts, deterministically. */
typedef struct {
    PGconn *c;
    int calls;
    long queued_by_other;
    int desc; /* insert against the writers' order: deadlocks; either side may lose */
} race_ctx;

static void queue_everything(void *ctx, const char *what, size_t done, size_t total) {
    (void)what, (void)done, (void)total;
    race_ctx *rc = ctx;
    if (rc->calls++) return;
    /* In key order, as enqueue's writers insert, two inserts cannot deadlock. In the other
     * order they can: a writer that loses goes again (the batch was not committed); this side
     * retries too. */
    PGresult *r = NULL;
    for (int attempt = 0; attempt < 10; attempt++) {
        PQclear(r);
        char sql[256];
        snprintf(sql, sizeof sql, "INSERT INTO queue (target, item_id, model, text) SELECT 0, statement_id::text, "
                                  "'m', 'queued meanwhile' FROM donto_statement ORDER BY 2 %s ON CONFLICT DO NOTHING",
                 rc->desc ? "DESC" : "ASC");
        r = PQexec(rc->c, sql);
        const char *st = PQresultErrorField(r, PG_DIAG_SQLSTATE);
        if (!rc->desc || PQresultStatus(r) == PGRES_COMMAND_OK || !st || strcmp(st, "40P01")) break;
    }
    CHECK(PQresultStatus(r) == PGRES_COMMAND_OK, "queue meanwhile: %s", PQerrorMessage(rc->c));
    rc->queued_by_other = atol(PQcmdTuples(r));
    PQclear(r);
}

static void enqueue_conflict(int desc) {
    donto_err err = {0};
    donto_store *s = fresh();
    size_t n = 2000;
    load_many(s, n);
    race_ctx rc = {.c = PQconnectdb(g_pg_url), .desc = desc};
    CHECK(PQstatus(rc.c) == CONNECTION_OK, "connect: %s", PQerrorMessage(rc.c));
    size_t added = 0;
    int r = donto_substrate_enqueue(s, DONTO_TARGET_CLAIM, "m", NULL, 50, queue_everything, &rc, &added, &err);
    CHECK(r == 0, "enqueue with conflicting batches failed: %s", err.msg);
    CHECK(rc.calls >= 1 && rc.queued_by_other > 0 && rc.queued_by_other < (long)n,
          "the race did not happen (%d reports, %ld queued by the other connection)", rc.calls, rc.queued_by_other);
    /* each claim queued once, by one of the two */
    CHECK_EQ_INT(added + (size_t)rc.queued_by_other, n);
    CHECK_EQ_INT(pending(s, DONTO_TARGET_CLAIM), n);
    PGresult *q = PQexec(rc.c, "SELECT count(*) FROM queue WHERE text <> 'queued meanwhile'");
    CHECK(PQresultStatus(q) == PGRES_TUPLES_OK && atol(PQgetvalue(q, 0, 0)) == (long)added,
          "rows enqueue says it added: %zu, rows with its text: %s", added,
          PQresultStatus(q) == PGRES_TUPLES_OK ? PQgetvalue(q, 0, 0) : "?");
    PQclear(q);
    PQfinish(rc.c);
    CHECK(donto_substrate_enqueue(s, DONTO_TARGET_CLAIM, "m", NULL, 50, NULL, NULL, &added, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(added, 0);
    donto_store_close(s);
}

static void test_enqueue_conflict(void) {
    if (strcmp(g_backend, "pg") != 0) return; /* SQLite has one writer and no cursor */
    enqueue_conflict(0);
    enqueue_conflict(1);
}

/* PostgreSQL: a claim retracted after enqueue's cursor took its snapshot is
 * still delivered by the cursor; the writer's "still live" probe (on the
 * claim's uuid key) must keep it out of the queue. The first progress report
 * retracts every claim through another handle; at most the batches already
 * being written when that commits (one per writer) get in. */
typedef struct {
    donto_store *other;
    int calls;
    size_t retracted;
} retract_ctx;

/* Enqueue the claims in batches of `batch` while `race` acts at the first
 * progress report (after the first committed batch): at most the batches
 * in flight then (one per writer, and the first) may get in, and a rerun
 * adds nothing. Returns what the first run added. */
static size_t enqueue_racing(donto_store *s, size_t batch, donto_progress_fn race, void *ctx, const char *what) {
    donto_err err = {0};
    size_t added = 0, again = 0;
    CHECK(donto_substrate_enqueue(s, DONTO_TARGET_CLAIM, "m", NULL, (int)batch, race, ctx, &added, &err) == 0, "%s",
          err.msg);
    CHECK(added >= batch && added <= 3 * batch, "%zu claims queued; after %s only batches in flight may get in", added,
          what);
    CHECK(donto_substrate_enqueue(s, DONTO_TARGET_CLAIM, "m", NULL, (int)batch, NULL, NULL, &again, &err) == 0, "%s",
          err.msg);
    CHECK_EQ_INT(again, 0);
    return added;
}

static void retract_everything(void *ctx, const char *what, size_t done, size_t total) {
    (void)what, (void)done, (void)total;
    retract_ctx *rc = ctx;
    if (rc->calls++) return;
    PGconn *c = PQconnectdb(g_pg_url);
    PGresult *r = PQexec(c, "SELECT statement_id::text FROM donto_statement");
    CHECK(PQresultStatus(r) == PGRES_TUPLES_OK, "ids: %s", PQerrorMessage(c));
    int n = PQntuples(r);
    const char **ids = malloc(sizeof *ids * (size_t)(n ? n : 1));
    for (int i = 0; i < n; i++) ids[i] = PQgetvalue(r, i, 0);
    donto_err err = {0};
    CHECK(donto_substrate_retract(rc->other, ids, (size_t)n, &rc->retracted, &err) == 0, "retract: %s", err.msg);
    free(ids);
    PQclear(r);
    PQfinish(c);
}

static void test_enqueue_retract_race(void) {
    if (strcmp(g_backend, "pg") != 0) return;
    donto_err err = {0};
    donto_store *s = fresh();
    size_t n = 2000;
    load_many(s, n);
    retract_ctx rc = {0};
    CHECK(donto_store_open(g_url, &rc.other, &err) == 0, "second handle: %s", err.msg);
    size_t batch = 50;
    enqueue_racing(s, batch, retract_everything, &rc, "the retraction");
    CHECK_EQ_INT(rc.retracted, n);
    CHECK(pending(s, DONTO_TARGET_CLAIM) <= (int64_t)(2 * batch), "%lld retracted claims still queued",
          (long long)pending(s, DONTO_TARGET_CLAIM));
    donto_store_close(rc.other);
    donto_store_close(s);
}

/* PostgreSQL: the same for a vector stored after the cursor's snapshot (by
 * a worker that got the item from someone else's enqueue): the writer's
 * probe must keep the item out of the queue, or it would be embedded twice.
 * The first progress report stores a vector for every claim. */
typedef struct {
    int calls;
    long stored;
} vector_ctx;

static void embed_everything(void *ctx, const char *what, size_t done, size_t total) {
    (void)what, (void)done, (void)total;
    vector_ctx *vc = ctx;
    if (vc->calls++) return;
    PGconn *c = PQconnectdb(g_pg_url);
    PGresult *r = PQexec(c, "INSERT INTO vectors (target, item_id, model, dims, vec, contributor, created) "
                            "SELECT 0, statement_id::text, 'm', 1, '\\x0000803f'::bytea, 'meanwhile', 0 "
                            "FROM donto_statement");
    CHECK(PQresultStatus(r) == PGRES_COMMAND_OK, "store vectors: %s", PQerrorMessage(c));
    vc->stored = atol(PQcmdTuples(r));
    PQclear(r);
    PQfinish(c);
}

static void test_enqueue_vector_race(void) {
    if (strcmp(g_backend, "pg") != 0) return;
    donto_store *s = fresh();
    size_t n = 2000;
    load_many(s, n);
    vector_ctx vc = {0};
    enqueue_racing(s, 50, embed_everything, &vc, "their vectors");
    CHECK_EQ_INT(vc.stored, n);
    donto_store_close(s);
}

static void run_suite(const char *backend) {
    g_backend = backend;
    int before = check_failures;
    static const struct {
        const char *name;
        void (*fn)(void);
    } CASES[] = {{"nquads", test_nquads},
                 {"jsonl_enqueue_retract", test_jsonl_enqueue_retract},
                 {"jsonl_errors", test_jsonl_errors},
                 {"wordnet", test_wordnet},
                 {"wordnet_arguments", test_wordnet_arguments},
                 {"argument_context", test_argument_context},
                 {"enqueue_batches", test_enqueue_batches},
                 {"enqueue_conflict", test_enqueue_conflict},
                 {"enqueue_retract_race", test_enqueue_retract_race},
                 {"enqueue_vector_race", test_enqueue_vector_race}};
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        double t0 = donto_now();
        CASES[i].fn();
        fprintf(stderr, "%s %s: %.2f s\n", backend, CASES[i].name, donto_now() - t0);
    }
    fprintf(stderr, "%s suite: %s\n", backend, check_failures == before ? "ok" : "FAILED");
}

static void rm_tmpdir(void) {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_tmpdir);
}

int main(int argc, char **argv) {
    const char *only = argc > 1 ? argv[1] : NULL;
    g_pg_url = getenv("DONTO_TEST_PG_URL");
    if (g_pg_url && !*g_pg_url) g_pg_url = NULL;
    snprintf(g_tmpdir, sizeof g_tmpdir, "%s/donto-sub-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(g_tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    test_builders();
    if (!only || strcmp(only, "sqlite") == 0) run_suite("sqlite");
    if (!only || strcmp(only, "pg") == 0) {
        if (g_pg_url)
            run_suite("pg");
        else if (only)
            CHECK(0, "test_substrate pg: DONTO_TEST_PG_URL is not set (run via scripts/pg-test-server)");
        else
            fprintf(stderr, "DONTO_TEST_PG_URL not set: PostgreSQL suite runs as test substrate_pg\n");
    }
    rm_tmpdir();
    return check_report("test_substrate");
}
