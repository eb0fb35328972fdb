/* conf.c — nebula.conf's keys, parse and lookup (conf.h).
 *
 * KEYS is the whole configuration: each row names a section and key, where
 * its value lives in struct conf_settings, its kind and range, and its
 * built-in default as the file would write it.  conf_defaults parses those
 * defaults with the same code that parses the file, so the two cannot drift.
 * inih (built with its defaults: no line number in the handler) calls
 * on_entry for each key; a refusal returns 0, and inih's return value is the
 * line of the first one, which the message then names. */
#include "core/conf/conf.h"

#include <errno.h>
#include <ini.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/util/err.h"

enum kind { K_STR, K_INT, K_BYTES, K_CHOICE, K_REAL };

struct key {
    const char *section, *name;
    enum kind kind;
    size_t offset, size; /* of the field; size: the buffer of a K_STR / K_CHOICE */
    int64_t lo, hi;      /* K_INT, K_BYTES; K_REAL: in millionths */
    const char *choices; /* K_CHOICE: "a|b|c" */
    const char *def;     /* the built-in default, as the file would write it */
};

#define F(field) offsetof(struct conf_settings, field), sizeof(((struct conf_settings *)0)->field)
static const struct key KEYS[] = {
    {"model", "path", K_STR, F(model), 0, 0, NULL, ""},
    {"model", "mtp", K_STR, F(mtp), 0, 0, NULL, ""},
    {"model", "prepared", K_STR, F(prepared), 0, 0, NULL, ""},
    {"model", "name", K_STR, F(name), 0, 0, NULL, ""},
    {"server", "port", K_INT, F(port), 1, 65535, NULL, "8090"},
    {"server", "api_port", K_INT, F(api_port), 0, 65535, NULL, "8091"},
    {"server", "max_queue", K_INT, F(max_queue), 0, 4096, NULL, "8"},
    {"server", "max_body", K_BYTES, F(max_body), 1024, 1ll << 30, NULL, "4194304"},
    {"engine", "threads", K_INT, F(threads), 0, 4096, NULL, "0"},
    {"engine", "ctx", K_INT, F(ctx), 0, 1ll << 40, NULL, "0"},
    {"engine", "prefill_chunk", K_INT, F(chunk), 1, NB_MAX_PREFILL_CHUNK, NULL, "512"},
    {"engine", "prefill_stream_rows", K_INT, F(stream_rows), 17, NB_MAX_PREFILL_CHUNK, NULL, "17"},
    {"engine", "backend", K_CHOICE, F(backend), 0, 0, "auto|cpu|cuda", "auto"},
    {"engine", "kernels", K_CHOICE, F(kernels), 0, 0, "ref|fast", "fast"},
    {"engine", "cpu_kernels", K_CHOICE, F(cpu_kernels), 0, 0, "auto|ref|fast|int8", "auto"},
    {"engine", "spec", K_CHOICE, F(spec), 0, 0, "off|mtp|lookup|auto", "off"},
    {"engine", "spec_coverage", K_STR, F(spec_coverage), 0, 0, NULL, "off"},
    {"engine", "vram_budget", K_BYTES, F(vram_budget), 0, INT64_MAX, NULL, "0"},
    {"engine", "ram_budget", K_BYTES, F(ram_budget), 0, INT64_MAX, NULL, "0"},
    {"cache", "enable", K_CHOICE, F(cache_enable), 0, 0, "on|off|auto", "auto"},
    {"cache", "ram_entries", K_INT, F(cache_ram_entries), 0, 1 << 20, NULL, "8"},
    {"cache", "ram_bytes", K_BYTES, F(cache_ram_bytes), 0, INT64_MAX, NULL, "4294967296"},
    {"cache", "dir", K_STR, F(cache_dir), 0, 0, NULL, ""},
    {"cache", "disk_bytes", K_BYTES, F(cache_disk_bytes), 0, INT64_MAX, NULL, "68719476736"},
    {"cache", "resume", K_CHOICE, F(cache_resume), 0, 0, "anywhere|grid", "anywhere"},
    {"generate", "accuracy_level", K_INT, F(accuracy_level), 1, 3, NULL, "3"},
    /* the adaptive slot cache (engine/slot_policy.h; the defaults are its GW_SLOT_*) */
    {"slots", "adapt", K_CHOICE, F(slots_adapt), 0, 0, "static|adaptive", "static"},
    {"slots", "adapt_every", K_INT, F(slots_every), 1, 4096, NULL, "4"},
    {"slots", "swaps", K_INT, F(slots_swaps), 1, 4096, NULL, "16"},
    {"slots", "decay", K_REAL, F(slots_decay), 1, 1000000, NULL, "0.98"},
    {"slots", "hysteresis", K_REAL, F(slots_hysteresis), 0, 1000000000, NULL, "0.5"},
};
#undef F
#define N_KEYS (int)(sizeof KEYS / sizeof *KEYS)

