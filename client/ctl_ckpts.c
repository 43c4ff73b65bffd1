/* ctl_ckpts.c - the checkpoints on disk: `ckptctl list` and `prune` ask
 * ckptd, `ckptctl verify` checks a checkpoint or job directory offline
 * (manifest, sizes, file digests, safetensors headers) without a daemon.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ctl.h"
#include "layout.h"
#include "mfst.h"
#include "verify.h"

/* --- list, prune ----------------------------------------------------------- */

void print_ckpt_table(struct table *t, uint64_t bytes, uint64_t on_disk,
		      const char *job, const char *where)
{
	if (t->nrows) {
		char b[32], w[32];
		size_t n = t->nrows;

		table_print(t, stdout, "");
		printf("%zu checkpoint%s%s, %s", n, n == 1 ? "" : "s", where,
		       fmt_bytes(bytes, b, sizeof(b)));
		if (on_disk < bytes)
			printf(" (%s on disk: files they share counted once)",
			       fmt_bytes(on_disk, w, sizeof(w)));
		printf("\n");
	} else if (job) {
		printf("no checkpoints of job %s%s\n", job, where);
	} else {
		printf("no checkpoints%s\n", where);
	}
	table_free(t);
}

int cmd_list(struct ctl *c, const struct ctl_opts *o)
{
	const char *job = o->job;
	bool as_json = o->json;
	json_t *req = json_object(), *rep, *cp;
	uint64_t bytes = 0;
	struct table t;
	size_t i;

	if (o->remote) {
		json_decref(req);
		return cmd_list_remote(c, o);
	}
	if (job)
		json_object_set_new(req, "job", json_string(job));
	rep = ctl_call(c, PROTO_LIST, req, CTL_REPLY_WAIT_MS, "list");
	if (as_json) {
		print_json(rep);
		json_decref(rep);
		return 0;
	}
	/* WRITTEN: what the save wrote; the rest did not change since the
	 * step before and is a hard link to it (incremental saves) */
	table_init(&t, "JOB,>STEP,LATEST,>FILES,>SIZE,>WRITTEN,CREATED,AGE");
	json_array_foreach(json_object_get(rep, "checkpoints"), i, cp) {
		int64_t when = (int64_t)jget_u64(cp, "created_unix", 0);
		uint64_t size = jget_u64(cp, "bytes", 0);
		uint64_t wr = jget_u64(cp, "bytes_written", size);
		char st[24], fl[24], sz[32], wb[32], cr[32], age[48];

		bytes += size;
		table_row(&t, jget_str(cp, "job", "?"),
			  fmt_u64(jget_u64(cp, "step", 0), st, sizeof(st)),
			  json_is_true(json_object_get(cp, "latest")) ? "*" : "",
			  fmt_u64(jget_u64(cp, "files", 0), fl, sizeof(fl)),
			  fmt_bytes(size, sz, sizeof(sz)), fmt_bytes(wr, wb, sizeof(wb)),
			  fmt_time(when, cr, sizeof(cr)),
			  fmt_age(when, age, sizeof(age)));
	}
	print_ckpt_table(&t, bytes, jget_u64(rep, "bytes_on_disk", bytes), job, "");
	json_decref(rep);
	return 0;
}

int cmd_prune(struct ctl *c, const struct ctl_opts *o)
{
	const char *job = o->job;
	long keep = o->keep;
	bool as_json = o->json;
	json_t *rep, *removed, *s;
	size_t i;

	rep = ctl_call(c, PROTO_PRUNE, json_pack("{s:s, s:I}", "job", job,
						 "keep", (json_int_t)keep),
		       CTL_PRUNE_WAIT_MS, "prune");
	removed = json_object_get(rep, "removed");
	if (as_json) {
		print_json(rep);
	} else if (json_array_size(removed) == 0) {
		printf("nothing to remove: %s has at most %ld checkpoints\n",
		       job, keep);
	} else {
		printf("removed steps:");
		json_array_foreach(removed, i, s)
			printf(" %lld", (long long)json_integer_value(s));
		putchar('\n');
	}
	json_decref(rep);
	return 0;
}

