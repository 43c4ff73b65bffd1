/* gate_page.h - the gate page of ckpt_save_stream(), as both ends see it:
 * a sealed memfd of one page made by libckpt, registered in the trainer's
 * CUDA context, mapped shared by ckptd.  Word i is ring slot i's gate: the
 * trainer's stream waits (cuStreamWaitValue32, CU_STREAM_WAIT_VALUE_GEQ)
 * until it reaches the save's sequence number; ckptd opens it with a CPU
 * store once the save is staged or abandoned, libckpt when it loses ckptd. */
#ifndef CKPT_GATE_PAGE_H
#define CKPT_GATE_PAGE_H

#include <stdatomic.h>
#include <stdint.h>

#define GATE_PAGE_WORDS 8          /* = ring slots (GPU_RING_SLOTS) */
#define GATE_WORD_STRIDE 16        /* words 64 bytes apart: one cache line each */

static inline _Atomic uint32_t *gate_word(void *page, unsigned slot)
{
	return (_Atomic uint32_t *)page + (size_t)slot * GATE_WORD_STRIDE;
}

/* Raise *w to at least v in GEQ's cyclic order ((int32_t)(*w - v) >= 0
 * once done); never lowers it, so a late store of an older sequence
 * number cannot shut a newer gate. */
static inline void gate_raise(_Atomic uint32_t *w, uint32_t v)
{
	uint32_t cur = atomic_load(w);
	while ((int32_t)(cur - v) < 0 && !atomic_compare_exchange_weak(w, &cur, v))
		;
}

#endif
