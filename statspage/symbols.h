/* Function names for native frames, from the ELF symbol tables of the files a process mapped
 * (.symtab when the file has one, else .dynsym). No dladdr, no debug information: the name of
 * the function that contains an address, and nothing is executed or loaded into the process.
 *
 * Used when a memory snapshot is written by a reader (tessera-stat snapshot), never on the
 * allocation path. Every file is read through bounds-checked offsets: a truncated or forged
 * ELF file gives no names, never a crash.
 */
#ifndef TS_SYMBOLS_H
#define TS_SYMBOLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct ts_symbols ts_symbols;

/* A cache of the files looked at so far. NULL when out of memory. */
ts_symbols *ts_symbols_create(void);
void ts_symbols_free(ts_symbols *s);

/* The function of path that contains file offset off (a return address less one, as a frame
 * holds): its name into name (at most len bytes) and true; false when unknown. */
bool ts_symbols_lookup(ts_symbols *s, const char *path, uint64_t off, char *name, size_t len);

#endif /* TS_SYMBOLS_H */
