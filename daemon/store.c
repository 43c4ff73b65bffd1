/* store.c - the checkpoint root on disk: job directories, staging, the
 * publish sequence, start-up recovery, pruning and listing.  See store.h. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fail.h"
#include "io.h"
#include "layout.h"
#include "log.h"
#include "names.h"
#include "perm.h"
#include "store.h"
#include "verify.h"

#define DIR_MODE 0750

void store_new_id(char out[33])
{
	unsigned char b[16];
	if (getrandom(b, sizeof(b), 0) != sizeof(b)) {
		/* getrandom cannot fail for 16 bytes after boot; keep ids unique anyway */
		static unsigned long ctr;
		snprintf((char *)b, sizeof(b), "%lx%lx", (unsigned long)getpid(), ++ctr);
	}
	for (int i = 0; i < 16; i++)
		sprintf(out + 2 * i, "%02x", b[i]);
}

static int read_small(int dirfd, const char *name, char *buf, size_t cap)
{
	int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	ssize_t n;
	if (fd < 0)
		return -errno;
	n = read(fd, buf, cap - 1);
	close(fd);
	if (n < 0)
		return -EIO;
	buf[n] = '\0';
	return (int)n;
}

int store_create_exclusive(int dirfd, const char *name, const void *data, size_t len,
			   mode_t mode)
{
	char tmp[256], id[33];

	store_new_id(id);
	if (snprintf(tmp, sizeof(tmp), "%s.%s.tmp", name, id) >= (int)sizeof(tmp))
		return -ENAMETOOLONG;
	return io_write_file(dirfd, name, tmp, data, len, IO_FILE_NOREPLACE |
			     IO_FILE_SYNC_DIR, mode);
}

/* job.json, if it is ckptd's (perm_is_ours: not planted by someone else). */
static int job_info_read(int jobfd, struct store_job_info *info)
{
	char buf[1024];
	json_t *j, *o, *rid;
	struct stat st;
	int r;

	if (fstatat(jobfd, LAYOUT_JOBFILE, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode) || !perm_is_ours(&st))
		return -EACCES;
	r = read_small(jobfd, LAYOUT_JOBFILE, buf, sizeof(buf));
	if (r < 0)
		return r;
	j = json_loads(buf, 0, NULL);
	o = json_object_get(j, "owner_uid");
	rid = json_object_get(j, "run_id");
	if (!json_is_integer(o) || !json_is_string(rid) ||
	    strlen(json_string_value(rid)) != 32) {
		json_decref(j);
		return -EINVAL;
	}
	info->owner = (uid_t)json_integer_value(o);
	memcpy(info->run_id, json_string_value(rid), 33);
	json_decref(j);
	return 0;
}

int store_job_owner(int jobfd, uid_t *owner)
{
	struct store_job_info ji;
	int r = job_info_read(jobfd, &ji);

	if (r == 0)
		*owner = ji.owner;
	return r;
}

