/* ckpt_restore.c - libckpt's restore: ckpt_restore() asks ckptd to fill
 * the registered tensors from a checkpoint, receives the report and the
 * blobs (in RESTORE_PART messages, then the reply), and keeps them for
 * ckpt_restore_info(), ckpt_restore_missing() / _unexpected() / _skipped()
 * and ckpt_get_blob().
 */
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt_int.h"

/* What a restore brought, filled from the RESTORE_PART messages and the
 * reply (or, from a daemon without parts, the reply alone). */
struct ckpt__name {
	char *group, *name;          /* one allocation: "group\0name" */
};

struct ckpt__restore {
	int                err;        /* first problem with its parts */
	uint64_t           nrestored;
	struct ckpt__name *missing;    size_t nmissing, cap_missing;
	struct ckpt__name *unexpected; size_t nunexpected, cap_unexpected;
	struct ckpt__skip { uint64_t step; char *reason; } *skipped;
	size_t             nskipped, cap_skipped;
	struct ckpt__blob *blobs;      size_t nblobs, cap_blobs;
	size_t             blob_fill;  /* bytes of the last blob received */
	struct ckpt_restore_info info; /* from the reply */
};

void ckpt__restore_free(struct ckpt__restore *r)
{
	if (!r)
		return;
	for (size_t i = 0; i < r->nmissing; i++)
		free(r->missing[i].group);
	for (size_t i = 0; i < r->nunexpected; i++)
		free(r->unexpected[i].group);
	for (size_t i = 0; i < r->nskipped; i++)
		free(r->skipped[i].reason);
	for (size_t i = 0; i < r->nblobs; i++) {
		free(r->blobs[i].name);
		free(r->blobs[i].data);
	}
	free(r->missing);
	free(r->unexpected);
	free(r->skipped);
	free(r->blobs);
	free(r);
}

/* "group/name" (group names have no '/') into a list. */
static int ckpt__name_add(struct ckpt__name **v, size_t *n, size_t *cap,
			  const json_t *e)
{
	const char *s = json_string_value(e), *slash = s ? strchr(s, '/') : NULL;
	char *g;

	if (!slash)
		return -EPROTO;
	if (ckpt__grow((void **)v, cap, *n + 1, sizeof(**v)) < 0 ||
	    !(g = strdup(s)))
		return -ENOMEM;
	g[slash - s] = '\0';
	(*v)[*n].group = g;
	(*v)[*n].name = g + (slash - s) + 1;
	(*n)++;
	return 0;
}

static int ckpt__names_add(struct ckpt__name **v, size_t *n, size_t *cap,
			   const json_t *list)
{
	size_t i;
	json_t *e;
	int r;

	if (!json_is_array(list))
		return -EPROTO;
	json_array_foreach(list, i, e)
		if ((r = ckpt__name_add(v, n, cap, e)) < 0)
			return r;
	return 0;
}

static int ckpt__skipped_add(struct ckpt__restore *rs, const json_t *list)
{
	size_t i;
	json_t *e;

	if (!json_is_array(list))
		return -EPROTO;
	json_array_foreach(list, i, e) {
		const char *why = json_string_value(json_object_get(e, "reason"));
		uint64_t step;

		if (!why || ckpt__json_u64(e, "step", &step) < 0)
			return -EPROTO;
		if (ckpt__grow((void **)&rs->skipped, &rs->cap_skipped,
			       rs->nskipped + 1, sizeof(*rs->skipped)) < 0 ||
		    !(rs->skipped[rs->nskipped].reason = strdup(why)))
			return -ENOMEM;
		rs->skipped[rs->nskipped++].step = step;
	}
	return 0;
}

/* A piece of a blob: bytes [off, off + blen) of blob `name` of len bytes.
 * Pieces come in order; a blob starts at offset 0. */
