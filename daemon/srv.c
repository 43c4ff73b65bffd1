/* srv.c - ckptd's event loop: the control socket, sessions, request
 * dispatch, worker notices, signals and the once-a-second tick. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "coord.h"
#include "gpu.h"
#include "gpu_wire.h"
#include "job.h"
#include "layout.h"
#include "log.h"
#include "metrics.h"
#include "names.h"
#include "notify.h"
#include "restore.h"
#include "srv.h"
#include "store.h"

#define OUTQ_MAX (64u << 20)     /* a client that reads nothing is dropped */

static void session_close(struct session *s, const char *why);
static void session_process(struct session *s);
static void session_update_poll(struct session *s);

uint64_t srv_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void region_unref(struct region_ref *rg)
{
	if (rg && --rg->refs == 0) {
		shm_region_release(&rg->r);
		gpu_mem_unref(rg->gm);
		free(rg);
	}
}

/* --- sending ------------------------------------------------------------ */

static int outq_flush(struct session *s)
{
	while (s->outq) {
		struct out_msg *m = s->outq;
		ssize_t n = send(s->fd, m->buf + m->off, m->len - m->off,
				 MSG_DONTWAIT | MSG_NOSIGNAL);
		if (n < 0) {
			if (errno == EAGAIN || errno == EINTR)
				return 0;
			return -errno;
		}
		m->off += (size_t)n;
		s->outq_bytes -= (size_t)n;
		if (m->off < m->len)
			return 0;
		s->outq = m->next;
		if (!s->outq)
			s->outq_tail = NULL;
		free(m->buf);
		free(m);
	}
	return 0;
}

void session_reply(struct session *s, uint16_t type, uint64_t req_id, int status,
		   const char *json, const void *bin, size_t blen)
{
	struct out_msg *m;
	ssize_t n;
	int r;

	if (s->closed)
		return;
	m = calloc(1, sizeof(*m));
	n = m ? proto_pack(type, req_id, status, json, json ? strlen(json) : 0, bin,
			   blen, 0, &m->buf) : -ENOMEM;
	if (n < 0) {
		free(m);
		session_close(s, "out of memory replying");
		return;
	}
	m->len = (size_t)n;
	if (s->outq_tail)
		s->outq_tail->next = m;
	else
		s->outq = m;
	s->outq_tail = m;
	s->outq_bytes += m->len;
	if (s->outq_bytes > OUTQ_MAX) {
		session_close(s, "client does not read its replies");
		return;
	}
	if ((r = outq_flush(s)) < 0) {
		session_close(s, strerror(-r));
		return;
	}
	session_update_poll(s);
}

void session_reply_err(struct session *s, uint16_t type, uint64_t req_id, int status,
		       const char *fmt, ...)
{
	char msg[512];
	json_t *o;
	char *txt;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	o = json_pack("{ss}", "error", msg);
	txt = o ? json_dumps(o, JSON_COMPACT) : NULL;
	json_decref(o);
	session_reply(s, type, req_id, status, txt ? txt : "{}", NULL, 0);
	free(txt);
}

/* --- session lifetime --------------------------------------------------- */

static void session_free(struct session *s)
{
	struct srv *S = s->srv;

	for (size_t i = 0; i < s->nregions; i++)
		region_unref(s->regions[i]);
	for (size_t i = 0; i < s->ntensors; i++) {
		free(s->tensors[i].group);
		free(s->tensors[i].name);
	}
	for (size_t i = 0; i < s->nblobs; i++) {
		free(s->blobs[i].name);
		free(s->blobs[i].data);
	}
	while (s->outq) {
		struct out_msg *m = s->outq;
		s->outq = m->next;
		free(m->buf);
		free(m);
	}
	free(s->regions);
	free(s->tensors);
	free(s->blobs);
	gpu_sess_close(s->gpu);
	proto_reader_release(&s->rd);
	if (s->prev)
		s->prev->next = s->next;
	else
		S->sessions = s->next;
	if (s->next)
		s->next->prev = s->prev;
	S->nsessions--;
	free(s);
}

void session_unref(struct session *s)
{
	if (--s->refs == 0)
		session_free(s);
}

static void poll_closed(uv_handle_t *h)
{
	struct session *s = h->data;
	close(s->fd);
	s->fd = -1;
	session_unref(s);
}

static void session_close(struct session *s, const char *why)
{
	if (s->closed)
		return;
	s->closed = 1;
	if (why)
		log_debug("session %llu (pid %d): closed: %s", (unsigned long long)s->id,
			  (int)s->pid, why);
	job_detach(s);
	uv_poll_stop(&s->poll);
	uv_close((uv_handle_t *)&s->poll, poll_closed);
}

static void on_session_io(uv_poll_t *h, int status, int events);

static void session_update_poll(struct session *s)
{
	int ev = 0;
	if (s->closed)
		return;
	if (!s->busy)
		ev |= UV_READABLE;
	if (s->outq)
		ev |= UV_WRITABLE;
	if (ev != s->poll_events) {
		s->poll_events = ev;
		if (ev)
			uv_poll_start(&s->poll, ev, on_session_io);
		else
			uv_poll_stop(&s->poll);
	}
}

void session_resume(struct session *s)
{
	s->busy = 0;
	if (s->closed)
		return;
	session_update_poll(s);
	session_process(s);
}

/* --- request handlers --------------------------------------------------- */

struct req {
	struct session *s;
	struct proto_msg *m;
	json_t *j;
	uint16_t rtype;
	char msg[512];
};

static void reply_ok(struct req *q, const char *json)
{
	session_reply(q->s, q->rtype, q->m->hdr.req_id, 0, json ? json : "{}", NULL, 0);
}

static void reply_json(struct req *q, json_t *o)
{
	char *txt = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	if (!txt) {
		session_reply_err(q->s, q->rtype, q->m->hdr.req_id, -ENOMEM, "out of memory");
		return;
	}
	reply_ok(q, txt);
	free(txt);
}

