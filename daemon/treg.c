/* treg.c - a session's registered tensors and their groups (see treg.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "safet.h"
#include "treg.h"

struct key {
	const struct session *s;
	const char *group, *name;
};

static int same_tensor(void *ctx, size_t pos)
{
	const struct key *k = ctx;
	return !strcmp(k->s->tensors[pos].name, k->name) &&
	       !strcmp(k->s->tensors[pos].group, k->group);
}

static int same_group(void *ctx, size_t pos)
{
	const struct key *k = ctx;
	return !strcmp(k->s->groups[pos].name, k->group);
}

struct reg_tensor *treg_find(struct session *s, const char *group, const char *name)
{
	struct key k = { s, group, name };
	long i = nidx_find(&s->tensor_idx, nidx_hash(group, name), same_tensor, &k);
	return i < 0 ? NULL : &s->tensors[i];
}

static struct reg_group *group_find(struct session *s, const char *group)
{
	struct key k = { s, group, NULL };
	long i = nidx_find(&s->group_idx, nidx_hash(group, NULL), same_group, &k);
	return i < 0 ? NULL : &s->groups[i];
}

/* May group g (NULL: a new one) take delta more header bytes? */
static int header_fits(const struct reg_group *g, const char *group, const char *name,
		       uint64_t delta, char *msg, size_t msglen)
{
	uint64_t now = g ? g->header_bytes : SAFET_HEADER_OVERHEAD;

	if (now + delta <= SAFET_MAX_HEADER)
		return 0;
	snprintf(msg, msglen, "group %s: its safetensors header would pass %u bytes, "
		 "the format's limit, with this tensor (%zu in the group, name of %zu "
		 "bytes): use shorter names or fewer tensors per group", group,
		 SAFET_MAX_HEADER, g ? g->ntensors : 0, strlen(name));
	return -E2BIG;
}

/* The group named group, made if new.  NULL: out of memory. */
static struct reg_group *group_get(struct session *s, const char *group)
{
	struct reg_group *g = group_find(s, group);
	uint64_t h = nidx_hash(group, NULL);

	if (g)
		return g;
	if (s->ngroups == s->cgroups) {
		size_t c = s->cgroups ? s->cgroups * 2 : 8;
		struct reg_group *a = realloc(s->groups, c * sizeof(*a));
		if (!a)
			return NULL;
		s->groups = a;
		s->cgroups = c;
	}
	g = &s->groups[s->ngroups];
	*g = (struct reg_group){ strdup(group), SAFET_HEADER_OVERHEAD, 0 };
	if (!g->name || nidx_put(&s->group_idx, h, s->ngroups) < 0) {
		free(g->name);
		return NULL;
	}
	s->ngroups++;
	return g;
}

static void group_put_back(struct session *s, struct reg_group *g, uint64_t bytes)
{
	size_t i = (size_t)(g - s->groups), last = s->ngroups - 1;

	g->header_bytes -= bytes;
	if (--g->ntensors)
		return;
	nidx_del(&s->group_idx, nidx_hash(g->name, NULL), i);
	free(g->name);
	if (i != last) {
		nidx_move(&s->group_idx, nidx_hash(s->groups[last].name, NULL), last, i);
		s->groups[i] = s->groups[last];
	}
	s->ngroups--;
}

int treg_add(struct session *s, const struct reg_tensor *t, const char *group,
	     const char *name, char *msg, size_t msglen)
{
	uint64_t bytes = safet_entry_bound(name, t->ndim);
	struct reg_tensor nt = *t;
	struct reg_group *g;
	int r;

	if ((r = header_fits(group_find(s, group), group, name, bytes, msg, msglen)) < 0)
		return r;
	if (s->ntensors == s->ctensors) {
		size_t c = s->ctensors ? s->ctensors * 2 : 64;
		struct reg_tensor *a = realloc(s->tensors, c * sizeof(*a));
		if (!a)
			goto nomem;
		s->tensors = a;
		s->ctensors = c;
	}
	nt.group = strdup(group);
	nt.name = strdup(name);
	if (!nt.group || !nt.name)
		goto nomem_strings;
	if (!(g = group_get(s, group)))
		goto nomem_strings;
	if (nidx_put(&s->tensor_idx, nidx_hash(group, name), s->ntensors) < 0) {
		g->ntensors++;                  /* so that an empty group goes */
		group_put_back(s, g, 0);
		goto nomem_strings;
	}
	g->header_bytes += bytes;
	g->ntensors++;
	s->tensors[s->ntensors++] = nt;
	s->treg_gen++;
	return 0;

nomem_strings:
	free(nt.group);
	free(nt.name);
nomem:
	snprintf(msg, msglen, "out of memory registering tensor %s/%s", group, name);
	return -ENOMEM;
}

int treg_replace(struct session *s, struct reg_tensor *old, const struct reg_tensor *t,
		 char *msg, size_t msglen)
{
	struct reg_group *g = group_find(s, old->group);
	uint64_t was = safet_entry_bound(old->name, old->ndim);
	uint64_t now = safet_entry_bound(old->name, t->ndim);
	int r;

	if (now > was && (r = header_fits(g, old->group, old->name, now - was, msg, msglen)) < 0)
		return r;
	if (g)
		g->header_bytes = g->header_bytes - was + now;
	{
		char *group = old->group, *name = old->name;
		*old = *t;
		old->group = group;
		old->name = name;
	}
	s->treg_gen++;
	return 0;
}

void treg_drop(struct session *s, size_t i)
{
	struct reg_tensor *t = &s->tensors[i];
	struct reg_group *g = group_find(s, t->group);
	size_t last = s->ntensors - 1;

	if (g)
		group_put_back(s, g, safet_entry_bound(t->name, t->ndim));
	nidx_del(&s->tensor_idx, nidx_hash(t->group, t->name), i);
	free(t->group);
	free(t->name);
	if (i != last) {
		nidx_move(&s->tensor_idx, nidx_hash(s->tensors[last].group,
						    s->tensors[last].name), last, i);
		s->tensors[i] = s->tensors[last];
	}
	s->ntensors--;
	s->treg_gen++;
}

void treg_release(struct session *s)
{
	for (size_t i = 0; i < s->ntensors; i++) {
		free(s->tensors[i].group);
		free(s->tensors[i].name);
	}
	for (size_t i = 0; i < s->ngroups; i++)
		free(s->groups[i].name);
	free(s->tensors);
	free(s->groups);
	s->tensors = NULL;
	s->groups = NULL;
	s->ntensors = s->ctensors = s->ngroups = s->cgroups = 0;
	s->treg_gen++;
	nidx_release(&s->tensor_idx);
	nidx_release(&s->group_idx);
}
