/*
 * donto-accel coordinator: the connection guard (issue 15).
 *
 * The attack. ~1,100 connections without a token, each sending one header
 * line every 2 s and never finishing, stopped the coordinator: /health and
 * /lease timed out while they were held. libmicrohttpd's default connection
 * limit is FD_SETSIZE - 4 (1020); past it its threads stop accepting, and
 * every new connection, probes included, waits in the listen backlog behind
 * the slow ones. MHD_OPTION_CONNECTION_TIMEOUT does not help: it measures
 * inactivity, and each trickled byte resets it.
 *
 * The defence, four parts:
 *
 *  1. Room. RLIMIT_NOFILE's soft limit is raised to the hard one, and the
 *     connection limit is set explicitly: max_connections (default 4096),
 *     capped by the descriptors left after a reserve for the threads, the
 *     store handles and files. libmicrohttpd gets a limit above ours by a
 *     headroom (max/16, 16..256) so that our accept policy, which sees the
 *     connections of every worker thread, decides first.
 *
 *  2. Deadlines that bytes do not reset. Every connection is tracked from
 *     NOTIFY_CONNECTION STARTED to CLOSED with its phase and when the phase
 *     began (monotonic clock):
 *        HEADERS   request line and headers complete within header_timeout_s
 *                  (default 10) of accept;
 *        BODY      the body complete within body_timeout_s (default 60) of
 *                  its headers;
 *        HANDLER   the request is in our handler or its answer is being sent:
 *                  never touched by the guard;
 *        IDLE      keep-alive between requests: closed after idle_timeout_s
 *                  (default 30). The first bytes of the next request are
 *                  seen in TCP_INFO (tcpi_last_data_recv moves past the
 *                  start of the idle phase): the connection is then in
 *                  HEADERS, its header clock started when the latest of
 *                  those bytes came (at most one reaper pass after the
 *                  first: never early, late by < 250 ms). Counting the
 *                  header deadline from
 *                  the end of the previous request instead would cut a
 *                  keep-alive client that idled longer than header_timeout_s
 *                  the moment it sent its next request.
 *     A reaper thread passes every 250 ms and ends overdue connections with
 *     shutdown(fd, SHUT_RDWR): libmicrohttpd owns the descriptor, sees the
 *     end of the stream and closes it itself (through CLOSED). close()
 *     here would free a number libmicrohttpd still uses.
 *
 *  3. Eviction, not lockout. The accept policy callback admits a new
 *     connection even when its address is at per_ip_limit (default 256; IPv6
 *     counted per /64, IPv4-mapped as IPv4) or the process is at
 *     max_connections: it shuts down the OLDEST connection that is still
 *     waiting for its headers or idle, that address's own at its address's
 *     limit, the oldest of all at max_connections, and refuses only when
 *     nothing is evictable (every connection of the address, or of the
 *     process, is inside a request). A flood cannot hold more than the
 *     limits, and a newcomer that sends its request at once (a load
 *     balancer's /health, from the flooding host or not) always gets in and
 *     is never the oldest waiting. (At max_connections the address's own
 *     oldest is not preferred: a host opening a few connections at once
 *     would have each new one evict its sibling of a millisecond before,
 *     still in the middle of its headers, instead of the flood's oldest;
 *     tests/test_slow_conn.c phase B caught exactly that.)
 *
 *  4. Clients that are gone. A client that sends part of a request and
 *     closes at once (its last bytes and its FIN arrive together) is missed
 *     by libmicrohttpd 0.9.75 in epoll mode: its recv() gets the bytes, a
 *     read shorter than the buffer clears READ_READY (connection.c,
 *     recv_param_adapter), the edge-triggered epoll never reports the FIN
 *     again, and the connection would be held until its deadline (10 s of
 *     headers, 60 s of body; a flood of such clients fills the limits with
 *     the dead). Found when a CI run held 128 closed connections for 5 s
 *     (tests/test_slow_conn.c, phase A); phase C reproduces it at will. So
 *     the reaper also reads each waiting connection's TCP state: in
 *     HEADERS, BODY or IDLE, CLOSE_WAIT (the client's FIN came) with nothing
 *     left unread (SIOCINQ 0) on two passes in a row, the connection can
 *     never bring another byte and nothing in the server is working on it:
 *     it is shut down (peer_closed). Two passes, >= 250 ms apart, leave alone
 *     a whole request followed by shutdown(SHUT_WR) (a legal half-close)
 *     that libmicrohttpd has read but not yet handed to a handler.
 *
 *  5. Counters (donto_coord_conn_stats): open, accepted, refused, evicted
 *     per address and at the maximum, timed out per phase, closed by the
 *     peer; on /metrics and logged as a summary at most every 10 s while
 *     they move.
 *
 * The descriptor is never shut down after it was closed. Found in
 * libmicrohttpd 0.9.75's source (Debian's libmicrohttpd_0.9.75-6 source
 * package, src/microhttpd/daemon.c): MHD_cleanup_connections() calls
 * notify_connection(CLOSED) first and only then MHD_socket_close_chk_
 * (pos->socket_fd) (after MHD_ip_limit_del and the epoll_ctl DEL); the
 * failure path of new_connection_process_() likewise notifies CLOSED (for a
 * connection it had reported STARTED) before closing; connections closed
 * before STARTED (over its limit, refused by the policy, out of memory) are
 * never in our table. MHD_stop_daemon ends every connection through the
 * same cleanup. So while a connection is in the table its descriptor is
 * open and is its own; the CLOSED handler takes the guard's mutex to remove
 * it, and every shutdown() happens under that mutex, so a number reused by a
 * newer connection is never shut down by mistake.
 *
 * Also from that source: the accept policy is MHD_start_daemon's apc
 * argument (0.9.75 has no MHD_OPTION_ACCEPT_POLICY_CALLBACK), called from
 * new_connection_prepare_() after libmicrohttpd's own limit checks and
 * before the connection exists; with a thread pool each worker has
 * connection_limit / threads and stops polling the listening socket when its
 * share is full (another worker accepts). A connection admitted by the policy
 * is reported STARTED by the same worker right after (a few connections may
 * be admitted at once by different workers: the limits can be passed by up
 * to the number of threads, which the headroom covers).
 *
 * Evicted connections count against neither limit from the moment they are
 * shut down (they are on their way out), and still appear in `open` until
 * libmicrohttpd reports them closed.
 */
