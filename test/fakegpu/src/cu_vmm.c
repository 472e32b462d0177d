/* cu_vmm.c — virtual memory management: physical handles (cuMemCreate), address
 * reservations and mappings. Device-located handles take physical memory from
 * their device; host-located ones take none. A released handle that is still
 * mapped keeps its memory until its last mapping goes, as with the real driver. */
#include <stdlib.h>

#include "cu_internal.h"

#define FG_VMM_GRANULARITY (2ull << 20)
#define FG_HANDLE_BASE 0xf000000000000000ull

struct fg_vmm_handle {
    int maps;
    int released;
};

struct fg_range {
    uint64_t base, size;
    CUmemGenericAllocationHandle handle; /* mappings only */
};

/* Reservations and mappings, few and short-lived enough for linear scans. */
static pthread_mutex_t vmm_mu = PTHREAD_MUTEX_INITIALIZER;
static struct fg_range *reservations, *mappings;
static size_t nres, capres, nmap, capmap;
static _Atomic uint64_t next_handle = FG_HANDLE_BASE;

void fg_vmm_reset(void)
{
    pthread_mutex_init(&vmm_mu, NULL);
    nres = nmap = 0;
}

static int push_range(struct fg_range **arr, size_t *n, size_t *cap, struct fg_range r)
{
    if (*n == *cap) {
        size_t nc = *cap ? *cap * 2 : 64;
        struct fg_range *a = realloc(*arr, nc * sizeof *a);
        if (!a)
            return -1;
        *arr = a;
        *cap = nc;
    }
    (*arr)[(*n)++] = r;
    return 0;
}

static int check_prop(const CUmemAllocationProp *prop, int *dev)
{
    if (!prop || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED)
        return -1;
    switch (prop->location.type) {
    case CU_MEM_LOCATION_TYPE_DEVICE:
        if (!fg_valid_dev(prop->location.id))
            return -1;
        *dev = prop->location.id;
        return 0;
    case CU_MEM_LOCATION_TYPE_HOST:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT:
        *dev = -1;
        return 0;
    default:
        return -1;
    }
}

FG_API CUresult cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
                                              CUmemAllocationGranularity_flags option)
{
    if (!fg_ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    int dev;
    if (!granularity || check_prop(prop, &dev) != 0 ||
        (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM && option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED))
        return CUDA_ERROR_INVALID_VALUE;
    *granularity = FG_VMM_GRANULARITY;
    return CUDA_SUCCESS;
}

FG_API CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                            unsigned long long flags)
{
    if (!fg_ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    int dev;
    if (!handle || flags != 0 || size == 0 || size % FG_VMM_GRANULARITY != 0 || check_prop(prop, &dev) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    struct fg_vmm_handle *h = calloc(1, sizeof *h);
    if (!h)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (dev >= 0) {
        CUresult r = fg_charge(dev, size);
        if (r != CUDA_SUCCESS) {
            free(h);
            return r;
        }
    }
    struct fg_entry e = {
        .key = atomic_fetch_add(&next_handle, 0x10),
        .size = size,
        .charged = dev >= 0 ? size : 0,
        .aux = h,
        .dev = dev,
        .kind = FG_KIND_VMM_HANDLE,
    };
    fg_table_insert(&e);
    *handle = e.key;
    return CUDA_SUCCESS;
}

/* Frees a handle's memory once it is both released and unmapped. Holds vmm_mu. */
static void maybe_free_handle(CUmemGenericAllocationHandle handle, struct fg_vmm_handle *h)
{
    struct fg_entry e;
    if (!h->released || h->maps > 0 || fg_table_remove(handle, FG_KIND_BIT(FG_KIND_VMM_HANDLE), &e) != 0)
        return;
    if (e.charged)
        fg_uncharge(e.dev, e.charged);
    free(h);
}

FG_API CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
    if (!fg_ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    struct fg_entry e;
    pthread_mutex_lock(&vmm_mu);
    CUresult r = CUDA_ERROR_INVALID_VALUE;
    if (fg_table_get(handle, &e) == 0 && e.kind == FG_KIND_VMM_HANDLE) {
        struct fg_vmm_handle *h = e.aux;
        if (!h->released) {
            h->released = 1;
            maybe_free_handle(handle, h);
            r = CUDA_SUCCESS;
        }
    }
    pthread_mutex_unlock(&vmm_mu);
    return r;
}

static int pow2(uint64_t x)
{
    return x && !(x & (x - 1));
}

FG_API CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                    unsigned long long flags)
{
    (void)addr; /* a hint only; the simulated address space ignores it */
    if (!fg_ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!ptr || size == 0 || size % FG_VMM_GRANULARITY != 0 || flags != 0 || (alignment && !pow2(alignment)))
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t align = alignment > FG_VMM_GRANULARITY ? alignment : FG_VMM_GRANULARITY;
    struct fg_range r = {.base = fg_va_alloc(size, align), .size = size};
    pthread_mutex_lock(&vmm_mu);
    int rc = push_range(&reservations, &nres, &capres, r);
    pthread_mutex_unlock(&vmm_mu);
    if (rc != 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *ptr = r.base;
    return CUDA_SUCCESS;
}

static int overlaps(uint64_t a, uint64_t an, uint64_t b, uint64_t bn)
{
    return a < b + bn && b < a + an;
}

FG_API CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    if (!fg_ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&vmm_mu);
    for (size_t i = 0; i < nres; i++) {
        if (reservations[i].base != ptr || reservations[i].size != size)
            continue;
        int mapped = 0;
        for (size_t j = 0; j < nmap && !mapped; j++)
            mapped = overlaps(mappings[j].base, mappings[j].size, ptr, size);
        if (!mapped) {
            reservations[i] = reservations[--nres];
            r = CUDA_SUCCESS;
        }
        break;
    }
    pthread_mutex_unlock(&vmm_mu);
    return r;
}

static int inside_reservation(uint64_t ptr, uint64_t size)
{
    for (size_t i = 0; i < nres; i++)
        if (ptr >= reservations[i].base && ptr + size <= reservations[i].base + reservations[i].size)
            return 1;
    return 0;
}

FG_API CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                         unsigned long long flags)
{
    if (!fg_ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (flags != 0 || size == 0 || size % FG_VMM_GRANULARITY != 0 || ptr % FG_VMM_GRANULARITY != 0 ||
        offset % FG_VMM_GRANULARITY != 0)
        return CUDA_ERROR_INVALID_VALUE;
    struct fg_entry e;
    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&vmm_mu);
    if (fg_table_get(handle, &e) != 0 || e.kind != FG_KIND_VMM_HANDLE || ((struct fg_vmm_handle *)e.aux)->released)
        r = CUDA_ERROR_INVALID_HANDLE;
    else if (offset > e.size || size > e.size - offset || !inside_reservation(ptr, size))
        r = CUDA_ERROR_INVALID_VALUE;
    for (size_t j = 0; j < nmap && r == CUDA_SUCCESS; j++)
        if (overlaps(mappings[j].base, mappings[j].size, ptr, size))
            r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS) {
        struct fg_range m = {.base = ptr, .size = size, .handle = handle};
        if (push_range(&mappings, &nmap, &capmap, m) != 0)
            r = CUDA_ERROR_OUT_OF_MEMORY;
        else
            ((struct fg_vmm_handle *)e.aux)->maps++;
    }
    pthread_mutex_unlock(&vmm_mu);
    return r;
}

