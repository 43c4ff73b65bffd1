/* ckpt_save.c - libckpt's saves: ckpt_save() and ckpt_save_stream() ask
 * ckptd for a checkpoint and get a ticket; the phases ckptd pushes as
 * EVENTs are folded into per-ticket state that ckpt_wait(), ckpt_times()
 * and ckpt_gate_stream() read.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt_int.h"
#include "hex.h"

/* --- tickets: per-save state fed by EVENTs ------------------------------- */

static struct ckpt__ticket *ckpt__ticket_find(ckpt_client *c, uint64_t id)
{
	for (size_t i = 0; i < c->ntickets; i++)
		if (c->tickets[i].id == id)
			return &c->tickets[i];
	return NULL;
}

static void ckpt__ticket_drop(ckpt_client *c, size_t i)
{
	free(c->tickets[i].message);
	memmove(&c->tickets[i], &c->tickets[i + 1],
		(c->ntickets - i - 1) * sizeof(c->tickets[0]));
	c->ntickets--;
}

/* Forget one save to make room: the oldest finished one, else the oldest. */
static void ckpt__ticket_evict(ckpt_client *c)
{
	size_t victim = 0;

	for (size_t i = 0; i < c->ntickets; i++) {
		if (c->tickets[i].error || c->tickets[i].phase == CKPT_COMMITTED) {
			victim = i;
			break;
		}
	}
	ckpt__ticket_drop(c, victim);
}

/* Find or add the state for ticket id.  A long run makes a save every few
 * minutes: beyond CKPT__MAX_TICKETS the oldest finished save is forgotten
 * (the oldest of all if none has finished), and so it is when memory for
 * one more runs out.  NULL only when there is no room at all, which
 * ckpt__ticket_reserve() rules out. */
static struct ckpt__ticket *ckpt__ticket_get(ckpt_client *c, uint64_t id)
{
	struct ckpt__ticket *t = ckpt__ticket_find(c, id);

	if (t)
		return t;
	if (c->ntickets >= CKPT__MAX_TICKETS)
		ckpt__ticket_evict(c);
	if (ckpt__grow((void **)&c->tickets, &c->cap_tickets, c->ntickets + 1,
		       sizeof(*c->tickets)) < 0) {
		if (!c->ntickets)
			return NULL;
		ckpt__ticket_evict(c);
	}
	t = &c->tickets[c->ntickets++];
	memset(t, 0, sizeof(*t));
	t->id = id;
	return t;
}

/* Called before a SAVE is sent, so that once ckptd has accepted it the
 * ticket always has a place (ckpt__ticket_get cannot fail any more). */
static int ckpt__ticket_reserve(ckpt_client *c)
{
	if (ckpt__grow((void **)&c->tickets, &c->cap_tickets, 1,
		       sizeof(*c->tickets)) < 0)
		return ckpt__fail(c, -ENOMEM, "out of memory");
	return 0;
}

/* ckptd accepted a save of step as ticket id: from now on ckpt_wait() and
 * ckpt_times() know it.  Events for it may already have arrived: what they
 * said is kept. */
static void ckpt__ticket_accepted(ckpt_client *c, uint64_t id, uint64_t step)
{
	struct ckpt__ticket *t = ckpt__ticket_get(c, id);

	t->known = true;
	t->step = step;
}

void ckpt__tickets_free(ckpt_client *c)
{
	for (size_t i = 0; i < c->ntickets; i++)
		free(c->tickets[i].message);
	free(c->tickets);
	c->tickets = NULL;
	c->ntickets = c->cap_tickets = 0;
}

/* Where a phase comes in a save's life (0: not a phase). */
static int ckpt__phase_order(int phase)
{
	switch (phase) {
	case CKPT_STAGED:     return 1;
	case CKPT_REPLICATED: return 2;
	case CKPT_DURABLE:    return 3;
	case CKPT_COMMITTED:  return 4;
	default:              return 0;
	}
}

static int ckpt__phase_parse(const char *s)
{
	if (!s)
		return 0;
	if (strcmp(s, "staged") == 0)
		return CKPT_STAGED;
	if (strcmp(s, "replicated") == 0)
		return CKPT_REPLICATED;
	if (strcmp(s, "durable") == 0)
		return CKPT_DURABLE;
	if (strcmp(s, "committed") == 0)
		return CKPT_COMMITTED;
	if (strcmp(s, "failed") == 0)
		return -1;
	return 0;                       /* a phase we do not know: ignored */
}

