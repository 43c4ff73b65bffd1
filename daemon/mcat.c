/* mcat.c - the memory catalogue: each job's newest committed step as the
 * coordinator told it (mcat.h). */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "mcat.h"
#include "names.h"

struct mcat_job {
	struct mcat_job *next;
	char             job[NAME_MAX_JOB + 1];
	struct mcat_step s;
};

static struct mcat_job *jobs;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

void mcat_step_release(struct mcat_step *s)
{
	free(s->manifest);
	free(s->owners);
	memset(s, 0, sizeof(*s));
}

/* A copy of s into out: 0 or -ENOMEM (out released). */
static int copy(const struct mcat_step *s, struct mcat_step *out)
{
	*out = (struct mcat_step){ .step = s->step, .nowners = s->nowners };
	memcpy(out->txid, s->txid, sizeof(out->txid));
	if ((s->manifest && !(out->manifest = strdup(s->manifest))) ||
	    (s->nowners && !(out->owners = malloc(sizeof(int) * (size_t)s->nowners)))) {
		mcat_step_release(out);
		return -ENOMEM;
	}
	if (s->nowners)
		memcpy(out->owners, s->owners, sizeof(int) * (size_t)s->nowners);
	return 0;
}

void mcat_committed(const char *job, uint64_t step, const char *txid,
		    const char *manifest, const int *owners, int nowners)
{
	struct mcat_step in = { .step = step, .manifest = (char *)manifest,
				.owners = (int *)owners, .nowners = owners ? nowners : 0 };
	struct mcat_step s;
	struct mcat_job *j;

	snprintf(in.txid, sizeof(in.txid), "%s", txid);
	if (copy(&in, &s) < 0) {
		log_warnx("job %s: out of memory recording step %llu in the memory catalogue",
			  job, (unsigned long long)step);
		return;
	}
	pthread_mutex_lock(&lock);
	for (j = jobs; j && strcmp(j->job, job); j = j->next)
		;
	if (!j && (j = calloc(1, sizeof(*j)))) {
		snprintf(j->job, sizeof(j->job), "%s", job);
		j->next = jobs;
		jobs = j;
		j->s.step = 0;
	} else if (j && j->s.step > step) {
		j = NULL;                 /* a newer step is known: keep it */
	}
	if (j) {
		mcat_step_release(&j->s);
		j->s = s;
	} else {
		mcat_step_release(&s);
	}
	pthread_mutex_unlock(&lock);
}

int mcat_get(const char *job, struct mcat_step *out)
{
	int r = -ENOENT;

	pthread_mutex_lock(&lock);
	for (struct mcat_job *j = jobs; j; j = j->next)
		if (!strcmp(j->job, job) && j->s.txid[0]) {
			r = copy(&j->s, out);
			break;
		}
	pthread_mutex_unlock(&lock);
	return r;
}

void mcat_each_memory(void (*fn)(void *arg, const char *job, const struct mcat_step *s),
		      void *arg)
{
	pthread_mutex_lock(&lock);
	for (struct mcat_job *j = jobs; j; j = j->next)
		if (j->s.manifest)
			fn(arg, j->job, &j->s);
	pthread_mutex_unlock(&lock);
}
