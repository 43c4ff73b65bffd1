/* test_tiling.c - box geometry of global tensors: exact tilings accepted,
 * gaps, overlaps and boxes outside refused; the byte runs of an overlap. */
#include <errno.h>
#include <string.h>

#include "testhelp.h"
#include "tiling.h"

static const int64_t G[2] = { 8, 6 };

static int check(size_t n, const int64_t (*off)[2], const int64_t (*shape)[2],
		 size_t *i, size_t *j)
{
	struct tbox b[8];

	for (size_t k = 0; k < n; k++)
		b[k] = (struct tbox){ off[k], shape[k] };
	return tiling_check(2, G, b, n, i, j);
}

static int test_tilings(void)
{
	static const int64_t rows_o[4][2] = { {0,0}, {3,0}, {6,0}, {7,0} };
	static const int64_t rows_s[4][2] = { {3,6}, {3,6}, {1,6}, {1,6} };
	static const int64_t cols_o[2][2] = { {0,0}, {0,3} };
	static const int64_t cols_s[2][2] = { {8,3}, {8,3} };
	static const int64_t blk_o[4][2] = { {0,0}, {0,3}, {4,0}, {4,3} };
	static const int64_t blk_s[4][2] = { {4,3}, {4,3}, {4,3}, {4,3} };
	static const int64_t gap_o[2][2] = { {0,0}, {4,0} };
	static const int64_t gap_s[2][2] = { {3,6}, {4,6} };
	static const int64_t ovl_o[3][2] = { {0,0}, {4,0}, {2,2} };
	static const int64_t ovl_s[3][2] = { {4,6}, {4,6}, {1,1} };
	static const int64_t out_o[2][2] = { {0,0}, {4,1} };
	static const int64_t out_s[2][2] = { {4,6}, {4,6} };
	static const int64_t emp_o[3][2] = { {0,0}, {2,2}, {4,0} };
	static const int64_t emp_s[3][2] = { {4,6}, {0,3}, {4,6} };
	size_t i = 99, j = 99;

	CHECK_EQ(check(4, rows_o, rows_s, &i, &j), TILING_OK);
	CHECK_EQ(check(2, cols_o, cols_s, &i, &j), TILING_OK);
	CHECK_EQ(check(4, blk_o, blk_s, &i, &j), TILING_OK);
	CHECK_EQ(check(3, emp_o, emp_s, &i, &j), TILING_OK);
	CHECK_EQ(check(2, gap_o, gap_s, &i, &j), TILING_GAP);
	CHECK_EQ(check(3, ovl_o, ovl_s, &i, &j), TILING_OVERLAP);
	CHECK((i == 0 && j == 2) || (i == 2 && j == 0));
	CHECK_EQ(check(2, out_o, out_s, &i, &j), TILING_OUTSIDE);
	CHECK_EQ(i, 1);
	CHECK_EQ(check(1, blk_o, blk_s, &i, &j), TILING_GAP);
	/* a replicated piece listed twice overlaps itself */
	CHECK_EQ(check(2, rows_o, rows_s + 0, &i, &j), TILING_GAP);
	{
		static const int64_t twice_o[2][2] = { {0,0}, {0,0} };
		static const int64_t twice_s[2][2] = { {8,6}, {8,6} };
		CHECK_EQ(check(2, twice_o, twice_s, &i, &j), TILING_OVERLAP);
	}
	return 0;
}

struct run { uint64_t s, d, len; };
struct runs { struct run r[64]; int n; };

static int collect(void *arg, uint64_t s, uint64_t d, uint64_t len)
{
	struct runs *rs = arg;

	if (rs->n == 64)
		return -E2BIG;
	rs->r[rs->n++] = (struct run){ s, d, len };
	return 0;
}

static int test_runs(void)
{
	/* saved: rows 4..7 (4x6); wanted: columns 3..5 (8x3), 4-byte elements */
	static const int64_t so[2] = { 4, 0 }, ss[2] = { 4, 6 };
	static const int64_t dof[2] = { 0, 3 }, ds[2] = { 8, 3 };
	int64_t io[2], is[2];
	struct runs rs = { .n = 0 };

	CHECK_EQ(tiling_intersect(2, (struct tbox){ so, ss }, (struct tbox){ dof, ds }, io, is), 1);
	CHECK_EQ(io[0], 4); CHECK_EQ(io[1], 3); CHECK_EQ(is[0], 4); CHECK_EQ(is[1], 3);
	CHECK_EQ(tiling_runs(2, (struct tbox){ io, is }, (struct tbox){ so, ss },
			     (struct tbox){ dof, ds }, 4, collect, &rs), 0);
	CHECK_EQ(rs.n, 4);
	for (int k = 0; k < 4; k++) {
		CHECK_EQ(rs.r[k].s, (uint64_t)(k * 6 + 3) * 4);   /* row k of the saved piece, col 3 */
		CHECK_EQ(rs.r[k].d, (uint64_t)((4 + k) * 3) * 4);  /* row 4+k of the wanted one */
		CHECK_EQ(rs.r[k].len, 12);
	}
	/* whole rows merge into one run */
	rs.n = 0;
	{
		static const int64_t wo[2] = { 2, 0 }, wsh[2] = { 4, 6 };
		CHECK_EQ(tiling_intersect(2, (struct tbox){ so, ss }, (struct tbox){ wo, wsh }, io, is), 1);
		CHECK_EQ(tiling_runs(2, (struct tbox){ io, is }, (struct tbox){ so, ss },
				     (struct tbox){ wo, wsh }, 2, collect, &rs), 0);
		CHECK_EQ(rs.n, 1);
		CHECK_EQ(rs.r[0].s, 0);
		CHECK_EQ(rs.r[0].d, 2 * 6 * 2);
		CHECK_EQ(rs.r[0].len, 2 * 6 * 2);
	}
	/* disjoint boxes: no intersection */
	{
		static const int64_t ao[2] = { 0, 0 }, as[2] = { 4, 6 };
		CHECK_EQ(tiling_intersect(2, (struct tbox){ so, ss }, (struct tbox){ ao, as }, io, is), 0);
	}
	/* a scalar: one run of one element */
	rs.n = 0;
	CHECK_EQ(tiling_runs(0, (struct tbox){ io, is }, (struct tbox){ so, ss },
			     (struct tbox){ so, ss }, 8, collect, &rs), 0);
	CHECK_EQ(rs.n, 1);
	CHECK_EQ(rs.r[0].len, 8);
	return 0;
}

static const struct test tests[] = {
	{ "tilings", test_tilings },
	{ "runs", test_runs },
};
TEST_MAIN(tests)
