/* A JSON string on a FILE, for the tools' --json reports (tessera-replay, bench-core). The stats
 * page renderer has its own, UTF-8-validating writer: page text comes from other processes;
 * these strings come from our own command line and files. */
#ifndef TS_TOOLS_JSON_OUT_H
#define TS_TOOLS_JSON_OUT_H

#include <stdio.h>

static inline void json_put_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            fprintf(f, "\\%c", *s);
        else if ((unsigned char)*s < 0x20)
            fprintf(f, "\\u%04x", *s);
        else
            fputc(*s, f);
    }
    fputc('"', f);
}

#endif /* TS_TOOLS_JSON_OUT_H */
