/* gpu.h - the daemon's CUDA seam.  CUDA is loaded with dlopen at run time
 * (never linked): on a machine without a driver or a device ckptd says so
 * once and stays host-only. */
#ifndef CKPT_GPU_H
#define CKPT_GPU_H

/* 1 if the CUDA runtime loaded and at least one device answers, 0 if not
 * (the reason is logged once), computed once. */
int gpu_available(void);
/* Why the GPU path is off ("" when it is on). */
const char *gpu_reason(void);

#endif
