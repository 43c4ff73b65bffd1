/* ckpt_restore.c - libckpt's restore: ckpt_restore() asks ckptd to fill
 * the registered tensors from a checkpoint and keeps the blobs it brings
 * back for ckpt_get_blob().
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt_int.h"

/* --- restore ------------------------------------------------------------- */

/* Slice the reply's binary part into blobs by the "blobs" lengths; on
 * success they replace the previous restore's. */
static int ckpt__blobs_take(ckpt_client *c, const json_t *list,
			    const uint8_t *bin, size_t blen)
{
	size_t n = json_array_size(list), off = 0;
	struct ckpt__blob *b;

	if (list && !json_is_array(list))
		goto out_bad;
	b = calloc(n ? n : 1, sizeof(*b));
	if (!b)
		return ckpt__fail(c, -ENOMEM, "out of memory");
	for (size_t i = 0; i < n; i++) {
		json_t *e = json_array_get(list, i);
		const char *name = json_string_value(json_object_get(e, "name"));
		uint64_t len;

		if (!name || ckpt__json_u64(e, "len", &len) < 0 ||
		    len > blen - off)
			goto out_free_blobs;
		b[i].name = strdup(name);
		b[i].data = malloc(len ? len : 1);
		if (!b[i].name || !b[i].data) {
			free(b[i].name);
			free(b[i].data);
			n = i;
			goto out_free_oom;
		}
		memcpy(b[i].data, bin + off, len);
		b[i].len = len;
		off += len;
	}
	if (off != blen)
		goto out_free_blobs;
	ckpt__blobs_clear(c);
	c->blobs = b;
	c->nblobs = n;
	return 0;

out_free_oom:
	for (size_t i = 0; i < n; i++) {
		free(b[i].name);
		free(b[i].data);
	}
	free(b);
	return ckpt__fail(c, -ENOMEM, "out of memory");
out_free_blobs:
	for (size_t i = 0; i < n; i++) {
		free(b[i].name);
		free(b[i].data);
	}
	free(b);
out_bad:
	return ckpt__fail(c, -EPROTO, "ckptd's RESTORE reply has malformed "
			  "blobs");
}

/* Append "<sep><label> a, b, c" to buf for a non-empty list of names.
 * Entries are "group/name" strings or {"group", "name"} objects. */
static void ckpt__append_names(char *buf, size_t cap, size_t *len,
			       const char *sep, const char *label,
			       const json_t *list)
{
	size_t i;
	json_t *e;

	if (json_array_size(list) == 0)
		return;
	*len += snprintf(buf + *len, cap - *len, "%s%s ", sep, label);
	json_array_foreach(list, i, e) {
		const char *g = json_string_value(json_object_get(e, "group"));
		const char *n = json_string_value(json_object_get(e, "name"));

		if (*len >= cap)
			break;
		if (json_is_string(e))
			*len += snprintf(buf + *len, cap - *len, "%s%s",
					 i ? ", " : "", json_string_value(e));
		else if (g && n)
			*len += snprintf(buf + *len, cap - *len, "%s%s/%s",
					 i ? ", " : "", g, n);
	}
	if (*len >= cap)
		*len = cap - 1;
}

/* What a successful restore has to tell, kept as ckpt_last_error(): the
 * tensors left out of a partial restore, e.g. "partial restore: missing
 * model/w2; unexpected optim/m", and newer checkpoints passed over because
 * they did not verify. */
static void ckpt__restore_report(ckpt_client *c, const json_t *rep)
{
	const json_t *missing = json_object_get(rep, "missing");
	const json_t *unexpected = json_object_get(rep, "unexpected");
	char buf[CKPT__ERR_LEN] = "";
	size_t len = 0, i;
	json_t *e;

	if (json_array_size(missing) || json_array_size(unexpected)) {
		len = snprintf(buf, sizeof(buf), "partial restore:");
		ckpt__append_names(buf, sizeof(buf), &len, " ", "missing",
				   missing);
		ckpt__append_names(buf, sizeof(buf), &len,
				   json_array_size(missing) ? "; " : " ",
				   "unexpected", unexpected);
	}
	json_array_foreach(json_object_get(rep, "skipped"), i, e) {
		const char *why = json_string_value(json_object_get(e, "reason"));
		uint64_t step;

		if (len >= sizeof(buf) - 1 ||
		    ckpt__json_u64(e, "step", &step) < 0)
			continue;
		len += snprintf(buf + len, sizeof(buf) - len,
				"%sskipped step %llu: %s", len ? "; " : "",
				(unsigned long long)step,
				why ? why : "did not verify");
	}
	if (buf[0])
		ckpt__fail(c, 0, "%s", buf);
}

int ckpt_restore(ckpt_client *c, int64_t step, unsigned flags,
		 uint64_t *restored_step)
{
	struct ckpt__reply rep = { 0 };
	uint64_t got;
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
	req = json_pack("{s:I, s:b}", "step", (json_int_t)step,
			"partial", (flags & CKPT_PARTIAL) != 0);
	r = ckpt__request(c, PROTO_RESTORE, req, NULL, 0, NULL, 0, &rep, true);
	json_decref(req);
	if (r < 0)
		return r;

	if (ckpt__json_u64(rep.json, "step", &got) < 0) {
		r = ckpt__fail(c, -EPROTO, "ckptd's RESTORE reply has no step");
		goto out_release;
	}
	r = ckpt__blobs_take(c, json_object_get(rep.json, "blobs"), rep.bin,
			     rep.blen);
	if (r < 0)
		goto out_release;
	c->err[0] = '\0';    /* success: no earlier failure's text remains */
	ckpt__restore_report(c, rep.json);
	if (restored_step)
		*restored_step = got;
out_release:
	ckpt__reply_release(&rep);
	return r;
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