/* --- verify (offline) ---------------------------------------------------- */

struct vres {
	bool     ok;
	uint64_t step, files, bytes;
	char     err[512];
};

static void verify_one(int dirfd, bool quick, struct vres *v)
{
	struct mfst *m = NULL;
	int r;

	memset(v, 0, sizeof(*v));
	r = verify_checkpoint(dirfd, quick ? VERIFY_STRUCTURE : VERIFY_FULL,
			      CTL_VERIFY_THREADS, &m, v->err, sizeof(v->err));
	if (r < 0) {
		if (!v->err[0])
			snprintf(v->err, sizeof(v->err), "%s", strerror(-r));
		return;
	}
	v->ok = true;
	v->step = m->step;
	v->files = m->nfiles;
	for (size_t i = 0; i < m->nfiles; i++)
		v->bytes += m->files[i].size;
	mfst_free(m);
}

/* A checkpoint's directory names its step: a manifest of another step (a
 * directory copied or renamed by hand) would restore as the wrong one. */
static void vres_step_is(struct vres *v, uint64_t step)
{
	if (v->ok && v->step != step) {
		v->ok = false;
		snprintf(v->err, sizeof(v->err), "its manifest says step %llu, its "
			 "directory step %llu", (unsigned long long)v->step,
			 (unsigned long long)step);
	}
}

/* The step a checkpoint directory's name says (path/iter_N/), if any. */
static int dir_step(const char *dir, uint64_t *step)
{
	char name[PATH_MAX];
	size_t n = strlen(dir);
	const char *base;

	while (n > 1 && dir[n - 1] == '/')
		n--;
	if (n >= sizeof(name))
		return -ENAMETOOLONG;
	memcpy(name, dir, n);
	name[n] = '\0';
	base = strrchr(name, '/');
	return layout_iter_parse(base ? base + 1 : name, step);
}

static json_t *vres_json(const char *dir, const struct vres *v)
{
	if (!v->ok)
		return json_pack("{s:s, s:b, s:s}", "dir", dir, "ok", 0,
				 "error", v->err);
	return json_pack("{s:s, s:b, s:I, s:I, s:I}", "dir", dir, "ok", 1,
			 "step", (json_int_t)v->step,
			 "files", (json_int_t)v->files,
			 "bytes", (json_int_t)v->bytes);
}

static void vres_print(const char *dir, const struct vres *v, bool quick,
		       const char *note)
{
	char b[32];

	fflush(stdout);         /* keep stdout and stderr lines in order */
	if (v->ok)
		printf("ok: %s step %llu, %llu files, %s %s%s\n", dir,
		       (unsigned long long)v->step,
		       (unsigned long long)v->files,
		       fmt_bytes(v->bytes, b, sizeof(b)),
		       quick ? "checked (structure only)" : "verified", note);
	else
		fprintf(stderr, "FAILED: %s: %s%s\n", dir, v->err, note);
}

static bool has_entry(int dirfd, const char *name)
{
	struct stat st;

	return fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0;
}

/* Every iter_* of a job directory, newest first: a table, then the reason
 * of each failure on stderr. */