/* "12G", "512M", "4096": a byte count (K, M, G, T: powers of 1024). */
static int parse_bytes(const char *v, uint64_t *out)
{
    char *end;
    errno = 0;
    if (*v < '0' || *v > '9') return -1;
    unsigned long long n = strtoull(v, &end, 10);
    unsigned shift = 0;
    switch (*end) {
    case 'K': case 'k': shift = 10; end++; break;
    case 'M': case 'm': shift = 20; end++; break;
    case 'G': case 'g': shift = 30; end++; break;
    case 'T': case 't': shift = 40; end++; break;
    default: break;
    }
    if (errno || *end || (shift && n > (UINT64_MAX >> shift))) return -1;
    *out = (uint64_t)n << shift;
    return 0;
}

static bool in_choices(const char *v, const char *choices)
{
    size_t n = strlen(v);
    for (const char *c = choices; *c;) {
        const char *bar = strchr(c, '|');
        size_t len = bar ? (size_t)(bar - c) : strlen(c);
        if (len == n && !strncmp(c, v, n)) return true;
        c += len + (bar != NULL);
    }
    return false;
}

/* value → field; a one-line reason in why when refused. */
static int set(const struct key *k, const char *v, struct conf_settings *s, char *why, size_t whylen)
{
    char *field = (char *)s + k->offset, *end;
    long long n;
    uint64_t b;
    switch (k->kind) {
    case K_STR:
        if (strlen(v) >= k->size) return snprintf(why, whylen, "longer than %zu bytes", k->size - 1), -1;
        memcpy(field, v, strlen(v) + 1);
        return 0;
    case K_CHOICE:
        if (!in_choices(v, k->choices)) return snprintf(why, whylen, "'%s' is not one of %s", v, k->choices), -1;
        memcpy(field, v, strlen(v) + 1);
        return 0;
    case K_INT:
        errno = 0;
        n = strtoll(v, &end, 10);
        if (!*v || *end || errno || n < k->lo || n > k->hi)
            return snprintf(why, whylen, "'%s' is not a whole number in [%lld, %lld]", v, (long long)k->lo, (long long)k->hi), -1;
        if (k->size == sizeof(int)) *(int *)field = (int)n;
        else *(int64_t *)field = n;
        return 0;
    case K_REAL: {
        errno = 0;
        double d = strtod(v, &end);
        if (!*v || *end || errno || !(d * 1e6 >= (double)k->lo && d * 1e6 <= (double)k->hi))
            return snprintf(why, whylen, "'%s' is not a number in [%g, %g]", v, (double)k->lo / 1e6, (double)k->hi / 1e6), -1;
        *(double *)field = d;
        return 0;
    }
    case K_BYTES:
        if (parse_bytes(v, &b) || b < (uint64_t)k->lo || b > (uint64_t)k->hi)
            return snprintf(why, whylen, "'%s' is not a byte count (like 4096, 512M, 12G) in [%lld, %lld]", v,
                            (long long)k->lo, (long long)k->hi), -1;
        *(uint64_t *)field = b;
        return 0;
    }
    return -1;
}

static const struct key *find(const char *section, const char *name)
{
    for (int i = 0; i < N_KEYS; i++)
        if (!strcmp(KEYS[i].section, section) && !strcmp(KEYS[i].name, name)) return &KEYS[i];
    return NULL;
}

void conf_defaults(struct conf_settings *s)
{
    char why[128];
    memset(s, 0, sizeof *s);
    for (int i = 0; i < N_KEYS; i++) set(&KEYS[i], KEYS[i].def, s, why, sizeof why);
}

struct parse {
    struct conf_settings *s;
    char key[96], why[256]; /* the first refusal */
    bool refused;
};

