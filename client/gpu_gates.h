/* gpu_gates.h - libckpt's gate page for ckpt_save_stream() (layout in
 * shm/gate_page.h): made and pinned in the trainer's CUDA context on the
 * first stream save, sent to ckptd, and watched: a thread waits for the
 * connection to ckptd to end and then opens every gate, so a ckptd that
 * dies (or closes the connection) never leaves a training stream blocked.
 * Internal to libckpt. */
#ifndef CKPT_GPU_GATES_H
#define CKPT_GPU_GATES_H

#include <stdint.h>

#include "cuda_api.h"

struct gpu_gates;

/* Make the page, registered (mapped for the device) in the current CUDA
 * context, and start its watcher on a duplicate of sock (sock < 0: no
 * watcher, for tests).  Releases pages of closed connections first (both
 * calls synchronise with the device, so they happen together).  0, or
 * -errno with a reason in err. */
int  gpu_gates_new(const struct cuda_driver *cu, int sock, struct gpu_gates **out,
		   char *err, size_t errlen);
int  gpu_gates_fd(const struct gpu_gates *g);       /* the memfd, for SAVE */
/* Slot's next save waits for seq: recorded before SAVE is sent, so that
 * the watcher opens it if the connection ends at any later moment. */
void gpu_gates_arm(struct gpu_gates *g, unsigned slot, uint32_t seq);
CUdeviceptr gpu_gates_word(const struct gpu_gates *g, unsigned slot);
/* Open every armed gate now.  Thread-safe, idempotent. */
void gpu_gates_open_all(struct gpu_gates *g);
/* The connection is closing (sock is still open): tell ckptd we are done
 * (shutdown for writing) and leave the gates to the watcher, which opens
 * them once ckptd has closed its end -- after ckptd has aborted the saves
 * it had not staged, so that a stream running on cannot tear a save that
 * gets published.  g is gone after this; NULL-safe. */
void gpu_gates_close(struct gpu_gates *g);

#endif
