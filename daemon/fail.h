/* fail.h - failpoints for crash tests.  FAILPOINT("publish.renamed") kills
 * the daemon with SIGKILL when $CKPT_FAILPOINT names that point (optionally
 * "name:N" for its Nth pass).  With $CKPT_FAILPOINT_HOLD naming a FIFO, the
 * point holds the thread that reaches it until the test writes to the FIFO
 * and closes it, instead of killing (tests of what runs meanwhile).  Costs
 * one branch when unset. */
#ifndef CKPT_FAIL_H
#define CKPT_FAIL_H

void fail_point(const char *name);
extern int fail_armed;
#define FAILPOINT(name) do { if (fail_armed) fail_point(name); } while (0)

void fail_setup(void);   /* reads $CKPT_FAILPOINT once */

#endif