static int on_entry(void *user, const char *section, const char *name, const char *value)
{
    struct parse *p = user;
    if (p->refused) return 1; /* the first error is the one reported */
    const struct key *k = find(section, name);
    snprintf(p->key, sizeof p->key, "%s%s%s", section, *section ? "." : "", name);
    if (!*section) snprintf(p->why, sizeof p->why, "a key outside any [section]");
    else if (!k) snprintf(p->why, sizeof p->why, "unknown key (docs/RUNNING.md lists them)");
    else if (set(k, value, p->s, p->why, sizeof p->why) == 0) return 1;
    p->refused = true;
    return 0;
}

int conf_load(const char *path, struct conf_settings *s, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (!f) return nb_errf(err, errlen, NB_ENOENT, "cannot open %s: %s", path, strerror(errno));
    struct parse p = {.s = s};
    int line = ini_parse_file(f, on_entry, &p);
    fclose(f);
    if (line == 0) return 0;
    if (line < 0) return nb_errf(err, errlen, NB_ENOMEM, "%s: out of memory", path);
    if (p.refused) return nb_errf(err, errlen, NB_EINVAL, "%s:%d: %s: %s", path, line, p.key, p.why);
    return nb_errf(err, errlen, NB_EINVAL, "%s:%d: not an INI line (want [section] or key = value)", path, line);
}

static bool readable(const char *path) { return access(path, R_OK) == 0; }

int conf_locate(const char *explicit_path, const char *exe_dir, char *out, size_t len, char *err, size_t errlen)
{
    if (explicit_path) {
        if (!readable(explicit_path))
            return nb_errf(err, errlen, NB_ENOENT, "--config %s: %s", explicit_path, strerror(errno));
        return snprintf(out, len, "%s", explicit_path) < (int)len ? 0 : nb_errf(err, errlen, NB_EINVAL, "path too long");
    }
    const char *xdg = getenv("XDG_CONFIG_HOME"), *home = getenv("HOME");
    char path[PATH_MAX];
    if (xdg && *xdg) snprintf(path, sizeof path, "%s/nebula/nebula.conf", xdg);
    else if (home && *home) snprintf(path, sizeof path, "%s/.config/nebula/nebula.conf", home);
    else path[0] = 0;
    if (path[0] && readable(path)) return snprintf(out, len, "%s", path) < (int)len ? 0 : 1;
    if (exe_dir && snprintf(path, sizeof path, "%s/../../conf/nebula.conf", exe_dir) < (int)sizeof path && readable(path))
        return snprintf(out, len, "%s", path) < (int)len ? 0 : 1;
    return 1;
}

int conf_load_default(const char *explicit_path, const char *exe_dir, struct conf_settings *s, char *used, size_t used_len,
                      char *err, size_t errlen)
{
    conf_defaults(s);
    used[0] = 0;
    int rc = conf_locate(explicit_path, exe_dir, used, used_len, err, errlen);
    if (rc == 1) return used[0] = 0, 0;
    return rc ? rc : conf_load(used, s, err, errlen);
}

int conf_get(const struct conf_settings *s, const char *key, char *out, size_t len)
{
    const char *dot = strchr(key, '.');
    char section[32];
    if (!dot || (size_t)(dot - key) >= sizeof section) return NB_ENOENT;
    memcpy(section, key, (size_t)(dot - key));
    section[dot - key] = 0;
    const struct key *k = find(section, dot + 1);
    if (!k) return NB_ENOENT;
    const char *field = (const char *)s + k->offset;
    switch (k->kind) {
    case K_STR:
    case K_CHOICE: snprintf(out, len, "%s", field); break;
    case K_INT:
        snprintf(out, len, "%lld", k->size == sizeof(int) ? (long long)*(const int *)field : (long long)*(const int64_t *)field);
        break;
    case K_BYTES: snprintf(out, len, "%" PRIu64, *(const uint64_t *)field); break;
    case K_REAL: snprintf(out, len, "%g", *(const double *)field); break;
    }
    return 0;
}

const char *conf_key_name(int i)
{
    static char name[64];
    if (i < 0 || i >= N_KEYS) return NULL;
    snprintf(name, sizeof name, "%s.%s", KEYS[i].section, KEYS[i].name);
    return name;
}
