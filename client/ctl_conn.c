/* ctl_conn.c - ckptctl's connection to ckptd: libckpt's transport
 * (ckpt_conn.c) with HELLO as role "ctl", deadlines on every reply, and
 * every failure ending the program with its reason (exit 2 when ckptd
 * cannot be reached, 1 for a connection lost later).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "ctl.h"

/* The connection broke: say what broke it. */
static void ctl_lost(struct ctl *c, int r)
{
	if (r == -ENOMEM)
		die(EXIT_FAIL, "out of memory");
	die(EXIT_FAIL, "%s", c->conn.why[0] ? c->conn.why : strerror(-r));
}

uint64_t ctl_send(struct ctl *c, uint16_t type, const json_t *req)
{
	uint64_t id;
	int r = ckpt__conn_send(&c->conn, type, req, NULL, 0, NULL, 0, &id);

	if (r == -ENOMEM)
		die(EXIT_FAIL, "out of memory");
	if (r < 0 && !c->conn.broken)
		die(EXIT_FAIL, "cannot send %s to ckptd: %s",
		    proto_type_name(type), strerror(-r));
	if (r < 0)
		ctl_lost(c, r);
	return id;
}

int ctl_wait(struct ctl *c, uint16_t type, uint64_t id, int64_t deadline,
	     struct ctl_reply *rep)
{
	struct ckpt__reply r0;
	const char *why;
	int r = ckpt__conn_await(&c->conn, type, id, deadline, false, NULL,
				 NULL, &r0);

	if (r == -EAGAIN)
		return 0;
	if (r == -EPROTO)
		die(EXIT_FAIL, "ckptd sent a malformed %s reply",
		    proto_type_name(type));
	if (r < 0)
		ctl_lost(c, r);
	memset(rep, 0, sizeof(*rep));
	rep->status = r0.status;
	rep->json = r0.json;            /* taken over */
	why = ckpt__reply_why(&r0);
	snprintf(rep->error, sizeof(rep->error), "%s",
		 *why ? why : ckpt_strerror(rep->status));
	return 1;
}

/* Send a request and wait up to wait_ms for its reply.  Lost connections
 * and timeouts are fatal. */
static void ctl_request(struct ctl *c, uint16_t type, const json_t *req,
			int64_t wait_ms, struct ctl_reply *rep)
{
	int64_t deadline = ckpt__now_ms() + wait_ms;
	uint64_t id = ctl_send(c, type, req);

	if (!ctl_wait(c, type, id, deadline, rep))
		die(EXIT_FAIL, "ckptd did not answer %s in time",
		    proto_type_name(type));
}

json_t *ctl_call(struct ctl *c, uint16_t type, json_t *req, int64_t wait_ms,
		 const char *what)
{
	struct ctl_reply rep;

	if (!req)
		die(EXIT_FAIL, "out of memory");
	ctl_request(c, type, req, wait_ms, &rep);
	json_decref(req);
	if (rep.status != 0)
		die(EXIT_FAIL, "%s: %s", what, rep.error);
	return rep.json;
}

void ctl_connect(struct ctl *c)
{
	char err[512];
	json_t *hello;

	ckpt__conn_init(&c->conn, PROTO_MAX_PAYLOAD);
	if (ckpt__conn_open(&c->conn, ctl_socket, err, sizeof(err)) < 0)
		die(EXIT_USAGE, "%s", err);
	hello = json_pack("{s:i, s:i, s:s, s:I}", "version", PROTO_VERSION,
			  "features", PROTO_FEAT_EVENTS, "role", "ctl",
			  "pid", (json_int_t)getpid());
	json_decref(ctl_call(c, PROTO_HELLO, hello, CTL_REPLY_WAIT_MS,
			     "ckptd refused the connection"));
}

void ctl_close(struct ctl *c)
{
	ckpt__conn_release(&c->conn);
}

json_t *ctl_status_get(struct ctl *c)
{
	return ctl_call(c, PROTO_STATUS, json_object(), CTL_REPLY_WAIT_MS,
			"status");
}
