/* ckpt_mem.c - what a trainer hands to libckpt to be saved: host memory
 * shared with ckptd (ckpt_alloc/ckpt_free), tensors registered in it or in
 * CUDA device memory exported to ckptd (ckpt_register/ckpt_unregister),
 * and small per-rank blobs (ckpt_put_blob).
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt_int.h"

static const char *const ckpt__dtype_names[CKPT_DTYPE_COUNT] = {
	"F64", "F32", "F16", "BF16", "I64", "I32", "I16", "I8", "U8", "BOOL",
};
static const size_t ckpt__dtype_sizes[CKPT_DTYPE_COUNT] = {
	8, 4, 2, 2, 8, 4, 2, 1, 1, 1,
};

void *ckpt_alloc(ckpt_client *c, size_t nbytes)
{
	struct shm_region shm;
	uint64_t id;
	json_t *req;
	int r;

	if (!c)
		return NULL;
	if (nbytes == 0) {
		ckpt__fail(c, -EINVAL, "ckpt_alloc: size must be greater than 0");
		return NULL;
	}
	if (nbytes > (size_t)INT64_MAX) {
		ckpt__fail(c, -EINVAL, "ckpt_alloc: %zu bytes is too large",
			   nbytes);
		return NULL;
	}
	if (ckpt__grow((void **)&c->regions, &c->cap_regions, c->nregions + 1,
		       sizeof(*c->regions)) < 0) {
		ckpt__fail(c, -ENOMEM, "out of memory");
		return NULL;
	}
	r = shm_region_create("ckpt", nbytes, &shm);
	if (r < 0) {
		ckpt__fail(c, r, "cannot create %zu bytes of shared memory: %s",
			   nbytes, strerror(-r));
		return NULL;
	}

	id = ++c->next_region;
	req = json_pack("{s:I, s:I}", "region", (json_int_t)id,
			"size", (json_int_t)shm.size);
	r = ckpt__request(c, PROTO_REGION_ADD, req, NULL, 0, &shm.fd, 1,
			  NULL, false);
	json_decref(req);
	if (r < 0) {
		shm_region_release(&shm);
		return NULL;
	}
	c->regions[c->nregions].id = id;
	c->regions[c->nregions].shm = shm;
	c->nregions++;
	return shm.base;
}

static void ckpt__tensor_drop(ckpt_client *c, size_t i)
{
	struct ckpt__tensor *t = &c->tensors[i], *last = &c->tensors[c->ntensors - 1];

	nidx_del(&c->tensor_idx, nidx_hash(t->group, t->name), i);
	free(t->group);
	free(t->name);
	if (t != last) {
		nidx_move(&c->tensor_idx, nidx_hash(last->group, last->name),
			  c->ntensors - 1, i);
		*t = *last;
	}
	c->ntensors--;
}

struct ckpt__tensor_key {
	const ckpt_client *c;
	const char *group, *name;
};

static int ckpt__tensor_is(void *ctx, size_t i)
{
	const struct ckpt__tensor_key *k = ctx;
	return strcmp(k->c->tensors[i].name, k->name) == 0 &&
	       strcmp(k->c->tensors[i].group, k->group) == 0;
}

static ssize_t ckpt__tensor_find(ckpt_client *c, const char *group,
				 const char *name)
{
	struct ckpt__tensor_key k = { c, group, name };
	return nidx_find(&c->tensor_idx, nidx_hash(group, name), ckpt__tensor_is, &k);
}

int ckpt_free(ckpt_client *c, void *ptr)
{
	size_t i;
	json_t *req;
	int r;

	if (!c)
		return -EINVAL;
	for (i = 0; i < c->nregions; i++)
		if (c->regions[i].shm.base == ptr)
			break;
	if (!ptr || i == c->nregions)
		return ckpt__fail(c, -EINVAL, "ckpt_free: pointer was not "
				  "returned by ckpt_alloc() on this handle");

	/* If the daemon refuses, the memory stays valid and registered.  If
	 * the connection is gone, the daemon has dropped the region anyway. */
	req = json_pack("{s:I}", "region", (json_int_t)c->regions[i].id);
	r = ckpt__request(c, PROTO_REGION_DEL, req, NULL, 0, NULL, 0, NULL,
			  false);
	json_decref(req);
	if (r < 0 && !c->conn.broken)
		return r;

	for (size_t t = c->ntensors; t-- > 0;)
		if (c->tensors[t].region == c->regions[i].id)
			ckpt__tensor_drop(c, t);
	shm_region_release(&c->regions[i].shm);
	c->regions[i] = c->regions[--c->nregions];
	return 0;
}