#define _DEFAULT_SOURCE /* struct tcp_info */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/sockios.h> /* SIOCINQ */
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>

#include "conn_guard.h"

#define DEF_MAX_CONNECTIONS 4096u
#define DEF_PER_IP 256u
#define DEF_HEADER_S 10u
#define DEF_BODY_S 60u
#define DEF_IDLE_S 30u
#define REAP_MS 250
#define SUMMARY_MS 10000
/* Descriptors kept for everything but client connections: listening
 * socket, logs, store files and sockets, epoll and ITC per thread. */
#define FD_RESERVE(threads, pool) (64ull + 4ull * (unsigned)(pool) + 4ull * (unsigned)(threads))
#define KEY_LEN 17 /* family tag + up to 16 address bytes */

enum { PH_HEADERS, PH_BODY, PH_HANDLER, PH_IDLE };

typedef struct gconn gconn;

/* A client address (an IPv6 /64), with its connections' counts and those
 * of them that may be evicted, oldest first. */
typedef struct gaddr {
    struct gaddr *next; /* hash chain */
    uint8_t key[KEY_LEN];
    unsigned count; /* tracked */
    unsigned live;  /* tracked and not shut down */
    gconn *head, *tail;
} gaddr;

struct gconn {
    gconn *prev, *next;   /* every tracked connection */
    gconn *eprev, *enext; /* evictable (HEADERS or IDLE), oldest first */
    gconn *aprev, *anext; /* the same, within its address */
    gaddr *addr;
    int fd;
    int phase;
    int evictable; /* on the two lists above */
    int shut;      /* shut down by us; CLOSED still to come */
    int gone;      /* passes in a row that found the client closed and nothing unread */
    int64_t since; /* ms (monotonic): the phase's clock started */
};

