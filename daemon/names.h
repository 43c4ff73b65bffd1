/* names.h - the whitelist for client-supplied names that become path
 * components (job, group, blob).  Tensor names never touch the file system. */
#ifndef CKPT_NAMES_H
#define CKPT_NAMES_H

#include <stddef.h>

#define NAME_MAX_JOB   64
#define NAME_MAX_GROUP 64
#define NAME_MAX_BLOB  128
#define NAME_MAX_TENSOR 1024

/* A path-component name: 1..maxlen bytes of [A-Za-z0-9_.-], first byte
 * alphanumeric (so never ".", "..", or hidden), no NUL inside.
 * Returns 0 or -EINVAL with what is wrong in msg (may be NULL). */
int name_check(const char *s, size_t maxlen, char *msg, size_t msglen);

/* A group name: name_check, and not ckptd's own files in a step
 * ("checkpoint_manifest.json" and names it starts, its temp files). */
int name_check_group(const char *s, char *msg, size_t msglen);

/* A tensor name: 1..NAME_MAX_TENSOR bytes of valid UTF-8 without control
 * characters; "__metadata__" is reserved by safetensors.  0 or -EINVAL
 * with msg, as name_check. */
int name_check_tensor(const char *s, char *msg, size_t msglen);

#endif