static int ckpt__blob_piece(struct ckpt__restore *rs, const char *name,
			    uint64_t off, uint64_t len, const uint8_t *bin,
			    size_t blen)
{
	struct ckpt__blob *b;

	if (off == 0) {
		if (rs->nblobs && rs->blob_fill != rs->blobs[rs->nblobs - 1].len)
			return -EPROTO;
		if (len > SIZE_MAX - 1 ||
		    ckpt__grow((void **)&rs->blobs, &rs->cap_blobs,
			       rs->nblobs + 1, sizeof(*rs->blobs)) < 0)
			return -ENOMEM;
		b = &rs->blobs[rs->nblobs];
		*b = (struct ckpt__blob){ strdup(name), malloc(len ? len : 1), len };
		if (!b->name || !b->data) {
			free(b->name);
			free(b->data);
			return -ENOMEM;
		}
		rs->nblobs++;
		rs->blob_fill = 0;
	}
	if (!rs->nblobs)
		return -EPROTO;
	b = &rs->blobs[rs->nblobs - 1];
	if (strcmp(b->name, name) != 0 || len != b->len || off != rs->blob_fill ||
	    blen > b->len - off)
		return -EPROTO;
	memcpy(b->data + off, bin, blen);
	rs->blob_fill += blen;
	return 0;
}

/* One RESTORE_PART of the restore being received. */
static void ckpt__restore_part(struct ckpt__restore *rs,
			       const struct proto_msg *m)
{
	json_t *j, *v;
	int r = 0;

	if (rs->err)
		return;                 /* read the rest, then fail */
	j = json_loadb(m->json, m->hdr.jlen, 0, NULL);
	if (!json_is_object(j))
		r = -EPROTO;
	if (r == 0 && (v = json_object_get(j, "restored")))
		rs->nrestored += json_is_array(v) ? json_array_size(v) : 0;
	if (r == 0 && (v = json_object_get(j, "missing")))
		r = ckpt__names_add(&rs->missing, &rs->nmissing,
				    &rs->cap_missing, v);
	if (r == 0 && (v = json_object_get(j, "unexpected")))
		r = ckpt__names_add(&rs->unexpected, &rs->nunexpected,
				    &rs->cap_unexpected, v);
	if (r == 0 && (v = json_object_get(j, "skipped")))
		r = ckpt__skipped_add(rs, v);
	if (r == 0 && (v = json_object_get(j, "blob"))) {
		uint64_t off, len;

		if (!json_is_string(v) || ckpt__json_u64(j, "off", &off) < 0 ||
		    ckpt__json_u64(j, "len", &len) < 0)
			r = -EPROTO;
		else
			r = ckpt__blob_piece(rs, json_string_value(v), off, len,
					     m->bin, m->blen);
	}
	json_decref(j);
	if (r < 0)
		rs->err = r;
}

/* The reply of a daemon without parts: the lists and the blobs (sliced
 * from the binary part by their lengths) are in it. */
static int ckpt__restore_whole(struct ckpt__restore *rs, const json_t *rep,
			       const uint8_t *bin, size_t blen)
{
	const json_t *list = json_object_get(rep, "blobs");
	size_t i, off = 0;
	json_t *e;
	int r;

	rs->nrestored = json_array_size(json_object_get(rep, "restored"));
	if ((r = ckpt__names_add(&rs->missing, &rs->nmissing, &rs->cap_missing,
				 json_object_get(rep, "missing"))) < 0 ||
	    (r = ckpt__names_add(&rs->unexpected, &rs->nunexpected,
				 &rs->cap_unexpected,
				 json_object_get(rep, "unexpected"))) < 0)
		return r;
	if (json_object_get(rep, "skipped") &&
	    (r = ckpt__skipped_add(rs, json_object_get(rep, "skipped"))) < 0)
		return r;
	if (list && !json_is_array(list))
		return -EPROTO;
	json_array_foreach(list, i, e) {
		const char *name = json_string_value(json_object_get(e, "name"));
		uint64_t len;

		if (!name || ckpt__json_u64(e, "len", &len) < 0 ||
		    len > blen - off)
			return -EPROTO;
		if ((r = ckpt__blob_piece(rs, name, 0, len, bin + off, len)) < 0)
			return r;
		off += len;
	}
	return off == blen ? 0 : -EPROTO;
}

/* With parts, the reply counts what they held: a count that differs means
 * a lost or foreign part. */
