/* hex.h - bytes as hex text and GPU UUIDs as nvidia-smi writes them, for
 * the wire forms of CUDA handles; shared by ckptd and libckpt. */
#ifndef CKPT_HEX_H
#define CKPT_HEX_H

#include <stddef.h>
#include <stdint.h>

/* Lower-case hex of n bytes into out (2n+1 bytes). */
void hex_encode(const uint8_t *b, size_t n, char *out);
/* Parse exactly 2n hex digits (either case) into b; 0 or -EINVAL. */
int  hex_decode(const char *s, uint8_t *b, size_t n);
/* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" <-> 16 bytes; parse: 0 or
 * -EINVAL. */
void hex_gpu_uuid_str(const uint8_t u[16], char out[41]);
int  hex_gpu_uuid_parse(const char *s, uint8_t u[16]);

#endif