static int verify_job(int jobfd, const char *dir, bool quick, bool as_json)
{
	json_t *all = json_array();
	uint64_t *steps = NULL, latest = 0, newest_ok = UINT64_MAX;
	bool has_latest = layout_latest_read(jobfd, &latest) == 0;
	int n = layout_list_steps(jobfd, &steps), bad = 0;
	struct table t;
	char **why = NULL;

	if (n < 0)
		die(EXIT_FAIL, "cannot list %s: %s", dir, strerror(-n));
	table_init(&t, ">STEP,LATEST,RESULT,>FILES,>SIZE");
	if (n > 0 && !(why = calloc((size_t)n, sizeof(*why))))
		die(EXIT_FAIL, "out of memory");
	for (int i = 0; i < n; i++) {
		char name[LAYOUT_ITER_LEN + 1], path[PATH_MAX];
		char st[24], fl[24], sz[32];
		bool is_latest = has_latest && steps[i] == latest;
		struct vres v;
		int fd;

		layout_iter_name(steps[i], name, sizeof(name));
		snprintf(path, sizeof(path), "%s/%s", dir, name);
		fd = openat(jobfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
			    O_CLOEXEC);
		if (fd < 0) {
			memset(&v, 0, sizeof(v));
			snprintf(v.err, sizeof(v.err), "cannot open: %s",
				 strerror(errno));
		} else {
			verify_one(fd, quick, &v);
			vres_step_is(&v, steps[i]);
			close(fd);
		}
		bad += !v.ok;
		if (v.ok && newest_ok == UINT64_MAX)
			newest_ok = steps[i];
		if (as_json) {
			json_array_append_new(all, vres_json(path, &v));
			continue;
		}
		if (!v.ok && asprintf(&why[i], "FAILED: %s: %s", path, v.err) < 0)
			why[i] = NULL;
		table_row(&t, fmt_u64(steps[i], st, sizeof(st)),
			  is_latest ? "*" : "",
			  v.ok ? (quick ? "ok (structure)" : "verified") : "FAILED",
			  v.ok ? fmt_u64(v.files, fl, sizeof(fl)) : "-",
			  v.ok ? fmt_bytes(v.bytes, sz, sizeof(sz)) : "-");
	}
	if (as_json) {
		print_json(all);
	} else if (n == 0) {
		fprintf(stderr, "FAILED: %s: no checkpoints in this job "
			"directory\n", dir);
	} else {
		printf("%s\n", dir);
		table_print(&t, stdout, "");
		fflush(stdout);
		for (int i = 0; i < n; i++)
			if (why[i])
				fprintf(stderr, "%s\n", why[i]);
		if (n == bad)
			printf("0 of %d checkpoints %s: nothing to restore from\n",
			       n, quick ? "passed" : "verified");
		else
			printf("%d of %d checkpoints %s; newest good: step %llu\n",
			       n - bad, n, quick ? "passed" : "verified",
			       (unsigned long long)newest_ok);
	}
	for (int i = 0; i < n; i++)
		free(why[i]);
	free(why);
	table_free(&t);
	json_decref(all);
	free(steps);
	return bad || n == 0 ? EXIT_FAIL : 0;
}

int cmd_verify(struct ctl *c, const struct ctl_opts *o)
{
	const char *dir = o->dir;
	bool quick = o->quick, as_json = o->json;
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), rc;
	struct vres v;

	if (fd < 0) {
		fprintf(stderr, "FAILED: %s: cannot open: %s\n", dir,
			strerror(errno));
		return EXIT_FAIL;
	}
	if (!has_entry(fd, MFST_NAME) && has_entry(fd, LAYOUT_LATEST)) {
		rc = verify_job(fd, dir, quick, as_json);
		close(fd);
		return rc;
	}
	if (!has_entry(fd, MFST_NAME)) {
		uint64_t *steps = NULL;
		int n = layout_list_steps(fd, &steps);

		free(steps);
		if (n > 0) {
			rc = verify_job(fd, dir, quick, as_json);
			close(fd);
			return rc;
		}
	}
	verify_one(fd, quick, &v);
	close(fd);
	{
		uint64_t step;
		if (dir_step(dir, &step) == 0)
			vres_step_is(&v, step);
	}
	if (as_json) {
		json_t *j = vres_json(dir, &v);
		print_json(j);
		json_decref(j);
	} else {
		vres_print(dir, &v, quick, "");
	}
	return v.ok ? 0 : EXIT_FAIL;
}
