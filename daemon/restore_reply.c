/* restore_reply.c - see restore_reply.h: a restore's report and blobs to
 * the trainer in parts, as fast as it reads them. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "job.h"
#include "log.h"
#include "proto.h"
#include "restore_reply.h"
#include "session.h"
#include "srv.h"

#define PART_MAX   (1u << 20)  /* payload of one part, at most */
#define PART_SLACK 256         /* its JSON around a blob's bytes or a name list */

enum stage { ST_RESTORED, ST_MISSING, ST_UNEXPECTED, ST_SKIPPED, ST_BLOBS, ST_DONE };

static const char *const stage_key[] = { "restored", "missing", "unexpected", "skipped" };

struct rreply {
	struct session *s;
	uint64_t        req_id;
	struct restore_result res;
	size_t          budget;     /* payload bytes per part */
	enum stage      stage;
	size_t          idx;        /* in the stage's list, or the blob */
	size_t          boff;       /* in that blob */
	int             in_pump;    /* the session closed under pump(): */
	int             dead;       /*   free on the way out */
};

void restore_list_add(json_t *list, const char *group, const char *name)
{
	size_t g = strlen(group), n = strlen(name);
	char *key = malloc(g + 1 + n);

	/* no printf and no second UTF-8 check: a restore of 100,000 tensors
	 * lists each of them */
	if (!key)
		return;
	memcpy(key, group, g);
	key[g] = '/';
	memcpy(key + g + 1, name, n);
	json_array_append_new(list, json_stringn_nocheck(key, g + 1 + n));
	free(key);
}

void restore_result_clear(struct restore_result *res)
{
	for (size_t i = 0; i < res->nblobs; i++) {
		free(res->blobs[i].name);
		free(res->blobs[i].data);
	}
	free(res->blobs);
	res->blobs = NULL;
	res->nblobs = 0;
	res->bytes = 0;
	if (res->restored)
		json_array_clear(res->restored);
	if (res->missing)
		json_array_clear(res->missing);
	if (res->unexpected)
		json_array_clear(res->unexpected);
}

void restore_result_release(struct restore_result *res)
{
	if (!res)
		return;
	restore_result_clear(res);
	json_decref(res->restored);
	json_decref(res->missing);
	json_decref(res->unexpected);
	json_decref(res->skipped);
	res->restored = res->missing = res->unexpected = res->skipped = NULL;
}

static json_t *stage_list(struct rreply *rr)
{
	switch (rr->stage) {
	case ST_RESTORED:   return rr->res.restored;
	case ST_MISSING:    return rr->res.missing;
	case ST_UNEXPECTED: return rr->res.unexpected;
	case ST_SKIPPED:    return rr->res.skipped;
	default:            return NULL;
	}
}

/* Bytes an entry can take in compact JSON (a name escapes to at most
 * twice its length: no control characters). */
static size_t entry_cost(const json_t *e)
{
	const json_t *why;

	if (json_is_string(e))
		return 2 * json_string_length(e) + 3;
	why = json_object_get(e, "reason");   /* skipped: any text, \u escapes */
	return 6 * json_string_length(why) + 64;
}

