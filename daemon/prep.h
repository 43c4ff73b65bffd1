/* prep.h - a trainer's saves made ready before the first one: once its
 * registrations have settled, ckptd lays out its saves (plan.c) and has
 * the memory tier allocate the memory of its captures (memt_reserve) on
 * the thread pool, so that the first save waits neither for the layout
 * nor for the kernel to zero new pages.  Loop thread. */
#ifndef CKPT_PREP_H
#define CKPT_PREP_H

struct srv;
struct session;

/* Every tick: prepare the trainers whose registrations did not change
 * since the last tick and are not laid out yet (by a save, or here). */
void prep_tick(struct srv *S);
/* job's last rank has left: what the tier made or kept for its next
 * saves is freed, on the pool (its committed copy stays). */
void prep_job_left(struct srv *S, const char *job);
/* Are s's saves prepared for its registrations as they are: something
 * registered, laid out (here or by a save), the tier's memory made? */
int  prep_ready(const struct session *s);

#endif