static int get_u64(json_t *j, const char *key, uint64_t *out)
{
	json_t *v = json_object_get(j, key);
	if (!json_is_integer(v) || json_integer_value(v) < 0)
		return -EINVAL;
	*out = (uint64_t)json_integer_value(v);
	return 0;
}

static const char *get_str(json_t *j, const char *key)
{
	return json_string_value(json_object_get(j, key));
}

#define FAIL(err, ...) do { snprintf(q->msg, sizeof(q->msg), __VA_ARGS__); return (err); } while (0)

static int h_hello(struct req *q)
{
	struct session *s = q->s;
	struct srv *S = s->srv;
	const char *role = get_str(q->j, "role"), *job, *why;
	uint64_t ver, rank, world, pid = 0;
	json_t *o;
	int r;

	if (s->role != ROLE_NONE)
		FAIL(-EALREADY, "HELLO was already sent");
	if (get_u64(q->j, "version", &ver) < 0 || !role)
		FAIL(-EINVAL, "HELLO needs \"version\" and \"role\"");
	if (ver != PROTO_VERSION)
		FAIL(-EPROTONOSUPPORT, "protocol version %llu is not supported (ckptd speaks %d)",
		     (unsigned long long)ver, PROTO_VERSION);
	get_u64(q->j, "pid", &pid);
	if (pid)
		s->pid = (pid_t)pid;
	if (strcmp(role, "ctl") == 0) {
		s->role = ROLE_CTL;
	} else if (strcmp(role, "trainer") == 0) {
		job = get_str(q->j, "job");
		if (!job || name_check(job, NAME_MAX_JOB, &why) < 0)
			FAIL(-EINVAL, "bad job name: %s", job ? why : "missing");
		if (get_u64(q->j, "rank", &rank) < 0 || get_u64(q->j, "world_size", &world) < 0 ||
		    world == 0 || world > 1000000 || rank >= world)
			FAIL(-EINVAL, "need 0 <= rank < world_size <= 1000000");
		if (S->draining)
			FAIL(-ESHUTDOWN, "ckptd is shutting down");
		r = job_attach(S, s, job, (int)rank, (int)world, q->msg, sizeof(q->msg));
		if (r < 0)
			return r;
		s->role = ROLE_TRAINER;
	} else {
		FAIL(-EINVAL, "unknown role \"%s\"", role);
	}
	o = json_pack("{sisisssIsb}", "version", PROTO_VERSION, "features",
		      PROTO_FEAT_HOST_MEM | PROTO_FEAT_EVENTS | (S->gpu ? PROTO_FEAT_CUDA_IPC : 0),
		      "daemon", "ckptd " CKPT_VERSION, "session", (json_int_t)s->id, "gpu", S->gpu);
	reply_json(q, o);
	return 0;
}

static struct region_ref *find_region(struct session *s, uint64_t id, size_t *idx)
{
	for (size_t i = 0; i < s->nregions; i++)
		if (s->regions[i]->id == id) {
			if (idx)
				*idx = i;
			return s->regions[i];
		}
	return NULL;
}

