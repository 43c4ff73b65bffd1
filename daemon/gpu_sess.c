/* gpu_sess.c - ckptd's side of ckpt_save_stream(): per trainer, the ring of
 * opened "ready" events and the trainer's gate page; per save, the wait
 * for "ready" and the CPU store that opens its gate (shm/gate_page.h).
 * Backend-neutral: every CUDA call goes through gpu_ops(). */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gate_page.h"
#include "gpu.h"
#include "shm_region.h"

#define MSG(...) snprintf(msg, msglen, __VA_ARGS__)

/* The trainer's gate page, mapped here; shared by the session and every
 * save armed on it (a save may outlive its session). */
struct gpu_page {
	int refs;                /* loop thread */
	struct shm_region shm;
	dev_t dev;
	ino_t ino;
};

struct gpu_slot {
	uint8_t  ready_h[GPU_HANDLE_BYTES];
	void    *ready;          /* the trainer's event, opened here */
	unsigned ready_gen;      /* in this generation of the device's context */
	uint32_t armed;          /* sequence number of its last save */
	int      used;
	atomic_uint opened;      /* value it was last opened with */
};

struct gpu_sess {
	int     refs;
	int     dev;
	int     closed;
	struct gpu_page *page;
	struct gpu_slot slot[GPU_RING_SLOTS];
};

struct gpu_sync {
	int      refs;
	struct gpu_sess *gs;
	struct gpu_slot *sl;
	void    *ready;
	uint32_t seq;
	atomic_int released;
	atomic_int ready_passed;       /* the trainer's "ready" was seen */
};

_Static_assert(GATE_PAGE_WORDS == GPU_RING_SLOTS, "a gate word per ring slot");

static void page_unref(struct gpu_page *pg)
{
	if (!pg || --pg->refs > 0)
		return;
	shm_region_release(&pg->shm);
	free(pg);
}

/* Adopt the trainer's gate page (fd stolen), or check that fd is the page
 * the session already has (a client resends it until a save is accepted). */
static int page_adopt(struct gpu_sess *gs, int fd, char *msg, size_t msglen)
{
	long ps = sysconf(_SC_PAGESIZE);
	struct gpu_page *pg;
	char why[128];
	struct stat st;
	int r;

	if (fstat(fd, &st) < 0) {
		r = -errno;
		close(fd);
		MSG("cannot stat the gate page: %s", strerror(-r));
		return r;
	}
	if (gs->page) {
		r = gs->page->dev == st.st_dev && gs->page->ino == st.st_ino ? 0 : -EINVAL;
		close(fd);
		if (r < 0)
			MSG("a trainer connection has one gate page: this SAVE sent another");
		return r;
	}
	if (!(pg = calloc(1, sizeof(*pg)))) {
		close(fd);
		return -ENOMEM;
	}
	if ((r = shm_region_adopt(fd, (size_t)(ps > 0 ? ps : 4096), &pg->shm, why,
				  sizeof(why))) < 0) {
		free(pg);
		MSG("bad gate page: %s", why);
		return r;
	}
	pg->refs = 1;
	pg->dev = st.st_dev;
	pg->ino = st.st_ino;
	gs->page = pg;
	return 0;
}

static int slot_busy(const struct gpu_slot *sl)
{
	return sl->used && atomic_load(&sl->opened) != sl->armed;
}

/* Open sl's gate at v (thread-safe; a slot has one save armed). */
static void slot_open(struct gpu_sess *gs, struct gpu_slot *sl, uint32_t v)
{
	if (atomic_exchange(&sl->opened, v) != v)
		gate_raise(gate_word(gs->page->shm.base, (unsigned)(sl - gs->slot)), v);
}

/* Was sl's event opened in the device's context as it is now?  A reset
 * (after a sticky error, gpu.c) destroys the events opened before it; a
 * faulted context is reset by the next call, event_open's included. */
static int ready_current(const struct gpu_sess *gs, const struct gpu_slot *sl)
{
	struct gpu_dev_state ds;

	gpu_dev_state(gs->dev, &ds);
	return sl->ready_gen == ds.resets && !ds.faulted;
}

static void sess_unref(struct gpu_sess *gs)
{
	const struct gpu_ops *o = gpu_ops();

	if (!gs || --gs->refs > 0)
		return;
	for (unsigned i = 0; i < GPU_RING_SLOTS && o; i++)
		if (ready_current(gs, &gs->slot[i]))
			o->event_close(gs->slot[i].ready);
	page_unref(gs->page);
	free(gs);
}

static int sess_new(struct gpu_sess **gsp, int dev)
{
	struct gpu_sess *gs = calloc(1, sizeof(*gs));
	if (!gs)
		return -ENOMEM;
	gs->refs = 1;
	gs->dev = dev;
	*gsp = gs;
	return 0;
}

