/* ctl_remote.c - REMOTE, ckptctl's requests to the object-store tier:
 * list what the bucket holds, push a local step, pull one down.  On the
 * pool: each may take as long as the object store does. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cmd.h"
#include "names.h"
#include "remote.h"
#include "restore.h"
#include "session.h"
#include "srv.h"
#include "store.h"

int ctl_remote_check(struct req *q)
{
	const char *op = cmd_get_str(q->j, "op"), *job = cmd_get_str(q->j, "job");
	char why[96];
	uint64_t step;

	if (!op || (strcmp(op, "list") && strcmp(op, "push") && strcmp(op, "pull")))
		return cmd_fail(q, -EINVAL, "REMOTE needs \"op\": list, push or pull");
	if (job && name_check(job, NAME_MAX_JOB, why, sizeof(why)) < 0)
		return cmd_fail(q, -EINVAL, "bad job name: %s", why);
	if (strcmp(op, "list") && !job)
		return cmd_fail(q, -EINVAL, "%s needs a job", op);
	if (!strcmp(op, "push") && cmd_get_u64(q->j, "step", &step) < 0)
		return cmd_fail(q, -EINVAL, "push needs a step");
	if (!remote_enabled())
		return cmd_fail(q, -ENOTCONN, "no remote is configured (\"remote\" in ckptd.json)");
	return 0;
}

/* The jobs of the remote listing this user may see: those whose local
 * directory they own (root and ckptd's user: all). */
static void only_own(struct req *q, json_t *arr)
{
	struct srv *S = q->s->srv;
	uid_t uid = q->s->uid;

	if (uid == 0 || uid == geteuid())
		return;
	for (size_t i = json_array_size(arr); i-- > 0; ) {
		const char *job = json_string_value(json_object_get(json_array_get(arr, i), "job"));
		struct store_job_info info;
		char why[256];
		int fd;
		if (job && store_job_open(S->rootfd, job, uid, 0, &info, &fd, why, sizeof(why)) == 0) {
			close(fd);
			continue;
		}
		json_array_remove(arr, i);
	}
}

int ctl_remote_work(struct req *q)
{
	struct srv *S = q->s->srv;
	const char *op = cmd_get_str(q->j, "op"), *job = cmd_get_str(q->j, "job");
	struct store_job_info info;
	char why[256];
	uint64_t step = 0, got;
	json_t *arr;
	int fd, r;

	if (!strcmp(op, "list")) {
		if ((r = remote_list(job, &arr, q->msg, sizeof(q->msg))) < 0)
			return r;
		only_own(q, arr);
		return cmd_set_reply(q, json_pack("{so}", "checkpoints", arr));
	}
	/* push: the user's own job; pull: a missing one is made for the owner
	 * the remote records, if this user may take it (remote_may_pull) */
	r = store_job_open(S->rootfd, job, q->s->uid, 0, &info, &fd, why, sizeof(why));
	if (r == -ENOENT && !strcmp(op, "pull")) {
		uid_t owner;
		if ((r = remote_may_pull(job, q->s->uid, &owner, q->msg, sizeof(q->msg))) < 0)
			return r;
		r = store_job_open(S->rootfd, job, owner, 1, &info, &fd, why, sizeof(why));
	}
	if (r < 0)
		return cmd_fail(q, r, "%s", why);
	if (!strcmp(op, "push")) {
		cmd_get_u64(q->j, "step", &step);
		r = remote_push(fd, job, step, q->msg, sizeof(q->msg));
		close(fd);
		return r < 0 ? r : cmd_set_reply(q, json_pack("{sI}", "queued", (json_int_t)step));
	}
	r = remote_pull(fd, job, q->s->uid, json_is_integer(json_object_get(q->j, "step")) ?
			json_integer_value(json_object_get(q->j, "step")) : -1, 0,
			&got, q->msg, sizeof(q->msg));
	close(fd);
	if (r < 0)
		return r;
	restore_cache_clear();
	return cmd_set_reply(q, json_pack("{sI}", "step", (json_int_t)got));
}