static int h_region_add(struct req *q)
{
	struct session *s = q->s;
	struct region_ref *rg;
	uint64_t id, size;
	const char *why = "";
	int r, fd;

	if (q->m->nfds != 1)
		FAIL(-EINVAL, "REGION_ADD needs exactly one file descriptor");
	fd = q->m->fds[0];
	q->m->fds[0] = -1;        /* adopt() steals it */
	q->m->nfds = 0;
	if (get_u64(q->j, "region", &id) < 0 || get_u64(q->j, "size", &size) < 0) {
		close(fd);
		FAIL(-EINVAL, "REGION_ADD needs \"region\" and \"size\"");
	}
	if (find_region(s, id, NULL)) {
		close(fd);
		FAIL(-EEXIST, "region %llu already exists", (unsigned long long)id);
	}
	if (s->nregions >= s->srv->cfg.max_regions) {
		close(fd);
		FAIL(-ENOSPC, "too many regions (max_regions %u)", s->srv->cfg.max_regions);
	}
	if (s->nregions == s->cregions) {
		size_t n = s->cregions ? s->cregions * 2 : 16;
		struct region_ref **a = realloc(s->regions, n * sizeof(*a));
		if (!a) {
			close(fd);
			return -ENOMEM;
		}
		s->regions = a;
		s->cregions = n;
	}
	rg = calloc(1, sizeof(*rg));
	if (!rg) {
		close(fd);
		return -ENOMEM;
	}
	r = shm_region_adopt(fd, (size_t)size, &rg->r, &why);
	if (r < 0) {
		free(rg);
		FAIL(r, "region refused: %s", why);
	}
	rg->refs = 1;
	rg->id = id;
	s->regions[s->nregions++] = rg;
	reply_ok(q, NULL);
	return 0;
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

	if (s->role != ROLE_TRAINER) {
		r = -EPERM;
		snprintf(q->msg, sizeof(q->msg), "only trainers register memory");
		goto out;
	}
	if (!s->srv->gpu) {
		r = -EOPNOTSUPP;
		snprintf(q->msg, sizeof(q->msg), "this ckptd has no GPU (%s): CUDA "
			 "tensors cannot be registered; copy them to ckpt_alloc() memory "
			 "or run ckptd where the GPU is visible", srv_gpu_why(s->srv));
		goto out;
	}
	if ((r = gpu_wire_region(q->j, q->m->nfds, &d, q->msg, sizeof(q->msg))) < 0)
		goto out;
	rg = find_region(s, d.region, NULL);
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
	if (s->nregions == s->cregions) {
		size_t n = s->cregions ? s->cregions * 2 : 16;
		struct region_ref **a = realloc(s->regions, n * sizeof(*a));
		if (!a) {
			r = -ENOMEM;
			goto out;
		}
		s->regions = a;
		s->cregions = n;
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
	s->regions[s->nregions++] = rg;
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
		reply_ok(q, NULL);
	return r;
}

static void drop_tensor(struct session *s, size_t i)
{
	free(s->tensors[i].group);
	free(s->tensors[i].name);
	s->tensors[i] = s->tensors[--s->ntensors];
}

static int h_region_del(struct req *q)
{
	struct session *s = q->s;
	struct region_ref *rg;
	uint64_t id;
	size_t idx;

	if (get_u64(q->j, "region", &id) < 0)
		FAIL(-EINVAL, "REGION_DEL needs \"region\"");
	if (!(rg = find_region(s, id, &idx)))
		FAIL(-ENOENT, "no region %llu", (unsigned long long)id);
	for (size_t i = s->ntensors; i-- > 0;)
		if (s->tensors[i].rg == rg)
			drop_tensor(s, i);
	s->regions[idx] = s->regions[--s->nregions];
	region_unref(rg);
	reply_ok(q, NULL);
	return 0;
}

static struct reg_tensor *find_tensor(struct session *s, const char *group, const char *name)
{
	for (size_t i = 0; i < s->ntensors; i++)
		if (!strcmp(s->tensors[i].group, group) && !strcmp(s->tensors[i].name, name))
			return &s->tensors[i];
	return NULL;
}

static int h_tensor_reg(struct req *q)
{
	struct session *s = q->s;
	const char *group = get_str(q->j, "group"), *name = get_str(q->j, "name");
	const char *dtype = get_str(q->j, "dtype"), *why;
	json_t *shape = json_object_get(q->j, "shape");
	struct reg_tensor t = { 0 }, *old;
	uint64_t region, offset, n = 1;
	size_t esz;

	if (s->role != ROLE_TRAINER)
		FAIL(-EPERM, "only trainers register tensors");
	if (!group || name_check(group, NAME_MAX_GROUP, &why) < 0)
		FAIL(-EINVAL, "bad group name: %s", group ? why : "missing");
	if (!name || name_check_tensor(name, &why) < 0)
		FAIL(-EINVAL, "bad tensor name: %s", name ? why : "missing");
	if (!dtype || !(esz = safet_dtype_size(dtype)))
		FAIL(-EINVAL, "unknown dtype \"%s\"", dtype ? dtype : "");
	if (json_object_get(q->j, "cuda"))
		FAIL(-EOPNOTSUPP, "CUDA tensors are not supported by this ckptd%s",
		     s->srv->gpu ? "" : " (no GPU)");
	if (!json_is_array(shape) || json_array_size(shape) > SAFET_MAX_NDIM)
		FAIL(-EINVAL, "shape must be an array of at most %d sizes", SAFET_MAX_NDIM);
	if (get_u64(q->j, "region", &region) < 0 || get_u64(q->j, "offset", &offset) < 0)
		FAIL(-EINVAL, "TENSOR_REG needs \"region\" and \"offset\"");
	t.ndim = (int)json_array_size(shape);
	for (int i = 0; i < t.ndim; i++) {
		json_t *d = json_array_get(shape, (size_t)i);
		if (!json_is_integer(d) || json_integer_value(d) < 0)
			FAIL(-EINVAL, "shape[%d] is not a non-negative integer", i);
		t.shape[i] = json_integer_value(d);
		if (t.shape[i] && n > UINT64_MAX / (uint64_t)t.shape[i])
			FAIL(-EOVERFLOW, "tensor too large");
		n *= (uint64_t)t.shape[i];
	}
	if (n > UINT64_MAX / esz)
		FAIL(-EOVERFLOW, "tensor too large");
	t.nbytes = n * esz;
	if (!(t.rg = find_region(s, region, NULL)))
		FAIL(-ENOENT, "no region %llu", (unsigned long long)region);
	if (t.rg->gm && !gpu_mem_ready(t.rg->gm))
		FAIL(-EINVAL, "CUDA region %llu is missing VMM chunks",
		     (unsigned long long)region);
	if (offset > t.rg->r.size || t.nbytes > t.rg->r.size - offset)
		FAIL(-ERANGE, "tensor %s/%s (%llu bytes at offset %llu) lies outside its region "
		     "of %zu bytes", group, name, (unsigned long long)t.nbytes,
		     (unsigned long long)offset, t.rg->r.size);
	t.offset = offset;
	snprintf(t.dtype, sizeof(t.dtype), "%s", dtype);
	if ((old = find_tensor(s, group, name))) {
		/* re-registration replaces: keep the strings */
		t.group = old->group;
		t.name = old->name;
		*old = t;
		reply_ok(q, NULL);
		return 0;
	}
	if (s->ntensors >= s->srv->cfg.max_tensors)
		FAIL(-ENOSPC, "too many tensors (max_tensors %u)", s->srv->cfg.max_tensors);
	if (s->ntensors == s->ctensors) {
		size_t c = s->ctensors ? s->ctensors * 2 : 64;
		struct reg_tensor *a = realloc(s->tensors, c * sizeof(*a));
		if (!a)
			return -ENOMEM;
		s->tensors = a;
		s->ctensors = c;
	}
	t.group = strdup(group);
	t.name = strdup(name);
	if (!t.group || !t.name) {
		free(t.group);
		free(t.name);
		return -ENOMEM;
	}
	s->tensors[s->ntensors++] = t;
	reply_ok(q, NULL);
	return 0;
}

static int h_tensor_del(struct req *q)
{
	struct session *s = q->s;
	const char *group = get_str(q->j, "group"), *name = get_str(q->j, "name");
	struct reg_tensor *t;

	if (!group || !name)
		FAIL(-EINVAL, "TENSOR_DEL needs \"group\" and \"name\"");
	if (!(t = find_tensor(s, group, name)))
		FAIL(-ENOENT, "no tensor %s/%s", group, name);
	drop_tensor(s, (size_t)(t - s->tensors));
	reply_ok(q, NULL);
	return 0;
}

static int h_blob_put(struct req *q)
{
	struct session *s = q->s;
	const char *name = get_str(q->j, "name"), *why;
	struct blob *b = NULL;
	uint8_t *data;

	if (s->role != ROLE_TRAINER)
		FAIL(-EPERM, "only trainers put blobs");
	if (!name || name_check(name, NAME_MAX_BLOB, &why) < 0)
		FAIL(-EINVAL, "bad blob name: %s", name ? why : "missing");
	if (q->m->blen > s->srv->cfg.max_blob_bytes)
		FAIL(-EFBIG, "blob '%s' is %zu bytes, more than max_blob_bytes %llu", name,
		     q->m->blen, (unsigned long long)s->srv->cfg.max_blob_bytes);
	for (size_t i = 0; i < s->nblobs; i++)
		if (!strcmp(s->blobs[i].name, name))
			b = &s->blobs[i];
	if (!b && s->nblobs >= s->srv->cfg.max_blobs)
		FAIL(-ENOSPC, "too many blobs (max_blobs %u)", s->srv->cfg.max_blobs);
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
	}
	free(b->data);
	b->data = data;
	b->len = q->m->blen;
	reply_ok(q, NULL);
	return 0;
}

