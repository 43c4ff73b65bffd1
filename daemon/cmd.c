/* cmd.c - the request table and the handlers of trainers' requests:
 * HELLO, memory regions, tensors, blobs, SAVE and RESTORE. */
#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmd.h"
#include "errbuf.h"
#include "fail.h"
#include "gpu.h"
#include "gpu_wire.h"
#include "job.h"
#include "log.h"
#include "mfst.h"
#include "names.h"
#include "restore.h"
#include "session.h"
#include "srv.h"
#include "treg.h"

int cmd_fail(struct req *q, int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	errbuf_vfail(q->msg, sizeof(q->msg), err, fmt, ap);
	va_end(ap);
	return err;
}

static void cmd_reply_ok(struct req *q, const char *json)   /* NULL: "{}" */
{
	session_reply(q->s, q->rtype, q->req_id, 0, json ? json : "{}", NULL, 0);
}

void cmd_reply_json(struct req *q, json_t *o)
{
	char *txt = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	if (!txt) {
		session_reply_err(q->s, q->rtype, q->req_id, -ENOMEM, "out of memory");
		return;
	}
	cmd_reply_ok(q, txt);
	free(txt);
}

int cmd_set_reply(struct req *q, json_t *o)
{
	char *txt = o ? json_dumps(o, JSON_COMPACT) : NULL;

	json_decref(o);
	if (!txt)
		return cmd_fail(q, -ENOMEM, "out of memory");
	free(q->reply);
	q->reply = txt;
	return 0;
}

int cmd_get_u64(json_t *j, const char *key, uint64_t *out)
{
	json_t *v = json_object_get(j, key);
	if (!json_is_integer(v) || json_integer_value(v) < 0)
		return -EINVAL;
	*out = (uint64_t)json_integer_value(v);
	return 0;
}

const char *cmd_get_str(json_t *j, const char *key)
{
	return json_string_value(json_object_get(j, key));
}

static int h_hello(struct req *q)
{
	struct session *s = q->s;
	struct srv *S = s->srv;
	const char *role = cmd_get_str(q->j, "role"), *job;
	char why[96];
	uint64_t ver, rank, world, pid = 0, features;
	json_t *o;
	int r;

	if (s->role != ROLE_NONE)
		return cmd_fail(q, -EALREADY, "HELLO was already sent");
	if (cmd_get_u64(q->j, "version", &ver) < 0 || !role)
		return cmd_fail(q, -EINVAL, "HELLO needs \"version\" and \"role\"");
	if (ver != PROTO_VERSION)
		return cmd_fail(q, -EPROTONOSUPPORT,
				"protocol version %llu is not supported (ckptd speaks %d)",
				(unsigned long long)ver, PROTO_VERSION);
	cmd_get_u64(q->j, "pid", &pid);
	if (cmd_get_u64(q->j, "features", &features) == 0)
		s->features = (uint32_t)features;
	if (pid)
		s->pid = (pid_t)pid;
	if (strcmp(role, "ctl") == 0) {
		s->role = ROLE_CTL;
	} else if (strcmp(role, "trainer") == 0) {
		job = cmd_get_str(q->j, "job");
		if (!job || name_check(job, NAME_MAX_JOB, why, sizeof(why)) < 0)
			return cmd_fail(q, -EINVAL, "bad job name: %s", job ? why : "missing");
		if (cmd_get_u64(q->j, "rank", &rank) < 0 || cmd_get_u64(q->j, "world_size", &world) < 0 ||
		    world == 0 || world > 1000000 || rank >= world)
			return cmd_fail(q, -EINVAL, "need 0 <= rank < world_size <= 1000000");
		if (S->draining)
			return cmd_fail(q, -ESHUTDOWN, "ckptd is shutting down");
		r = job_attach(S, s, job, (int)rank, (int)world, q->msg, sizeof(q->msg));
		if (r < 0)
			return r;
		s->role = ROLE_TRAINER;
	} else {
		return cmd_fail(q, -EINVAL, "unknown role \"%s\"", role);
	}
	o = json_pack("{sisisssIsb}", "version", PROTO_VERSION, "features",
		      PROTO_FEAT_HOST_MEM | PROTO_FEAT_EVENTS | PROTO_FEAT_RESTORE_PARTS |
		      PROTO_FEAT_GLOBAL | PROTO_FEAT_FROZEN |
		      (S->gpu ? PROTO_FEAT_CUDA_IPC : 0),
		      "daemon", "ckptd " CKPT_VERSION, "session", (json_int_t)s->id, "gpu", S->gpu);
	cmd_reply_json(q, o);
	return 0;
}

