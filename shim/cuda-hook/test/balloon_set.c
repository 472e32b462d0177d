/* balloon_set — lower or raise device 0's cap of a limits file in place, as the node
 * agent's balloon controller does (docs/balloon.md), for scripts with no Go
 * toolchain (hack/gpu-check.sh).
 * usage: balloon_set <limits> <cap-bytes> <ceiling-bytes> <wait-ms>
 *   ceiling 0 raises the cap back (deflate): the cap is stored before the ceiling is
 *   cleared; otherwise the ceiling and wait bound are stored before the cap is lowered. */
#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "tessera_abi.h"

static uint64_t num(const char *s, const char *what)
{
    char *end;
    uint64_t v = strtoull(s, &end, 10);
    if (*s == '\0' || *end != '\0') {
        fprintf(stderr, "balloon_set: %s \"%s\" is not a number\n", what, s);
        exit(2);
    }
    return v;
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: %s <limits> <cap-bytes> <ceiling-bytes> <wait-ms>\n", argv[0]);
        return 2;
    }
    uint64_t cap = num(argv[2], "cap-bytes"), ceiling = num(argv[3], "ceiling-bytes"), wait = num(argv[4], "wait-ms");
    int fd = open(argv[1], O_RDWR);
    if (fd < 0) {
        perror(argv[1]);
        return 1;
    }
    tessera_limits *l = mmap(NULL, sizeof *l, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (l == MAP_FAILED || l->magic != TESSERA_LIMITS_MAGIC || l->device_count < 1) {
        fprintf(stderr, "balloon_set: %s is not a limits file\n", argv[1]);
        return 1;
    }
    tessera_device_limit *d = &l->devices[0];
    if (ceiling != 0) {
        __atomic_store_n(&d->balloon_words[TESSERA_BALLOON_WAIT_MS], wait, __ATOMIC_SEQ_CST);
        __atomic_store_n(&d->balloon_words[TESSERA_BALLOON_FLOOR], cap, __ATOMIC_SEQ_CST);
        __atomic_store_n(&d->balloon_words[TESSERA_BALLOON_CEILING], ceiling, __ATOMIC_SEQ_CST);
        atomic_store(&d->mem_limit_bytes, cap);
    } else {
        atomic_store(&d->mem_limit_bytes, cap);
        __atomic_store_n(&d->balloon_words[TESSERA_BALLOON_CEILING], 0, __ATOMIC_SEQ_CST);
        __atomic_store_n(&d->balloon_words[TESSERA_BALLOON_FLOOR], 0, __ATOMIC_SEQ_CST);
    }
    atomic_fetch_add(&l->generation, 1);
    munmap(l, sizeof *l);
    return 0;
}
