/* Peer grants: which devices a virtual-memory mapping is made accessible to. One routine for
 * every backend (shim/backend_cuda.c and the device model), so the model cannot drift from the
 * driver's side.
 *
 * A backend keeps the devices the program enabled peer access for as a set of bits (device d:
 * bit d; devices 0-63). Every mapping is granted to its owning device first, then to each peer
 * in increasing order, in one access call (cuMemSetAccess takes the whole list). */
#ifndef TS_PEERS_H
#define TS_PEERS_H

#include <stdint.h>

#include "core/backend.h"

#define TS_PEER_MAX 64

/* Add device to the set. TS_EINVAL (set unchanged) for a device outside 0-63. */
static inline int ts_peer_add(uint64_t *peers, int device)
{
    if (device < 0 || device >= TS_PEER_MAX)
        return TS_EINVAL;
    *peers |= (uint64_t)1 << device;
    return TS_OK;
}

/* The devices a mapping owned by `owner` is granted to: owner first, then every peer but the
 * owner, in increasing order. out holds TS_PEER_MAX entries; returns how many were written. */
static inline unsigned ts_peer_grantees(uint64_t peers, int owner, int out[TS_PEER_MAX])
{
    unsigned n = 0;
    out[n++] = owner;
    const uint64_t own = owner >= 0 && owner < TS_PEER_MAX ? (uint64_t)1 << owner : 0;
    for (uint64_t rest = peers & ~own; rest; rest &= rest - 1) /* at most 63 more */
        out[n++] = __builtin_ctzll(rest);
    return n;
}

#endif /* TS_PEERS_H */