static int h_save(struct req *q)
{
	struct session *s = q->s;
	uint64_t step, ticket;
	char txid[33], json[320], done_hex[2 * GPU_HANDLE_BYTES + 1];
	uint8_t done[GPU_HANDLE_BYTES] = { 0 };
	int stream = json_object_get(q->j, "cuda") != NULL, r;

	if (s->role != ROLE_TRAINER)
		FAIL(-EPERM, "only trainers save");
	if (get_u64(q->j, "step", &step) < 0)
		FAIL(-EINVAL, "SAVE needs a non-negative \"step\"");
	if (stream) {
		/* ckpt_save_stream(): copies wait for the trainer's "ready",
		 * its stream waits for our "done" (released once staged) */
		struct gpu_save_desc d;
		if (!s->srv->gpu)
			FAIL(-EOPNOTSUPP, "this ckptd has no GPU (%s): use ckpt_save()",
			     srv_gpu_why(s->srv));
		if ((r = gpu_wire_save(json_object_get(q->j, "cuda"), &d, q->msg,
				       sizeof(q->msg))) < 0)
			return r;
		if ((r = gpu_sess_save(&s->gpu, d.uuid, d.slot, d.ready, &s->save_sync,
				       done, q->msg, sizeof(q->msg))) < 0)
			return r;
	}
	r = job_save(s, step, &ticket, txid, q->msg, sizeof(q->msg));
	gpu_sync_unref(s->save_sync);    /* the rsave holds its own */
	s->save_sync = NULL;
	if (r < 0)
		return r;
	gpu_hex(done, sizeof(done), done_hex);
	snprintf(json, sizeof(json), "{\"ticket\":%llu,\"txid\":\"%s\"%s%s%s}",
		 (unsigned long long)ticket, txid, stream ? ",\"done\":\"" : "",
		 stream ? done_hex : "", stream ? "\"" : "");
	reply_ok(q, json);
	return 0;
}

static int h_restore(struct req *q)
{
	struct session *s = q->s;
	json_t *st = json_object_get(q->j, "step");
	int r;

	if (s->role != ROLE_TRAINER)
		FAIL(-EPERM, "only trainers restore");
	if (!json_is_integer(st) || json_integer_value(st) < -1)
		FAIL(-EINVAL, "RESTORE needs \"step\" (-1 for latest)");
	if (job_settling(s->job)) {
		/* a save every rank made is still being written: wait for it */
		s->pending_restore_req = q->m->hdr.req_id;
		s->pending_restore_step = json_integer_value(st);
		s->pending_restore_partial = json_is_true(json_object_get(q->j, "partial"));
		s->busy = 1;
		return 0;
	}
	r = restore_start(s->srv, s, q->m->hdr.req_id, json_integer_value(st),
			  json_is_true(json_object_get(q->j, "partial")));
	if (r < 0)
		FAIL(r, "cannot start the restore: %s", strerror(-r));
	return 0;
}

static json_t *status_json(struct srv *S)
{
	unsigned used, total;
	uint64_t waits;
	json_t *o, *jobs = json_array();

	shm_pool_usage(&S->pool, &used, &total, &waits);
	for (struct job *j = S->jobs; j; j = j->next) {
		json_t *inflight = json_array();
		for (struct step *st = j->steps; st; st = st->next) {
			uint64_t total_b = 0, staged = 0, written = 0;
			for (int r = 0; r < j->world_size; r++) {
				struct rsave *rs = st->rs[r];
				if (!rs)
					continue;
				total_b += rs->bytes_total;
				staged += atomic_load(&rs->bytes_staged);
				written += atomic_load(&rs->bytes_written);
			}
			json_array_append_new(inflight, json_pack(
				"{sIsssssisisisIsIsI}", "step", (json_int_t)st->step,
				"txid", st->txid, "phase",
				st->failed ? "aborting" : st->state == STEP_COMMITTING ?
				"committing" : st->nstaged < st->nsaved || st->nsaved < j->world_size ?
				"staging" : "writing",
				"ranks_saved", st->nsaved, "ranks_staged", st->nstaged,
				"ranks_durable", st->ndurable, "bytes_total", (json_int_t)total_b,
				"bytes_staged", (json_int_t)staged, "bytes_written", (json_int_t)written));
		}
		json_array_append_new(jobs, json_pack(
			"{sssIsisisososo}", "name", j->name, "owner_uid", (json_int_t)j->info.owner,
			"world_size", j->world_size, "ranks_connected", j->nconnected,
			"last_committed_step", j->have_last ? json_integer((json_int_t)j->last_step) : json_null(),
			"last_committed_unix", j->last_unix ? json_integer(j->last_unix) : json_null(),
			"in_flight", inflight));
	}
	o = json_pack("{sssisIsssbsbs{sIsIsIsIsb}sisIsfsIsIso}",
		"daemon", "ckptd " CKPT_VERSION, "pid", (int)getpid(),
		"uptime_s", (json_int_t)((srv_now_ns() - S->started_ns) / 1000000000ull),
		"io_backend", S->pipe.backend_used, "direct_io", S->cfg.direct_io, "gpu", S->gpu,
		"pool", "used", (json_int_t)used * (json_int_t)S->pool.chunk_bytes,
		"total", (json_int_t)total * (json_int_t)S->pool.chunk_bytes,
		"chunk", (json_int_t)S->pool.chunk_bytes, "waits", (json_int_t)waits,
		"locked", S->pool.locked,
		"clients", (int)S->nsessions,
		"bytes_written", (json_int_t)atomic_load(&S->pipe.bytes_written),
		"write_rate_bps", S->write_rate_bps,
		"saves_committed", (json_int_t)S->saves_committed,
		"saves_failed", (json_int_t)S->saves_failed, "jobs", jobs);
	if (o)
		json_object_set_new(o, "draining", json_boolean(S->draining));
	if (o && coord_active())
		json_object_set_new(o, "cluster", coord_status_json());
	return o;
}

