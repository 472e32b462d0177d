/* empty.c — an empty shared object: the baseline cost of preloading anything. */
int tessera_bench_empty;
