/* remote_none.c - remote.h without an object store, for builds that lack
 * libcurl and libxml2 (the GPU bundle): "remote" is refused at start-up. */
#include <errno.h>
#include <stdio.h>

#include "remote.h"

int remote_start(const struct config *cfg, int rootfd, int uploads, char *err,
		 size_t errlen)
{
	(void)rootfd;
	(void)uploads;
	if (!cfg->remote.url[0])
		return 0;
	snprintf(err, errlen, "remote: this ckptd was built without the object-store "
		 "tier (libcurl, libxml2)");
	return -ENOTSUP;
}

int remote_check(const struct config *cfg, char *err, size_t errlen)
{
	return remote_start(cfg, -1, 0, err, errlen);
}

void remote_reload(const struct config *cfg) { (void)cfg; }
void remote_stop(void) { }
int  remote_enabled(void) { return 0; }
void remote_committed(const char *job, uint64_t step) { (void)job; (void)step; }
int  remote_held(const char *job, uint64_t step) { (void)job; (void)step; return 0; }

int remote_push(int jobfd, const char *job, uint64_t step, char *msg, size_t msglen)
{
	(void)jobfd; (void)job; (void)step;
	snprintf(msg, msglen, "no remote is configured");
	return -ENOTCONN;
}

int remote_may_pull(const char *job, uid_t uid, uid_t *owner, char *msg, size_t msglen)
{
	(void)job; (void)uid; (void)owner;
	snprintf(msg, msglen, "no remote is configured");
	return -ENOTCONN;
}

int remote_pull(int jobfd, const char *job, uid_t uid, int64_t step, int world,
		uint64_t *got, char *msg, size_t msglen)
{
	(void)jobfd; (void)job; (void)uid; (void)step; (void)world; (void)got;
	snprintf(msg, msglen, "no remote is configured");
	return -ENOTCONN;
}

int remote_list(const char *job, json_t **out, char *msg, size_t msglen)
{
	(void)job; (void)out;
	snprintf(msg, msglen, "no remote is configured");
	return -ENOTCONN;
}

json_t *remote_status_json(void) { return NULL; }