/* REGION_ADD: checks on the loop; validating and mapping the memfd,
 * populating its pages (work proportional to its size), on the pool. */
static int region_add_check(struct req *q)
{
	struct session *s = q->s;
	struct region_ref *rg;
	uint64_t id, size;

	if (q->m->nfds != 1)
		return cmd_fail(q, -EINVAL, "REGION_ADD needs exactly one file descriptor");
	q->fd = q->m->fds[0];
	q->m->fds[0] = -1;        /* ours now; adopt() steals it */
	q->m->nfds = 0;
	if (cmd_get_u64(q->j, "region", &id) < 0 || cmd_get_u64(q->j, "size", &size) < 0)
		return cmd_fail(q, -EINVAL, "REGION_ADD needs \"region\" and \"size\"");
	if (session_region_find(s, id, NULL))
		return cmd_fail(q, -EEXIST, "region %llu already exists", (unsigned long long)id);
	if (s->nregions >= s->srv->cfg.max_regions)
		return cmd_fail(q, -ENOSPC,
				"too many regions (max_regions %u)", s->srv->cfg.max_regions);
	if (!(rg = calloc(1, sizeof(*rg))))
		return -ENOMEM;
	rg->refs = 1;
	rg->id = id;
	rg->r.fd = -1;
	rg->r.size = (size_t)size;      /* what work maps */
	q->arg = rg;
	return 0;
}

static int region_add_work(struct req *q)
{
	struct region_ref *rg = q->arg;
	char why[96] = "";
	int r, fd = q->fd;

	q->fd = -1;
	FAILPOINT("cmd.region_add");
	r = shm_region_adopt(fd, rg->r.size, &rg->r, why, sizeof(why));
	if (r < 0)
		return cmd_fail(q, r, "region refused: %s", why);
	return 0;
}

static void region_add_done(struct req *q)
{
	struct region_ref *rg = q->arg;

	q->arg = NULL;
	if (q->r == 0 && !q->s->closed && (q->r = session_region_add(q->s, rg)) == 0)
		return;
	region_unref(rg);               /* unmaps what adopt() mapped */
}

static const char *srv_gpu_why(const struct srv *S)
{
	return strcmp(S->cfg.gpu, "off") == 0 ? "\"gpu\": \"off\" in the configuration" :
	       gpu_reason();
}

/* CUDA memory: one cudaMalloc allocation (IPC handle) or a VMM range whose
 * chunks arrive as fds, at most PROTO_MAX_FDS per message, in order. */
static int h_cuda_region_add(struct req *q)
{
	struct session *s = q->s;
	struct gpu_region_desc d;
	struct region_ref *rg;
	unsigned used = 0;
	int r = 0, hit = 0;

	if (!s->srv->gpu) {
		r = -EOPNOTSUPP;
		snprintf(q->msg, sizeof(q->msg), "this ckptd has no GPU (%s): CUDA "
			 "tensors cannot be registered; copy them to ckpt_alloc() memory "
			 "or run ckptd where the GPU is visible", srv_gpu_why(s->srv));
		goto out;
	}
	if ((r = gpu_wire_region(q->j, q->m->nfds, &d, q->msg, sizeof(q->msg))) < 0)
		goto out;
	rg = session_region_find(s, d.region, NULL);
	if (d.kind == GPU_MEM_VMM && d.at > 0) {     /* more chunks of a range */
		if (!rg || !rg->gm || rg->gm->kind != GPU_MEM_VMM || rg->r.size != d.size) {
			r = -ENOENT;
			snprintf(q->msg, sizeof(q->msg), "no VMM region %llu of %llu bytes "
				 "to add chunks to", (unsigned long long)d.region,
				 (unsigned long long)d.size);
			goto out;
		}
		goto chunks;
	}
	if (rg) {
		r = -EEXIST;
		snprintf(q->msg, sizeof(q->msg), "region %llu already exists",
			 (unsigned long long)d.region);
		goto out;
	}
	if (s->nregions >= s->srv->cfg.max_regions) {
		r = -ENOSPC;
		snprintf(q->msg, sizeof(q->msg), "too many regions (max_regions %u)",
			 s->srv->cfg.max_regions);
		goto out;
	}
	if (!(rg = calloc(1, sizeof(*rg)))) {
		r = -ENOMEM;
		goto out;
	}
	r = gpu_mem_get(s->pid, d.uuid, d.base, d.size, d.kind, d.key, &rg->gm, &hit,
			q->msg, sizeof(q->msg));
	if (r < 0) {
		free(rg);
		goto out;
	}
	rg->refs = 1;
	rg->id = d.region;
	rg->r.fd = -1;
	rg->r.size = (size_t)d.size;
	if ((r = session_region_add(s, rg)) < 0) {
		region_unref(rg);
		goto out;
	}
chunks:
	for (uint64_t at = d.at; used < d.nchunks; at += d.chunk[used++]) {
		int fd = q->m->fds[used];
		q->m->fds[used] = -1;          /* stolen */
		if (hit && gpu_mem_ready(rg->gm)) {
			close(fd);             /* shared with another session */
			continue;
		}
		if ((r = gpu_mem_vmm_add(rg->gm, at, d.chunk[used], fd, q->msg,
					 sizeof(q->msg))) < 0) {
			used++;
			break;                 /* the region stays unusable */
		}
	}
out:
	for (unsigned i = used; i < q->m->nfds; i++)
		if (q->m->fds[i] >= 0) {
			close(q->m->fds[i]);
			q->m->fds[i] = -1;
		}
	q->m->nfds = 0;
	if (r == 0)
		cmd_reply_ok(q, NULL);
	return r;
}