static int ckpt__restore_counts(const struct ckpt__restore *rs,
				const json_t *counts)
{
	uint64_t n[5];

	if (ckpt__json_u64(counts, "restored", &n[0]) < 0 ||
	    ckpt__json_u64(counts, "missing", &n[1]) < 0 ||
	    ckpt__json_u64(counts, "unexpected", &n[2]) < 0 ||
	    ckpt__json_u64(counts, "skipped", &n[3]) < 0 ||
	    ckpt__json_u64(counts, "blobs", &n[4]) < 0)
		return -EPROTO;
	if (n[0] != rs->nrestored || n[1] != rs->nmissing ||
	    n[2] != rs->nunexpected || n[3] != rs->nskipped ||
	    n[4] != rs->nblobs ||
	    (rs->nblobs && rs->blob_fill != rs->blobs[rs->nblobs - 1].len))
		return -EPROTO;
	return 0;
}

static int ckpt__source_parse(const char *s)
{
	static const char *const names[] = {
		[CKPT_FROM_DISK] = "disk", [CKPT_FROM_MEMORY] = "memory",
		[CKPT_FROM_PEER] = "peer", [CKPT_FROM_REMOTE] = "remote",
	};

	for (int i = CKPT_FROM_DISK; s && i <= CKPT_FROM_REMOTE; i++)
		if (!strcmp(s, names[i]))
			return i;
	return 0;      /* a source this library does not know */
}

/* Fill rs from the final reply.  0 or -errno (message set). */
static int ckpt__restore_finish(ckpt_client *c, struct ckpt__restore *rs,
				const struct ckpt__reply *rep)
{
	const json_t *counts = json_object_get(rep->json, "counts");
	uint64_t v;
	int r;

	if (rs->err == -ENOMEM)
		return ckpt__fail(c, -ENOMEM, "out of memory receiving the "
				  "restore");
	if (rs->err < 0)
		return ckpt__fail(c, -EPROTO, "ckptd sent a malformed part of "
				  "its RESTORE reply");
	if (ckpt__json_u64(rep->json, "step", &rs->info.step) < 0)
		return ckpt__fail(c, -EPROTO, "ckptd's RESTORE reply has no "
				  "step");
	r = counts ? ckpt__restore_counts(rs, counts)
		   : ckpt__restore_whole(rs, rep->json, rep->bin, rep->blen);
	if (r == -ENOMEM)
		return ckpt__fail(c, r, "out of memory receiving the restore");
	if (r < 0)
		return ckpt__fail(c, r, "ckptd's RESTORE reply does not add "
				  "up (malformed or missing parts)");
	rs->info.bytes = ckpt__json_u64(rep->json, "bytes", &v) == 0 ? v : 0;
	rs->info.micros = ckpt__json_u64(rep->json, "micros", &v) == 0 ? v : 0;
	rs->info.source = json_object_get(rep->json, "source") ?
		ckpt__source_parse(json_string_value(
			json_object_get(rep->json, "source"))) : CKPT_FROM_DISK;
	if (rs->nmissing > INT_MAX || rs->nunexpected > INT_MAX)
		return ckpt__fail(c, -EOVERFLOW, "too many tensors to report");
	rs->info.n_missing = (int)rs->nmissing;
	rs->info.n_unexpected = (int)rs->nunexpected;
	return 0;
}

struct ckpt__restore_rx {
	ckpt_client          *c;
	struct ckpt__restore *rs;
};

/* Messages on the way to the RESTORE reply: its parts, and EVENTs. */
static void ckpt__restore_on_msg(void *arg, const struct proto_msg *m)
{
	struct ckpt__restore_rx *rx = arg;

	if (m->hdr.type == PROTO_RESTORE_PART)
		ckpt__restore_part(rx->rs, m);
	else
		ckpt__on_event(rx->c, m);
}

