/* remote_creds.c - the object store's credentials: from a credentials file
 * that only ckptd's user may read, or from the environment; loaded the
 * same way by `ckptd -n` (remote_check) and at start.  Never logged. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "remote.h"
#include "remote_creds.h"

static void trim(char *s)
{
	size_t n = strlen(s);
	while (n && (s[n - 1] == '\n' || s[n - 1] == '\r' || s[n - 1] == ' ' || s[n - 1] == '\t'))
		s[--n] = '\0';
	size_t k = strspn(s, " \t");
	memmove(s, s + k, strlen(s + k) + 1);
}

/* An AWS shared-credentials file: [profile] then key = value lines. */
static int creds_file(const char *path, const char *profile, struct s3_target *t,
		      char *err, size_t errlen)
{
	char line[2300], want[80];
	struct stat st;
	int in = 0, fd;
	FILE *f;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		snprintf(err, errlen, "remote: cannot open the credentials file '%s': %s",
			 path, strerror(errno));
		return -errno;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (st.st_mode & 077) ||
	    (st.st_uid != geteuid() && st.st_uid != 0)) {
		snprintf(err, errlen, "remote: the credentials file '%s' must be a regular "
			 "file of ckptd's user (or root) that group and others cannot read "
			 "(chmod 600)", path);
		close(fd);
		return -EPERM;
	}
	if (!(f = fdopen(fd, "r"))) {
		close(fd);
		return -ENOMEM;
	}
	snprintf(want, sizeof(want), "[%s]", profile);
	while (fgets(line, sizeof(line), f)) {
		char *eq;
		trim(line);
		if (line[0] == '[') {
			in = strcmp(line, want) == 0;
			continue;
		}
		if (!in || !(eq = strchr(line, '=')))
			continue;
		*eq = '\0';
		trim(line);
		trim(eq + 1);
		if (strcmp(line, "aws_access_key_id") == 0)
			snprintf(t->key_id, sizeof(t->key_id), "%s", eq + 1);
		else if (strcmp(line, "aws_secret_access_key") == 0)
			snprintf(t->secret, sizeof(t->secret), "%s", eq + 1);
		else if (strcmp(line, "aws_session_token") == 0)
			snprintf(t->token, sizeof(t->token), "%s", eq + 1);
	}
	fclose(f);
	explicit_bzero(line, sizeof(line));
	if (!t->key_id[0] || !t->secret[0]) {
		snprintf(err, errlen, "remote: the credentials file '%s' has no "
			 "aws_access_key_id and aws_secret_access_key under %s", path, want);
		return -EINVAL;
	}
	return 0;
}

static int creds_env(struct s3_target *t, char *err, size_t errlen)
{
	const char *id = getenv("AWS_ACCESS_KEY_ID"), *sec = getenv("AWS_SECRET_ACCESS_KEY");
	const char *tok = getenv("AWS_SESSION_TOKEN");

	if (!id || !*id || !sec || !*sec) {
		snprintf(err, errlen, "remote: no credentials: set AWS_ACCESS_KEY_ID and "
			 "AWS_SECRET_ACCESS_KEY in ckptd's environment, or "
			 "remote.credentials_file");
		return -EINVAL;
	}
	snprintf(t->key_id, sizeof(t->key_id), "%s", id);
	snprintf(t->secret, sizeof(t->secret), "%s", sec);
	snprintf(t->token, sizeof(t->token), "%s", tok ? tok : "");
	return 0;
}

int creds_load(const struct config_remote *rc, struct s3_target *t, char *err,
		      size_t errlen)
{
	return rc->credentials_file[0] ? creds_file(rc->credentials_file, rc->profile, t,
						    err, errlen)
				       : creds_env(t, err, errlen);
}

int remote_check(const struct config *cfg, char *err, size_t errlen)
{
	struct s3_target t;
	int r;

	if (!cfg->remote.url[0])
		return 0;
	memset(&t, 0, sizeof(t));
	r = creds_load(&cfg->remote, &t, err, errlen);
	explicit_bzero(&t, sizeof(t));
	return r;
}