static int h_region_del(struct req *q)
{
	struct session *s = q->s;
	struct region_ref *rg;
	uint64_t id;
	size_t idx;

	if (cmd_get_u64(q->j, "region", &id) < 0)
		return cmd_fail(q, -EINVAL, "REGION_DEL needs \"region\"");
	if (!(rg = session_region_find(s, id, &idx)))
		return cmd_fail(q, -ENOENT, "no region %llu", (unsigned long long)id);
	for (size_t i = s->ntensors; i-- > 0;)
		if (s->tensors[i].rg == rg)
			treg_drop(s, i);
	session_region_del(s, idx);
	cmd_reply_ok(q, NULL);
	return 0;
}

/* TENSOR_REG's "global" object: where this piece sits in its global
 * tensor.  0, or -errno with msg filled. */
static int parse_layout(const json_t *g, struct reg_tensor *t, char *msg, size_t msglen)
{
	json_t *gs = json_object_get(g, "shape"), *off = json_object_get(g, "offset");
	json_t *ri = json_object_get(g, "replica_index"), *rc = json_object_get(g, "replica_count");

	if (!json_is_object(g) || !json_is_array(gs) || !json_is_array(off) ||
	    json_array_size(gs) != (size_t)t->ndim || json_array_size(off) != (size_t)t->ndim ||
	    !json_is_integer(ri) || !json_is_integer(rc)) {
		snprintf(msg, msglen, "\"global\" needs shape and offset of %d dims, "
			 "replica_index and replica_count", t->ndim);
		return -EINVAL;
	}
	if (json_integer_value(rc) < 1 || json_integer_value(rc) > MFST_MAX_WORLD ||
	    json_integer_value(ri) < 0 || json_integer_value(ri) >= json_integer_value(rc)) {
		snprintf(msg, msglen, "replica_index %lld is not in 0..replica_count-1 "
			 "(replica_count %lld)", (long long)json_integer_value(ri),
			 (long long)json_integer_value(rc));
		return -EINVAL;
	}
	for (int d = 0; d < t->ndim; d++) {
		json_t *a = json_array_get(gs, (size_t)d), *b = json_array_get(off, (size_t)d);
		if (!json_is_integer(a) || !json_is_integer(b) || json_integer_value(a) < 0 ||
		    json_integer_value(b) < 0 ||
		    json_integer_value(b) > json_integer_value(a) - t->shape[d]) {
			snprintf(msg, msglen, "dimension %d: the piece (offset %lld, size %lld) "
				 "does not lie inside the global shape (%lld)", d,
				 (long long)json_integer_value(b), (long long)t->shape[d],
				 (long long)json_integer_value(a));
			return -EINVAL;
		}
		t->gshape[d] = json_integer_value(a);
		t->goffset[d] = json_integer_value(b);
	}
	t->global = 1;
	t->replica_index = (int)json_integer_value(ri);
	t->replica_count = (int)json_integer_value(rc);
	return 0;
}

