/* cmd.h - the request table: for each message type its handler and the
 * checks dispatch makes before calling it; helpers shared by handlers.
 * Loop thread only. */
#ifndef CKPT_CMD_H
#define CKPT_CMD_H

#include <jansson.h>
#include <stdint.h>

#include "proto.h"

struct session;

/* One request being handled: a handler returns 0 once it replied (or
 * will reply later), or -errno with an optional message in msg that
 * dispatch sends as the error reply. */
struct req {
	struct session *s;
	struct proto_msg *m;
	json_t *j;
	uint16_t rtype;                /* the reply's type */
	char msg[512];
};

struct cmd {
	int (*fn)(struct req *);
	int need_hello;
};

/* The entry for a request type, or NULL if it is not a request. */
const struct cmd *cmd_lookup(uint16_t type);

void cmd_reply_ok(struct req *q, const char *json);   /* NULL: "{}" */
void cmd_reply_json(struct req *q, json_t *o);       /* steals o */
int  cmd_get_u64(json_t *j, const char *key, uint64_t *out);
const char *cmd_get_str(json_t *j, const char *key);

/* Operator requests (ctl.c). */
int h_status(struct req *q);
int h_flush(struct req *q);
int h_list(struct req *q);
int h_prune(struct req *q);

#define FAIL(err, ...) do { snprintf(q->msg, sizeof(q->msg), __VA_ARGS__); return (err); } while (0)

#endif