/* Queue the next part.  1 queued, 0 nothing left, -ENOMEM. */
static int next_part(struct rreply *rr)
{
	json_t *o = NULL, *list;
	const void *bin = NULL;
	size_t blen = 0;
	char *txt;

	while (rr->stage < ST_BLOBS) {
		size_t n = json_array_size(list = stage_list(rr)), used = 32;
		json_t *arr;

		if (rr->idx >= n) {
			rr->stage++;
			rr->idx = 0;
			continue;
		}
		if (!(arr = json_array()) ||
		    !(o = json_pack("{so}", stage_key[rr->stage], arr)))
			return -ENOMEM;
		for (size_t i = rr->idx; i < n; i++) {
			json_t *e = json_array_get(list, i);
			if (i > rr->idx && used + entry_cost(e) > rr->budget - PART_SLACK)
				break;
			if (json_array_append(arr, e) < 0) {
				json_decref(o);
				return -ENOMEM;
			}
			used += entry_cost(e);
		}
		rr->idx += json_array_size(arr);
		break;
	}
	if (!o && rr->stage == ST_BLOBS) {
		const struct restore_blob *b;

		if (rr->idx >= rr->res.nblobs) {
			rr->stage = ST_DONE;
			return 0;
		}
		b = &rr->res.blobs[rr->idx];
		blen = b->len - rr->boff;
		if (blen > rr->budget - PART_SLACK)
			blen = rr->budget - PART_SLACK;
		bin = b->data + rr->boff;
		o = json_pack("{sssIsI}", "blob", b->name, "off", (json_int_t)rr->boff,
			      "len", (json_int_t)b->len);
		if (!o)
			return -ENOMEM;
		rr->boff += blen;
		if (rr->boff == b->len) {
			rr->idx++;
			rr->boff = 0;
		}
	}
	if (!o)
		return 0;
	txt = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	if (!txt)
		return -ENOMEM;
	session_reply(rr->s, PROTO_RESTORE_PART, rr->req_id, 0, txt, bin, blen);
	free(txt);
	return 1;
}

static json_t *counts(const struct restore_result *res)
{
	return json_pack("{sIsIsIsIsI}",
			 "restored", (json_int_t)json_array_size(res->restored),
			 "missing", (json_int_t)json_array_size(res->missing),
			 "unexpected", (json_int_t)json_array_size(res->unexpected),
			 "skipped", (json_int_t)json_array_size(res->skipped),
			 "blobs", (json_int_t)res->nblobs);
}

/* The final reply; with parts it carries the counts of what they held. */
static void send_final(struct rreply *rr, int parts)
{
	struct session *s = rr->s;
	const struct restore_result *res = &rr->res;
	uint64_t micros = (now_ns() - res->t_start_ns) / 1000;
	json_t *o = json_pack("{sIsssIsI}", "step", (json_int_t)res->step, "source", res->source,
			      "bytes", (json_int_t)res->bytes, "micros", (json_int_t)micros);
	char *txt;

	if (o && parts && json_object_set_new(o, "counts", counts(res)) < 0) {
		json_decref(o);
		o = NULL;
	}
	txt = o ? json_dumps(o, JSON_COMPACT) : NULL;
	json_decref(o);
	if (!txt) {
		session_reply_err(s, PROTO_RESTORE | PROTO_REPLY, rr->req_id, -ENOMEM,
				  "out of memory");
		return;
	}
	session_reply(s, PROTO_RESTORE | PROTO_REPLY, rr->req_id, 0, txt, NULL, 0);
	free(txt);
	if (!s->closed)
		log_info("job %s: rank %d restored iter_%09llu from %s", s->job ?
			 s->job->name : "?", s->rank, (unsigned long long)res->step,
			 res->source);
}

/* A client without parts: everything in one reply, as protocol version 1
 * first had it, if it fits. */
