/* read_txn_bench: the cost of a read transaction as the daemon takes one
 * per batch of requests: begin, one store_get, abort, N times, over a
 * store of 1,000 entries. Counted with callgrind (the difference of two
 * runs is the loop), or timed with time(1):
 *   valgrind --tool=callgrind build/bench/read_txn_bench 10000
 *   valgrind --tool=callgrind build/bench/read_txn_bench 20000
 *   /usr/bin/time -f %U build/bench/read_txn_bench 2000000
 * (docs/DESIGN.md §4, "A failed write": what entering the environment
 * costs). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "scratch.h"
#include "store/store.h"

static int add(struct store_txn *t, struct idc_arena *a, const char *dn, const char *cn)
{
	struct store_pair p[] = {{{"objectClass", 11}, {"person", 6}},
				 {{"cn", 2}, {cn, strlen(cn)}}};
	struct store_entry e;
	int rc = store_entry_from_pairs(a, (struct store_val){dn, strlen(dn)}, p, 2, &e, NULL);
	return rc ? rc : store_add(t, &e, NULL, NULL);
}

static int fill(struct store *s)
{
	struct store_txn *t;
	struct idc_arena a = IDC_ARENA_INIT;
	int rc = store_txn_begin(s, NULL, 0, &t, NULL);
	if (rc)
		return rc;
	rc = add(t, &a, "cn=base", "base");
	char dn[64], cn[32];
	for (int i = 0; i < 1000 && !rc; i++) {
		snprintf(cn, sizeof(cn), "u%d", i);
		snprintf(dn, sizeof(dn), "cn=%s,cn=base", cn);
		rc = add(t, &a, dn, cn);
	}
	rc = rc ? (store_txn_abort(t), rc) : store_txn_commit(t, NULL);
	idc_arena_free(&a);
	return rc;
}

__attribute__((noinline)) static int one(struct store *s)
{
	struct store_txn *t;
	int rc = store_txn_begin(s, NULL, STORE_TXN_RDONLY, &t, NULL);
	if (rc)
		return rc;
	struct store_entry e;
	rc = store_get(t, (struct store_val){"cn=u7,cn=base", 13}, &e, NULL);
	store_txn_abort(t);
	return rc;
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 100000;
	char dir[] = "/tmp/idc-read-txn-XXXXXX";
	if (!mkdtemp(dir))
		return 1;
	static const char *const idx[] = {"objectClass", "cn"};
	struct store_options o = {STORE_CREATE | STORE_NOSYNC, 0, idx, 2, 0};
	struct store *s = NULL;
	int rc = store_open(dir, &o, &s, NULL);
	if (!rc)
		rc = fill(s);
	for (long i = 0; i < n && !rc; i++)
		rc = one(s);
	if (s)
		store_close(s);
	scratch_rm_tree(dir);
	if (rc)
		fprintf(stderr, "read_txn_bench: %s\n", idc_strerror(rc));
	return rc ? 1 : 0;
}