/* nbytes = prod(shape) * element size, refusing overflow. */
static int ckpt__tensor_nbytes(ckpt_client *c, ckpt_dtype dtype, int ndim,
			       const int64_t *shape, size_t *out)
{
	size_t n;

	if ((unsigned)dtype >= CKPT_DTYPE_COUNT)
		return ckpt__fail(c, -EINVAL, "unknown dtype %d", (int)dtype);
	if (ndim < 0 || ndim > CKPT_MAX_NDIM)
		return ckpt__fail(c, -EINVAL, "ndim %d is outside 0..%d", ndim,
				  CKPT_MAX_NDIM);
	if (ndim > 0 && !shape)
		return ckpt__fail(c, -EINVAL, "shape is NULL");
	n = ckpt__dtype_sizes[dtype];
	for (int i = 0; i < ndim; i++) {
		if (shape[i] < 0)
			return ckpt__fail(c, -EINVAL, "shape[%d] is negative "
					  "(%lld)", i, (long long)shape[i]);
		if (shape[i] && n > SIZE_MAX / (uint64_t)shape[i])
			return ckpt__fail(c, -EOVERFLOW, "tensor size overflows");
		n *= (size_t)shape[i];
	}
	*out = n;
	return 0;
}

static struct ckpt__region *ckpt__region_containing(ckpt_client *c,
						    const void *ptr,
						    size_t nbytes)
{
	uintptr_t p = (uintptr_t)ptr;

	for (size_t i = 0; i < c->nregions; i++) {
		uintptr_t base = (uintptr_t)c->regions[i].shm.base;
		size_t size = c->regions[i].shm.size;

		if (p >= base && p - base <= size && nbytes <= size - (p - base))
			return &c->regions[i];
	}
	return NULL;
}

/* CUDA device memory: find the region of the allocation holding ptr, or
 * export the allocation to ckptd as a new region.  An IPC allocation seen
 * before at the same base with other handle bytes was freed and the address
 * reused: its region (and the tensors in it) is dropped first. */