struct conn_guard {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t reaper;
    int reaper_on, stop;
    _Atomic int closed; /* conn_guard_close: refuse every new connection */
    gconn *all;
    gconn *ehead, *etail;
    gaddr **buckets;
    size_t nbuckets; /* a power of two */
    unsigned max, mhd_limit, per_ip;
    int64_t header_ms, body_ms, idle_ms;
    int64_t last_summary;
    unsigned live; /* tracked and not shut down */
    donto_coord_conn_stats st, logged;
};

static int64_t mono_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- addresses ------------------------------------------------------------------ */

static void addr_key(const struct sockaddr *sa, socklen_t len, uint8_t key[KEY_LEN]) {
    memset(key, 0, KEY_LEN);
    if (!sa) return;
    if (sa->sa_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in)) {
        key[0] = 4;
        memcpy(key + 1, &((const struct sockaddr_in *)sa)->sin_addr, 4);
    } else if (sa->sa_family == AF_INET6 && len >= (socklen_t)sizeof(struct sockaddr_in6)) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
        if (IN6_IS_ADDR_V4MAPPED(a)) {
            key[0] = 4;
            memcpy(key + 1, a->s6_addr + 12, 4);
        } else {
            key[0] = 6; /* per /64: one host's addresses share a prefix */
            memcpy(key + 1, a->s6_addr, 8);
        }
    } /* anything else: all in one entry */
}

static size_t addr_hash(const conn_guard *g, const uint8_t key[KEY_LEN]) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (int i = 0; i < KEY_LEN; i++) h = (h ^ key[i]) * 1099511628211ull;
    return (size_t)(h ^ (h >> 29)) & (g->nbuckets - 1);
}

static gaddr *addr_find(conn_guard *g, const uint8_t key[KEY_LEN]) {
    for (gaddr *a = g->buckets[addr_hash(g, key)]; a; a = a->next)
        if (!memcmp(a->key, key, KEY_LEN)) return a;
    return NULL;
}

static gaddr *addr_get(conn_guard *g, const uint8_t key[KEY_LEN]) {
    gaddr *a = addr_find(g, key);
    if (a) return a;
    a = calloc(1, sizeof *a);
    if (!a) return NULL;
    memcpy(a->key, key, KEY_LEN);
    size_t b = addr_hash(g, key);
    a->next = g->buckets[b];
    g->buckets[b] = a;
    return a;
}

static void addr_drop(conn_guard *g, gaddr *a) {
    gaddr **p = &g->buckets[addr_hash(g, a->key)];
    while (*p && *p != a) p = &(*p)->next;
    if (*p) *p = a->next;
    free(a);
}

/* ---- the evictable lists -------------------------------------------------------- */

static void ev_append(conn_guard *g, gconn *c) {
    gaddr *a = c->addr;
    c->enext = NULL;
    c->eprev = g->etail;
    if (g->etail) g->etail->enext = c;
    else g->ehead = c;
    g->etail = c;
    c->anext = NULL;
    c->aprev = a->tail;
    if (a->tail) a->tail->anext = c;
    else a->head = c;
    a->tail = c;
    c->evictable = 1;
}

static void ev_remove(conn_guard *g, gconn *c) {
    if (!c->evictable) return;
    gaddr *a = c->addr;
    if (c->eprev) c->eprev->enext = c->enext;
    else g->ehead = c->enext;
    if (c->enext) c->enext->eprev = c->eprev;
    else g->etail = c->eprev;
    if (c->aprev) c->aprev->anext = c->anext;
    else a->head = c->anext;
    if (c->anext) c->anext->aprev = c->aprev;
    else a->tail = c->aprev;
    c->eprev = c->enext = c->aprev = c->anext = NULL;
    c->evictable = 0;
}

/* A phase starts now; HEADERS and IDLE go to the end of the evictable lists
 * (the lists stay ordered by when their connections became evictable). */
static void set_phase(conn_guard *g, gconn *c, int phase, int64_t now) {
    c->phase = phase;
    c->gone = 0; /* the server moved it on: the count starts again */
    if (c->shut) return;
    ev_remove(g, c);
    c->since = now;
    if (phase == PH_HEADERS || phase == PH_IDLE) ev_append(g, c);
}

