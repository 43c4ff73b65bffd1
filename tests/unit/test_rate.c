/* test_rate.c - the shared send-rate budget (rate.c): connections share
 * one rate, not a fraction each (attack on issue 18, F6: with 8
 * connections each held to 1/8 of the limit, one file went at 1/8). */
#include "rate.h"
#include "testhelp.h"

#define MIB (1024ull * 1024)
#define SEC 1000000000ull

/* 8 connections reserving 1 MiB each at once at 4 MiB/s: the last turn
 * comes at 7/4 s, and the budget is free again at 2 s: 8 MiB in 2 s. */
static int shared_by_connections(void)
{
	struct rate r = RATE_INIT;
	uint64_t at = 0;

	for (int c = 0; c < 8; c++)
		at = rate_reserve(&r, 10 * SEC, MIB, 4 * MIB);
	CHECK(at == 10 * SEC + 7 * SEC / 4);
	CHECK(r.next_ns == 12 * SEC);
	return 0;
}

/* One connection alone gets the whole rate: 4 MiB at 4 MiB/s in 1 s. */
static int one_alone_gets_all(void)
{
	struct rate r = RATE_INIT;

	for (int k = 0; k < 4; k++)
		CHECK(rate_reserve(&r, 0, MIB, 4 * MIB) == (uint64_t)k * SEC / 4);
	CHECK(r.next_ns == SEC);
	return 0;
}

/* Idle time is not saved up: after a pause, the next chunk waits its
 * share from now, and a burst is not sent faster than the rate. */
static int idle_not_saved(void)
{
	struct rate r = RATE_INIT;

	rate_reserve(&r, 0, MIB, 4 * MIB);
	CHECK(rate_reserve(&r, 5 * SEC, MIB, 4 * MIB) == 5 * SEC);
	CHECK(rate_reserve(&r, 5 * SEC, MIB, 4 * MIB) == 5 * SEC + SEC / 4);
	return 0;
}

static const struct test tests[] = {
	{ "shared_by_connections", shared_by_connections },
	{ "one_alone_gets_all", one_alone_gets_all },
	{ "idle_not_saved", idle_not_saved },
};
TEST_MAIN(tests)