static int ckpt__gpu_region(ckpt_client *c, const void *ptr, size_t nbytes,
			    uint64_t *id, uint64_t *offset)
{
	struct gpu_client_export *ex;
	struct gpu_client_mem mem;
	char why[512];
	uint64_t rid;
	json_t *req;
	int r = gpu_client_describe(ptr, nbytes, &mem);

	if (r < 0)
		return ckpt__fail(c, -EINVAL, "pointer is not inside memory "
				  "from ckpt_alloc() and is not CUDA device "
				  "memory%s%s%s", gpu_client_reason()[0] ? " (" : "",
				  gpu_client_reason(), gpu_client_reason()[0] ? ")" : "");
	if (!c->daemon_gpu)
		return ckpt__fail(c, -EOPNOTSUPP, "this is CUDA memory but ckptd has "
				  "no GPU: run ckptd where the GPU is visible, or "
				  "register host memory from ckpt_alloc()");
	if (!(ex = malloc(sizeof(*ex))))
		return ckpt__fail(c, -ENOMEM, "out of memory");
	if ((r = gpu_client_export(&mem, ex, why, sizeof(why))) < 0) {
		free(ex);
		return ckpt__fail(c, r, "cannot register CUDA memory: %s", why);
	}
	for (size_t i = 0; i < c->ngpu; i++) {
		struct ckpt__gpu_region *g = &c->gpu[i];
		if (g->base != ex->base || g->kind != ex->kind)
			continue;
		if (g->size == ex->size && !memcmp(g->key, ex->key, sizeof(g->key))) {
			*id = g->id;
			*offset = ex->offset;
			gpu_client_export_release(ex);
			free(ex);
			return 0;
		}
		if (ex->kind == GPU_CLIENT_IPC) {     /* freed, address reused */
			req = json_pack("{s:I}", "region", (json_int_t)g->id);
			(void)ckpt__request(c, PROTO_REGION_DEL, req, NULL, 0, NULL, 0,
					    NULL, false);
			json_decref(req);
			for (size_t t = c->ntensors; t-- > 0;)
				if (c->tensors[t].region == g->id)
					ckpt__tensor_drop(c, t);
			c->gpu[i] = c->gpu[--c->ngpu];
			break;
		}
	}
	if (ckpt__grow((void **)&c->gpu, &c->cap_gpu, c->ngpu + 1, sizeof(*c->gpu)) < 0) {
		gpu_client_export_release(ex);
		free(ex);
		return ckpt__fail(c, -ENOMEM, "out of memory");
	}
	rid = ++c->next_region;
	r = 0;
	if (ex->kind == GPU_CLIENT_IPC) {
		req = gpu_client_region_json(ex, rid, 0, 0);
		r = ckpt__request(c, PROTO_CUDA_REGION_ADD, req, NULL, 0, NULL, 0,
				  NULL, false);
		json_decref(req);
	}
	for (unsigned k = 0; ex->kind == GPU_CLIENT_VMM && r == 0 && k < ex->nchunks;
	     k += GPU_CLIENT_FDS_PER_MSG) {
		unsigned n = ex->nchunks - k < GPU_CLIENT_FDS_PER_MSG ?
			     ex->nchunks - k : GPU_CLIENT_FDS_PER_MSG;
		req = gpu_client_region_json(ex, rid, k, n);
		r = ckpt__request(c, PROTO_CUDA_REGION_ADD, req, NULL, 0, ex->fds + k,
				  n, NULL, false);
		json_decref(req);
	}
	if (r == 0) {
		struct ckpt__gpu_region *g = &c->gpu[c->ngpu++];
		if (c->pid == getpid())
			gpu_ring_prepare(&c->ring);     /* the gate page, while idle */
		g->id = rid;
		g->kind = ex->kind;
		g->base = ex->base;
		g->size = ex->size;
		memcpy(g->key, ex->key, sizeof(g->key));
		*id = rid;
		*offset = ex->offset;
	}
	gpu_client_export_release(ex);    /* ckptd has its own copies */
	free(ex);
	return r;
}

static int ckpt__tensor_remember(ckpt_client *c, const char *group,
				 const char *name, uint64_t region)
{
	ssize_t i = ckpt__tensor_find(c, group, name);
	struct ckpt__tensor t;

	if (i >= 0) {
		c->tensors[i].region = region;
		return 0;
	}
	if (ckpt__grow((void **)&c->tensors, &c->cap_tensors, c->ntensors + 1,
		       sizeof(*c->tensors)) < 0)
		return -ENOMEM;
	t.group = strdup(group);
	t.name = strdup(name);
	t.region = region;
	if (!t.group || !t.name ||
	    nidx_put(&c->tensor_idx, nidx_hash(group, name), c->ntensors) < 0) {
		free(t.group);
		free(t.name);
		return -ENOMEM;
	}
	c->tensors[c->ntensors++] = t;
	return 0;
}

/* TENSOR_REG's "global" object, or NULL with c's error set. */
static json_t *ckpt__layout_json(ckpt_client *c, const char *name, int ndim,
				 const int64_t *local_shape,
				 const struct ckpt_layout *l)
{
	json_t *gs = json_array(), *off = json_array();

	for (int d = 0; gs && off && d < ndim; d++) {
		if (l->global_shape[d] < 0 || l->offset[d] < 0 ||
		    l->offset[d] > l->global_shape[d] - local_shape[d]) {
			json_decref(gs);
			json_decref(off);
			ckpt__fail(c, -EINVAL, "ckpt_register_global: %s: dimension %d: the "
				   "piece (offset %lld, size %lld) does not lie inside the global "
				   "shape (%lld)", name, d, (long long)l->offset[d],
				   (long long)local_shape[d], (long long)l->global_shape[d]);
			return NULL;
		}
		json_array_append_new(gs, json_integer(l->global_shape[d]));
		json_array_append_new(off, json_integer(l->offset[d]));
	}
	if (l->replica_count < 1 || l->replica_index < 0 ||
	    l->replica_index >= l->replica_count) {
		json_decref(gs);
		json_decref(off);
		ckpt__fail(c, -EINVAL, "ckpt_register_global: %s: replica_index %d is not in "
			   "0..replica_count-1 (replica_count %d)", name, l->replica_index,
			   l->replica_count);
		return NULL;
	}
	return json_pack("{s:o, s:o, s:i, s:i}", "shape", gs, "offset", off,
			 "replica_index", l->replica_index, "replica_count", l->replica_count);
}

