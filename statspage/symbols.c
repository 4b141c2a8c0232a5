/* Function names from ELF symbol tables (statspage/symbols.h). */
#include "statspage/symbols.h"

#include <elf.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define FILES_MAX 64                    /* distinct files looked at per snapshot */
#define FILE_BYTES_MAX ((uint64_t)2 << 30) /* larger files get no names */
#define SYMS_MAX (4u << 20)

typedef struct sym {
    uint64_t lo, hi; /* [lo, hi) in the file's virtual addresses */
    uint32_t name;   /* offset into names */
} sym;

typedef struct load {
    uint64_t off, filesz, vaddr; /* a PT_LOAD: file offset off maps to vaddr */
} load;

/* One file. Invariant: syms sorted by lo, names NUL-terminated at its end. */
typedef struct elf_file {
    char path[256];
    bool ok;
    load loads[16];
    size_t nloads;
    sym *syms;
    size_t nsyms;
    char *names;
    size_t names_len;
} elf_file;

struct ts_symbols {
    elf_file files[FILES_MAX];
    size_t nfiles;
};

ts_symbols *ts_symbols_create(void)
{
    return calloc(1, sizeof(ts_symbols));
}

void ts_symbols_free(ts_symbols *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->nfiles; i++) {
        free(s->files[i].syms);
        free(s->files[i].names);
    }
    free(s);
}

/* [off, off + len) lies inside a file of size n. */
static bool within(uint64_t off, uint64_t len, uint64_t n)
{
    return off <= n && len <= n - off;
}

static int sym_cmp(const void *a, const void *b)
{
    const sym *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Read the FUNC symbols of one symbol table section (and its string table) into f. */
static bool read_symtab(elf_file *f, const unsigned char *m, uint64_t n, const Elf64_Shdr *sh,
                        const Elf64_Shdr *strsh)
{
    if (sh->sh_entsize != sizeof(Elf64_Sym) || !within(sh->sh_offset, sh->sh_size, n) ||
        !within(strsh->sh_offset, strsh->sh_size, n) || strsh->sh_size == 0)
        return false;
    uint64_t count = sh->sh_size / sizeof(Elf64_Sym);
    if (count > SYMS_MAX)
        count = SYMS_MAX;
    f->names = malloc(strsh->sh_size + 1);
    f->syms = malloc((count ? count : 1) * sizeof *f->syms);
    if (!f->names || !f->syms)
        return false;
    memcpy(f->names, m + strsh->sh_offset, strsh->sh_size);
    f->names[strsh->sh_size] = '\0';
    f->names_len = strsh->sh_size;
    for (uint64_t i = 0; i < count; i++) {
        Elf64_Sym y;
        memcpy(&y, m + sh->sh_offset + i * sizeof y, sizeof y);
        if (ELF64_ST_TYPE(y.st_info) != STT_FUNC || y.st_value == 0 || y.st_name >= f->names_len)
            continue;
        uint64_t size = y.st_size ? y.st_size : 1;
        if (y.st_value > UINT64_MAX - size)
            continue;
        f->syms[f->nsyms++] = (sym){y.st_value, y.st_value + size, y.st_name};
    }
    qsort(f->syms, f->nsyms, sizeof *f->syms, sym_cmp);
    return f->nsyms > 0;
}

/* Parse the file: its PT_LOAD segments and a symbol table. */
static void load_file(elf_file *f)
{
    int fd = open(f->path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0)
        return;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size < (off_t)sizeof(Elf64_Ehdr) ||
        (uint64_t)st.st_size > FILE_BYTES_MAX) {
        close(fd);
        return;
    }
    uint64_t n = (uint64_t)st.st_size;
    const unsigned char *m = mmap(NULL, n, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (m == MAP_FAILED)
        return;
    Elf64_Ehdr eh;
    memcpy(&eh, m, sizeof eh);
    if (memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64 ||
        eh.e_phentsize != sizeof(Elf64_Phdr) || eh.e_shentsize != sizeof(Elf64_Shdr) ||
        !within(eh.e_phoff, (uint64_t)eh.e_phnum * sizeof(Elf64_Phdr), n) ||
        !within(eh.e_shoff, (uint64_t)eh.e_shnum * sizeof(Elf64_Shdr), n))
        goto out;
    for (unsigned i = 0; i < eh.e_phnum && f->nloads < 16; i++) {
        Elf64_Phdr ph;
        memcpy(&ph, m + eh.e_phoff + (uint64_t)i * sizeof ph, sizeof ph);
        if (ph.p_type == PT_LOAD)
            f->loads[f->nloads++] = (load){ph.p_offset, ph.p_filesz, ph.p_vaddr};
    }
    /* .symtab (every function) when the file was not stripped, else .dynsym (exports) */
    for (int pass = 0; pass < 2 && !f->ok; pass++) {
        uint32_t want = pass == 0 ? SHT_SYMTAB : SHT_DYNSYM;
        for (unsigned i = 0; i < eh.e_shnum && !f->ok; i++) {
            Elf64_Shdr sh, strsh;
            memcpy(&sh, m + eh.e_shoff + (uint64_t)i * sizeof sh, sizeof sh);
            if (sh.sh_type != want || sh.sh_link >= eh.e_shnum)
                continue;
            memcpy(&strsh, m + eh.e_shoff + (uint64_t)sh.sh_link * sizeof strsh, sizeof strsh);
            if (read_symtab(f, m, n, &sh, &strsh)) {
                f->ok = true;
            } else {
                free(f->syms);
                free(f->names);
                f->syms = NULL;
                f->names = NULL;
                f->nsyms = 0;
            }
        }
    }
out:
    munmap((void *)m, n);
}

static elf_file *file_get(ts_symbols *s, const char *path)
{
    for (size_t i = 0; i < s->nfiles; i++)
        if (strcmp(s->files[i].path, path) == 0)
            return &s->files[i];
    if (s->nfiles == FILES_MAX || strlen(path) >= sizeof s->files[0].path || path[0] != '/')
        return NULL;
    elf_file *f = &s->files[s->nfiles++];
    snprintf(f->path, sizeof f->path, "%s", path);
    load_file(f);
    return f;
}

bool ts_symbols_lookup(ts_symbols *s, const char *path, uint64_t off, char *name, size_t len)
{
    elf_file *f = s ? file_get(s, path) : NULL;
    if (!f || !f->ok)
        return false;
    /* the file offset to the address the symbol table speaks of */
    uint64_t va = 0;
    bool found = false;
    for (size_t i = 0; i < f->nloads && !found; i++)
        if (off >= f->loads[i].off && off - f->loads[i].off < f->loads[i].filesz) {
            va = off - f->loads[i].off + f->loads[i].vaddr;
            found = true;
        }
    if (!found)
        return false;
    /* the last symbol starting at or below va */
    size_t lo = 0, hi = f->nsyms;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (f->syms[mid].lo <= va)
            lo = mid;
        else
            hi = mid;
    }
    const sym *y = &f->syms[lo];
    if (y->lo > va || va >= y->hi)
        return false;
    /* printable ASCII only: the name goes into a pickle's UTF-8 string */
    size_t k = 0;
    for (const char *c = f->names + y->name; *c && k + 1 < len; c++)
        name[k++] = (unsigned char)*c > 0x20 && (unsigned char)*c < 0x7f ? *c : '?';
    if (len)
        name[k] = '\0';
    return k > 0;
}
