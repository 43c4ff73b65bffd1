/* remote_creds.h - the object store's credentials (remote_creds.c). */
#ifndef CKPT_REMOTE_CREDS_H
#define CKPT_REMOTE_CREDS_H

#include <stddef.h>

#include "config.h"
#include "s3.h"

/* The credentials remote_start loads into t: credentials_file (owned by
 * ckptd's user or root, readable by nobody else), or the environment.
 * 0 or -errno with err (never the secret). */
int creds_load(const struct config_remote *rc, struct s3_target *t, char *err,
	       size_t errlen);

#endif
