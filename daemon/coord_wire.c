/* coord_wire.c - the multi-node commit's names and wire form: the txid
 * every node derives alike for a step, and a node's report as JSON (the
 * only place a report is serialised).  No MPI here. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "coord_int.h"
#include "sha.h"

int coord_txid(const char *run_id, uint64_t step, char out[33])
{
	struct sha_ctx h;
	char hex[SHA_HEX_LEN + 1], buf[96];
	int n = snprintf(buf, sizeof(buf), "ckpt-cluster:%s:%llu", run_id,
			 (unsigned long long)step), r;

	/* no fallback name: another node would derive another one and the
	 * nodes would stage the step in different directories */
	if ((r = sha_init(&h)) < 0)
		return r;
	sha_update(&h, buf, (size_t)n);
	sha_final_hex(&h, hex);
	memcpy(out, hex, 32);
	out[32] = '\0';
	return 0;
}

/* --- the wire form of a report ------------------------------------------ */

/* JSON text (malloc'd) or NULL when out of memory. */
char *coord__report_encode(const struct report *rp)
{
	json_t *o = json_pack("{sssIsssssisisssbsi}", "job", rp->job, "step",
			      (json_int_t)rp->step, "txid", rp->txid, "run_id", rp->run_id,
			      "world_size", rp->world_size, "err", rp->err, "msg", rp->msg,
			      "memory", rp->memory, "replicas", rp->replicas);
	json_t *part = NULL;
	char *txt = NULL;

	if (o && rp->part && (commit_part_to_json(rp->part, &part) < 0 ||
			      json_object_set_new(o, "part", part) < 0)) {
		json_decref(o);
		return NULL;
	}
	if (o)
		txt = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	return txt;
}

/* 0, or -EINVAL / -ENOMEM with msg. */
int coord__report_decode(int tag, const char *txt, struct report *rp, char *msg,
			 size_t msglen)
{
	json_t *o = json_loads(txt, 0, NULL);
	const char *job = json_string_value(json_object_get(o, "job"));
	const char *txid = json_string_value(json_object_get(o, "txid"));
	const char *rid = json_string_value(json_object_get(o, "run_id"));
	const char *m = json_string_value(json_object_get(o, "msg"));
	json_t *step = json_object_get(o, "step");
	int r = 0;

	memset(rp, 0, sizeof(*rp));
	if (!job || name_check(job, NAME_MAX_JOB, NULL, 0) < 0 || !txid || strlen(txid) > 32 ||
	    !rid || strlen(rid) > 32 || !json_is_integer(step) ||
	    json_integer_value(step) < 0) {
		snprintf(msg, msglen, "malformed report (tag %d)", tag);
		json_decref(o);
		return -EINVAL;
	}
	rp->tag = tag;
	snprintf(rp->job, sizeof(rp->job), "%s", job);
	rp->step = (uint64_t)json_integer_value(step);
	snprintf(rp->txid, sizeof(rp->txid), "%s", txid);
	snprintf(rp->run_id, sizeof(rp->run_id), "%s", rid);
	rp->world_size = (int)json_integer_value(json_object_get(o, "world_size"));
	rp->err = (int)json_integer_value(json_object_get(o, "err"));
	snprintf(rp->msg, sizeof(rp->msg), "%s", m ? m : "");
	rp->memory = json_is_true(json_object_get(o, "memory"));
	rp->replicas = (int)json_integer_value(json_object_get(o, "replicas"));
	if (tag == T_DURABLE)
		r = commit_part_from_json(json_object_get(o, "part"), &rp->part, msg, msglen);
	json_decref(o);
	return r;
}
