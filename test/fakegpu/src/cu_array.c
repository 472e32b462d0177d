/* cu_array.c — CUDA arrays and mipmapped arrays.
 *
 * An array takes width × max(height,1) × max(depth,1) × channels × element size
 * bytes rounded up to 512; a mipmapped array the sum of its levels' bytes (level
 * i: each non-zero extent halved i times, at least 1), rounded up to 512. The
 * hook charges the same formula (docs/fakegpu.md). */
#include "cu_internal.h"

#define FG_ARRAY_ALIGN 512ull
#define FG_ARRAY_BASE 0xa000000000000000ull

static _Atomic uint64_t next_array = FG_ARRAY_BASE;

static unsigned element_size(CUarray_format f)
{
    switch (f) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8: return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF: return 2;
    case CU_AD_FORMAT_UNSIGNED_INT32:
    case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_FLOAT: return 4;
    }
    return 0;
}

/* Bytes of one level, or 0 on overflow. */
static uint64_t level_bytes(uint64_t w, uint64_t h, uint64_t d, unsigned texel)
{
    uint64_t n = 0;
    if (__builtin_mul_overflow(w, h ? h : 1, &n) || __builtin_mul_overflow(n, d ? d : 1, &n) ||
        __builtin_mul_overflow(n, texel, &n))
        return 0;
    return n;
}

/* The normalized formats (CUDA 11.5): UNORM_INT8X1 0xc0 .. SNORM_INT16X4 0xcb, in
 * groups of three (X1, X2, X4); 8-bit for UNORM/SNORM_INT8Xn, 16-bit for _INT16Xn.
 * The channel count is part of the format and NumChannels must match it. */
#define FG_FORMAT_NORM_FIRST 0xc0u
#define FG_FORMAT_NORM_LAST 0xcbu

/* Validates a descriptor; returns bytes per texel or 0. */
static unsigned texel_size(CUarray_format f, unsigned channels, uint64_t w, uint64_t h, uint64_t d)
{
    unsigned es = element_size(f);
    if ((unsigned)f >= FG_FORMAT_NORM_FIRST && (unsigned)f <= FG_FORMAT_NORM_LAST) {
        unsigned k = (unsigned)f - FG_FORMAT_NORM_FIRST;
        es = k % 6 < 3 ? 1 : 2;
        if (channels != 1u << (k % 3))
            return 0;
    }
    if (es == 0 || (channels != 1 && channels != 2 && channels != 4) || w == 0 || (d && !h))
        return 0;
    return es * channels;
}

static CUresult create(uint64_t *key, uint64_t bytes, int kind)
{
    struct CUctx_st *ctx;
    CUresult r = fg_enter(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    if (bytes == 0 || bytes > UINT64_MAX - FG_ARRAY_ALIGN)
        return CUDA_ERROR_OUT_OF_MEMORY;
    bytes = (bytes + FG_ARRAY_ALIGN - 1) & ~(FG_ARRAY_ALIGN - 1);
    r = fg_charge(ctx->dev, bytes);
    if (r != CUDA_SUCCESS)
        return r;
    struct fg_entry e = {
        .key = atomic_fetch_add(&next_array, 0x10),
        .size = bytes,
        .charged = bytes,
        .ctx = ctx,
        .dev = ctx->dev,
        .kind = kind,
    };
    fg_table_insert(&e);
    *key = e.key;
    return CUDA_SUCCESS;
}

FG_API CUresult cuArrayCreate_v2(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *d)
{
    if (!fg_ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    unsigned texel = d ? texel_size(d->Format, d->NumChannels, d->Width, d->Height, 0) : 0;
    if (!pHandle || texel == 0)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t key;
    CUresult r = create(&key, level_bytes(d->Width, d->Height, 0, texel), FG_KIND_ARRAY);
    if (r == CUDA_SUCCESS)
        *pHandle = (CUarray)(uintptr_t)key;
    return r;
}

FG_API CUresult cuArray3DCreate_v2(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *d)
{
    if (!fg_ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    unsigned texel = d ? texel_size(d->Format, d->NumChannels, d->Width, d->Height, d->Depth) : 0;
    if (!pHandle || texel == 0)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t key;
    CUresult r = create(&key, level_bytes(d->Width, d->Height, d->Depth, texel), FG_KIND_ARRAY);
    if (r == CUDA_SUCCESS)
        *pHandle = (CUarray)(uintptr_t)key;
    return r;
}

static CUresult destroy(uint64_t key, int kind)
{
    if (!fg_ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    struct fg_entry e;
    if (fg_table_remove(key, FG_KIND_BIT(kind), &e) != 0)
        return CUDA_ERROR_INVALID_HANDLE;
    fg_uncharge(e.dev, e.charged);
    return CUDA_SUCCESS;
}

FG_API CUresult cuArrayDestroy(CUarray hArray)
{
    return destroy((uint64_t)(uintptr_t)hArray, FG_KIND_ARRAY);
}

static uint64_t halve(uint64_t x, unsigned i)
{
    if (x == 0)
        return 0;
    x = i < 64 ? x >> i : 0;
    return x ? x : 1;
}

FG_API CUresult cuMipmappedArrayCreate(CUmipmappedArray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *d,
                                       unsigned int numMipmapLevels)
{
    if (!fg_ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    unsigned texel = d ? texel_size(d->Format, d->NumChannels, d->Width, d->Height, d->Depth) : 0;
    if (!pHandle || texel == 0 || numMipmapLevels == 0)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t maxdim = d->Width;
    if (d->Height > maxdim)
        maxdim = d->Height;
    if (d->Depth > maxdim)
        maxdim = d->Depth;
    unsigned levels = 1;
    while ((maxdim >> levels) > 0)
        levels++;
    if (numMipmapLevels > levels)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t total = 0;
    for (unsigned i = 0; i < numMipmapLevels; i++) {
        uint64_t b = level_bytes(halve(d->Width, i), halve(d->Height, i), halve(d->Depth, i), texel);
        if (b == 0 || __builtin_add_overflow(total, b, &total))
            return CUDA_ERROR_OUT_OF_MEMORY;
    }
    uint64_t key;
    CUresult r = create(&key, total, FG_KIND_MIPMAP);
    if (r == CUDA_SUCCESS)
        *pHandle = (CUmipmappedArray)(uintptr_t)key;
    return r;
}

FG_API CUresult cuMipmappedArrayDestroy(CUmipmappedArray hMipmappedArray)
{
    return destroy((uint64_t)(uintptr_t)hMipmappedArray, FG_KIND_MIPMAP);
}
