/* region.c — the shared-memory side of accounting. Everything here is lock-free:
 * C11 atomics on words of a MAP_SHARED file, so a process killed at any point can
 * leave at most a slot that the others recognise as dead and clear. */
#include "region.h"

#include "glibc_baseline.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static void *map_file(const char *what, const char *path, size_t size, bool writable, char *err, size_t errlen)
{
    /* O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer. */
    int fd = open(path, (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        snprintf(err, errlen, "%s %s: open: %s", what, path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (baseline_fstat(fd, &st) != 0) {
        snprintf(err, errlen, "%s %s: stat: %s", what, path, strerror(errno));
        close(fd);
        return NULL;
    }
    if (!S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s %s: not a regular file", what, path);
        close(fd);
        return NULL;
    }
    if ((uint64_t)st.st_size < size) {
        snprintf(err, errlen, "%s %s: truncated: %lld bytes, the layout needs %zu", what, path,
                 (long long)st.st_size, size);
        close(fd);
        return NULL;
    }
    void *p = mmap(NULL, size, writable ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED, fd, 0);
    int e = errno;
    close(fd);
    if (p == MAP_FAILED) {
        snprintf(err, errlen, "%s %s: mmap: %s", what, path, strerror(e));
        return NULL;
    }
    return p;
}

static int check_header(const char *what, const char *path, uint64_t magic, uint32_t version, uint32_t size,
                        uint64_t want_magic, size_t want_size, char *err, size_t errlen)
{
    if (magic != want_magic) {
        snprintf(err, errlen, "%s %s: wrong magic %#llx (want %#llx): not a tessera %s file", what, path,
                 (unsigned long long)magic, (unsigned long long)want_magic, what);
        return -1;
    }
    if (version != TESSERA_ABI_VERSION) {
        snprintf(err, errlen, "%s %s: ABI version %u, this hook reads version %u", what, path, version,
                 TESSERA_ABI_VERSION);
        return -1;
    }
    if (size != want_size) {
        snprintf(err, errlen, "%s %s: size field %u, want %zu", what, path, size, want_size);
        return -1;
    }
    return 0;
}

int region_map(const char *path, tessera_region **out, char *err, size_t errlen)
{
    tessera_region *r = map_file("region", path, sizeof *r, true, err, errlen);
    if (r == NULL)
        return -1;
    if (check_header("region", path, atomic_load(&((_Atomic uint64_t *)&r->magic)[0]), r->abi_version, r->size,
                     TESSERA_REGION_MAGIC, sizeof *r, err, errlen) != 0)
        goto bad;
    if (r->max_devices != TESSERA_MAX_DEVICES || r->max_procs != TESSERA_MAX_PROCS) {
        snprintf(err, errlen, "region %s: %u devices x %u slots, want %u x %u", path, r->max_devices,
                 r->max_procs, TESSERA_MAX_DEVICES, TESSERA_MAX_PROCS);
        goto bad;
    }
    *out = r;
    return 0;
bad:
    munmap(r, sizeof *r);
    return -1;
}

int limits_map(const char *path, const tessera_limits **out, char *err, size_t errlen)
{
    const tessera_limits *l = map_file("limits", path, sizeof *l, false, err, errlen);
    if (l == NULL)
        return -1;
    if (check_header("limits", path, atomic_load(&((const _Atomic uint64_t *)&l->magic)[0]), l->abi_version,
                     l->size, TESSERA_LIMITS_MAGIC, sizeof *l, err, errlen) != 0)
        goto bad;
    if (l->device_count > TESSERA_MAX_DEVICES) {
        snprintf(err, errlen, "limits %s: device_count %u exceeds %u", path, l->device_count, TESSERA_MAX_DEVICES);
        goto bad;
    }
    *out = l;
    return 0;
bad:
    munmap((void *)l, sizeof *l);
    return -1;
}

void region_unmap(tessera_region *r) { munmap(r, sizeof *r); }
void limits_unmap(const tessera_limits *l) { munmap((void *)l, sizeof *l); }

int proc_stat_parse(const char *buf, uint64_t *start_time, bool *zombie)
{
    /* comm may contain spaces and parentheses: fields restart after the last ')'. */
    const char *p = strrchr(buf, ')');
    if (p == NULL || p[1] != ' ' || p[2] == '\0')
        return -1;
    p += 2; /* field 3, state */
    bool exited = (*p == 'Z' || *p == 'X');
    for (int field = 3; field < 22; field++) {
        p = strchr(p, ' ');
        if (p == NULL)
            return -1;
        p++;
        /* Field 20, num_threads: a thread-group leader that called pthread_exit shows
         * as a zombie while its other threads (and its device memory) live on. */
        if (field + 1 == 20 && !(p[0] == '1' && p[1] == ' ') && !(p[0] == '0' && p[1] == ' '))
            exited = false;
    }
    if (*p < '0' || *p > '9')
        return -1;
    uint64_t v = 0;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (v > (UINT64_MAX - 9) / 10)
            return -1;
        v = v * 10 + (uint64_t)(*p - '0');
    }
    *start_time = v;
    *zombie = exited;
    return 0;
}

int proc_identity(pid_t pid, uint64_t *start_time, bool *zombie)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    return proc_stat_parse(buf, start_time, zombie);
}

bool proc_alive(uint32_t pid, uint64_t start_time)
{
    if (pid == 0 || pid >= TESSERA_SLOT_RECLAIM_BIT)
        return false;
    if (kill((pid_t)pid, 0) != 0 && errno == ESRCH)
        return false;
    uint64_t st;
    bool zombie;
    /* kill() says it exists. An unreadable /proc entry (hidepid mounts hide other
     * users' processes) therefore means alive; one that vanished in between is
     * found dead by the next look. */
    if (proc_identity((pid_t)pid, &st, &zombie) != 0)
        return true;
    if (zombie)
        return false; /* its address space and device memory are gone */
    return start_time == 0 || st == start_time;
}

void region_dec_floor(_Atomic uint64_t *w, uint64_t n)
{
    uint64_t cur = atomic_load_explicit(w, memory_order_relaxed);
    while (!atomic_compare_exchange_weak(w, &cur, cur > n ? cur - n : 0))
        ;
}

int region_expire_seqs(tessera_region *r, tessera_proc_slot *s, uint64_t now)
{
    int n = 0;
    for (int k = 0; k < TESSERA_SEQ_RECORDS; k++) {
        uint64_t v = atomic_load_explicit(&s->seq_until[k], memory_order_relaxed);
        if (v == 0 || (v & ~TESSERA_SEQ_DEV_MASK) > now)
            continue;
        /* Whoever swaps it to 0 owns the count: the owner's refresh (an
         * exchange) sees 0 and counts itself again. */
        if (!atomic_compare_exchange_strong(&s->seq_until[k], &v, 0))
            continue;
        region_dec_floor(&r->compute[v & TESSERA_SEQ_DEV_MASK].inflight, 1);
        n++;
    }
    return n;
}

/* Zero a slot we hold with RECLAIM_BIT|me, then free it. Returns the bytes it held. */
static uint64_t clear_and_free(tessera_region *r, tessera_proc_slot *s, uint32_t marker)
{
    region_expire_seqs(r, s, UINT64_MAX);
    uint64_t total = 0;
    for (int d = 0; d < TESSERA_MAX_DEVICES; d++)
        total += atomic_exchange(&s->used_bytes[d], 0);
    atomic_store(&s->start_time, 0);
    uint32_t expect = marker;
    atomic_compare_exchange_strong(&s->pid, &expect, 0);
    return total;
}

static void raise_hwm(tessera_region *r, uint32_t n)
{
    uint32_t cur = atomic_load(&r->slot_hwm);
    while (cur < n && !atomic_compare_exchange_weak(&r->slot_hwm, &cur, n))
        ;
}

static uint32_t hwm(tessera_region *r)
{
    uint32_t n = atomic_load(&r->slot_hwm);
    return n > TESSERA_MAX_PROCS ? TESSERA_MAX_PROCS : n;
}

int region_reap(tessera_region *r, uint32_t me, uint64_t my_start)
{
    const uint32_t mine = TESSERA_SLOT_RECLAIM_BIT | me;
    int reaped = 0;
    uint64_t bytes = 0;
    uint32_t n = hwm(r);
    for (uint32_t i = 0; i < n; i++) {
        tessera_proc_slot *s = &r->slots[i];
        uint32_t pid = atomic_load(&s->pid);
        if (pid == 0)
            continue;
        if (pid == me) {
            /* Ours, or left by a dead process that had our pid (start time differs). */
            uint64_t st = atomic_load(&s->start_time);
            if (st == 0 || st == my_start)
                continue;
        } else if (pid & TESSERA_SLOT_RECLAIM_BIT) {
            uint32_t reaper = pid & ~TESSERA_SLOT_RECLAIM_BIT;
            /* The node reaper is outside our pid namespace: always treated as alive. */
            if (reaper == TESSERA_REAPER_NODE || reaper == me || proc_alive(reaper, 0))
                continue;
        } else if (proc_alive(pid, atomic_load(&s->start_time))) {
            continue;
        }
        if (!atomic_compare_exchange_strong(&s->pid, &pid, mine))
            continue; /* changed under us: someone else is on it */
        bytes += clear_and_free(r, s, mine);
        reaped++;
    }
    if (reaped) {
        atomic_fetch_add(&r->reaped_procs, (uint64_t)reaped);
        atomic_fetch_add(&r->reaped_bytes, bytes);
    }
    return reaped;
}

int region_claim(tessera_region *r, uint32_t pid, uint64_t start_time)
{
    region_reap(r, pid, start_time);
    for (uint32_t i = 0; i < TESSERA_MAX_PROCS; i++) {
        tessera_proc_slot *s = &r->slots[i];
        uint32_t cur = atomic_load(&s->pid);
        if (cur == pid && atomic_load(&s->start_time) == start_time) {
            /* Ours from before an exec(): the driver freed that image's memory
             * and dropped its queued work. */
            region_expire_seqs(r, s, UINT64_MAX);
            for (int d = 0; d < TESSERA_MAX_DEVICES; d++)
                atomic_store(&s->used_bytes[d], 0);
            raise_hwm(r, i + 1);
            return (int)i;
        }
        if (cur != 0)
            continue;
        if (!atomic_compare_exchange_strong(&s->pid, &cur, pid))
            continue;
        /* A free slot's usage is zero (whoever freed it zeroed it first). The hwm is
         * raised before the first charge so that every summer sees this slot. */
        atomic_store(&s->start_time, start_time);
        raise_hwm(r, i + 1);
        return (int)i;
    }
    return -1;
}

void region_release(tessera_region *r, int slot, uint32_t pid)
{
    if (slot < 0 || slot >= TESSERA_MAX_PROCS)
        return;
    tessera_proc_slot *s = &r->slots[slot];
    uint32_t cur = atomic_load(&s->pid);
    if (cur != pid)
        return; /* reaped already (we were taken for dead) */
    const uint32_t marker = TESSERA_SLOT_RECLAIM_BIT | pid;
    if (atomic_compare_exchange_strong(&s->pid, &cur, marker))
        clear_and_free(r, s, marker);
}

uint64_t region_usage(tessera_region *r, int dev)
{
    uint64_t sum = 0;
    uint32_t n = hwm(r);
    for (uint32_t i = 0; i < n; i++)
        sum += atomic_load(&r->slots[i].used_bytes[dev]);
    return sum;
}