static int h_status(struct req *q)
{
	json_t *o = status_json(q->s->srv);
	if (!o)
		return -ENOMEM;
	reply_json(q, o);
	return 0;
}

static int h_flush(struct req *q)
{
	uint64_t timeout = 600000;
	const char *job = get_str(q->j, "job");
	get_u64(q->j, "timeout_ms", &timeout);
	if (timeout > 86400000)
		timeout = 86400000;
	return job_flush(q->s->srv, q->s, q->m->hdr.req_id, job, (uint32_t)timeout);
}

/* One job's checkpoints for LIST. */
static void list_job(struct srv *S, const char *name, int jobfd, json_t *arr)
{
	uint64_t *steps = NULL, latest = 0;
	int have_latest = layout_latest_read(jobfd, &latest) == 0;
	int n = layout_list_steps(jobfd, &steps);

	for (int i = 0; i < n; i++) {
		char iter[32], err[128];
		struct mfst *m = NULL;
		uint64_t bytes = 0;
		int fd;
		layout_iter_name(steps[i], iter, sizeof(iter));
		fd = openat(jobfd, iter, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0 || mfst_read(fd, &m, err, sizeof(err)) < 0) {
			if (fd >= 0)
				close(fd);
			continue;
		}
		close(fd);
		for (size_t k = 0; k < m->nfiles; k++)
			bytes += m->files[k].size;
		json_array_append_new(arr, json_pack("{sssIsbsIsIsI}", "job", name,
			"step", (json_int_t)steps[i], "latest", have_latest && latest == steps[i],
			"files", (json_int_t)m->nfiles, "bytes", (json_int_t)bytes,
			"created_unix", (json_int_t)m->created_unix));
		mfst_free(m);
	}
	free(steps);
}

static int h_list(struct req *q)
{
	struct srv *S = q->s->srv;
	const char *want = get_str(q->j, "job"), *why;
	json_t *arr;

	if (want && name_check(want, NAME_MAX_JOB, &why) < 0)
		FAIL(-EINVAL, "bad job name: %s", why);
	arr = json_array();
	DIR *d;
	struct dirent *e;

	/* a dup shares the directory offset: start from the top */
	d = fdopendir(fcntl(S->rootfd, F_DUPFD_CLOEXEC, 3));
	if (d)
		rewinddir(d);
	while (d && (e = readdir(d))) {
		struct store_job_info info;
		int jobfd;
		if (name_check(e->d_name, NAME_MAX_JOB, NULL) < 0 ||
		    (want && strcmp(want, e->d_name)))
			continue;
		if (store_job_open(S->rootfd, e->d_name, q->s->uid, 0, &info, &jobfd) < 0)
			continue;      /* another user's job, or not a job */
		list_job(S, e->d_name, jobfd, arr);
		close(jobfd);
	}
	if (d)
		closedir(d);
	reply_json(q, json_pack("{so}", "checkpoints", arr));
	return 0;
}

static int h_prune(struct req *q)
{
	struct srv *S = q->s->srv;
	const char *name = get_str(q->j, "job"), *why;
	struct store_job_info info;
	uint64_t keep, *removed = NULL;
	json_t *arr;
	int jobfd, n;

	if (!name || name_check(name, NAME_MAX_JOB, &why) < 0)
		FAIL(-EINVAL, "bad job name: %s", name ? why : "missing");
	if (get_u64(q->j, "keep", &keep) < 0 || keep == 0)
		FAIL(-EINVAL, "PRUNE needs \"keep\" >= 1");
	n = store_job_open(S->rootfd, name, q->s->uid, 0, &info, &jobfd);
	if (n < 0)
		FAIL(n, "job '%s': %s", name, n == -EPERM ? "belongs to another user" : strerror(-n));
	n = store_prune(jobfd, info.run_id, (unsigned)keep, &removed);
	close(jobfd);
	if (n < 0)
		FAIL(n, "prune failed: %s", strerror(-n));
	restore_cache_clear();
	arr = json_array();
	for (int i = 0; i < n; i++)
		json_array_append_new(arr, json_integer((json_int_t)removed[i]));
	free(removed);
	reply_json(q, json_pack("{so}", "removed", arr));
	return 0;
}

static const struct {
	int (*fn)(struct req *);
	int need_hello;
} handlers[PROTO_TYPE_MAX] = {
	[PROTO_HELLO]      = { h_hello, 0 },
	[PROTO_REGION_ADD] = { h_region_add, 1 },
	[PROTO_REGION_DEL] = { h_region_del, 1 },
	[PROTO_TENSOR_REG] = { h_tensor_reg, 1 },
	[PROTO_TENSOR_DEL] = { h_tensor_del, 1 },
	[PROTO_BLOB_PUT]   = { h_blob_put, 1 },
	[PROTO_SAVE]       = { h_save, 1 },
	[PROTO_RESTORE]    = { h_restore, 1 },
	[PROTO_STATUS]     = { h_status, 1 },
	[PROTO_FLUSH]      = { h_flush, 1 },
	[PROTO_LIST]       = { h_list, 1 },
	[PROTO_PRUNE]      = { h_prune, 1 },
	[PROTO_CUDA_REGION_ADD] = { h_cuda_region_add, 1 },
};