static int h_tensor_reg(struct req *q)
{
	struct session *s = q->s;
	const char *group = cmd_get_str(q->j, "group"), *name = cmd_get_str(q->j, "name");
	const char *dtype = cmd_get_str(q->j, "dtype");
	char why[96];
	json_t *shape = json_object_get(q->j, "shape");
	struct reg_tensor t = { 0 }, *old;
	uint64_t region, offset, n = 1;
	size_t esz;
	int r;

	if (!group || name_check_group(group, why, sizeof(why)) < 0)
		return cmd_fail(q, -EINVAL, "bad group name: %s", group ? why : "missing");
	if (!name || name_check_tensor(name, why, sizeof(why)) < 0)
		return cmd_fail(q, -EINVAL, "bad tensor name: %s", name ? why : "missing");
	if (!dtype || !(esz = safet_dtype_size(dtype)))
		return cmd_fail(q, -EINVAL, "unknown dtype \"%s\"", dtype ? dtype : "");
	if (json_object_get(q->j, "cuda"))
		return cmd_fail(q, -EOPNOTSUPP, "CUDA tensors are not supported by this ckptd%s",
				s->srv->gpu ? "" : " (no GPU)");
	if (!json_is_array(shape) || json_array_size(shape) > SAFET_MAX_NDIM)
		return cmd_fail(q, -EINVAL,
				"shape must be an array of at most %d sizes", SAFET_MAX_NDIM);
	if (cmd_get_u64(q->j, "region", &region) < 0 || cmd_get_u64(q->j, "offset", &offset) < 0)
		return cmd_fail(q, -EINVAL, "TENSOR_REG needs \"region\" and \"offset\"");
	t.ndim = (int)json_array_size(shape);
	for (int i = 0; i < t.ndim; i++) {
		json_t *d = json_array_get(shape, (size_t)i);
		if (!json_is_integer(d) || json_integer_value(d) < 0)
			return cmd_fail(q, -EINVAL, "shape[%d] is not a non-negative integer", i);
		t.shape[i] = json_integer_value(d);
		if (t.shape[i] && n > UINT64_MAX / (uint64_t)t.shape[i])
			return cmd_fail(q, -EOVERFLOW, "tensor too large");
		n *= (uint64_t)t.shape[i];
	}
	if (n > UINT64_MAX / esz)
		return cmd_fail(q, -EOVERFLOW, "tensor too large");
	t.nbytes = n * esz;
	if (json_object_get(q->j, "frozen") && !json_is_boolean(json_object_get(q->j, "frozen")))
		return cmd_fail(q, -EINVAL, "\"frozen\" must be true or false");
	t.frozen = json_is_true(json_object_get(q->j, "frozen"));
	if (json_object_get(q->j, "global")) {
		char why[160];
		int r = parse_layout(json_object_get(q->j, "global"), &t, why, sizeof(why));
		if (r < 0)
			return cmd_fail(q, r, "global tensor %s/%s: %s", group, name, why);
	}
	if (!(t.rg = session_region_find(s, region, NULL)))
		return cmd_fail(q, -ENOENT, "no region %llu", (unsigned long long)region);
	if (t.rg->gm && !gpu_mem_ready(t.rg->gm))
		return cmd_fail(q, -EINVAL, "CUDA region %llu is missing VMM chunks",
				(unsigned long long)region);
	if (offset > t.rg->r.size || t.nbytes > t.rg->r.size - offset)
		return cmd_fail(q, -ERANGE,
				"tensor %s/%s (%llu bytes at offset %llu) lies outside its region "
				"of %zu bytes", group, name, (unsigned long long)t.nbytes,
				(unsigned long long)offset, t.rg->r.size);
	t.offset = offset;
	snprintf(t.dtype, sizeof(t.dtype), "%s", dtype);
	if ((old = treg_find(s, group, name))) {
		/* re-registration replaces */
		if ((r = treg_replace(s, old, &t, q->msg, sizeof(q->msg))) < 0)
			return r;
		cmd_reply_ok(q, NULL);
		return 0;
	}
	if (s->ntensors >= s->srv->cfg.max_tensors)
		return cmd_fail(q, -ENOSPC,
				"too many tensors (max_tensors %u)", s->srv->cfg.max_tensors);
	if ((r = treg_add(s, &t, group, name, q->msg, sizeof(q->msg))) < 0)
		return r;
	cmd_reply_ok(q, NULL);
	return 0;
}

