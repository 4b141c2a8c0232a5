/* Simulated CUDA driver: settings a program makes and reads back, that change nothing here
 * because nothing they tune runs on the simulated device: context limits (cuCtxSetLimit /
 * cuCtxGetLimit), persisting L2 lines (cuCtxResetPersistingL2Cache) and the stream attributes
 * of cuStreamSetAttribute / cuStreamGetAttribute (the L2 access policy window, the
 * synchronisation policy, the priority).
 *
 * The values and checks are an H100's under CUDA 13: the documented defaults, the device
 * runtime's synchronisation depth unsupported from compute capability 9.0 on, the L2 fetch
 * granularity between 0 and 128 bytes, the persisting L2 size clamped to the device's maximum,
 * the limits of green (CIG) contexts read-only. */
#include "sim.h"

#include <string.h>

static size_t limit_default(CUlimit l)
{
    switch (l) {
    case CU_LIMIT_STACK_SIZE: return 1024;
    case CU_LIMIT_PRINTF_FIFO_SIZE: return 1 << 20;
    case CU_LIMIT_MALLOC_HEAP_SIZE: return 8 << 20;
    case CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT: return 2048;
    case CU_LIMIT_MAX_L2_FETCH_GRANULARITY: return 64;
    case CU_LIMIT_CIG_SHMEM_FALLBACK_ENABLED: return 1;
    case CU_LIMIT_SHMEM_SIZE: {
        int v = 0;
        sim_device_attribute(&v, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, 0);
        return (size_t)v;
    }
    default: return 0; /* the persisting L2 size; CIG_ENABLED: not a green context */
    }
}

static CUresult limit_known(CUlimit l)
{
    if ((unsigned)l >= CU_LIMIT_MAX || l == CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH)
        return CUDA_ERROR_UNSUPPORTED_LIMIT; /* sync depth: compute capability below 9.0 only */
    return CUDA_SUCCESS;
}

CUresult sim_ctx_set_limit(CUlimit limit, size_t value)
{
    CUresult r = sim_check_init();
    if (r == CUDA_SUCCESS)
        r = limit_known(limit);
    if (r != CUDA_SUCCESS)
        return r;
    if (limit == CU_LIMIT_SHMEM_SIZE || limit == CU_LIMIT_CIG_ENABLED ||
        (limit == CU_LIMIT_MAX_L2_FETCH_GRANULARITY && value > 128))
        return CUDA_ERROR_INVALID_VALUE; /* read-only, or out of the documented range */
    if (limit == CU_LIMIT_PERSISTING_L2_CACHE_SIZE) {
        int max = 0;
        sim_device_attribute(&max, CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE, 0);
        if (value > (size_t)max) /* a hint: clamped to what the device has */
            value = (size_t)max;
    }
    sim_lock();
    struct sim_ctx *cur;
    r = sim_current_ctx(&cur);
    if (r == CUDA_SUCCESS) {
        if (cur->limits_uid != cur->uid) {
            cur->limits_set = 0;
            cur->limits_uid = cur->uid;
        }
        cur->limits[limit] = value;
        cur->limits_set |= 1u << limit;
    }
    sim_unlock();
    return r;
}

CUresult sim_ctx_get_limit(size_t *value, CUlimit limit)
{
    CUresult r = sim_check_init();
    if (r == CUDA_SUCCESS)
        r = limit_known(limit);
    if (r != CUDA_SUCCESS)
        return r;
    if (!value)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    struct sim_ctx *cur;
    r = sim_current_ctx(&cur);
    if (r == CUDA_SUCCESS)
        *value = cur->limits_uid == cur->uid && (cur->limits_set & (1u << limit))
                     ? cur->limits[limit]
                     : limit_default(limit);
    sim_unlock();
    return r;
}

CUresult sim_ctx_reset_persisting_l2(void)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    sim_lock();
    struct sim_ctx *cur;
    r = sim_current_ctx(&cur); /* no L2 here: nothing to demote */
    sim_unlock();
    return r;
}

static CUresult window_check(const CUaccessPolicyWindow *w)
{
    int max = 0;
    sim_device_attribute(&max, CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE, 0);
    bool ratio = w->hitRatio >= 0.0f && w->hitRatio <= 1.0f; /* false for a NaN too */
    if (w->num_bytes > (size_t)max || !ratio || (unsigned)w->hitProp > CU_ACCESS_PROPERTY_PERSISTING ||
        (unsigned)w->missProp > CU_ACCESS_PROPERTY_STREAMING)
        return CUDA_ERROR_INVALID_VALUE; /* a miss cannot persist */
    return CUDA_SUCCESS;
}

CUresult sim_stream_attribute(CUstream h, bool ptsz, CUstreamAttrID attr, CUstreamAttrValue *v,
                              bool set)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!v)
        return CUDA_ERROR_INVALID_VALUE;
    if (set && attr == CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW) {
        r = window_check(&v->accessPolicyWindow);
        if (r != CUDA_SUCCESS)
            return r;
    }
    if (set && attr == CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY &&
        (v->syncPolicy < CU_SYNC_POLICY_AUTO || v->syncPolicy > CU_SYNC_POLICY_BLOCKING_SYNC))
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    struct sim_stream *s;
    r = sim_resolve_locked(h, ptsz, &s);
    if (r == CUDA_SUCCESS) {
        switch (attr) {
        case CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW:
            if (set)
                s->window = v->accessPolicyWindow;
            else
                v->accessPolicyWindow = s->window;
            break;
        case CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY:
            if (set)
                s->sync_policy = v->syncPolicy;
            else /* a stream starts with the automatic policy */
                v->syncPolicy = s->sync_policy ? s->sync_policy : CU_SYNC_POLICY_AUTO;
            break;
        case CU_LAUNCH_ATTRIBUTE_PRIORITY:
            if (set) /* H100 range: [-5, 0], clamped as cuStreamCreateWithPriority does */
                s->priority = v->priority < -5 ? -5 : v->priority > 0 ? 0 : v->priority;
            else
                v->priority = s->priority;
            break;
        default:
            r = CUDA_ERROR_INVALID_VALUE;
        }
    }
    sim_unlock();
    return r;
}
