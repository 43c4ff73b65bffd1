/* ctl.h - what ckptctl's files share (everything else in them is static):
 *   ckptctl.c     command line: the command table, options, help, dispatch
 *   ctl_conn.c    talking to ckptd over libckpt's transport (dies on error)
 *   ctl_fmt.c     output: sizes, durations, aligned tables, JSON
 *   ctl_status.c  status and top: render the daemon's STATUS, redraw it
 *   ctl_flush.c   flush, with progress from a second connection
 *   ctl_ckpts.c   the checkpoints: list, prune, verify (offline)
 *   ctl_remote.c  the object-store tier: list --remote, push, pull
 *   ctl_export.c  export: global tensors in the Hugging Face layout
 */
#ifndef CKPT_CTL_H
#define CKPT_CTL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "ckpt_int.h"

#define EXIT_FAIL  1
#define EXIT_USAGE 2

#define CTL_REPLY_WAIT_MS     (60 * 1000)      /* status, list */
#define CTL_PRUNE_WAIT_MS     (10 * 60 * 1000) /* removing big directories */
#define CTL_FLUSH_DEFAULT_S   600
#define CTL_VERIFY_THREADS    4

/* Options of a command: what any of them may take. */
struct ctl_opts {
	const char *job, *dir;
	double timeout_s, interval_s;
	long keep, count, step;        /* step -1: none given */
	bool json, quick, watch, remote;
};

/* --- ckptctl.c ------------------------------------------------------------- */
extern const char *ctl_socket;     /* -s, else $CKPT_SOCKET, else default */

void die(int code, const char *fmt, ...)
	__attribute__((format(printf, 2, 3), noreturn));

/* --- ctl_conn.c: a connection to ckptd; every failure ends the program --- */
struct ctl {
	struct ckpt__conn conn;
};

/* The reply to one request.  status 0: json is the reply; else error is the
 * daemon's reason (and json may still hold counters). */
struct ctl_reply {
	int32_t status;
	json_t *json;
	char    error[512];
};

void     ctl_connect(struct ctl *c);           /* and HELLO as "ctl" */
void     ctl_close(struct ctl *c);
/* Send a request (req is borrowed); returns its request id. */
uint64_t ctl_send(struct ctl *c, uint16_t type, const json_t *req);
/* Wait until deadline (monotonic ms) for the reply to request id, skipping
 * EVENTs.  1 with *rep filled, 0 when the deadline passed. */
int      ctl_wait(struct ctl *c, uint16_t type, uint64_t id,
		  int64_t deadline, struct ctl_reply *rep);
/* A request whose failure ends the program with "what: <reason>"; steals
 * req, returns the reply (new reference). */
json_t  *ctl_call(struct ctl *c, uint16_t type, json_t *req, int64_t wait_ms,
		  const char *what);
json_t  *ctl_status_get(struct ctl *c);       /* STATUS, new reference */

/* --- ctl_fmt.c: formatting ------------------------------------------------- */
const char *fmt_bytes(uint64_t n, char *buf, size_t len);   /* "1.5 KiB" */
const char *fmt_duration(uint64_t s, char *buf, size_t len); /* "4m 3s" */
const char *fmt_age(int64_t when, char *buf, size_t len);   /* "12s ago" */
const char *fmt_time(int64_t when, char *buf, size_t len);  /* local time */
const char *fmt_bar(double frac, int width, char *buf, size_t len);
const char *fmt_u64(uint64_t v, char *buf, size_t len);
const char *fmt_owner(uint64_t uid, char *buf, size_t len); /* user name */

/* Aligned columns: collect rows of strings, then print with every column
 * as wide as its widest cell. */
#define TABLE_MAX_COLS 10
#define TABLE_CELL     64

struct table {
	int    ncols;
	const char *head[TABLE_MAX_COLS];
	bool   right[TABLE_MAX_COLS];
	char (*cells)[TABLE_MAX_COLS][TABLE_CELL];
	size_t nrows, cap;
	char   spec[256];       /* head[] points into it */
};

/* spec: "NAME,>NUM,..." - a leading '>' right-aligns the column. */
void table_init(struct table *t, const char *spec);
void table_row(struct table *t, ...);          /* ncols strings (NULL: "-") */
void table_print(struct table *t, FILE *f, const char *indent);  /* frees */
void table_free(struct table *t);

/* JSON members with defaults, so that a daemon that omits a field still
 * gives a readable view. */
uint64_t    jget_u64(const json_t *o, const char *key, uint64_t dflt);
const char *jget_str(const json_t *o, const char *key, const char *dflt);
void        print_json(const json_t *j);

/* --- the commands (each returns the exit status) ---------------------------- */
int  cmd_status(struct ctl *c, const struct ctl_opts *o);     /* ctl_status.c */
/* How far an in-flight save is (0..1); *est: the bytes the world saves. */
double step_progress(const json_t *s, uint64_t world, uint64_t *est);
int  cmd_flush(struct ctl *c, const struct ctl_opts *o);      /* ctl_flush.c */
int  cmd_list(struct ctl *c, const struct ctl_opts *o);       /* ctl_ckpts.c */
/* A list's table, then "N checkpoints<where>, SIZE" and, when the files
 * take less (incremental saves link them), " (ON_DISK on disk: ...)"; or
 * "no checkpoints [of job J]<where>".  Frees t. */
void print_ckpt_table(struct table *t, uint64_t bytes, uint64_t on_disk,
		      const char *job, const char *where);
int  cmd_prune(struct ctl *c, const struct ctl_opts *o);
int  cmd_verify(struct ctl *c, const struct ctl_opts *o);     /* c is NULL */
int  cmd_list_remote(struct ctl *c, const struct ctl_opts *o); /* ctl_remote.c */
int  cmd_push(struct ctl *c, const struct ctl_opts *o);
int  cmd_pull(struct ctl *c, const struct ctl_opts *o);
int  export_main(int argc, char **argv);                      /* ctl_export.c */
int  ctl_help(const char *cmd);         /* ckptctl.c: print a command's help */

#endif
