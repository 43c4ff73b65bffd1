/* restore_reply.h - a successful restore's outcome to its trainer: the
 * report (tensors restored, missing, unexpected; steps skipped) and the
 * blobs, in parts that each fit one message, queued as fast as the trainer
 * reads them, then the final RESTORE reply (proto/PROTOCOL.md).  A client
 * that did not announce PROTO_FEAT_RESTORE_PARTS gets everything in the
 * one reply, or -EMSGSIZE when it does not fit.  Loop thread only. */
#ifndef CKPT_RESTORE_REPLY_H
#define CKPT_RESTORE_REPLY_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

struct session;

struct restore_blob {
	char    *name;
	uint8_t *data;
	size_t   len;
};

struct restore_result {
	uint64_t step;             /* the step restored */
	uint64_t bytes;            /* tensor and blob bytes delivered */
	uint64_t t_start_ns;       /* when the RESTORE was accepted */
	const char *source;        /* where from: "disk", "memory", "remote" (static) */
	json_t  *restored, *missing, *unexpected;   /* "group/name" strings */
	json_t  *skipped;          /* {"step", "reason"} of newer steps passed over */
	struct restore_blob *blobs; size_t nblobs;
};

/* Append "group/name" to one of res's tensor lists (both names checked
 * already: valid UTF-8, no '/' in group).  Out of memory: left out. */
void restore_list_add(json_t *list, const char *group, const char *name);
/* Forget the blobs, bytes and tensor lists of an attempt (a failed one,
 * before an older step is tried); skipped is kept. */
void restore_result_clear(struct restore_result *res);
/* Frees what res holds (not res itself).  NULL-safe. */
void restore_result_release(struct restore_result *res);

/* Send res (stolen) as the reply to request req_id of s.  s is busy (not
 * reading requests) and holds a reference for the restore: both are given
 * back once the final reply is queued or the session closes. */
void restore_reply_send(struct session *s, uint64_t req_id, struct restore_result *res);

#endif