/* End c: shutdown(), never close() (the descriptor is libmicrohttpd's; it
 * closes it when it sees the end, after telling us CLOSED). Under g->mu. */
static void shut(conn_guard *g, gconn *c, unsigned long long *counter) {
    if (c->shut) return;
    if (shutdown(c->fd, SHUT_RDWR) != 0 && errno != ENOTCONN)
        DLOG_DEBUG("coord: guard: shutdown(%d): %s", c->fd, strerror(errno));
    ev_remove(g, c);
    c->shut = 1;
    g->live--;
    c->addr->live--;
    ++*counter;
}

/* ---- libmicrohttpd callbacks -------------------------------------------------------- */

enum MHD_Result conn_guard_accept(void *cls, const struct sockaddr *addr, socklen_t addrlen) {
    conn_guard *g = cls;
    if (atomic_load(&g->closed)) return MHD_NO; /* stopping; not counted as refused */
    uint8_t key[KEY_LEN];
    addr_key(addr, addrlen, key);
    int ok = 1;
    pthread_mutex_lock(&g->mu);
    gaddr *a = addr_find(g, key);
    if (a && a->live >= g->per_ip) {
        if (a->head) shut(g, a->head, &g->st.evicted_per_ip);
        else ok = 0; /* every one of its connections is inside a request */
    }
    if (ok && g->live >= g->max) {
        if (g->ehead) shut(g, g->ehead, &g->st.evicted_full);
        else ok = 0; /* every connection is inside a request */
    }
    if (!ok) g->st.refused++;
    pthread_mutex_unlock(&g->mu);
    return ok ? MHD_YES : MHD_NO;
}

static gconn *conn_of(struct MHD_Connection *conn) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? (gconn *)ci->socket_context : NULL;
}

static void on_started(conn_guard *g, struct MHD_Connection *conn, void **socket_context) {
    *socket_context = NULL;
    const union MHD_ConnectionInfo *fi = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    const union MHD_ConnectionInfo *ai = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    gconn *c = calloc(1, sizeof *c);
    if (!fi || !c) { /* untracked: never shut down by the guard, never counted */
        free(c);
        DLOG_WARN("coord: guard: cannot track a connection (out of memory)");
        return;
    }
    const struct sockaddr *sa = ai ? ai->client_addr : NULL;
    socklen_t len = !sa ? 0 : sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
    uint8_t key[KEY_LEN];
    addr_key(sa, len, key);
    c->fd = fi->connect_fd;
    pthread_mutex_lock(&g->mu);
    gaddr *a = addr_get(g, key);
    if (!a) {
        pthread_mutex_unlock(&g->mu);
        free(c);
        DLOG_WARN("coord: guard: cannot track a connection (out of memory)");
        return;
    }
    c->addr = a;
    a->count++;
    a->live++;
    g->live++;
    g->st.open++;
    g->st.accepted++;
    c->next = g->all;
    if (g->all) g->all->prev = c;
    g->all = c;
    set_phase(g, c, PH_HEADERS, mono_ms());
    *socket_context = c;
    pthread_mutex_unlock(&g->mu);
}

static void on_closed(conn_guard *g, void **socket_context) {
    gconn *c = *socket_context;
    if (!c) return;
    pthread_mutex_lock(&g->mu);
    ev_remove(g, c);
    if (c->prev) c->prev->next = c->next;
    else g->all = c->next;
    if (c->next) c->next->prev = c->prev;
    gaddr *a = c->addr;
    if (!c->shut) g->live--, a->live--;
    if (--a->count == 0) addr_drop(g, a);
    g->st.open--;
    pthread_mutex_unlock(&g->mu);
    free(c);
    *socket_context = NULL;
}

void conn_guard_notify(void *cls, struct MHD_Connection *conn, void **socket_context,
                       enum MHD_ConnectionNotificationCode code) {
    if (code == MHD_CONNECTION_NOTIFY_STARTED) on_started(cls, conn, socket_context);
    else if (code == MHD_CONNECTION_NOTIFY_CLOSED) on_closed(cls, socket_context);
}

static void phase_hook(conn_guard *g, struct MHD_Connection *conn, int phase) {
    if (!g) return;
    gconn *c = conn_of(conn);
    if (!c) return;
    pthread_mutex_lock(&g->mu);
    set_phase(g, c, phase, mono_ms());
    pthread_mutex_unlock(&g->mu);
}

