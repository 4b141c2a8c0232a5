/* Standalone driver for the libFuzzer targets: runs LLVMFuzzerTestOneInput on every file named on
 * the command line, and on every regular file inside each directory named (not recursive), so
 * the corpora are replayed as ordinary tests with any compiler, no libFuzzer needed.
 * Exit status 0 when all inputs ran (a failing check inside the target aborts). */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "standalone: %s: %s\n", path, strerror(errno));
        return -1;
    }
    size_t cap = 4096, len = 0;
    uint8_t *buf = malloc(cap);
    for (;;) {
        if (!buf) {
            fclose(f);
            fprintf(stderr, "standalone: %s: out of memory\n", path);
            return -1;
        }
        len += fread(buf + len, 1, cap - len, f);
        if (len < cap)
            break;
        uint8_t *bigger = realloc(buf, cap * 2);
        if (!bigger)
            free(buf);
        buf = bigger;
        cap *= 2;
    }
    int err = ferror(f);
    fclose(f);
    if (err) {
        fprintf(stderr, "standalone: %s: read error\n", path);
        free(buf);
        return -1;
    }
    /* an exact-size copy, so ASan catches a read past the end as libFuzzer would */
    uint8_t *exact = malloc(len ? len : 1);
    if (!exact) {
        free(buf);
        return -1;
    }
    memcpy(exact, buf, len);
    free(buf);
    LLVMFuzzerTestOneInput(exact, len);
    free(exact);
    return 0;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int run_dir(const char *dir, unsigned *count)
{
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "standalone: %s: %s\n", dir, strerror(errno));
        return -1;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        if (n == cap) {
            size_t ncap = cap ? cap * 2 : 64;
            char **nn = realloc(names, ncap * sizeof *nn);
            if (!nn) {
                rc = -1;
                break;
            }
            names = nn;
            cap = ncap;
        }
        size_t l = strlen(dir) + strlen(de->d_name) + 2;
        names[n] = malloc(l);
        if (!names[n]) {
            rc = -1;
            break;
        }
        snprintf(names[n], l, "%s/%s", dir, de->d_name);
        n++;
    }
    closedir(d);
    if (n)
        qsort(names, n, sizeof *names, by_name);
    for (size_t i = 0; i < n; i++) {
        struct stat st;
        if (rc == 0 && stat(names[i], &st) == 0 && S_ISREG(st.st_mode)) {
            if (run_file(names[i]) != 0)
                rc = -1;
            else
                (*count)++;
        }
        free(names[i]);
    }
    free(names);
    return rc;
}

int main(int argc, char **argv)
{
    if (LLVMFuzzerInitialize)
        LLVMFuzzerInitialize(&argc, &argv);
    if (argc < 2) {
        fprintf(stderr, "usage: %s FILE_OR_DIR...\n", argv[0]);
        return 2;
    }
    unsigned count = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            fprintf(stderr, "standalone: %s: %s\n", argv[i], strerror(errno));
            return 1;
        }
        int rc;
        if (S_ISDIR(st.st_mode)) {
            rc = run_dir(argv[i], &count);
        } else {
            rc = run_file(argv[i]);
            count += rc == 0;
        }
        if (rc != 0)
            return 1;
    }
    fprintf(stderr, "standalone: %u inputs ran\n", count);
    return count ? 0 : 1;
}
