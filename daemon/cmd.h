/* cmd.h - the request table: for each request type its handler, where it
 * runs (the loop, or a pool thread for work that may take long) and the
 * checks dispatch makes before calling it; helpers shared by handlers. */
#ifndef CKPT_CMD_H
#define CKPT_CMD_H

#include <jansson.h>
#include <stdint.h>
#include <uv.h>

#include "proto.h"

struct session;

enum cmd_role    { CMD_ANY = 0, CMD_TRAINER, CMD_CTL };   /* who may send it */
enum cmd_runs_on { CMD_LOOP = 0, CMD_POOL };

/* One request being handled.  Handlers return 0 once they replied (or
 * will reply later), or -errno with an optional message in msg that
 * dispatch sends as the error reply. */
struct req {
	struct session *s;
	struct proto_msg *m;           /* NULL on the pool and after it */
	json_t *j;                     /* the request's JSON object */
	uint64_t req_id;
	uint16_t rtype;                /* the reply's type */
	char msg[512];
	/* CMD_POOL only */
	const struct cmd *c;
	uv_work_t work;
	int r;                         /* what work returned */
	char *reply;                   /* work's JSON reply (malloc'd); NULL: "{}" */
	void *arg;                     /* the handler's state across the hop */
	int fd;                        /* a descriptor taken from m, or -1 */
};

/* CMD_LOOP: fn handles the request on the loop thread.
 * CMD_POOL: fn (optional) checks and prepares it on the loop; work runs on
 * a libuv pool thread and must touch no loop state (a session's uid and
 * the server's rootfd and configuration limits never change and may be
 * read); done (optional) runs on the loop at the end whatever happened
 * (fn or work failed, the session closed meanwhile: then it only
 * releases q->arg) and may set q->r.
 * The session reads no further request until the reply is queued, so
 * replies keep their order. */
struct cmd {
	uint16_t type;
	int (*fn)(struct req *q);
	int (*work)(struct req *q);
	void (*done)(struct req *q);
	int needs_hello;
	enum cmd_role role;
	int fds_ok;                    /* may carry file descriptors */
	enum cmd_runs_on runs_on;
	const char *role_why;          /* the refusal for another role */
};

/* The entry for a request type, or NULL if it is not a request. */
const struct cmd *cmd_lookup(uint16_t type);

void cmd_reply_json(struct req *q, json_t *o);       /* steals o */
/* For work: o's compact text into q->reply (steals o). */
int  cmd_set_reply(struct req *q, json_t *o);
int  cmd_get_u64(json_t *j, const char *key, uint64_t *out);
/* The error reply's message into q->msg; returns err, so a handler's
 * early exit reads `return cmd_fail(q, -EINVAL, "...", ...);`. */
int  cmd_fail(struct req *q, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
const char *cmd_get_str(json_t *j, const char *key);

/* Operator requests (ctl.c). */
int ctl_status(struct req *q);
int ctl_flush(struct req *q);
int ctl_list_check(struct req *q);
int ctl_list_work(struct req *q);
int ctl_prune_check(struct req *q);
int ctl_prune_work(struct req *q);
int ctl_remote_check(struct req *q);          /* ctl_remote.c */
int ctl_remote_work(struct req *q);


#endif