void conn_guard_headers_done(conn_guard *g, struct MHD_Connection *conn) { phase_hook(g, conn, PH_BODY); }
void conn_guard_handling(conn_guard *g, struct MHD_Connection *conn) { phase_hook(g, conn, PH_HANDLER); }
void conn_guard_request_done(conn_guard *g, struct MHD_Connection *conn) { phase_hook(g, conn, PH_IDLE); }

/* ---- the reaper ---------------------------------------------------------------------- */

/* What the kernel knows of a waiting connection. */
typedef struct {
    int64_t last_data_at; /* when (ms, monotonic) the last data byte arrived (jiffies: a few ms of
                             rounding); -1 when unknown */
    int gone;             /* the client closed its side and nothing is left unread */
} tcp_seen;

static tcp_seen tcp_look(int fd, int64_t now) {
    tcp_seen t = {-1, 0};
    struct tcp_info ti;
    socklen_t l = sizeof ti;
    memset(&ti, 0, sizeof ti);
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &l) != 0 || l < (socklen_t)sizeof ti) return t;
    t.last_data_at = now - (int64_t)ti.tcpi_last_data_recv;
    int unread = -1;
    t.gone = ti.tcpi_state == TCP_CLOSE_WAIT && ioctl(fd, SIOCINQ, &unread) == 0 && unread == 0;
    return t;
}

static void summary(conn_guard *g, int64_t now) {
    donto_coord_conn_stats *s = &g->st, *o = &g->logged;
    unsigned long long ev = s->evicted_per_ip + s->evicted_full - o->evicted_per_ip - o->evicted_full;
    unsigned long long to = s->timeout_headers + s->timeout_body + s->timeout_idle - o->timeout_headers -
                            o->timeout_body - o->timeout_idle;
    unsigned long long rf = s->refused - o->refused, pc = s->peer_closed - o->peer_closed;
    if (!ev && !to && !rf && !pc) return;
    DLOG_WARN("coord: connections: %llu open; in the last %.0f s: %llu evicted (%llu per address, %llu at the "
              "maximum), %llu timed out (headers %llu, body %llu, idle %llu), %llu let go after the client closed "
              "them, %llu refused",
              s->open, (double)(now - g->last_summary) / 1000.0, ev, s->evicted_per_ip - o->evicted_per_ip,
              s->evicted_full - o->evicted_full, to, s->timeout_headers - o->timeout_headers,
              s->timeout_body - o->timeout_body, s->timeout_idle - o->timeout_idle, pc, rf);
    *o = *s;
    g->last_summary = now;
}