static void dispatch(struct session *s, struct proto_msg *m)
{
	struct req q = { .s = s, .m = m, .rtype = (uint16_t)(m->hdr.type | PROTO_REPLY) };
	json_error_t jerr;
	uint16_t t = m->hdr.type;
	int r;

	if (t >= PROTO_TYPE_MAX || !handlers[t].fn) {
		session_reply_err(s, PROTO_ERROR, m->hdr.req_id, -EBADMSG,
				  "%s is not a request", proto_type_name(t));
		return;
	}
	if (handlers[t].need_hello && s->role == ROLE_NONE) {
		session_reply_err(s, q.rtype, m->hdr.req_id, -EPROTO, "send HELLO first");
		return;
	}
	if (m->nfds && t != PROTO_REGION_ADD && t != PROTO_CUDA_REGION_ADD) {
		session_reply_err(s, q.rtype, m->hdr.req_id, -EINVAL,
				  "unexpected file descriptors with %s", proto_type_name(t));
		return;
	}
	q.j = json_loadb(m->json, m->hdr.jlen, JSON_REJECT_DUPLICATES, &jerr);
	if (!q.j && json_error_code(&jerr) == json_error_out_of_memory) {
		session_reply_err(s, PROTO_ERROR, m->hdr.req_id, -ENOMEM,
				  "out of memory reading %s", proto_type_name(t));
		return;
	}
	if (!json_is_object(q.j)) {
		session_reply_err(s, PROTO_ERROR, m->hdr.req_id, -EINVAL,
				  "malformed JSON in %s: %s", proto_type_name(t),
				  q.j ? "not an object" : jerr.text);
		json_decref(q.j);
		return;
	}
	r = handlers[t].fn(&q);
	if (r < 0)
		session_reply_err(s, q.rtype, m->hdr.req_id, r, "%s",
				  q.msg[0] ? q.msg : strerror(-r));
	json_decref(q.j);
}

/* Handle every complete message buffered, unless a restore pauses us. */
static void session_process(struct session *s)
{
	while (!s->closed && !s->busy) {
		struct proto_msg m;
		struct proto_hdr bad;
		const char *why = "";
		int r = proto_next(&s->rd, &m, &bad, &why);

		if (r == 0)
			break;
		if (r < 0) {
			/* the stream cannot be re-synchronised: say why, then close */
			char msg[160];
			snprintf(msg, sizeof(msg), "{\"error\":\"bad message: %s\"}", why);
			session_reply(s, PROTO_ERROR, r == -EPROTO ? 0 : bad.req_id, r, msg, NULL, 0);
			outq_flush(s);
			session_close(s, why);
			return;
		}
		dispatch(s, &m);
		for (unsigned i = 0; i < m.nfds; i++)
			if (m.fds[i] >= 0)
				close(m.fds[i]);
		if (s->busy)
			session_update_poll(s);
	}
	s->rd_since_ns = s->rd.used ? (s->rd_since_ns ? s->rd_since_ns : srv_now_ns()) : 0;
}

static void on_session_io(uv_poll_t *h, int status, int events)
{
	struct session *s = h->data;

	if (status < 0) {
		session_close(s, uv_strerror(status));
		return;
	}
	if (events & UV_WRITABLE) {
		int r = outq_flush(s);
		if (r < 0) {
			session_close(s, strerror(-r));
			return;
		}
		session_update_poll(s);
	}
	if ((events & UV_READABLE) && !s->busy) {
		/* the reader holds at most one complete message: drain between reads */
		for (int i = 0; i < 16 && !s->closed && !s->busy; i++) {
			int r = proto_read(&s->rd, s->fd);
			if (r == -ENOBUFS) {
				session_process(s);
				continue;
			}
			if (r == -EAGAIN)
				break;
			if (r == 0) {
				session_close(s, "end of file");
				return;
			}
			if (r < 0) {
				/* A bad header makes proto_read() refuse to read on:
				 * session_process() sends the ERROR reply saying why
				 * and closes; any other error just closes. */
				session_process(s);
				if (!s->closed)
					session_close(s, strerror(-r));
				return;
			}
		}
		if (!s->closed)
			session_process(s);
	}
}

static void on_accept(uv_poll_t *h, int status, int events)
{
	struct srv *S = h->data;
	struct ucred cred;
	socklen_t clen = sizeof(cred);
	struct session *s;
	/* One descriptor held in reserve: out of fds (EMFILE), the listening
	 * socket stays readable and the loop would spin; give the reserve up
	 * to accept the waiting connection, refuse it, and take it back. */
	static int spare = -2;
	static const char nofd[] = "{\"error\":\"ckptd is out of file descriptors\"}";
	int fd;

	if (spare == -2)
		spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
	fd = accept4(S->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
	if (fd < 0 && (errno == EMFILE || errno == ENFILE) && spare >= 0) {
		close(spare);
		fd = accept4(S->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd >= 0) {
			proto_send(fd, PROTO_ERROR, 0, -EMFILE, nofd, sizeof(nofd) - 1,
				   NULL, 0, NULL, 0);
			close(fd);
		}
		spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
		log_warnx("out of file descriptors: refused a connection");
		return;
	}
	if (fd < 0)
		return;
	if (S->nsessions >= S->cfg.max_clients) {
		static const char busy[] = "{\"error\":\"too many clients (max_clients)\"}";
		proto_send(fd, PROTO_ERROR, 0, -EBUSY, busy, sizeof(busy) - 1, NULL, 0, NULL, 0);
		close(fd);
		return;
	}
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) < 0 ||
	    !(s = calloc(1, sizeof(*s)))) {
		close(fd);
		return;
	}
	s->srv = S;
	s->id = ++S->next_session_id;
	s->fd = fd;
	s->refs = 1;
	s->uid = cred.uid;
	s->gid = cred.gid;
	s->pid = cred.pid;
	s->rank = -1;
	s->rd_since_ns = srv_now_ns();     /* HELLO must come in time too */
	s->hello_ns = s->rd_since_ns;
	proto_reader_init(&s->rd, S->cfg.max_message_bytes);
	uv_poll_init(S->loop, &s->poll, fd);
	s->poll.data = s;
	s->next = S->sessions;
	if (S->sessions)
		S->sessions->prev = s;
	S->sessions = s;
	S->nsessions++;
	session_update_poll(s);
}