int ckpt_restore(ckpt_client *c, int64_t step, unsigned flags,
		 uint64_t *restored_step)
{
	struct ckpt__reply rep = { 0 };
	struct ckpt__restore *rs;
	json_t *req;
	int r;

	if (!c)
		return -EINVAL;
	if (step < CKPT_LATEST)
		return ckpt__fail(c, -EINVAL, "step %lld is not a step or "
				  "CKPT_LATEST", (long long)step);
	if (flags & ~CKPT_PARTIAL)
		return ckpt__fail(c, -EINVAL, "unknown flags 0x%x",
				  flags & ~CKPT_PARTIAL);
	if (!(rs = calloc(1, sizeof(*rs))))
		return ckpt__fail(c, -ENOMEM, "out of memory");
	/* whatever happens, the last restore's report is this one's */
	ckpt__restore_free(c->restore);
	c->restore = NULL;
	req = json_pack("{s:I, s:b}", "step", (json_int_t)step,
			"partial", (flags & CKPT_PARTIAL) != 0);
	r = ckpt__request_with(c, PROTO_RESTORE, req, NULL, 0, NULL, 0, &rep,
			       true, ckpt__restore_on_msg,
			       &(struct ckpt__restore_rx){ c, rs });
	json_decref(req);
	if (r == 0)
		r = ckpt__restore_finish(c, rs, &rep);
	ckpt__reply_release(&rep);
	if (r < 0) {
		ckpt__restore_free(rs);
		return r;
	}
	/* the blobs replace the previous restore's */
	ckpt__blobs_clear(c);
	c->blobs = rs->blobs;
	c->nblobs = rs->nblobs;
	rs->blobs = NULL;
	rs->nblobs = 0;
	c->restore = rs;
	c->err[0] = '\0';    /* success: no earlier failure's text remains */
	if (restored_step)
		*restored_step = rs->info.step;
	return 0;
}

int ckpt_restore_info(ckpt_client *c, struct ckpt_restore_info *out)
{
	if (!c || !out)
		return -EINVAL;
	if (!c->restore)
		return ckpt__fail(c, -ENOENT, "no restore succeeded on this "
				  "handle since the last ckpt_restore()");
	*out = c->restore->info;
	return 0;
}

static int ckpt__restore_name(ckpt_client *c, const struct ckpt__name *v,
			      size_t n, int i, const char **group,
			      const char **name)
{
	if (!c)
		return -EINVAL;
	if (!c->restore)
		return ckpt__fail(c, -ENOENT, "no restore succeeded on this "
				  "handle since the last ckpt_restore()");
	if (i < 0 || (size_t)i >= n)
		return ckpt__fail(c, -ENOENT, "index %d is outside 0..%zu", i,
				  n ? n - 1 : 0);
	if (group)
		*group = v[i].group;
	if (name)
		*name = v[i].name;
	return 0;
}

int ckpt_restore_missing(ckpt_client *c, int i, const char **group,
			 const char **name)
{
	return ckpt__restore_name(c, c ? c->restore ? c->restore->missing
				       : NULL : NULL,
				  c && c->restore ? c->restore->nmissing : 0,
				  i, group, name);
}

int ckpt_restore_unexpected(ckpt_client *c, int i, const char **group,
			    const char **name)
{
	return ckpt__restore_name(c, c ? c->restore ? c->restore->unexpected
				       : NULL : NULL,
				  c && c->restore ? c->restore->nunexpected : 0,
				  i, group, name);
}

int ckpt_restore_skipped(ckpt_client *c, int i, uint64_t *step,
			 const char **reason)
{
	if (!c)
		return -EINVAL;
	if (!c->restore)
		return ckpt__fail(c, -ENOENT, "no restore succeeded on this "
				  "handle since the last ckpt_restore()");
	if (i < 0 || (size_t)i >= c->restore->nskipped)
		return -ENOENT;       /* the end of the list: no message */
	if (step)
		*step = c->restore->skipped[i].step;
	if (reason)
		*reason = c->restore->skipped[i].reason;
	return 0;
}

int ckpt_get_blob(ckpt_client *c, const char *name, void *buf, size_t cap,
		  size_t *len)
{
	if (!c || !name || (cap && !buf))
		return -EINVAL;
	for (size_t i = 0; i < c->nblobs; i++) {
		const struct ckpt__blob *b = &c->blobs[i];

		if (strcmp(b->name, name) != 0)
			continue;
		if (cap)
			memcpy(buf, b->data, b->len < cap ? b->len : cap);
		if (len)
			*len = b->len;
		return 0;
	}
	return ckpt__fail(c, -ENOENT, "the last restore brought no blob "
			  "named '%s'", name);
}
