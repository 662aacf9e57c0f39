/*
 * The coordinator's connection guard (private to coord; the design is at the
 * top of conn_guard.c): a connection limit sized to the descriptor limit, a
 * per-address limit that evicts instead of locking out, and deadlines for
 * headers, bodies and idle keep-alive connections that trickled bytes do not
 * reset.
 *
 * server.c wires it into libmicrohttpd: conn_guard_accept as the accept
 * policy callback, conn_guard_notify as MHD_OPTION_NOTIFY_CONNECTION,
 * conn_guard_mhd_limit() as MHD_OPTION_CONNECTION_LIMIT, and the three
 * request hooks from its request callbacks.
 */
#ifndef DONTO_COORD_CONN_GUARD_H
#define DONTO_COORD_CONN_GUARD_H

#include <sys/socket.h>

#include <microhttpd.h>

#include "donto/coord.h"
#include "donto/util.h"

typedef struct conn_guard conn_guard;

/* Raise RLIMIT_NOFILE's soft limit to the hard one, size the limits from
 * cfg (max_connections, per_ip_limit, the three timeouts; 0: defaults) and
 * the descriptors left after a reserve for threads and store handles, log
 * what was chosen, start the reaper thread. */
int conn_guard_start(const donto_coord_config *cfg, int threads, int pool, conn_guard **out, donto_err *err);

/* The value for MHD_OPTION_CONNECTION_LIMIT: above the guard's own limit,
 * so that the guard, which sees every worker thread's connections, decides
 * first (libmicrohttpd refuses over its limit without asking). */
unsigned conn_guard_mhd_limit(const conn_guard *g);

/* Stop the reaper and free g; after MHD_stop_daemon (every connection has
 * been reported closed by then). NULL is fine. */
void conn_guard_stop(conn_guard *g);

/* Close the door: from now on the accept policy refuses every new
 * connection (libmicrohttpd closes it at once), so a drain can end; the
 * connections already open are served as before. The coordinator's stop
 * calls this instead of MHD_quiesce_daemon, which with epoll and a thread
 * pool races the worker threads over the listening socket's epoll entry and
 * aborts the process ("Failed to remove listen FD from epoll set", seen in
 * CI). NULL is fine. */
void conn_guard_close(conn_guard *g);

/* libmicrohttpd callbacks; cls is the guard. */
enum MHD_Result conn_guard_accept(void *cls, const struct sockaddr *addr, socklen_t addrlen);
void conn_guard_notify(void *cls, struct MHD_Connection *conn, void **socket_context,
                       enum MHD_ConnectionNotificationCode code);

/* The request's phases, from server.c's callbacks: its headers are in (the
 * body, if any, is next); it is in the handler (never touched from then on);
 * it is done (the connection is an idle keep-alive one until the next). */
void conn_guard_headers_done(conn_guard *g, struct MHD_Connection *conn);
void conn_guard_handling(conn_guard *g, struct MHD_Connection *conn);
void conn_guard_request_done(conn_guard *g, struct MHD_Connection *conn);

/* The counters; zeros for NULL. */
void conn_guard_stats(conn_guard *g, donto_coord_conn_stats *out);

/* Append the counters to out in Prometheus text format. */
void conn_guard_metrics(conn_guard *g, donto_buf *out);

#endif
