/* errbuf.h - the daemon's one error idiom (STYLE.md): a function returns 0
 * (or a count) on success and -errno on failure, and says why in a buffer
 * its caller passes as (char *msg, size_t msglen); msg may be NULL when no
 * reason is wanted.  errbuf_fail() is the early exit of such a function:
 * `return errbuf_fail(msg, msglen, -EINVAL, "bad '%s'", name);`. */
#ifndef CKPT_ERRBUF_H
#define CKPT_ERRBUF_H

#include <stdarg.h>
#include <stddef.h>

/* Format the reason into msg (when msg and msglen), return err. */
int errbuf_fail(char *msg, size_t msglen, int err, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* The same for a variadic caller of its own (cmd_fail). */
int errbuf_vfail(char *msg, size_t msglen, int err, const char *fmt, va_list ap)
	__attribute__((format(printf, 4, 0)));

#endif
