/*
 * scratch: the benchmarks' scratch directories (store_bench, idcache-perf).
 *
 * Owns: nothing; removes what a benchmark made. May call: libc.
 * Threads: any; nftw is not reentrant with itself across threads that
 * change directory, and nothing here does.
 */
#ifndef IDC_BENCH_SCRATCH_H
#define IDC_BENCH_SCRATCH_H

/* Remove path and everything below it, not following symbolic links; an
 * empty path or one that is gone is not an error. Best effort: what cannot
 * be removed stays. */
void scratch_rm_tree(const char *path);

#endif