static void ckpt__times_update(struct ckpt_times *tm, const json_t *ev)
{
	uint64_t v;

	if (ckpt__json_u64(ev, "staged_us", &v) == 0 && v)
		tm->staged_us = v;
	if (ckpt__json_u64(ev, "durable_us", &v) == 0 && v)
		tm->durable_us = v;
	if (ckpt__json_u64(ev, "committed_us", &v) == 0 && v)
		tm->committed_us = v;
	if (ckpt__json_u64(ev, "bytes", &v) == 0 && v)
		tm->bytes = v;
}

/* Fold one EVENT into its ticket.  A malformed event is dropped: there is
 * nobody to report it to, and the save's next event will still arrive. */
void ckpt__on_event(void *client, const struct proto_msg *m)
{
	ckpt_client *c = client;
	json_t *ev = json_loadb(m->json, m->hdr.jlen, 0, NULL);
	struct ckpt__ticket *t;
	uint64_t id, step;
	int phase;

	if (!ev)
		return;
	if (ckpt__json_u64(ev, "ticket", &id) < 0)
		goto out_free_ev;
	phase = ckpt__phase_parse(json_string_value(json_object_get(ev,
								   "phase")));
	t = ckpt__ticket_get(c, id);
	if (!t || t->error)             /* nothing follows "failed" */
		goto out_free_ev;
	if (ckpt__json_u64(ev, "step", &step) == 0)
		t->step = step;
	ckpt__times_update(&t->times, ev);

	if (phase > 0 && ckpt__phase_order(phase) > ckpt__phase_order(t->phase)) {
		t->phase = phase;
	} else if (phase < 0) {
		json_t *e = json_object_get(ev, "error");
		json_t *msg_j = json_object_get(ev, "message");
		const char *msg = json_string_value(msg_j);
		json_int_t err = json_is_integer(e) ? json_integer_value(e) : 0;

		t->error = (err < 0 && err > -4096) ? (int)err : -EIO;
		free(t->message);
		t->message = msg && *msg ? strdup(msg) : NULL;
	}
out_free_ev:
	json_decref(ev);
}

/* --- saves --------------------------------------------------------------- */

static struct ckpt__ticket *ckpt__ticket_known(ckpt_client *c, uint64_t id)
{
	struct ckpt__ticket *t = ckpt__ticket_find(c, id);

	return t && t->known ? t : NULL;
}

/* Has the save reached phase?  1 yes, 0 not yet, < 0 its error. */
static int ckpt__ticket_done(ckpt_client *c, struct ckpt__ticket *t,
			     ckpt_phase phase)
{
	if (ckpt__phase_order(t->phase) >= ckpt__phase_order(phase))
		return 1;
	if (!t->error)
		return 0;
	if (t->message)
		return ckpt__fail(c, t->error, "%s", t->message);
	return ckpt__fail(c, t->error, "save of step %llu failed: %s",
			  (unsigned long long)t->step,
			  ckpt_strerror(t->error));
}

struct ckpt__stream_ops ckpt__stream_ops = {
	.record = gpu_ring_record,
	.wait = gpu_ring_wait,
};

int ckpt_save(ckpt_client *c, uint64_t step, uint64_t *ticket)
{
	struct ckpt__reply rep = { 0 };
	uint64_t id;
	json_t *req;
	int r;

	if (!c)
		return -EINVAL;
	if (step > CKPT_MAX_STEP)
		return ckpt__fail(c, -EINVAL, "step %llu is out of range (at most "
				  "CKPT_MAX_STEP, 999999999)", (unsigned long long)step);
	if ((r = ckpt__ticket_reserve(c)) < 0)
		return r;
	req = json_pack("{s:I}", "step", (json_int_t)step);
	r = ckpt__request(c, PROTO_SAVE, req, NULL, 0, NULL, 0, &rep, false);
	json_decref(req);
	if (r < 0)
		return r;
	if (ckpt__json_u64(rep.json, "ticket", &id) < 0) {
		ckpt__reply_release(&rep);
		return ckpt__fail(c, -EPROTO, "ckptd's SAVE reply has no ticket");
	}
	ckpt__reply_release(&rep);
	ckpt__ticket_accepted(c, id, step);
	if (ticket)
		*ticket = id;
	return 0;
}

/* Take in queued events without waiting (the host never blocks here). */
static void ckpt__poll_events(ckpt_client *c)
{
	struct proto_msg m;

	while (ckpt__next_msg(c, &m, ckpt__now_ms()) == 1) {
		ckpt__msg_close_fds(&m);
		if (m.hdr.type == PROTO_EVENT)
			ckpt__on_event(c, &m);
	}
}