static int h_tensor_del(struct req *q)
{
	struct session *s = q->s;
	const char *group = cmd_get_str(q->j, "group"), *name = cmd_get_str(q->j, "name");
	struct reg_tensor *t;

	if (!group || !name)
		return cmd_fail(q, -EINVAL, "TENSOR_DEL needs \"group\" and \"name\"");
	if (!(t = treg_find(s, group, name)))
		return cmd_fail(q, -ENOENT, "no tensor %s/%s", group, name);
	treg_drop(s, (size_t)(t - s->tensors));
	cmd_reply_ok(q, NULL);
	return 0;
}

static int h_blob_put(struct req *q)
{
	struct session *s = q->s;
	const char *name = cmd_get_str(q->j, "name");
	char why[96];
	struct blob *b = NULL;
	uint8_t *data;
	uint64_t mine, all;

	if (!name || name_check(name, NAME_MAX_BLOB, why, sizeof(why)) < 0)
		return cmd_fail(q, -EINVAL, "bad blob name: %s", name ? why : "missing");
	if (q->m->blen > s->srv->cfg.max_blob_bytes)
		return cmd_fail(q, -EFBIG,
				"blob '%s' is %zu bytes, more than max_blob_bytes %llu", name,
				q->m->blen, (unsigned long long)s->srv->cfg.max_blob_bytes);
	for (size_t i = 0; i < s->nblobs; i++)
		if (!strcmp(s->blobs[i].name, name))
			b = &s->blobs[i];
	if (!b && s->nblobs >= s->srv->cfg.max_blobs)
		return cmd_fail(q, -ENOSPC, "too many blobs (max_blobs %u)", s->srv->cfg.max_blobs);
	/* bytes held after the put: a replaced blob's bytes go */
	mine = s->blob_bytes - (b ? b->len : 0) + q->m->blen;
	all = s->srv->blob_bytes - (b ? b->len : 0) + q->m->blen;
	if (mine > s->srv->cfg.max_client_blob_bytes)
		return cmd_fail(q, -ENOSPC, "blob '%s' (%zu bytes) would make this client's blobs "
				"%llu bytes, more than max_client_blob_bytes %llu", name, q->m->blen,
				(unsigned long long)mine,
				(unsigned long long)s->srv->cfg.max_client_blob_bytes);
	if (all > s->srv->cfg.max_total_blob_bytes)
		return cmd_fail(q, -ENOSPC, "blob '%s' (%zu bytes) would make the blobs ckptd holds "
				"for all clients %llu bytes, more than max_total_blob_bytes %llu",
				name, q->m->blen, (unsigned long long)all,
				(unsigned long long)s->srv->cfg.max_total_blob_bytes);
	data = malloc(q->m->blen ? q->m->blen : 1);
	if (!data)
		return -ENOMEM;
	memcpy(data, q->m->bin, q->m->blen);
	if (!b) {
		struct blob *a = realloc(s->blobs, (s->nblobs + 1) * sizeof(*a));
		char *nm = strdup(name);
		if (!a || !nm) {
			free(nm);
			free(data);
			if (a)
				s->blobs = a;
			return -ENOMEM;
		}
		s->blobs = a;
		b = &s->blobs[s->nblobs++];
		b->name = nm;
		b->data = NULL;
		b->len = 0;
	}
	s->blob_bytes = s->blob_bytes - b->len + q->m->blen;
	s->srv->blob_bytes = s->srv->blob_bytes - b->len + q->m->blen;
	free(b->data);
	b->data = data;
	b->len = q->m->blen;
	cmd_reply_ok(q, NULL);
	return 0;
}

static int h_save(struct req *q)
{
	struct session *s = q->s;
	uint64_t step, ticket;
	char txid[33], json[320];
	int stream = json_object_get(q->j, "cuda") != NULL, r, page_fd;

	if (q->m->nfds > (unsigned)stream)
		return cmd_fail(q, -EINVAL, "SAVE carries a file descriptor only with "
				"\"cuda\" (the gate page)");
	if (cmd_get_u64(q->j, "step", &step) < 0)
		return cmd_fail(q, -EINVAL, "SAVE needs a non-negative \"step\"");
	if (stream) {
		/* ckpt_save_stream(): copies wait for the trainer's "ready",
		 * its stream waits on its gate word (opened once staged) */
		struct gpu_save_desc d;
		if (!s->srv->gpu)
			return cmd_fail(q, -EOPNOTSUPP,
					"this ckptd has no GPU (%s): use ckpt_save()",
					srv_gpu_why(s->srv));
		if ((r = gpu_wire_save(json_object_get(q->j, "cuda"), &d, q->msg,
				       sizeof(q->msg))) < 0)
			return r;
		page_fd = q->m->nfds ? q->m->fds[0] : -1;
		if (q->m->nfds) {
			q->m->fds[0] = -1;          /* stolen */
			q->m->nfds = 0;
		}
		if ((r = gpu_sess_save(&s->gpu, d.uuid, d.slot, d.seq, d.ready, page_fd,
				       &s->save_sync, q->msg, sizeof(q->msg))) < 0)
			return r;
	}
	r = step_save(s, step, &ticket, txid, q->msg, sizeof(q->msg));
	gpu_sync_unref(s->save_sync);    /* the rsave holds its own */
	s->save_sync = NULL;
	if (r < 0)
		return r;
	snprintf(json, sizeof(json), "{\"ticket\":%llu,\"txid\":\"%s\"}",
		 (unsigned long long)ticket, txid);
	cmd_reply_ok(q, json);
	return 0;
}

