/* fg_state.c — the node-wide state file: mapping, slots, charging and reaping. */
#include "fg_state.h"

#include "glibc_baseline.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

uint64_t fg_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Start time of pid in clock ticks since boot (field 22 of /proc/pid/stat), or 0
 * when there is no such process or it has exited (zombie). */
static uint64_t proc_start_ticks(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    /* The command name may contain spaces and ')': fields restart after the last ')'. */
    char *p = strrchr(buf, ')');
    if (!p)
        return 0;
    p++;
    if (p[0] != ' ' || p[1] == 'Z' || p[1] == 'X' || p[1] == 'x')
        return 0;
    for (int field = 3; field < 22 && p; field++)
        p = strchr(p + 1, ' ');
    return p ? strtoull(p + 1, NULL, 10) : 0;
}

static uint64_t owner_word(pid_t pid)
{
    uint64_t start = proc_start_ticks(pid) & 0x7fffffffull;
    return (uint64_t)(uint32_t)pid | (start << 32);
}

/*
 * Liveness without pids. A process holds an open-file-description lock on one
 * byte of the state file per claimed slot (the slot's owner word) for as long as
 * it lives; the kernel drops it when the process dies, whichever pid namespace
 * it ran in — a pid is only meaningful inside its own namespace, and containers
 * sharing one simulated GPU each have their own. Two descriptors per process:
 * `lock_fd` holds the slot's lock, `probe_fd` (a second open of the same file,
 * so a separate description whose locks conflict with ours) asks whether a slot
 * is held and holds a dead slot's lock while reaping it, which keeps claimers
 * out until its words are zeroed.
 */
static char lock_path[4096];
static int probe_fd = -1, lock_fd = -1;
static pid_t lock_fd_pid;
static pthread_mutex_t reap_mu = PTHREAD_MUTEX_INITIALIZER;

static off_t slot_lock_offset(uint32_t i)
{
    return (off_t)(offsetof(struct fg_state, slot) + (size_t)i * sizeof(struct fg_state_slot));
}

/* F_OFD_SETLK (type F_WRLCK or F_UNLCK) or F_OFD_GETLK on slot i's byte. */
static int slot_lock_op(int fd, int cmd, short type, uint32_t i)
{
    struct flock fl = {.l_type = type, .l_whence = SEEK_SET, .l_start = slot_lock_offset(i), .l_len = 1};
    int r;
    while ((r = fcntl(fd, cmd, &fl)) != 0 && errno == EINTR)
        ;
    if (r != 0)
        return -1;
    return cmd == F_OFD_GETLK ? fl.l_type != F_UNLCK : 0;
}

int fg_state_lock_file(const char *path)
{
    if (probe_fd >= 0 && strcmp(path, lock_path) == 0)
        return 0;
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return -1;
    if (probe_fd >= 0)
        close(probe_fd);
    if (lock_fd >= 0)
        close(lock_fd);
    lock_fd = -1;
    probe_fd = fd;
    snprintf(lock_path, sizeof lock_path, "%s", path);
    return 0;
}

/* A fork child shares the parent's lock description: it closes its copy (the
 * parent keeps its lock) so that it never keeps a dead parent's slot alive, and
 * claims its own slot with a new description if it initialises again. */
static void state_atfork_child(void)
{
    pthread_mutex_init(&reap_mu, NULL);
    if (lock_fd >= 0)
        close(lock_fd);
    lock_fd = -1;
}

__attribute__((constructor)) static void state_register_atfork(void)
{
    pthread_atfork(NULL, NULL, state_atfork_child);
}

int fg_owner_alive(const struct fg_state *st, uint32_t slot, uint64_t owner)
{
    if (owner == 0 || slot >= FG_MAX_SLOTS)
        return 0;
    if (atomic_load(&((struct fg_state *)st)->slot[slot].owner) != owner)
        return 0; /* freed, or claimed by another process since */
    if (probe_fd < 0)
        return 1; /* no file to ask: assume alive rather than reap a live process */
    return slot_lock_op(probe_fd, F_OFD_GETLK, F_WRLCK, slot) != 0;
}