static int ckpt__register(ckpt_client *c, const char *group, const char *name,
			  const void *ptr, ckpt_dtype dtype, int ndim,
			  const int64_t *shape, const struct ckpt_layout *layout,
			  unsigned flags)
{
	struct ckpt__region *reg;
	json_t *req, *jshape;
	size_t nbytes = 0;
	uint64_t rid, off;
	int r;

	if (!c)
		return -EINVAL;
	if ((r = ckpt__check_name(c, "group", group, CKPT__MAX_GROUP)) < 0 ||
	    (r = ckpt__check_tensor_name(c, name)) < 0 ||
	    (r = ckpt__tensor_nbytes(c, dtype, ndim, shape, &nbytes)) < 0)
		return r;
	reg = ckpt__region_containing(c, ptr, nbytes);
	/* A zero-byte tensor has no bytes to find: whatever its pointer (NULL
	 * for an empty CUDA tensor in PyTorch, or the end of a cudaMalloc
	 * block), it lives in a page of our own. */
	if (!reg && nbytes == 0) {
		if (!c->empty && !(c->empty = ckpt_alloc(c, 1)))
			return c->conn.broken ? c->conn.broken : -ENOMEM;  /* c->err says */
		reg = ckpt__region_containing(c, c->empty, 0);
		ptr = c->empty;
	}
	if (!reg && (reg = ckpt__region_containing(c, ptr, 0)))
		return ckpt__fail(c, -EINVAL, "tensor %s/%s: its %zu bytes at "
				  "offset %zu run past the end of its "
				  "ckpt_alloc() memory (%zu bytes)", group, name,
				  nbytes, (size_t)((uintptr_t)ptr -
						   (uintptr_t)reg->shm.base),
				  reg->shm.size);
	if (reg) {
		rid = reg->id;
		off = (uint64_t)((uintptr_t)ptr - (uintptr_t)reg->shm.base);
	} else if ((r = ckpt__gpu_region(c, ptr, nbytes, &rid, &off)) < 0) {
		return r;
	}

	jshape = json_array();
	for (int i = 0; jshape && i < ndim; i++)
		json_array_append_new(jshape, json_integer(shape[i]));
	req = json_pack("{s:s, s:s, s:s, s:o, s:I, s:I}", "group", group,
			"name", name, "dtype", ckpt__dtype_names[dtype],
			"shape", jshape, "region", (json_int_t)rid,
			"offset", (json_int_t)off);
	if (req && layout) {
		json_t *g = ckpt__layout_json(c, name, ndim, shape, layout);
		if (!g) {
			json_decref(req);
			return -EINVAL;
		}
		json_object_set_new(req, "global", g);
	}
	if (req && (flags & CKPT_FROZEN))
		json_object_set_new(req, "frozen", json_true());
	r = ckpt__request(c, PROTO_TENSOR_REG, req, NULL, 0, NULL, 0, NULL,
			  false);
	json_decref(req);
	if (r < 0)
		return r;
	/* Registered with the daemon; our list only serves ckpt_free(), so
	 * running out of memory here costs nothing worse than a stale entry. */
	(void)ckpt__tensor_remember(c, group, name, rid);
	return 0;
}

int ckpt_register(ckpt_client *c, const char *group, const char *name,
		  const void *ptr, ckpt_dtype dtype, int ndim,
		  const int64_t *shape)
{
	return ckpt__register(c, group, name, ptr, dtype, ndim, shape, NULL, 0);
}