static int h_restore(struct req *q)
{
	struct session *s = q->s;
	json_t *st = json_object_get(q->j, "step");
	int r;

	if (!json_is_integer(st) || json_integer_value(st) < -1)
		return cmd_fail(q, -EINVAL, "RESTORE needs \"step\" (-1 for latest)");
	if (job_settling(s->job)) {
		/* a save every rank made is still being written: wait for it */
		s->pending_restore_req = q->req_id;
		s->pending_restore_step = json_integer_value(st);
		s->pending_restore_partial = json_is_true(json_object_get(q->j, "partial"));
		s->busy = 1;
		return 0;
	}
	r = restore_start(s->srv, s, q->req_id, json_integer_value(st),
			  json_is_true(json_object_get(q->j, "partial")));
	if (r < 0)
		return cmd_fail(q, r, "cannot start the restore: %s", strerror(-r));
	return 0;
}

#define MEM "only trainers register memory"
static const struct cmd cmds[] = {
/*	  type                     fn                 work             done             hello role         fds runs_on   refusal */
	{ PROTO_HELLO,             h_hello,           NULL,            NULL,            0, CMD_ANY,     0, CMD_LOOP, NULL },
	{ PROTO_REGION_ADD,        region_add_check,  region_add_work, region_add_done, 1, CMD_TRAINER, 1, CMD_POOL, MEM },
	{ PROTO_CUDA_REGION_ADD,   h_cuda_region_add, NULL,            NULL,            1, CMD_TRAINER, 1, CMD_LOOP, MEM },
	{ PROTO_REGION_DEL,        h_region_del,      NULL,            NULL,            1, CMD_TRAINER, 0, CMD_LOOP, MEM },
	{ PROTO_TENSOR_REG,        h_tensor_reg,      NULL,            NULL,            1, CMD_TRAINER, 0, CMD_LOOP, "only trainers register tensors" },
	{ PROTO_TENSOR_DEL,        h_tensor_del,      NULL,            NULL,            1, CMD_TRAINER, 0, CMD_LOOP, "only trainers register tensors" },
	{ PROTO_BLOB_PUT,          h_blob_put,        NULL,            NULL,            1, CMD_TRAINER, 0, CMD_LOOP, "only trainers put blobs" },
	{ PROTO_SAVE,              h_save,            NULL,            NULL,            1, CMD_TRAINER, 1, CMD_LOOP, "only trainers save" },
	{ PROTO_RESTORE,           h_restore,         NULL,            NULL,            1, CMD_TRAINER, 0, CMD_LOOP, "only trainers restore" },
	{ PROTO_STATUS,            ctl_status,        NULL,            NULL,            1, CMD_ANY,     0, CMD_LOOP, NULL },
	{ PROTO_FLUSH,             ctl_flush,         NULL,            NULL,            1, CMD_ANY,     0, CMD_LOOP, NULL },
	{ PROTO_LIST,              ctl_list_check,    ctl_list_work,   NULL,            1, CMD_ANY,     0, CMD_POOL, NULL },
	{ PROTO_PRUNE,             ctl_prune_check,   ctl_prune_work,  NULL,            1, CMD_ANY,     0, CMD_POOL, NULL },
	{ PROTO_REMOTE,            ctl_remote_check,  ctl_remote_work, NULL,            1, CMD_ANY,     0, CMD_POOL, NULL },
};
#undef MEM

const struct cmd *cmd_lookup(uint16_t type)
{
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
		if (cmds[i].type == type)
			return &cmds[i];
	return NULL;
}