/* --- notices, signals, tick --------------------------------------------- */

static void srv_notify(void *arg, enum pipe_notice what, struct rsave *rs)
{
	struct srv *S = arg;
	pthread_mutex_lock(&S->nlock);
	if (S->nnotices == S->cnotices) {
		size_t n = S->cnotices ? S->cnotices * 2 : 256;
		struct notice *a = realloc(S->notices, n * sizeof(*a));
		if (!a)
			fatalx("out of memory queueing a pipeline notice");
		S->notices = a;
		S->cnotices = n;
	}
	S->notices[S->nnotices++] = (struct notice){ what, rs };
	pthread_mutex_unlock(&S->nlock);
	uv_async_send(&S->wake);
}

/* Start restores that waited for their job's in-flight steps to settle. */
static void restore_poll(struct srv *S)
{
	for (struct session *s = S->sessions; s; s = s->next) {
		uint64_t req = s->pending_restore_req;
		int r;
		if (!req || s->closed || !s->job || job_settling(s->job))
			continue;
		s->pending_restore_req = 0;
		s->busy = 0;
		r = restore_start(S, s, req, s->pending_restore_step, s->pending_restore_partial);
		if (r < 0) {
			session_reply_err(s, PROTO_RESTORE | PROTO_REPLY, req, r,
					  "cannot start the restore: %s", strerror(-r));
			session_resume(s);
		}
	}
}

static void on_wake(uv_async_t *h)
{
	struct srv *S = h->data;
	for (;;) {
		struct notice batch[64];
		size_t n;
		pthread_mutex_lock(&S->nlock);
		n = S->nnotices < 64 ? S->nnotices : 64;
		if (n == 0) {           /* (notices may still be NULL) */
			pthread_mutex_unlock(&S->nlock);
			break;
		}
		memcpy(batch, S->notices, n * sizeof(*batch));
		memmove(S->notices, S->notices + n, (S->nnotices - n) * sizeof(*batch));
		S->nnotices -= n;
		pthread_mutex_unlock(&S->nlock);
		for (size_t i = 0; i < n; i++)
			job_on_notice(S, batch[i].what, batch[i].rs);
	}
	job_flush_poll(S);
	restore_poll(S);
}

static void srv_shutdown(struct srv *S)
{
	uv_poll_stop(&S->listen_poll);
	uv_close((uv_handle_t *)&S->listen_poll, NULL);
	close(S->listen_fd);
	metrics_stop();
	unlink(S->cfg.socket);
	for (struct session *s = S->sessions; s; s = s->next)
		session_close(s, "daemon exiting");
	uv_close((uv_handle_t *)&S->tick, NULL);
	uv_close((uv_handle_t *)&S->sig_term, NULL);
	uv_close((uv_handle_t *)&S->sig_int, NULL);
	uv_close((uv_handle_t *)&S->sig_hup, NULL);
	uv_close((uv_handle_t *)&S->wake, NULL);
}

static void on_tick(uv_timer_t *t)
{
	struct srv *S = t->data;
	uint64_t now = srv_now_ns(), bytes = atomic_load(&S->pipe.bytes_written);
	uint64_t limit = (uint64_t)S->cfg.msg_timeout_ms * 1000000ull;

	if (S->rate_last_ns) {
		double inst = (double)(bytes - S->rate_last_bytes) * 1e9 /
			      (double)(now - S->rate_last_ns);
		S->write_rate_bps = 0.5 * S->write_rate_bps + 0.5 * inst;
	}
	S->rate_last_ns = now;
	S->rate_last_bytes = bytes;

	/* a half-sent message, or no HELLO, for too long: slowloris */
	for (struct session *s = S->sessions, *next; s; s = next) {
		next = s->next;
		if (!s->closed && !s->busy && s->rd_since_ns && now - s->rd_since_ns > limit)
			session_close(s, s->role == ROLE_NONE ? "no HELLO in time" :
				      "message not completed in time");
	}

	if (S->draining) {
		if (!job_busy(S) && !coord_busy()) {
			log_info("drained: every accepted save is finished; exiting");
			srv_shutdown(S);
		} else if (now > S->drain_deadline_ns) {
			log_warnx("drain timeout: aborting saves still in flight");
			job_abort_all(S, -ESHUTDOWN, "ckptd stopped before the save finished");
			S->exit_code = 1;
			S->drain_deadline_ns = UINT64_MAX;
		}
	}
}

static void on_term(uv_signal_t *h, int sig)
{
	struct srv *S = h->data;
	if (S->draining) {
		log_warnx("second signal: exiting now");
		S->exit_code = 1;
		job_abort_all(S, -ESHUTDOWN, "ckptd stopped");
		srv_shutdown(S);
		return;
	}
	S->draining = 1;
	S->drain_deadline_ns = srv_now_ns() + (uint64_t)S->cfg.drain_timeout_ms * 1000000ull;
	notify_send("STOPPING=1\nSTATUS=draining: finishing accepted saves");
	log_info("%s: finishing accepted saves (up to %u ms), accepting no new ones",
		 strsignal(sig), S->cfg.drain_timeout_ms);
	on_tick(&S->tick);
}

static void on_hup(uv_signal_t *h, int sig)
{
	struct srv *S = h->data;
	struct config nc;
	char err[512];

	if (!S->config_path) {
		log_warnx("SIGHUP: no configuration file to reload");
		return;
	}
	if (config_load(S->config_path, &nc, err, sizeof(err)) < 0) {
		log_warnx("SIGHUP: new configuration rejected, keeping the old one: %s", err);
		return;
	}
	coord_expand(nc.socket, sizeof(nc.socket));     /* "{rank}" */
	/* Keys that shape what already exists need a restart. */
	if (strcmp(nc.socket, S->cfg.socket) || strcmp(nc.root, S->cfg.root) ||
	    nc.staging_bytes != S->cfg.staging_bytes || nc.chunk_bytes != S->cfg.chunk_bytes ||
	    nc.stage_threads != S->cfg.stage_threads || nc.write_threads != S->cfg.write_threads ||
	    strcmp(nc.cluster, S->cfg.cluster)) {
		log_warnx("SIGHUP: socket, root, pool, threads and cluster change only on "
			  "restart; keeping the old configuration");
		return;
	}
	config_diff(&S->cfg, &nc, err, sizeof(err));
	if (nc.socket_mode != S->cfg.socket_mode && chmod(nc.socket, nc.socket_mode) < 0)
		log_warn("SIGHUP: chmod '%s'", nc.socket);
	S->cfg = nc;
	log_set_level(log_level_parse(nc.log_level));
	log_info("SIGHUP: configuration reloaded from %s (%s)", S->config_path,
		 err[0] ? err : "no changes");
	metrics_reload(S);
}