static void *reaper_main(void *arg) {
    conn_guard *g = arg;
    pthread_mutex_lock(&g->mu);
    while (!g->stop) {
        struct timespec dl;
        clock_gettime(CLOCK_MONOTONIC, &dl);
        dl.tv_nsec += REAP_MS * 1000000L;
        if (dl.tv_nsec >= 1000000000L) dl.tv_sec++, dl.tv_nsec -= 1000000000L;
        while (!g->stop && pthread_cond_timedwait(&g->cv, &g->mu, &dl) == 0) {
        } /* woken early (or spuriously): wait on; ETIMEDOUT or an error: a pass */
        if (g->stop) break;
        int64_t now = mono_ms();
        for (gconn *c = g->all; c; c = c->next) {
            if (c->shut || c->phase == PH_HANDLER) continue; /* a request is ours until it is answered */
            tcp_seen t = tcp_look(c->fd, now);
            c->gone = t.gone ? c->gone + 1 : 0;
            if (c->gone >= 2) {
                shut(g, c, &g->st.peer_closed);
                continue;
            }
            switch (c->phase) {
            case PH_HEADERS:
                if (now - c->since >= g->header_ms) shut(g, c, &g->st.timeout_headers);
                break;
            case PH_BODY:
                if (now - c->since >= g->body_ms) shut(g, c, &g->st.timeout_body);
                break;
            default: /* PH_IDLE */
                if (t.last_data_at > c->since + 20) { /* 20 ms: the kernel's rounding */
                    /* The next request has begun: its header clock runs from
                     * its latest byte so far. It keeps its place among the
                     * evictable. */
                    c->phase = PH_HEADERS;
                    c->since = t.last_data_at;
                } else if (now - c->since >= g->idle_ms) {
                    shut(g, c, &g->st.timeout_idle);
                }
                break;
            }
        }
        if (now - g->last_summary >= SUMMARY_MS) summary(g, now);
    }
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

/* ---- start, stop, counters --------------------------------------------------------- */

static unsigned clampu(unsigned long long v, unsigned lo, unsigned hi) {
    return v < lo ? lo : v > hi ? hi : (unsigned)v;
}

int conn_guard_start(const donto_coord_config *cfg, int threads, int pool, conn_guard **out, donto_err *err) {
    *out = NULL;
    /* Room: the soft descriptor limit up to the hard one. */
    struct rlimit rl;
    unsigned long long fdlim = 1024;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        rlim_t want = rl.rlim_max == RLIM_INFINITY ? (rlim_t)1 << 20 : rl.rlim_max;
        if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < want) {
            rlim_t old = rl.rlim_cur;
            rl.rlim_cur = want;
            if (setrlimit(RLIMIT_NOFILE, &rl) == 0) {
                DLOG_INFO("coord: descriptor limit (RLIMIT_NOFILE) raised from %llu to %llu", (unsigned long long)old,
                          (unsigned long long)want);
            } else {
                DLOG_WARN("coord: cannot raise the descriptor limit from %llu to %llu: %s", (unsigned long long)old,
                          (unsigned long long)want, strerror(errno));
                rl.rlim_cur = old;
            }
        }
        fdlim = rl.rlim_cur == RLIM_INFINITY ? 1ull << 20 : (unsigned long long)rl.rlim_cur;
    }
    unsigned long long reserve = FD_RESERVE(threads, pool);
    unsigned long long avail = fdlim > reserve + 64 ? fdlim - reserve : 64;
    unsigned max = cfg->max_connections ? cfg->max_connections : DEF_MAX_CONNECTIONS;
    unsigned head = clampu(max / 16, 16, 256);
    if ((unsigned long long)max + head > avail) {
        head = clampu(avail / 16, 8, 256);
        unsigned capped = (unsigned)(avail - head);
        DLOG_WARN("coord: %u connections asked for, but the descriptor limit (%llu, less %llu reserved) allows %u; "
                  "raise the hard limit (ulimit -Hn, LimitNOFILE=) for more",
                  max, fdlim, reserve, capped);
        max = capped;
    }

    conn_guard *g = calloc(1, sizeof *g);
    if (!g) return donto_seterr(err, "out of memory");
    g->max = max;
    g->mhd_limit = max + head;
    g->per_ip = cfg->per_ip_limit ? cfg->per_ip_limit : DEF_PER_IP;
    g->header_ms = 1000ll * (cfg->header_timeout_s ? cfg->header_timeout_s : DEF_HEADER_S);
    g->body_ms = 1000ll * (cfg->body_timeout_s ? cfg->body_timeout_s : DEF_BODY_S);
    g->idle_ms = 1000ll * (cfg->idle_timeout_s ? cfg->idle_timeout_s : DEF_IDLE_S);
    g->nbuckets = 256;
    while (g->nbuckets < max && g->nbuckets < 65536) g->nbuckets *= 2;
    g->buckets = calloc(g->nbuckets, sizeof *g->buckets);
    g->last_summary = mono_ms();
    pthread_condattr_t ca;
    int ok = g->buckets && pthread_mutex_init(&g->mu, NULL) == 0;
    if (ok) {
        ok = pthread_condattr_init(&ca) == 0;
        if (ok) {
            ok = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) == 0 && pthread_cond_init(&g->cv, &ca) == 0;
            pthread_condattr_destroy(&ca);
        }
        if (!ok) pthread_mutex_destroy(&g->mu);
    }
    if (!ok) {
        free(g->buckets);
        free(g);
        return donto_seterr(err, "connection guard: out of resources");
    }
    if (pthread_create(&g->reaper, NULL, reaper_main, g) != 0) {
        pthread_cond_destroy(&g->cv);
        pthread_mutex_destroy(&g->mu);
        free(g->buckets);
        free(g);
        return donto_seterr(err, "connection guard: cannot start its thread");
    }
    g->reaper_on = 1;
    DLOG_INFO("coord: connections: at most %u held (libmicrohttpd's limit %u; descriptors %llu), %u per address; "
              "headers within %lld s, body within %lld s, idle keep-alive %lld s",
              g->max, g->mhd_limit, fdlim, g->per_ip, (long long)g->header_ms / 1000, (long long)g->body_ms / 1000,
              (long long)g->idle_ms / 1000);
    *out = g;
    return 0;
}

