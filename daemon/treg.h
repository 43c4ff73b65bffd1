/* treg.h - a session's registered tensors: found by (group, name) through
 * a hash index, added, replaced and dropped, each group's safetensors
 * header kept within the format's limit (SAFET_MAX_HEADER) so that what
 * REGISTER accepts, SAVE can write.  Every change moves s->treg_gen on:
 * plan.c keeps the layout of a session's saves until it does.  Loop
 * thread only. */
#ifndef CKPT_TREG_H
#define CKPT_TREG_H

#include <stddef.h>

#include "session.h"

/* The tensor registered as group/name, or NULL. */
struct reg_tensor *treg_find(struct session *s, const char *group, const char *name);

/* Register t (its group and name are copied; its other fields are taken
 * as they are).  0, -E2BIG when its group's header would pass the limit,
 * or -ENOMEM, with msg filled; the session is unchanged on failure. */
int treg_add(struct session *s, const struct reg_tensor *t, const char *group,
	     const char *name, char *msg, size_t msglen);

/* Replace old's shape, region and the rest by t's (old keeps its
 * strings).  0 or -E2BIG with msg, old unchanged. */
int treg_replace(struct session *s, struct reg_tensor *old, const struct reg_tensor *t,
		 char *msg, size_t msglen);

/* Drop tensors[i] (the last one takes its place). */
void treg_drop(struct session *s, size_t i);

/* Free every tensor and group and the indexes. */
void treg_release(struct session *s);

#endif
