/* Naming the native frames of a memory snapshot after the fact (tessera-stat symbolize).
 *
 * snapshot_on_oom writes frames as the process saw them: {'name': '0x<file offset>',
 * 'filename': <the mapped file>, 'line': 0}, because naming them means reading symbol tables,
 * which is no work for a process at its failure. This pass reads such a pickle back, names each
 * raw frame whose file is still there from the file's ELF symbol tables (statspage/symbols.h),
 * leaves a frame it cannot name as it was, and writes the pickle again. Frames in tessera's own
 * files (libtessera*), which older snapshots kept, are left out, as the writer does today.
 *
 * Only the pickles tessera writes are read (statspage/snapshot.c's opcodes: protocol 2, no memo,
 * so no shared references): anything else is refused with the opcode and its offset. Every
 * length is checked against the bytes left, nesting is bounded and so are the items open at once;
 * a hostile file gets an error, never a crash or unbounded work.
 */
#ifndef TS_SYMBOLIZE_H
#define TS_SYMBOLIZE_H

#include <stddef.h>

struct ts_symbols;

/* What the pass did. */
typedef struct ts_symbolize_counts {
    size_t frames;     /* frame dicts seen ({'name', 'filename', 'line'}) */
    size_t named;      /* raw frames given a function name */
    size_t unresolved; /* raw frames left as they were (file gone, no symbol) */
    size_t dropped;    /* tessera's own frames left out */
    size_t bounded;    /* raw frames left as they were to keep the output under the bound */
} ts_symbolize_counts;

/* Items open at once and nesting of containers the reader accepts. */
#define TS_SYMBOLIZE_MAX_ITEMS (1u << 21)
#define TS_SYMBOLIZE_MAX_DEPTH 64

/* Name the raw frames of the pickle in[0, n) (at most TS_SNAP_MAX_BYTES) with sym's symbol
 * tables; the new pickle in *out (malloc'd, *outlen bytes, never over TS_SNAP_MAX_BYTES).
 * 0; EINVAL when the bytes are not a pickle tessera writes (err says where); EFBIG when over the
 * bound; ENOMEM. c may be NULL. */
int ts_snap_symbolize(const unsigned char *in, size_t n, struct ts_symbols *sym,
                      unsigned char **out, size_t *outlen, ts_symbolize_counts *c, char *err,
                      size_t errlen);

#endif /* TS_SYMBOLIZE_H */
