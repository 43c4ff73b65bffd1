/* errbuf.c - the reason of a failure into the caller's buffer.  See errbuf.h. */
#include <stdarg.h>
#include <stdio.h>

#include "errbuf.h"

int errbuf_vfail(char *msg, size_t msglen, int err, const char *fmt, va_list ap)
{
	if (msg && msglen)
		vsnprintf(msg, msglen, fmt, ap);
	return err;
}

int errbuf_fail(char *msg, size_t msglen, int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	errbuf_vfail(msg, msglen, err, fmt, ap);
	va_end(ap);
	return err;
}