static uint64_t boot_id_hash(void)
{
    char buf[128] = {0};
    int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t n = read(fd, buf, sizeof buf - 1);
        (void)n;
        close(fd);
    }
    uint64_t h = 0xcbf29ce484222325ull;
    for (char *p = buf; *p; p++) {
        h ^= (unsigned char)*p;
        h *= 0x100000001b3ull;
    }
    return h;
}

static void zero_slot(struct fg_state *st, struct fg_state_slot *s)
{
    struct fg_sched_slot *ss = &st->sched[s - st->slot];
    atomic_store(&ss->head, 0);
    atomic_store(&ss->tail, 0);
    for (int d = 0; d < FG_MAX_DEVICES; d++) {
        atomic_store(&s->used[d], 0);
        atomic_store(&s->busy_ns[d], 0);
        atomic_store(&s->contexts[d], 0);
    }
}

static int any_live_slot(struct fg_state *st)
{
    uint32_t hwm = atomic_load(&st->hdr.slot_hwm);
    for (uint32_t i = 0; i < hwm && i < FG_MAX_SLOTS; i++)
        if (fg_owner_alive(st, i, atomic_load(&st->slot[i].owner)))
            return 1;
    return 0;
}

/* Writes a fresh header, device table and empty slots. Caller holds the flock. */
static void format_state(struct fg_state *st, const struct fg_config *cfg, uint64_t slice_ns, uint64_t boot)
{
    memset(st, 0, sizeof *st);
    st->hdr.slice_ns = slice_ns;
    st->hdr.version = FG_STATE_VERSION;
    st->hdr.header_size = sizeof st->hdr;
    st->hdr.device_size = sizeof st->dev[0];
    st->hdr.slot_size = sizeof st->slot[0];
    st->hdr.max_devices = FG_MAX_DEVICES;
    st->hdr.max_slots = FG_MAX_SLOTS;
    st->hdr.device_count = (uint32_t)cfg->count;
    st->hdr.config_fingerprint = fg_config_fingerprint(cfg);
    st->hdr.boot_id = boot;
    for (int d = 0; d < cfg->count; d++)
        st->dev[d].mem_bytes = cfg->dev[d].mem_bytes;
    atomic_thread_fence(memory_order_release);
    __atomic_store_n(&st->hdr.magic, FG_STATE_MAGIC, __ATOMIC_RELEASE);
}

/* Checks an existing mapping against cfg; reformats it when nobody uses it. */
static int adopt_state(struct fg_state *st, const struct fg_config *cfg, uint64_t slice_ns, const char *path,
                       char *err, unsigned errlen)
{
    uint64_t boot = boot_id_hash();
    uint64_t magic = __atomic_load_n(&st->hdr.magic, __ATOMIC_ACQUIRE);
    if (magic == 0) {
        format_state(st, cfg, slice_ns, boot);
        return 0;
    }
    if (magic != FG_STATE_MAGIC || st->hdr.version != FG_STATE_VERSION ||
        st->hdr.header_size != sizeof st->hdr || st->hdr.slot_size != sizeof st->slot[0] ||
        st->hdr.device_size != sizeof st->dev[0] || st->hdr.max_slots != FG_MAX_SLOTS ||
        st->hdr.max_devices != FG_MAX_DEVICES) {
        snprintf(err, errlen,
                 "FAKEGPU_STATE=%s: not a fakegpu state file of version %u (magic %#llx, version %u); "
                 "remove it",
                 path, FG_STATE_VERSION, (unsigned long long)magic, st->hdr.version);
        return -1;
    }
    if (st->hdr.boot_id != boot) {
        format_state(st, cfg, slice_ns, boot); /* every process it records died with the last boot */
        return 0;
    }
    if (st->hdr.config_fingerprint == fg_config_fingerprint(cfg) && st->hdr.device_count == (uint32_t)cfg->count)
        return 0;
    if (any_live_slot(st)) {
        snprintf(err, errlen,
                 "FAKEGPU_STATE=%s: in use by live processes with a different device configuration; "
                 "give this configuration its own FAKEGPU_STATE",
                 path);
        return -1;
    }
    format_state(st, cfg, slice_ns, boot);
    return 0;
}