int store_job_dir_is_ours(int jobfd, char *why, size_t whylen)
{
	struct stat st;

	if (fstat(jobfd, &st) < 0) {
		snprintf(why, whylen, "%s", strerror(errno));
		return 0;
	}
	if (!perm_is_ours(&st)) {
		perm_why_not_ours(&st, why, whylen);
		return 0;
	}
	if (fstatat(jobfd, LAYOUT_JOBFILE, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT;       /* none yet: dir_is_fresh decides */
	if (!S_ISREG(st.st_mode) || !perm_is_ours(&st)) {
		char w[96] = "not a regular file";
		if (S_ISREG(st.st_mode))
			perm_why_not_ours(&st, w, sizeof(w));
		snprintf(why, whylen, "its %s is %s", LAYOUT_JOBFILE, w);
		return 0;
	}
	return 1;
}

/* Only the job's owner and ckptd read a job (perm.h).  A file system
 * without ACLs gets 0700, said once; any other failure leaves the job
 * open to others: an error for the job. */
static int protect_job(int jobfd, const char *job, uid_t owner)
{
	static int warned;
	int r = perm_job_dir(jobfd, owner);

	if (r == -EOPNOTSUPP && !warned) {
		warned = 1;
		log_warnx("%s: the file system has no POSIX ACLs: job directories are "
			  "ckptd's only (mode 0700); owners read them through ckptd", job);
	}
	return r == -EOPNOTSUPP ? 0 : r;
}

/* Nothing in it but what ckptd writes into a job (checkpoints, latest,
 * temp files): one it has just made, one another node is making, or one
 * whose job.json an operator removed to start a new run.  Checkpoints
 * without a job.json have no known owner: only root takes them over. */
static int dir_is_fresh(int jobfd, uid_t uid)
{
	int fd = openat(jobfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	struct dirent *e;
	uint64_t step;
	int fresh = 1;

	if (!d) {
		if (fd >= 0)
			close(fd);
		return 0;
	}
	while (fresh && (e = readdir(d)))
		/* job.json itself: another node finished it since we looked */
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") &&
		    strcmp(e->d_name, LAYOUT_JOBFILE) &&
		    strcmp(e->d_name, LAYOUT_LATEST) && !layout_is_leftover(e->d_name) &&
		    (layout_iter_parse(e->d_name, &step) < 0 || uid != 0))
			fresh = 0;
	closedir(d);
	return fresh;
}

int store_job_open(int rootfd, const char *job, uid_t uid, int create,
		   struct store_job_info *info, int *jobfd, char *msg, size_t msglen)
{
	struct store_job_info ji;
	char why[160];
	int fd, r;

	if (create && mkdirat(rootfd, job, DIR_MODE) < 0 && errno != EEXIST) {
		r = -errno;
		snprintf(msg, msglen, "cannot create job directory '%s': %s", job, strerror(-r));
		return r;
	}
	fd = openat(rootfd, job, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		r = errno == ELOOP || errno == ENOTDIR ? -EPERM : -errno;
		snprintf(msg, msglen, r == -EPERM ? "'%s' under the root is not a directory: "
			 "not used" : "cannot open job directory '%s': %s", job, strerror(-r));
		return r;
	}
	/* a directory or job.json ckptd did not make (someone with write
	 * access to the root planted it) is never adopted: whoever owns it
	 * could read and move what ckptd wrote there */
	if (!store_job_dir_is_ours(fd, why, sizeof(why))) {
		snprintf(msg, msglen, "'%s' under the root was not made by ckptd (%s): not "
			 "used; an operator may remove it", job, why);
		r = -EACCES;
		goto fail;
	}
	r = job_info_read(fd, &ji);
	/* job.json is ckptd's job marker: a directory without it becomes a
	 * job only while it holds nothing else (we, or another node, have
	 * just made it), never someone's directory that happens to be there */
	if (r == -ENOENT && create && !dir_is_fresh(fd, uid)) {
		snprintf(msg, msglen, "'%s' under the root is not a ckpt job directory "
			 "(no %s): not used", job, LAYOUT_JOBFILE);
		r = -ENOTEMPTY;
		goto fail;
	}
	if (r == -ENOENT && create) {
		char buf[128];
		ji.owner = uid;
		if ((r = protect_job(fd, job, uid)) < 0)      /* job.json inherits it */
			goto fail_protect;
		store_new_id(ji.run_id);
		snprintf(buf, sizeof(buf), "{\"owner_uid\": %u, \"run_id\": \"%s\"}\n",
			 (unsigned)uid, ji.run_id);
		/* several daemons on a shared root may create it at once: the
		 * first one wins and the others read its run id */
		r = store_create_exclusive(fd, LAYOUT_JOBFILE, buf, strlen(buf), 0640);
		if (r == -EEXIST)
			r = job_info_read(fd, &ji);
	}
	if (r < 0) {
		snprintf(msg, msglen, r == -ENOENT ? "job '%s' does not exist" :
			 "cannot read job '%s': %s", job, strerror(-r));
		goto fail;
	}
	if (ji.owner != uid && uid != 0) {
		snprintf(msg, msglen, "job '%s' belongs to another user", job);
		r = -EPERM;
		goto fail;
	}
	if (create && (r = protect_job(fd, job, ji.owner)) < 0)
		goto fail_protect;
	*info = ji;
	*jobfd = fd;
	return 0;
fail_protect:
	snprintf(msg, msglen, "cannot restrict access to job '%s' to its owner: %s; "
		 "not used", job, strerror(-r));
fail:
	close(fd);
	return r;
}

int store_staging_create(int jobfd, uint64_t step, const char *txid,
			 int *fd, char *name, size_t namelen)
{
	int r = layout_staging_name(step, txid, name, namelen), dfd;

	if (r < 0)
		return r;
	if (mkdirat(jobfd, name, DIR_MODE) < 0)
		return -errno;
	dfd = openat(jobfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0) {
		r = -errno;
		unlinkat(jobfd, name, AT_REMOVEDIR);
		return r;
	}
	*fd = dfd;
	return 0;
}

int store_staging_join(int jobfd, uint64_t step, const char *txid,
		       int *fd, char *name, size_t namelen)
{
	int r = layout_staging_name(step, txid, name, namelen), dfd;

	if (r < 0)
		return r;
	if (mkdirat(jobfd, name, DIR_MODE) < 0 && errno != EEXIST)
		return -errno;
	dfd = openat(jobfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0)
		return -errno;
	*fd = dfd;
	return 0;
}

int store_mkdirs(int dirfd, const char *rel)
{
	char path[LAYOUT_PATH_MAX];
	snprintf(path, sizeof(path), "%s", rel);
	for (char *p = path;; p++) {
		if (*p != '/' && *p != '\0')
			continue;
		char c = *p;
		*p = '\0';
		if (mkdirat(dirfd, path, DIR_MODE) < 0 && errno != EEXIST)
			return -errno;
		if (c == '\0')
			return 0;
		*p = c;
	}
}

/* fsync every directory below (and including) dfd. */
static int fsync_dirs(int dfd, int depth)
{
	DIR *d;
	struct dirent *e;
	int r = 0, dup_fd = dup(dfd);

	if (dup_fd < 0)
		return -errno;
	d = fdopendir(dup_fd);
	if (!d) {
		close(dup_fd);
		return -errno;
	}
	rewinddir(d);
	while (r == 0 && depth < 4 && (e = readdir(d))) {
		int sub;
		if (e->d_name[0] == '.' || !layout_is_dir(dfd, e))
			continue;
		sub = openat(dfd, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (sub < 0) {
			r = -errno;
			break;
		}
		r = fsync_dirs(sub, depth + 1);
		close(sub);
	}
	closedir(d);
	return r ? r : io_fsync(dfd);
}

int store_publish(int jobfd, int stagingfd, const char *staging_name,
		  const struct mfst *m, int *renamed, char *msg, size_t msglen)
{
	char iter[32];
	uint64_t latest = 0;
	int r, have_latest;

	*renamed = 0;
	layout_iter_name(m->step, iter, sizeof(iter));
	if ((r = fsync_dirs(stagingfd, 0)) < 0) {
		snprintf(msg, msglen, "fsync of the staging directories: %s", strerror(-r));
		return r;
	}
	FAILPOINT("publish.before_manifest");
	if ((r = mfst_write(stagingfd, m)) == 0)
		verify_structure_note(stagingfd, m);    /* the prune checks it next */
	if (r < 0) {
		snprintf(msg, msglen, "write %s: %s", MFST_NAME, strerror(-r));
		return r;
	}
	FAILPOINT("publish.after_manifest");
	if ((r = io_fsync(stagingfd)) < 0) {
		snprintf(msg, msglen, "fsync of the staging directory: %s", strerror(-r));
		return r;
	}
	if (renameat2(jobfd, staging_name, jobfd, iter, RENAME_NOREPLACE) < 0) {
		r = -errno;
		snprintf(msg, msglen, "rename to %s: %s", iter, strerror(errno));
		return r;
	}
	*renamed = 1;
	FAILPOINT("publish.after_rename");
	if ((r = io_fsync(jobfd)) < 0) {
		snprintf(msg, msglen, "fsync of the job directory after rename: %s", strerror(-r));
		return r;
	}
	/* a pointer to a checkpoint removed by hand does not hold latest back */
	have_latest = layout_latest_read(jobfd, &latest) == 0 &&
		      layout_step_exists(jobfd, latest);
	if (!have_latest || m->step > latest) {
		if ((r = layout_latest_write(jobfd, m->step)) < 0) {
			snprintf(msg, msglen, "update %s: %s", LAYOUT_LATEST, strerror(-r));
			return r;
		}
	}
	FAILPOINT("publish.after_latest");
	return 0;
}

int store_remove_tree(int parent, const char *name)
{
	int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	DIR *d;
	struct dirent *e;
	int r = 0;

	if (fd < 0) {
		if (errno == ENOTDIR || errno == ELOOP)   /* a file or a symlink */
			return unlinkat(parent, name, 0) < 0 ? -errno : 0;
		return errno == ENOENT ? 0 : -errno;
	}
	d = fdopendir(fd);
	if (!d) {
		close(fd);
		return -errno;
	}
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		int rr = store_remove_tree(dirfd(d), e->d_name);
		if (rr < 0 && !r)
			r = rr;
	}
	closedir(d);
	if (unlinkat(parent, name, AT_REMOVEDIR) < 0 && !r)
		r = -errno;
	return r;
}

/* Is jobfd/name ckptd's (its uid owns it)?  0 with *owner when another
 * user's; 1 otherwise (gone included: nothing to leave alone). */
static int leftover_ours(int jobfd, const char *name, uid_t *owner)
{
	struct stat st;

	if (fstatat(jobfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0 || st.st_uid == geteuid())
		return 1;
	*owner = st.st_uid;
	return 0;
}

int store_remove_leftover(int jobfd, const char *name)
{
	uid_t owner;

	return leftover_ours(jobfd, name, &owner) ? store_remove_tree(jobfd, name) : -EPERM;
}

/* Does dirfd/iter verify at the structure level?  Fills run_id if asked. */
static int check_ckpt(int jobfd, uint64_t step, char *run_id, char *why, size_t whylen)
{
	char iter[32], rid[33];
	uint64_t said;
	int fd, r;

	layout_iter_name(step, iter, sizeof(iter));
	fd = openat(jobfd, iter, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		snprintf(why, whylen, "%s", strerror(errno));
		return -errno;
	}
	r = verify_structure_known(fd, &said, rid, why, whylen);
	close(fd);
	if (r == 0 && said != step) {
		snprintf(why, whylen, "manifest says step %llu", (unsigned long long)said);
		r = -EINVAL;
	}
	if (r == 0 && run_id)
		memcpy(run_id, rid, 33);
	return r;
}

/* The temp files of a flush cut short (memflush.c: "<path>.flush-N.tmp",
 * "<manifest>.N.tmp") in the staging directory fd and the directories of
 * m's files: not part of the checkpoint. */
static void remove_flush_temps(int fd, const struct mfst *m)
{
	for (size_t i = 0; i <= m->nfiles; i++) {
		const char *p = i < m->nfiles ? m->files[i].path : ".";
		const char *slash = strrchr(p, '/');
		char dir[LAYOUT_PATH_MAX];
		struct dirent *e;
		int dfd;
		DIR *d;

		snprintf(dir, sizeof(dir), "%.*s", slash ? (int)(slash - p) : 1, slash ? p : ".");
		dfd = openat(fd, dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (dfd < 0 || !(d = fdopendir(dfd))) {
			if (dfd >= 0)
				close(dfd);
			continue;
		}
		while ((e = readdir(d))) {
			size_t n = strlen(e->d_name);
			if (n > 4 && !strcmp(e->d_name + n - 4, ".tmp") &&
			    (strstr(e->d_name, ".flush-") ||
			     !strncmp(e->d_name, LAYOUT_MEMORY_MANIFEST ".", sizeof(LAYOUT_MEMORY_MANIFEST))))
				unlinkat(dirfd(d), e->d_name, 0);
		}
		closedir(d);
	}
}

/* A staging directory (name) holding a memory-level step its world wrote
 * as it ended (memflush.h): published when it is newer than the newest
 * verified checkpoint (have_newest 0: none) and every file is there and
 * matches its digest.  1 (*step set) published, 0 not: a leftover. */
static int publish_flushed(int jobfd, const char *job, const char *name, uint64_t newest,
			   int have_newest, uint64_t *step)
{
	char why[512] = "", msg[512], want[96];
	struct mfst *m = NULL;
	int fd, r = -EINVAL, renamed = 0;

	fd = openat(jobfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 || faccessat(fd, LAYOUT_MEMORY_MANIFEST, F_OK, AT_SYMLINK_NOFOLLOW) < 0) {
		if (fd >= 0)             /* an ordinary staging directory */
			close(fd);
		return 0;
	}
	if (mfst_read_named(fd, LAYOUT_MEMORY_MANIFEST, &m, why, sizeof(why)) < 0)
		goto out;
	layout_staging_name(m->step, m->txid, want, sizeof(want));
	if (strcmp(want, name) || strcmp(m->job, job)) {
		snprintf(why, sizeof(why), "its manifest is of another step or job");
		goto out;
	}
	if (have_newest && m->step <= newest) {
		snprintf(why, sizeof(why), "iter_%09llu on disk is as new",
			 (unsigned long long)newest);
		goto out;
	}
	for (size_t i = 0; i < m->nfiles; i++)
		if ((r = verify_file(fd, m, i, VERIFY_BYTES_AUDIT, why, sizeof(why))) < 0)
			goto out;
	remove_flush_temps(fd, m);
	/* its manifest becomes the checkpoint's own */
	if (unlinkat(fd, LAYOUT_MEMORY_MANIFEST, 0) < 0) {
		r = -errno;
		snprintf(why, sizeof(why), "remove %s: %s", LAYOUT_MEMORY_MANIFEST, strerror(errno));
		goto out;
	}
	r = store_publish(jobfd, fd, name, m, &renamed, msg, sizeof(msg));
	if (r < 0 && !renamed) {
		snprintf(why, sizeof(why), "publish: %.400s", msg);
		goto out;
	}
	log_info("%s: memory-level step %llu published from the copies its world's "
		 "nodes wrote as it ended (%zu files)%s%s", job, (unsigned long long)m->step,
		 m->nfiles, r < 0 ? "; " : "", r < 0 ? msg : "");
	*step = m->step;
	r = 1;
out:
	if (r != 1)
		log_warnx("%s: memory-level step in '%s' not published: %s", job, name, why);
	mfst_free(m);
	close(fd);
	return r == 1;
}

static void recover_job(int rootfd, const char *job)
{
	int jobfd = openat(rootfd, job, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	uint64_t *steps = NULL, latest = 0, good = 0;
	struct store_job_info ji;
	char why[160];
	int n, r, have_latest, have_good = 0;
	DIR *d;
	struct dirent *e;

	if (jobfd < 0)
		return;
	/* only directories that carry our job marker are ours to repair */
	if (!store_job_dir_is_ours(jobfd, why, sizeof(why))) {
		log_warnx("'%s' under the root was not made by ckptd (%s): left alone",
			  job, why);
		close(jobfd);
		return;
	}
	if (job_info_read(jobfd, &ji) < 0) {
		log_info("'%s' has no valid %s: not a ckpt job, left alone", job, LAYOUT_JOBFILE);
		close(jobfd);
		return;
	}
	/* jobs of an older ckptd too */
	if ((r = protect_job(jobfd, job, ji.owner)) < 0)
		log_warnx("%s: cannot restrict access to the job to its owner: %s", job,
			  strerror(-r));
	n = layout_list_steps(jobfd, &steps);
	for (int i = 0; i < n; i++) {
		char why[512];
		if (check_ckpt(jobfd, steps[i], NULL, why, sizeof(why)) == 0) {
			good = steps[i];
			have_good = 1;
			break;
		}
		log_warnx("%s: checkpoint iter_%09llu does not verify, skipped: %s", job,
			  (unsigned long long)steps[i], why);
	}
	d = fdopendir(dup(jobfd));
	if (d)
		rewinddir(d);     /* the dup shares jobfd's offset */
	while (d && (e = readdir(d))) {
		uint64_t flushed = 0;
		uid_t owner;
		if (!layout_is_leftover(e->d_name))
			continue;
		/* another user's: neither published as ours nor removed */
		if (!leftover_ours(jobfd, e->d_name, &owner)) {
			log_warnx("%s: '%s' is named like ckptd's leftovers but owned by uid %u, "
				  "not ckptd's: left alone", job, e->d_name, (unsigned)owner);
			continue;
		}
		if (publish_flushed(jobfd, job, e->d_name, good, have_good, &flushed)) {
			good = flushed;
			have_good = 1;
			continue;
		}
		r = store_remove_tree(jobfd, e->d_name);
		if (r < 0)
			log_warnx("%s: cannot remove leftover '%s': %s", job, e->d_name, strerror(-r));
		else
			log_info("%s: removed unpublished leftover '%s'", job, e->d_name);
	}
	if (d)
		closedir(d);

	have_latest = layout_latest_read(jobfd, &latest) == 0;
	if (have_good && (!have_latest || latest != good)) {
		if (layout_latest_write(jobfd, good) == 0)
			log_info("%s: latest checkpoint repaired: %s%09llu", job,
				 have_latest ? "was iter_" : "none, now iter_",
				 (unsigned long long)(have_latest ? latest : good));
		if (have_latest)
			log_info("%s: latest now iter_%09llu", job, (unsigned long long)good);
	} else if (!have_good && have_latest) {
		unlinkat(jobfd, LAYOUT_LATEST, 0);
		io_fsync(jobfd);
		log_warnx("%s: no checkpoint verifies; removed %s", job, LAYOUT_LATEST);
	}
	free(steps);
	close(jobfd);
}

int store_recover(int rootfd)
{
	int dfd = dup(rootfd);
	DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
	struct dirent *e;

	if (d)
		rewinddir(d);     /* the dup shares rootfd's offset */

	if (!d) {
		if (dfd >= 0)
			close(dfd);
		return -errno;
	}
	while ((e = readdir(d))) {
		if (name_check(e->d_name, NAME_MAX_JOB, NULL, 0) < 0 || !layout_is_dir(rootfd, e))
			continue;
		recover_job(rootfd, e->d_name);
	}
	closedir(d);
	return 0;
}

#define PRUNED_SUFFIX ".staging-pruned"

/* Remove a checkpoint renamed for deletion; one retry, as its failures
 * (out of memory, EINTR-like I/O) are mostly transient.  One that ckptd's
 * uid does not own was not renamed by ckptd: it stays (-EPERM). */
static int remove_doomed(int jobfd, const char *doomed)
{
	int r = store_remove_leftover(jobfd, doomed);

	if (r < 0 && r != -EPERM)
		r = store_remove_leftover(jobfd, doomed);
	if (r < 0 && r != -EPERM)
		log_warnx("prune: cannot remove '%s' yet: %s", doomed, strerror(-r));
	return r;
}

/* Finish deletions an earlier prune could not complete.  Only our renamed
 * checkpoints: live staging directories, and names like ours that another
 * user made, are left alone. */
static void sweep_doomed(int jobfd)
{
	int fd = fcntl(jobfd, F_DUPFD_CLOEXEC, 3);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	struct dirent *e;
	size_t n, k = strlen(PRUNED_SUFFIX);

	if (!d) {
		if (fd >= 0)
			close(fd);
		return;
	}
	rewinddir(d);     /* the dup shares jobfd's offset */
	while ((e = readdir(d))) {
		n = strlen(e->d_name);
		if (!strncmp(e->d_name, ".iter_", 6) && n > k &&
		    !strcmp(e->d_name + n - k, PRUNED_SUFFIX))
			remove_doomed(jobfd, e->d_name);
	}
	closedir(d);
}

int store_prune(int jobfd, const char *run_id, unsigned keep, uint64_t **removed)
{
	return store_prune_held(jobfd, run_id, keep, NULL, NULL, removed);
}

int store_prune_held(int jobfd, const char *run_id, unsigned keep,
		     store_held_fn held, void *arg, uint64_t **removed)
{
	uint64_t *steps = NULL, latest = 0, *out;
	unsigned kept = 0;
	int n, count = 0, have_latest;

	if (keep == 0) {
		if (removed)
			*removed = NULL;
		return 0;
	}
	sweep_doomed(jobfd);
	n = layout_list_steps(jobfd, &steps);
	if (n < 0)
		return n;
	out = calloc((size_t)n + 1, sizeof(*out));
	if (!out) {
		free(steps);
		return -ENOMEM;
	}
	have_latest = layout_latest_read(jobfd, &latest) == 0;
	for (int i = 0; i < n; i++) {
		char rid[33], why[256], iter[32], doomed[64];
		if (check_ckpt(jobfd, steps[i], rid, why, sizeof(why)) < 0 ||
		    strcmp(rid, run_id) != 0)
			continue;      /* broken or another run's: not ours to delete */
		if (kept < keep || (have_latest && steps[i] == latest)) {
			kept++;
			continue;
		}
		if (held && held(arg, steps[i]))
			continue;

		/* Rename first so a crash mid-delete leaves a leftover, not a
		 * half-deleted checkpoint that looks real. */
		layout_iter_name(steps[i], iter, sizeof(iter));
		snprintf(doomed, sizeof(doomed), ".%s" PRUNED_SUFFIX, iter);
		if (renameat2(jobfd, iter, jobfd, doomed, RENAME_NOREPLACE) < 0) {
			if (errno == EEXIST)    /* not ours: sweep_doomed removed ours */
				log_warnx("prune: cannot rename %s: '%s' exists and is not "
					  "ckptd's (remove it)", iter, doomed);
			else
				log_warn("prune: cannot rename %s", iter);
			continue;
		}
		FAILPOINT("prune.renamed");
		remove_doomed(jobfd, doomed);     /* a later prune finishes it */
		FAILPOINT("prune.removed");
		out[count++] = steps[i];
	}
	if (count)
		io_fsync(jobfd);
	free(steps);
	if (removed)
		*removed = out;
	else
		free(out);
	return count;
}