int ckpt_register_global(ckpt_client *c, const char *group, const char *name,
			 const void *ptr, ckpt_dtype dtype, int ndim,
			 const int64_t *local_shape, const struct ckpt_layout *layout)
{
	if (!c)
		return -EINVAL;
	if (!layout)
		return ckpt__fail(c, -EINVAL, "ckpt_register_global: layout is NULL");
	return ckpt_register_flags(c, group, name, ptr, dtype, ndim, local_shape, layout, 0);
}

int ckpt_register_flags(ckpt_client *c, const char *group, const char *name,
			const void *ptr, ckpt_dtype dtype, int ndim,
			const int64_t *shape, const struct ckpt_layout *layout,
			unsigned flags)
{
	if (!c)
		return -EINVAL;
	if (flags & ~CKPT_FROZEN)
		return ckpt__fail(c, -EINVAL, "ckpt_register_flags: unknown flags 0x%x",
				  flags & ~CKPT_FROZEN);
	if (layout && !(c->daemon_features & PROTO_FEAT_GLOBAL))
		return ckpt__fail(c, -EOPNOTSUPP, "ckpt_register_global: this ckptd "
				  "does not support global tensors (upgrade it)");
	if ((flags & CKPT_FROZEN) && !(c->daemon_features & PROTO_FEAT_FROZEN))
		return ckpt__fail(c, -EOPNOTSUPP, "ckpt_register_flags: this ckptd "
				  "does not support CKPT_FROZEN (upgrade it)");
	return ckpt__register(c, group, name, ptr, dtype, ndim, shape, layout, flags);
}

/* A CUDA region without tensors goes: ckptd's mapping would otherwise keep
 * the GPU memory alive after the trainer frees it. */
static void ckpt__gpu_region_gc(ckpt_client *c, uint64_t rid)
{
	json_t *req;

	for (size_t t = 0; t < c->ntensors; t++)
		if (c->tensors[t].region == rid)
			return;
	for (size_t g = 0; g < c->ngpu; g++) {
		if (c->gpu[g].id != rid)
			continue;
		req = json_pack("{s:I}", "region", (json_int_t)rid);
		(void)ckpt__request(c, PROTO_REGION_DEL, req, NULL, 0, NULL, 0, NULL, false);
		json_decref(req);
		c->gpu[g] = c->gpu[--c->ngpu];
		return;
	}
}

int ckpt_unregister(ckpt_client *c, const char *group, const char *name)
{
	json_t *req;
	ssize_t i;
	int r;

	if (!c)
		return -EINVAL;
	if ((r = ckpt__check_name(c, "group", group, CKPT__MAX_GROUP)) < 0 ||
	    (r = ckpt__check_tensor_name(c, name)) < 0)
		return r;
	req = json_pack("{s:s, s:s}", "group", group, "name", name);
	r = ckpt__request(c, PROTO_TENSOR_DEL, req, NULL, 0, NULL, 0, NULL,
			  false);
	json_decref(req);
	if (r < 0)
		return r;
	i = ckpt__tensor_find(c, group, name);
	if (i >= 0) {
		uint64_t rid = c->tensors[i].region;
		ckpt__tensor_drop(c, (size_t)i);
		ckpt__gpu_region_gc(c, rid);
	}
	return 0;
}

int ckpt_put_blob(ckpt_client *c, const char *name, const void *data,
		  size_t len)
{
	json_t *req;
	int r;

	if (!c)
		return -EINVAL;
	if ((r = ckpt__check_name(c, "blob", name, CKPT__MAX_BLOB)) < 0)
		return r;
	if (!data && len)
		return ckpt__fail(c, -EINVAL, "blob data is NULL");
	/* Room for the JSON part: {"name":"<128 bytes>"} */
	if (len > c->max_payload - 1024)
		return ckpt__fail(c, -EMSGSIZE, "blob '%s' is %zu bytes; ckptd "
				  "takes at most %u", name, len,
				  c->max_payload - 1024);
	req = json_pack("{s:s}", "name", name);
	r = ckpt__request(c, PROTO_BLOB_PUT, req, data, len, NULL, 0, NULL,
			  false);
	json_decref(req);
	return r;
}