int gpu_sess_save(struct gpu_sess **gsp, const uint8_t uuid[GPU_UUID_BYTES],
		  unsigned slot, uint32_t seq, const uint8_t ready_h[GPU_HANDLE_BYTES],
		  int page_fd, struct gpu_sync **out, char *msg, size_t msglen)
{
	const struct gpu_ops *o = gpu_need_ops(msg, msglen);
	struct gpu_slot *sl;
	struct gpu_sync *sy;
	int dev, r = -EOPNOTSUPP;

	if (!o)
		goto out_close_fd;
	r = -EINVAL;
	if (slot >= GPU_RING_SLOTS) {
		MSG("event slot %u is outside 0..%d", slot, GPU_RING_SLOTS - 1);
		goto out_close_fd;
	}
	if ((dev = o->device_of(uuid)) < 0) {
		gpu_unknown_msg(uuid, msg, msglen);
		r = -ENODEV;
		goto out_close_fd;
	}
	if (!*gsp && (r = sess_new(gsp, dev)) < 0)
		goto out_close_fd;
	if ((*gsp)->dev != dev) {
		MSG("one trainer saves from one GPU (device %d, now %d)", (*gsp)->dev, dev);
		r = -EINVAL;
		goto out_close_fd;
	}
	if (page_fd >= 0 && (r = page_adopt(*gsp, page_fd, msg, msglen)) < 0)
		return r;
	if (!(*gsp)->page) {
		MSG("the first stream SAVE of a connection carries its gate page");
		return -EINVAL;
	}
	sl = &(*gsp)->slot[slot];
	if (slot_busy(sl)) {
		MSG("event slot %u is still in use by an earlier save", slot);
		return -EBUSY;
	}
	if (!sl->ready || memcmp(sl->ready_h, ready_h, GPU_HANDLE_BYTES) ||
	    !ready_current(*gsp, sl)) {
		struct gpu_dev_state ds;
		if (ready_current(*gsp, sl))
			o->event_close(sl->ready);
		sl->ready = NULL;
		if ((r = o->event_open(dev, ready_h, &sl->ready, msg, msglen)) < 0)
			return r;
		gpu_dev_state(dev, &ds);
		sl->ready_gen = ds.resets;
		memcpy(sl->ready_h, ready_h, GPU_HANDLE_BYTES);
	}
	if (!(sy = calloc(1, sizeof(*sy))))
		return -ENOMEM;
	sl->armed = seq;
	atomic_store(&sl->opened, seq - 1);
	sl->used = 1;
	sy->refs = 1;
	sy->gs = *gsp;
	(*gsp)->refs++;
	sy->sl = sl;
	sy->ready = sl->ready;
	sy->seq = seq;
	*out = sy;
	return 0;

out_close_fd:
	if (page_fd >= 0)
		close(page_fd);
	return r;
}

void gpu_sess_close(struct gpu_sess *gs)
{
	if (!gs)
		return;
	gs->closed = 1;
	/* open each gate at the value it was last armed with: a save still
	 * staging is abandoned by its owner, and nothing may stay blocked */
	for (unsigned i = 0; i < GPU_RING_SLOTS; i++)
		if (gs->slot[i].used)
			slot_open(gs, &gs->slot[i], gs->slot[i].armed);
	sess_unref(gs);
}

void gpu_sync_release(struct gpu_sync *s)
{
	if (!s || atomic_exchange(&s->released, 1))
		return;
	slot_open(s->gs, s->sl, s->seq);
}

int gpu_sync_ready(struct gpu_sync *s, char *msg, size_t msglen)
{
	const struct gpu_ops *o;
	int r;

	if (!s || atomic_load(&s->ready_passed))
		return 1;
	if (!(o = gpu_need_ops(msg, msglen)))
		return -EOPNOTSUPP;
	if ((r = o->event_ready(s->ready, msg, msglen)) == 1)
		atomic_store(&s->ready_passed, 1);
	return r;
}

int gpu_sync_wait(struct gpu_sync *s, const atomic_int *cancel, char *msg, size_t msglen)
{
	const struct gpu_ops *o;
	int r;

	if (!s || atomic_load(&s->ready_passed))
		return 0;
	if (!(o = gpu_need_ops(msg, msglen)))
		return -EOPNOTSUPP;
	if ((r = o->event_wait(s->ready, cancel, msg, msglen)) < 0)
		return r;
	atomic_store(&s->ready_passed, 1);
	return 0;
}

struct gpu_sync *gpu_sync_ref(struct gpu_sync *s)
{
	if (s)
		s->refs++;
	return s;
}

void gpu_sync_unref(struct gpu_sync *s)
{
	if (!s || --s->refs > 0)
		return;
	gpu_sync_release(s);
	sess_unref(s->gs);
	free(s);
}