/* A version 1 file (same header and slots, no timeline) left by an older build:
 * replaced, unless a live process still uses it. Caller holds the flock. */
static int upgrade_v1(int fd, const char *path, char *err, unsigned errlen)
{
    void *m = mmap(NULL, FG_STATE_V1_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
        snprintf(err, errlen, "FAKEGPU_STATE=%s: mmap: %s", path, strerror(errno));
        return -1;
    }
    struct fg_state *old = m;
    int live = old->hdr.magic == FG_STATE_MAGIC && old->hdr.version == 1 && any_live_slot(old);
    munmap(m, FG_STATE_V1_SIZE);
    if (live) {
        snprintf(err, errlen, "FAKEGPU_STATE=%s: in use by live processes of an older fakegpu (state version 1)",
                 path);
        return -1;
    }
    if (ftruncate(fd, 0) != 0) {
        snprintf(err, errlen, "FAKEGPU_STATE=%s: ftruncate: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

struct fg_state *fg_state_open(const struct fg_config *cfg, uint64_t slice_ns, char *err, unsigned errlen)
{
    char defpath[64];
    const char *path = getenv("FAKEGPU_STATE");
    if (!path || !*path) {
        snprintf(defpath, sizeof defpath, "/tmp/fakegpu-state-%u", (unsigned)getuid());
        path = defpath;
    }
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
        snprintf(err, errlen, "FAKEGPU_STATE=%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    struct fg_state *st = NULL;
    if (fg_state_lock_file(path) != 0) { /* upgrade_v1 and adopt_state ask which slots are alive */
        snprintf(err, errlen, "FAKEGPU_STATE=%s: cannot reopen: %s", path, strerror(errno));
        close(fd);
        return NULL;
    }
    while (flock(fd, LOCK_EX) != 0) {
        if (errno != EINTR) {
            snprintf(err, errlen, "FAKEGPU_STATE=%s: flock: %s", path, strerror(errno));
            close(fd);
            return NULL;
        }
    }
    struct stat sb;
    if (baseline_fstat(fd, &sb) != 0) {
        snprintf(err, errlen, "FAKEGPU_STATE=%s: stat: %s", path, strerror(errno));
        goto out;
    }
    if (sb.st_size == FG_STATE_V1_SIZE && upgrade_v1(fd, path, err, errlen) != 0)
        goto out;
    if (sb.st_size == FG_STATE_V1_SIZE)
        sb.st_size = 0;
    if (sb.st_size != 0 && sb.st_size != (off_t)sizeof *st) {
        snprintf(err, errlen, "FAKEGPU_STATE=%s: size %lld, expected %zu: not a fakegpu state file; remove it",
                 path, (long long)sb.st_size, sizeof *st);
        goto out;
    }
    if (sb.st_size == 0 && ftruncate(fd, sizeof *st) != 0) {
        snprintf(err, errlen, "FAKEGPU_STATE=%s: ftruncate: %s", path, strerror(errno));
        goto out;
    }
    void *m = mmap(NULL, sizeof *st, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
        snprintf(err, errlen, "FAKEGPU_STATE=%s: mmap: %s", path, strerror(errno));
        goto out;
    }
    st = m;
    if (adopt_state(st, cfg, slice_ns, path, err, errlen) != 0) {
        munmap(m, sizeof *st);
        st = NULL;
    }
out:
    flock(fd, LOCK_UN);
    close(fd);
    return st;
}

void fg_state_close(struct fg_state *st)
{
    if (st)
        munmap(st, sizeof *st);
}

static void raise_hwm(struct fg_state *st, uint32_t n)
{
    uint32_t cur = atomic_load(&st->hdr.slot_hwm);
    while (cur < n && !atomic_compare_exchange_weak(&st->hdr.slot_hwm, &cur, n))
        ;
}

/* The description that holds this process's slot lock (opened on first claim,
 * and again in a fork child). */
static int own_lock_fd(void)
{
    if (lock_fd >= 0 && lock_fd_pid == getpid())
        return lock_fd;
    if (lock_fd >= 0)
        close(lock_fd);
    lock_fd = probe_fd < 0 ? -1 : open(lock_path, O_RDWR | O_CLOEXEC);
    lock_fd_pid = getpid();
    return lock_fd;
}

/* Claims slot i: its lock first, so that the owner word is never set without a
 * live holder (a reaper holding the lock keeps us out until it has finished). */
static int claim_slot(struct fg_state *st, int fd, uint32_t i, uint64_t me)
{
    struct fg_state_slot *s = &st->slot[i];
    if (atomic_load(&s->owner) != 0 || slot_lock_op(fd, F_OFD_SETLK, F_WRLCK, i) != 0)
        return 0;
    uint64_t expect = 0;
    if (!atomic_compare_exchange_strong(&s->owner, &expect, me)) {
        slot_lock_op(fd, F_OFD_SETLK, F_UNLCK, i);
        return 0;
    }
    return 1;
}

struct fg_state_slot *fg_state_claim(struct fg_state *st)
{
    uint64_t me = owner_word(getpid());
    int fd = own_lock_fd();
    if (fd < 0)
        return NULL;
    for (int pass = 0; pass < 2; pass++) {
        for (uint32_t i = 0; i < FG_MAX_SLOTS; i++) {
            struct fg_state_slot *s = &st->slot[i];
            if (claim_slot(st, fd, i, me)) {
                zero_slot(st, s);
                atomic_store(&s->claimed_ns, fg_now_ns());
                raise_hwm(st, i + 1);
                return s;
            }
        }
        if (fg_state_reap(st) == 0)
            break;
    }
    return NULL;
}

int fg_state_charge(struct fg_state *st, struct fg_state_slot *s, int dev, uint64_t n)
{
    /* Store then sum, both seq_cst: of two racing charges at least one sees the
     * other, so the capacity can never be exceeded (near it both may refuse). */
    atomic_fetch_add(&s->used[dev], n);
    if (fg_state_used(st, dev) > st->dev[dev].mem_bytes) {
        atomic_fetch_sub(&s->used[dev], n);
        return -1;
    }
    return 0;
}

void fg_state_uncharge(struct fg_state_slot *s, int dev, uint64_t n)
{
    atomic_fetch_sub(&s->used[dev], n);
}

uint64_t fg_state_used(const struct fg_state *st, int dev)
{
    uint32_t hwm = atomic_load(&((struct fg_state *)st)->hdr.slot_hwm);
    uint64_t sum = 0;
    for (uint32_t i = 0; i < hwm && i < FG_MAX_SLOTS; i++)
        sum += atomic_load(&((struct fg_state *)st)->slot[i].used[dev]);
    return sum;
}

/* Zeroes slot i if nobody holds its lock: its owner (or a reaper before us) died.
 * We hold the lock while zeroing, so no claimer can take the slot meanwhile and
 * a reaper killed midway releases it for the next one to finish. */
static int reap_slot(struct fg_state *st, uint32_t i)
{
    struct fg_state_slot *s = &st->slot[i];
    if (slot_lock_op(probe_fd, F_OFD_SETLK, F_WRLCK, i) != 0)
        return 0; /* held: alive */
    int n = 0;
    uint64_t owner = atomic_load(&s->owner);
    uint64_t mark = FG_OWNER_REAPING | (uint32_t)getpid();
    if (owner != 0 && atomic_compare_exchange_strong(&s->owner, &owner, mark)) {
        zero_slot(st, s);
        atomic_store(&s->claimed_ns, 0);
        atomic_store(&s->owner, 0);
        n = 1;
    }
    slot_lock_op(probe_fd, F_OFD_SETLK, F_UNLCK, i);
    return n;
}

int fg_state_reap(struct fg_state *st)
{
    if (probe_fd < 0)
        return 0;
    int n = 0;
    /* One reaper per process: threads share probe_fd's locks. */
    pthread_mutex_lock(&reap_mu);
    uint32_t hwm = atomic_load(&st->hdr.slot_hwm);
    for (uint32_t i = 0; i < hwm && i < FG_MAX_SLOTS; i++) {
        uint64_t o = atomic_load(&st->slot[i].owner);
        if (o != 0 && !fg_owner_alive(st, i, o))
            n += reap_slot(st, i);
    }
    pthread_mutex_unlock(&reap_mu);
    return n;
}