/* Slots whose save is STAGED or failed may be recorded again. */
static void ckpt__ring_reap(ckpt_client *c)
{
	for (unsigned i = 0; i < GPU_CLIENT_RING; i++) {
		struct ckpt__ticket *t;
		if (!c->ring.busy[i] || !c->ring.ticket[i])
			continue;
		t = ckpt__ticket_find(c, c->ring.ticket[i]);
		if (!t || t->error || t->phase >= CKPT_STAGED)
			gpu_ring_release(&c->ring, i);
	}
}

int ckpt_save_stream_flags(ckpt_client *c, uint64_t step, void *cuda_stream,
			   unsigned flags, uint64_t *ticket)
{
	struct ckpt__reply rep = { 0 };
	struct gpu_ring_save sv;
	struct ckpt__ticket *t;
	char why[512], uuid_s[41], ready_s[2 * GPU_CLIENT_HANDLE + 1];
	uint64_t id;
	json_t *req;
	int slot, r;

	if (!c)
		return -EINVAL;
	if ((r = ckpt__check_owner(c)) < 0)
		return r;
	if (flags & ~CKPT_GATE_LATER)
		return ckpt__fail(c, -EINVAL, "unknown flags 0x%x", flags & ~CKPT_GATE_LATER);
	if (step > CKPT_MAX_STEP)
		return ckpt__fail(c, -EINVAL, "step %llu is out of range (at most "
				  "CKPT_MAX_STEP, 999999999)", (unsigned long long)step);
	if (!c->daemon_gpu)
		return ckpt__fail(c, -EOPNOTSUPP, "ckptd has no GPU: use ckpt_save()");
	if ((r = ckpt__ticket_reserve(c)) < 0)
		return r;
	ckpt__ring_reap(c);
	if ((slot = gpu_ring_acquire(&c->ring)) < 0) {
		ckpt__poll_events(c);
		ckpt__ring_reap(c);
		if ((slot = gpu_ring_acquire(&c->ring)) < 0)
			return ckpt__fail(c, -EBUSY, "%d stream saves are still being "
					  "staged: wait for one with ckpt_wait(..., "
					  "CKPT_STAGED, ...)", GPU_CLIENT_RING);
	}
	if ((r = ckpt__stream_ops.record(&c->ring, (unsigned)slot, cuda_stream,
					 &sv, why, sizeof(why))) < 0) {
		gpu_ring_release(&c->ring, (unsigned)slot);
		return ckpt__fail(c, r, "ckpt_save_stream: %s", why);
	}
	hex_gpu_uuid_str(sv.uuid, uuid_s);
	hex_encode(sv.ready, sizeof(sv.ready), ready_s);
	req = json_pack("{s:I, s:{s:s, s:i, s:s, s:I}}", "step", (json_int_t)step, "cuda",
			"gpu", uuid_s, "slot", slot, "ready", ready_s,
			"seq", (json_int_t)sv.seq);
	/* the gate page goes with SAVEs until ckptd has accepted one */
	r = ckpt__request(c, PROTO_SAVE, req, NULL, 0, sv.page_fd >= 0 ? &sv.page_fd : NULL,
			  sv.page_fd >= 0, &rep, false);
	json_decref(req);
	if (r < 0) {
		gpu_ring_release(&c->ring, (unsigned)slot);
		return r;
	}
	if (ckpt__json_u64(rep.json, "ticket", &id) < 0) {
		ckpt__reply_release(&rep);
		/* the slot stays busy: ckptd may still record on it */
		return ckpt__fail(c, -EPROTO, "ckptd's SAVE reply has no ticket");
	}

	/* Accepted: from here on the caller gets the ticket, whatever else
	 * goes wrong.  The slot is reused once the save is STAGED or failed;
	 * the ticket keeps (slot, seq) for a gate made later. */
	ckpt__reply_release(&rep);
	c->ring.page_sent = 1;
	gpu_ring_bind(&c->ring, (unsigned)slot, id);
	ckpt__ticket_accepted(c, id, step);
	t = ckpt__ticket_find(c, id);
	t->stream = true;
	t->slot = (unsigned)slot;
	t->seq = sv.seq;
	if (ticket)
		*ticket = id;
	if (flags & CKPT_GATE_LATER)
		return 0;
	/* The training stream goes on once ckptd has staged the tensors (or
	 * the connection to ckptd ends: gpu_gates.h). */
	if ((r = ckpt__stream_ops.wait(&c->ring, (unsigned)slot, sv.seq, cuda_stream,
				       why, sizeof(why))) < 0) {
		ckpt__fail(c, CKPT_UNORDERED, "save %llu accepted, but the stream "
			   "cannot wait for it (%s): ckpt_wait() for CKPT_STAGED "
			   "before changing the tensors", (unsigned long long)id,
			   why);
		return CKPT_UNORDERED;
	}
	t->gated = cuda_stream;
	t->gated_any = true;
	return 0;
}

