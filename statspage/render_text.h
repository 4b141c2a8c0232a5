/* Text helpers the renderers share (statspage/render.c defines them), not part of the reader's
 * API. */
#ifndef TS_STATSPAGE_RENDER_TEXT_H
#define TS_STATSPAGE_RENDER_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

/* The command for narrow columns: the program's directory dropped, sanitised for a terminal,
 * in at most width characters (cut with "..."), padded to width when pad. */
void ts_render_put_command(FILE *f, const char *cmd, size_t cap, size_t width, bool pad);

#endif /* TS_STATSPAGE_RENDER_TEXT_H */