unsigned conn_guard_mhd_limit(const conn_guard *g) { return g ? g->mhd_limit : 0; }

void conn_guard_close(conn_guard *g) {
    if (g) atomic_store(&g->closed, 1);
}

void conn_guard_stop(conn_guard *g) {
    if (!g) return;
    pthread_mutex_lock(&g->mu);
    g->stop = 1;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
    if (g->reaper_on) pthread_join(g->reaper, NULL);
    /* Nothing is left after MHD_stop_daemon; free whatever is, all the same. */
    for (gconn *c = g->all, *n; c; c = n) n = c->next, free(c);
    for (size_t b = 0; b < g->nbuckets; b++)
        for (gaddr *a = g->buckets[b], *n; a; a = n) n = a->next, free(a);
    free(g->buckets);
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
    free(g);
}

void conn_guard_stats(conn_guard *g, donto_coord_conn_stats *out) {
    memset(out, 0, sizeof *out);
    if (!g) return;
    pthread_mutex_lock(&g->mu);
    *out = g->st;
    out->max_connections = g->max;
    out->per_ip_limit = g->per_ip;
    pthread_mutex_unlock(&g->mu);
}

void conn_guard_metrics(conn_guard *g, donto_buf *out) {
    if (!g) return;
    donto_coord_conn_stats s;
    conn_guard_stats(g, &s);
    donto_buf_printf(out,
                     "# HELP donto_embed_connections_open Client connections held now.\n"
                     "# TYPE donto_embed_connections_open gauge\ndonto_embed_connections_open %llu\n"
                     "# HELP donto_embed_connections_max The connection limit in force (--max-connections).\n"
                     "# TYPE donto_embed_connections_max gauge\ndonto_embed_connections_max %u\n"
                     "# HELP donto_embed_connections_accepted_total Connections admitted.\n"
                     "# TYPE donto_embed_connections_accepted_total counter\ndonto_embed_connections_accepted_total %llu\n"
                     "# HELP donto_embed_connections_refused_total Connections refused at a limit with nothing to evict.\n"
                     "# TYPE donto_embed_connections_refused_total counter\ndonto_embed_connections_refused_total %llu\n"
                     "# HELP donto_embed_connections_evicted_total Connections waiting for headers or idle, closed to admit "
                     "a newer one.\n# TYPE donto_embed_connections_evicted_total counter\n"
                     "donto_embed_connections_evicted_total{limit=\"per_ip\"} %llu\n"
                     "donto_embed_connections_evicted_total{limit=\"max_connections\"} %llu\n"
                     "# HELP donto_embed_connections_timed_out_total Connections closed by a deadline, by phase.\n"
                     "# TYPE donto_embed_connections_timed_out_total counter\n"
                     "donto_embed_connections_timed_out_total{phase=\"headers\"} %llu\n"
                     "donto_embed_connections_timed_out_total{phase=\"body\"} %llu\n"
                     "donto_embed_connections_timed_out_total{phase=\"idle\"} %llu\n"
                     "# HELP donto_embed_connections_peer_closed_total Waiting connections the client had closed, let go "
                     "before their deadline.\n# TYPE donto_embed_connections_peer_closed_total counter\n"
                     "donto_embed_connections_peer_closed_total %llu\n",
                     s.open, s.max_connections, s.accepted, s.refused, s.evicted_per_ip, s.evicted_full, s.timeout_headers,
                     s.timeout_body, s.timeout_idle, s.peer_closed);
}
