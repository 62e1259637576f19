/*
 * Unit tests for src/daemon/budget.c: entries per uid, what makes a uid
 * wait (its own output, its share of everyone's), which snapshots it may
 * take, the spacing of its builds, and when entries are freed.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "daemon/daemon.h"

#define MIB (1024u * 1024u)

/* conn.c's, which the budget asks to wake waiting connections. */
static unsigned wakes;
void conn_wake_later(struct daemon *dm)
{
	(void)dm;
	wakes++;
}

static void test_entries(void **state)
{
	(void)state;
	struct daemon dm = {0};
	struct budget_uid *a = budget_get(&dm, 1000), *b = budget_get(&dm, 1001);
	assert_non_null(a);
	assert_non_null(b);
	assert_ptr_equal(budget_get(&dm, 1000), a); /* one entry per uid */
	budget_put(&dm, a);
	budget_sweep(&dm, false);
	assert_ptr_equal(budget_get(&dm, 1000), a); /* still used: kept */
	budget_put(&dm, a);
	budget_put(&dm, a);
	budget_built(b, idc_now_ns(), 100u * 1000000u); /* spaced for 1 s */
	budget_put(&dm, b);
	budget_sweep(&dm, false);
	assert_ptr_equal(dm.budgets, b); /* a freed, b kept for its spacing */
	assert_ptr_equal(budget_get(&dm, 1001), b);
	budget_sweep(&dm, true);
	assert_null(dm.budgets);
}

static void test_output(void **state)
{
	(void)state;
	struct daemon dm = {0};
	struct budget_uid *a = budget_get(&dm, 1000), *b = budget_get(&dm, 1001);
	budget_charge_out(&dm, a, 0, DAEMON_UID_MEM);
	assert_false(budget_over(&dm, a)); /* up to the budget */
	budget_charge_out(&dm, a, DAEMON_UID_MEM, DAEMON_UID_MEM + 1);
	assert_true(budget_over(&dm, a));
	assert_false(budget_over(&dm, b)); /* others unaffected */
	assert_false(budget_over(&dm, NULL));
	dm.budget_waiting = 1;
	wakes = 0;
	budget_charge_out(&dm, a, DAEMON_UID_MEM + 1, 0);
	assert_false(budget_over(&dm, a));
	assert_int_equal(wakes, 1); /* a charge went down with someone waiting */
	assert_int_equal(dm.budget_out, 0);
	assert_int_equal(dm.budget_total, 0);
	budget_sweep(&dm, true);
}

/* Past DAEMON_MEM_TOTAL, a uid may hold its share of it. */
static void test_fair_share(void **state)
{
	(void)state;
	struct daemon dm = {0};
	struct budget_uid *u[11];
	size_t each = DAEMON_MEM_TOTAL / 10 + MIB; /* under DAEMON_UID_MEM */
	for (uid_t i = 0; i < 11; i++) {
		u[i] = budget_get(&dm, 2000 + i);
		budget_charge_out(&dm, u[i], 0, i ? each : MIB);
	}
	assert_true(dm.budget_out > DAEMON_MEM_TOTAL);
	assert_true(budget_over(&dm, u[1]));  /* over its share */
	assert_false(budget_over(&dm, u[0])); /* under it */
	budget_sweep(&dm, true);
}

static void test_snapshots(void **state)
{
	(void)state;
	struct daemon dm = {0};
	struct budget_uid *a = budget_get(&dm, 1000);
	size_t big = 2u * DAEMON_UID_MEM;
	assert_true(budget_snap_admit(&dm, a, big)); /* the first one, whatever its size */
	budget_charge_snap(&dm, a, big, true);
	assert_false(budget_snap_admit(&dm, a, 1));
	assert_false(budget_over(&dm, a)); /* snapshots do not make it wait */
	budget_charge_snap(&dm, a, big, false);
	budget_charge_snap(&dm, a, DAEMON_UID_MEM / 2, true);
	assert_true(budget_snap_admit(&dm, a, DAEMON_UID_MEM / 2));
	assert_false(budget_snap_admit(&dm, a, DAEMON_UID_MEM / 2 + 1));
	budget_charge_out(&dm, a, 0, MIB); /* output counts too */
	assert_false(budget_snap_admit(&dm, a, DAEMON_UID_MEM / 2));
	budget_charge_out(&dm, a, MIB, 0);
	budget_charge_snap(&dm, a, DAEMON_UID_MEM / 2, false);
	assert_int_equal(dm.budget_total, 0);
	budget_sweep(&dm, true);
}

static void test_build_spacing(void **state)
{
	(void)state;
	struct daemon dm = {0};
	struct budget_uid *a = budget_get(&dm, 1000);
	uint64_t ms = 1000000u, now = 5000u * ms;
	assert_int_equal(budget_build_wait(a, now), 0);
	budget_built(a, now, 20 * ms);
	assert_int_equal(budget_build_wait(a, now), DAEMON_SNAP_SPACING * 20 * ms);
	assert_int_equal(budget_build_wait(a, now + DAEMON_SNAP_SPACING * 20 * ms), 0);
	budget_built(a, now, 900 * ms); /* long builds: the wait is capped */
	assert_int_equal(budget_build_wait(a, now), (uint64_t)DAEMON_SNAP_WAIT_MAX_MS * ms);
	assert_int_equal(budget_build_wait(NULL, now), 0);
	budget_sweep(&dm, true);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_entries),       cmocka_unit_test(test_output),
	    cmocka_unit_test(test_fair_share),    cmocka_unit_test(test_snapshots),
	    cmocka_unit_test(test_build_spacing),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