/* Unmaps every mapping inside [ptr, ptr+size); one that straddles the edge is an error. */
FG_API CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    if (!fg_ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&vmm_mu);
    int found = 0;
    for (size_t j = 0; j < nmap; j++) {
        struct fg_range *m = &mappings[j];
        if (!overlaps(m->base, m->size, ptr, size))
            continue;
        if (m->base < ptr || m->base + m->size > ptr + size) {
            pthread_mutex_unlock(&vmm_mu);
            return CUDA_ERROR_INVALID_VALUE;
        }
        found = 1;
    }
    for (size_t j = 0; j < nmap;) {
        struct fg_range m = mappings[j];
        if (!overlaps(m.base, m.size, ptr, size)) {
            j++;
            continue;
        }
        mappings[j] = mappings[--nmap];
        struct fg_entry e;
        if (fg_table_get(m.handle, &e) == 0) {
            struct fg_vmm_handle *h = e.aux;
            h->maps--;
            maybe_free_handle(m.handle, h);
        }
    }
    pthread_mutex_unlock(&vmm_mu);
    return found ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* Bytes of [ptr, ptr+size) covered by mappings. Holds vmm_mu. */
static uint64_t mapped_bytes(uint64_t ptr, uint64_t size)
{
    uint64_t n = 0;
    for (size_t j = 0; j < nmap; j++) {
        uint64_t lo = mappings[j].base > ptr ? mappings[j].base : ptr;
        uint64_t hi = mappings[j].base + mappings[j].size;
        if (hi > ptr + size)
            hi = ptr + size;
        if (hi > lo)
            n += hi - lo;
    }
    return n;
}

FG_API CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)
{
    if (!fg_ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!desc || count == 0 || size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < count; i++) {
        if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE)
            return CUDA_ERROR_INVALID_VALUE;
        if (!fg_valid_dev(desc[i].location.id))
            return CUDA_ERROR_INVALID_DEVICE;
        if (desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE && desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READ &&
            desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
            return CUDA_ERROR_INVALID_VALUE;
    }
    pthread_mutex_lock(&vmm_mu);
    uint64_t covered = mapped_bytes(ptr, size);
    pthread_mutex_unlock(&vmm_mu);
    return covered == size ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