int ckpt_save_stream(ckpt_client *c, uint64_t step, void *cuda_stream,
		     uint64_t *ticket)
{
	return ckpt_save_stream_flags(c, step, cuda_stream, 0, ticket);
}

int ckpt_gate_stream(ckpt_client *c, uint64_t ticket, void *cuda_stream)
{
	struct ckpt__ticket *t;
	char why[512];
	int r;

	if (!c)
		return -EINVAL;
	if ((r = ckpt__check_owner(c)) < 0)
		return r;
	/* what ckptd has said so far: a save already staged needs no gate */
	ckpt__poll_events(c);
	if (!(t = ckpt__ticket_known(c, ticket)))
		return ckpt__fail(c, -ENOENT, "no save with ticket %llu on this handle",
				  (unsigned long long)ticket);
	if (!t->stream)
		return ckpt__fail(c, -EINVAL, "ticket %llu is a ckpt_save(), not a stream "
				  "save: no gate to wait on; ckpt_wait() for CKPT_STAGED",
				  (unsigned long long)ticket);
	/* failed: ckptd never publishes it, so nothing needs to be held */
	if ((r = ckpt__ticket_done(c, t, CKPT_STAGED)) != 0)
		return r < 0 ? r : 0;
	if (t->gated_any && t->gated == cuda_stream)
		return 0;
	/* Not staged yet.  ckptd opens the word at seq once the save is
	 * staged or abandoned, and libckpt's watcher opens it if the
	 * connection ends: the stream never waits forever. */
	if ((r = ckpt__stream_ops.wait(&c->ring, t->slot, t->seq, cuda_stream, why,
				       sizeof(why))) < 0)
		return ckpt__fail(c, r, "save %llu: the stream cannot wait for it (%s): "
				  "ckpt_wait() for CKPT_STAGED before changing the "
				  "tensors", (unsigned long long)ticket, why);
	t->gated = cuda_stream;
	t->gated_any = true;
	return 0;
}

static const char *ckpt__phase_name(int phase)
{
	switch (phase) {
	case CKPT_STAGED:    return "staged";
	case CKPT_REPLICATED: return "replicated";
	case CKPT_DURABLE:   return "durable";
	case CKPT_COMMITTED: return "committed";
	default:             return "?";
	}
}

int ckpt_wait(ckpt_client *c, uint64_t ticket, ckpt_phase phase,
	      int timeout_ms)
{
	int64_t deadline = timeout_ms < 0 ? -1 : ckpt__now_ms() + timeout_ms;
	uint64_t step;
	int r;

	if (!c)
		return -EINVAL;
	if (!ckpt__phase_order(phase))
		return ckpt__fail(c, -EINVAL, "unknown phase %d", (int)phase);
	if ((r = ckpt__check_owner(c)) < 0)
		return r;

	for (;;) {
		/* Looked up again each time: events may move the array. */
		struct ckpt__ticket *t = ckpt__ticket_known(c, ticket);
		struct proto_msg m;

		if (!t)
			return ckpt__fail(c, -ENOENT, "no save with ticket %llu "
					  "on this handle",
					  (unsigned long long)ticket);
		r = ckpt__ticket_done(c, t, phase);
		if (r != 0)
			return r < 0 ? r : 0;
		step = t->step;

		r = ckpt__next_msg(c, &m, deadline);
		if (r == -EAGAIN)
			return ckpt__fail(c, -EAGAIN, "timed out waiting for "
					  "step %llu to be %s",
					  (unsigned long long)step,
					  ckpt__phase_name(phase));
		if (r < 0)
			return r;
		ckpt__msg_close_fds(&m);
		if (m.hdr.type == PROTO_EVENT)
			ckpt__on_event(c, &m);
	}
}

int ckpt_times(ckpt_client *c, uint64_t ticket, struct ckpt_times *out)
{
	struct ckpt__ticket *t;

	if (!c || !out)
		return -EINVAL;
	t = ckpt__ticket_known(c, ticket);
	if (!t)
		return ckpt__fail(c, -ENOENT, "no save with ticket %llu on this "
				  "handle", (unsigned long long)ticket);
	*out = t->times;
	return 0;
}