static void send_whole(struct rreply *rr)
{
	struct session *s = rr->s;
	struct restore_result *res = &rr->res;
	size_t total = 0, off = 0, max = s->srv->cfg.max_message_bytes;
	json_t *bl = json_array(), *o;
	uint8_t *bin = NULL;
	char *txt = NULL;
	int r = bl ? 0 : -ENOMEM;

	for (size_t i = 0; i < res->nblobs && r == 0; i++) {
		if (json_array_append_new(bl, json_pack("{sssI}", "name", res->blobs[i].name,
				"len", (json_int_t)res->blobs[i].len)) < 0)
			r = -ENOMEM;
		total += res->blobs[i].len;
	}
	if (r == 0 && total >= max) {
		r = -EMSGSIZE;
		goto out;
	}
	o = r ? NULL : json_pack("{sIsOsOsOsOsOsssIsI}", "step", (json_int_t)res->step,
				 "restored", res->restored, "missing", res->missing,
				 "unexpected", res->unexpected, "blobs", bl, "skipped",
				 res->skipped, "source", res->source, "bytes", (json_int_t)res->bytes,
				 "micros", (json_int_t)((now_ns() - res->t_start_ns) / 1000));
	txt = o ? json_dumps(o, JSON_COMPACT) : NULL;
	json_decref(o);
	bin = txt ? malloc(total ? total : 1) : NULL;
	if (!bin) {
		r = -ENOMEM;
		goto out;
	}
	if (strlen(txt) + total > max) {
		r = -EMSGSIZE;
		goto out;
	}
	for (size_t i = 0; i < res->nblobs; i++) {
		memcpy(bin + off, res->blobs[i].data, res->blobs[i].len);
		off += res->blobs[i].len;
	}
	session_reply(s, PROTO_RESTORE | PROTO_REPLY, rr->req_id, 0, txt, bin, total);
	log_info("job %s: rank %d restored iter_%09llu from %s", s->job ? s->job->name : "?",
		 s->rank, (unsigned long long)res->step, res->source);
out:
	if (r == -EMSGSIZE)
		session_reply_err(s, PROTO_RESTORE | PROTO_REPLY, rr->req_id, r,
				  "the restore of rank %d (iter_%09llu) does not fit one message "
				  "(max_message_bytes %zu) and this client cannot take it in parts: "
				  "use a libckpt that announces restore parts", s->rank,
				  (unsigned long long)res->step, max);
	else if (r < 0)
		session_reply_err(s, PROTO_RESTORE | PROTO_REPLY, rr->req_id, r, "out of memory");
	free(bin);
	free(txt);
	json_decref(bl);
}

static void rreply_free(struct rreply *rr)
{
	struct session *s = rr->s;

	restore_result_release(&rr->res);
	free(rr);
	session_resume(s);      /* reads requests again (no-op once closed) */
	session_unref(s);
}

/* The session's output drained (or it closed): queue more parts, and the
 * final reply after the last. */
static void pump(struct session *s, void *arg, int closing)
{
	struct rreply *rr = arg;

	if (closing) {
		if (rr->in_pump)
			rr->dead = 1;
		else
			rreply_free(rr);
		return;
	}
	rr->in_pump = 1;
	while (!rr->dead && s->outq_bytes < rr->budget) {
		int r = next_part(rr);
		if (r < 0 && !rr->dead)
			session_reply_err(s, PROTO_RESTORE | PROTO_REPLY, rr->req_id, r,
					  "out of memory sending the restore");
		else if (r == 0 && !rr->dead)
			send_final(rr, 1);
		if (r <= 0) {
			if (!rr->dead)
				s->task = (struct session_task){ 0 };
			rr->dead = 1;
		}
	}
	rr->in_pump = 0;
	if (rr->dead)
		rreply_free(rr);
}

void restore_reply_send(struct session *s, uint64_t req_id, struct restore_result *res)
{
	struct rreply *rr = calloc(1, sizeof(*rr));
	size_t max = s->srv->cfg.max_message_bytes;

	if (!rr) {
		session_reply_err(s, PROTO_RESTORE | PROTO_REPLY, req_id, -ENOMEM, "out of memory");
		restore_result_release(res);
		session_resume(s);
		session_unref(s);
		return;
	}
	rr->s = s;
	rr->req_id = req_id;
	rr->res = *res;
	*res = (struct restore_result){ 0 };
	rr->budget = max < PART_MAX ? max : PART_MAX;
	if (!(s->features & PROTO_FEAT_RESTORE_PARTS)) {
		send_whole(rr);
		rreply_free(rr);
		return;
	}
	s->task = (struct session_task){ pump, rr };
	pump(s, rr, 0);
}