/* --- start-up ----------------------------------------------------------- */

static int listen_unix(const char *path, unsigned mode)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	mode_t old;
	int fd, r;

	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	strcpy(sa.sun_path, path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	/* A stale socket from a crash: remove it, but never a live one. */
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
		close(fd);
		return -EADDRINUSE;
	}
	unlink(path);
	old = umask(0177);
	r = bind(fd, (struct sockaddr *)&sa, sizeof(sa));
	umask(old);
	if (r < 0 || chmod(path, mode) < 0 || listen(fd, 128) < 0) {
		r = -errno;
		close(fd);
		return r;
	}
	return fd;
}

int srv_init(struct srv *S, const struct config *cfg, const char *config_path)
{
	int r;

	memset(S, 0, sizeof(*S));
	S->cfg = *cfg;
	S->config_path = config_path;
	S->started_ns = srv_now_ns();
	S->loop = uv_default_loop();
	pthread_mutex_init(&S->nlock, NULL);

	S->rootfd = store_open_root(cfg->root);
	if (S->rootfd < 0) {
		log_warnx("cannot open root '%s': %s", cfg->root, strerror(-S->rootfd));
		return S->rootfd;
	}
	if (strcmp(cfg->cluster, "mpi") == 0) {
		/* joins the world; the coordinator alone recovers the shared root */
		if ((r = coord_init(S)) < 0)
			return r;
	} else {
		store_recover(S->rootfd);
	}

	r = shm_pool_init(&S->pool, cfg->staging_bytes, cfg->chunk_bytes);
	if (r < 0) {
		log_warnx("cannot create a %llu-byte staging pool: %s",
			  (unsigned long long)cfg->staging_bytes, strerror(-r));
		return r;
	}
	if (!S->pool.locked && cfg->lock_pool)
		log_info("staging pool not locked in memory (raise LimitMEMLOCK to lock it)");
	S->gpu = strcmp(cfg->gpu, "off") != 0 && gpu_available() == 1;
	if (getenv("CKPTD_GPU_TEST_DOUBLE") && !strcmp(getenv("CKPTD_GPU_TEST_DOUBLE"), "1")) {
		log_warnx("CKPTD_GPU_TEST_DOUBLE=1: CUDA memory is SIMULATED with memfds "
			  "(tests only, never in production)");
		gpu_set_ops(&gpu_double_ops);
		S->gpu = 1;
	}
	/* pinned: device-to-host copies at full speed; io_uring and O_DIRECT
	 * use the same pages unchanged */
	if (S->gpu && gpu_host_register(S->pool.base, S->pool.bytes) < 0)
		log_warnx("cannot pin the staging pool for CUDA (cudaHostRegister): "
			  "GPU saves will be slower");

	uv_async_init(S->loop, &S->wake, on_wake);
	S->wake.data = S;
	r = pipe_start(&S->pipe, &S->pool, &S->cfg, srv_notify, S);
	if (r < 0)
		return r;

	S->listen_fd = listen_unix(S->cfg.socket, cfg->socket_mode);   /* {rank} done */
	if (S->listen_fd < 0) {
		log_warnx("cannot listen on '%s': %s", S->cfg.socket,
			  S->listen_fd == -EADDRINUSE ? "another ckptd is running there" :
			  strerror(-S->listen_fd));
		return S->listen_fd;
	}
	uv_poll_init(S->loop, &S->listen_poll, S->listen_fd);
	S->listen_poll.data = S;
	uv_poll_start(&S->listen_poll, UV_READABLE, on_accept);

	uv_signal_init(S->loop, &S->sig_term);
	uv_signal_init(S->loop, &S->sig_int);
	uv_signal_init(S->loop, &S->sig_hup);
	S->sig_term.data = S->sig_int.data = S->sig_hup.data = S;
	uv_signal_start(&S->sig_term, on_term, SIGTERM);
	uv_signal_start(&S->sig_int, on_term, SIGINT);
	uv_signal_start(&S->sig_hup, on_hup, SIGHUP);
	signal(SIGPIPE, SIG_IGN);

	uv_timer_init(S->loop, &S->tick);
	S->tick.data = S;
	uv_timer_start(&S->tick, on_tick, 1000, 1000);
	metrics_start(S);        /* a busy port is logged; saves matter more */
	return 0;
}

int srv_run(struct srv *S)
{
	char st[256];

	log_info("ready: socket %s, root %s, pool %llu MiB in %llu KiB chunks%s, "
		 "I/O %s%s, %s", S->cfg.socket, S->cfg.root,
		 (unsigned long long)(S->pool.bytes >> 20),
		 (unsigned long long)(S->pool.chunk_bytes >> 10),
		 S->pool.locked ? " (locked)" : "", S->pipe.backend_used,
		 S->cfg.direct_io ? " + O_DIRECT" : "", S->gpu ? "GPU" : "host-only");
	snprintf(st, sizeof(st), "READY=1\nSTATUS=serving %s", S->cfg.socket);
	notify_send(st);
	uv_run(S->loop, UV_RUN_DEFAULT);

	/* every handle is closed: stop the workers and free what is left */
	coord_finalize(S);
	pipe_stop(&S->pipe);
	job_free_all(S);
	shm_pool_release(&S->pool);
	free(S->notices);
	close(S->rootfd);
	uv_loop_close(S->loop);
	return S->exit_code;
}
