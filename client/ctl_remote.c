/* ctl_remote.c - ckptctl and the object-store tier: list --remote, push,
 * pull (REMOTE requests; ckptd holds the credentials and does the work). */
#include <stdio.h>

#include "ctl.h"

int cmd_list_remote(struct ctl *c, const struct ctl_opts *o)
{
	json_t *req = json_pack("{s:s}", "op", "list"), *rep, *cp;
	uint64_t bytes = 0;
	struct table t;
	size_t i;

	if (o->job)
		json_object_set_new(req, "job", json_string(o->job));
	rep = ctl_call(c, PROTO_REMOTE, req, (int64_t)(o->timeout_s * 1000), "list --remote");
	if (o->json) {
		print_json(rep);
		json_decref(rep);
		return 0;
	}
	table_init(&t, "JOB,>STEP,LATEST,>SIZE");
	json_array_foreach(json_object_get(rep, "checkpoints"), i, cp) {
		char st[24], sz[32];
		if (json_is_false(json_object_get(cp, "valid")))
			continue;                   /* below the table */
		bytes += jget_u64(cp, "bytes", 0);
		table_row(&t, jget_str(cp, "job", "?"),
			  fmt_u64(jget_u64(cp, "step", 0), st, sizeof(st)),
			  json_is_true(json_object_get(cp, "latest")) ? "*" : "",
			  fmt_bytes(jget_u64(cp, "bytes", 0), sz, sizeof(sz)));
	}
	print_ckpt_table(&t, bytes, bytes, o->job, " on the remote");
	json_array_foreach(json_object_get(rep, "checkpoints"), i, cp)
		if (json_is_false(json_object_get(cp, "valid")))
			printf("job %s step %llu on the remote cannot be restored: %s\n",
			       jget_str(cp, "job", "?"),
			       (unsigned long long)jget_u64(cp, "step", 0),
			       jget_str(cp, "reason", "?"));
	json_decref(rep);
	return 0;
}

int cmd_push(struct ctl *c, const struct ctl_opts *o)
{
	json_t *rep = ctl_call(c, PROTO_REMOTE, json_pack("{s:s, s:s, s:I}", "op", "push",
				"job", o->job, "step", (json_int_t)o->step),
			       CTL_REPLY_WAIT_MS, "push");

	if (o->json)
		print_json(rep);
	else
		printf("job %s step %ld queued for upload (progress: ckptctl status)\n",
		       o->job, o->step);
	json_decref(rep);
	return 0;
}

int cmd_pull(struct ctl *c, const struct ctl_opts *o)
{
	json_t *req = json_pack("{s:s, s:s}", "op", "pull", "job", o->job), *rep;

	if (o->step >= 0)
		json_object_set_new(req, "step", json_integer(o->step));
	rep = ctl_call(c, PROTO_REMOTE, req, (int64_t)(o->timeout_s * 1000), "pull");
	if (o->json)
		print_json(rep);
	else
		printf("job %s step %llu downloaded, verified and published\n", o->job,
		       (unsigned long long)jget_u64(rep, "step", 0));
	json_decref(rep);
	return 0;
}
