/* conf.h — nebula.conf: the one INI file of defaults (docs/RUNNING.md lists
 * every key, its default and who reads it).
 *
 * The key idea: one table of keys (conf.c) drives everything — the built-in
 * defaults, the parse (libinih from Debian), the checks, and `nebula config
 * get` — so a key is declared once.  Flags override the file, the file
 * overrides the built-in defaults, a key the file leaves out keeps its
 * default, and an unknown key or a bad value is an error that names
 * file:line and the key.  Callers: the coordinator, the `nebula` CLI and,
 * through `nebula config get`, deploy/start.sh. */
#ifndef NB_CONF_H
#define NB_CONF_H

#include <stddef.h>
#include <stdint.h>

#define CONF_PATH_MAX 1024
#define CONF_NAME_MAX 128

struct conf_settings {
    /* [model] */
    char model[CONF_PATH_MAX];    /* model.path: the GGUF ("": none; start.sh: the demo model) */
    char mtp[CONF_PATH_MAX];      /* model.mtp: a separate MTP GGUF ("": the model file's own, or none) */
    char prepared[CONF_PATH_MAX]; /* model.prepared: nebula-prepare's directory ("": none) */
    char name[CONF_NAME_MAX];     /* model.name: its id in the API ("": GGUF general.name) */
    /* [server] */
    int port;                     /* server.port: the page (nginx) on 127.0.0.1 */
    int api_port;                 /* server.api_port: the coordinator's HTTP API on 127.0.0.1 */
    int max_queue;                /* server.max_queue: requests that may wait while one runs */
    uint64_t max_body;            /* server.max_body: largest request body, bytes */
    /* [engine] */
#define NB_MAX_PREFILL_CHUNK 8192 /* the largest prefill chunk anything accepts (issue 14: layer-major chunks of up to 8K) */
    int threads;                  /* engine.threads: 0 = all cores */
    int64_t ctx;                  /* engine.ctx: positions a request may use (0: the model's / placement's) */
    int chunk;                    /* engine.prefill_chunk: prefill tokens per step (1 … NB_MAX_PREFILL_CHUNK) */
    int stream_rows;              /* engine.prefill_stream_rows: a prefill piece of more rows streams its
                                   * RAM-tier experts to the GPU (17 … NB_MAX_PREFILL_CHUNK) */
    char backend[8];              /* engine.backend: auto, cpu or cuda */
    char kernels[8];              /* engine.kernels: the CUDA matrix kernels, ref or fast */
    char cpu_kernels[8];          /* engine.cpu_kernels: ref, fast or auto (fast beside cuda, ref beside cpu) */
    char spec[8];                 /* engine.spec: speculative decoding, off, mtp, lookup or auto */
    uint64_t vram_budget;         /* engine.vram_budget: bytes (0: placement.json's) */
    uint64_t ram_budget;          /* engine.ram_budget: bytes for nebula-prepare's RAM tier (0: its default) */
    /* [cache]: the prompt cache across requests (coordinator/cache.c; docs/RUNNING.md) */
    char cache_enable[5];         /* cache.enable: on, off (every request prefilled from its first token) or auto (on with the
                                   * cpu backend; on cuda once its GPU check has run: coordinator/cache.c) */
    int cache_ram_entries;        /* cache.ram_entries: checkpoints kept in the gpu-worker's RAM at most */
    uint64_t cache_ram_bytes;     /* cache.ram_bytes: their bytes at most */
    char cache_dir[CONF_PATH_MAX];/* cache.dir: where checkpoints are also written, found again after a restart ("": none) */
    uint64_t cache_disk_bytes;    /* cache.disk_bytes: the directory's files at most */
    char cache_resume[9];         /* cache.resume: anywhere (checkpoints at a request's end and its generation prompt's role
                                   * header too: exact within float tolerance) or grid (only bit-exact ones: coordinator/cache.c) */
    /* [generate] */
    int accuracy_level;           /* generate.accuracy_level: 1-3, a request's default (3: exact) */
};

/* The built-in defaults (what a missing file or key means). */
void conf_defaults(struct conf_settings *s);

/* Reads `path` over *s (call conf_defaults first): each key present replaces
 * its field.  0, NB_ENOENT (cannot open), or NB_EINVAL with err
 * "FILE:LINE: KEY: why" for an unknown section or key, a bad value or a
 * line that is not INI. */
int conf_load(const char *path, struct conf_settings *s, char *err, size_t errlen);

/* Which file to read, in this order: `explicit` (--config FILE, which must
 * exist), else $XDG_CONFIG_HOME/nebula/nebula.conf (~/.config/... when unset:
 * the user's copy), else the repository's conf/nebula.conf found from
 * exe_dir (build/bin/ → ../../conf/).  0 with out filled, or 1 when there is
 * none (the built-in defaults hold); NB_ENOENT when `explicit` is missing. */
int conf_locate(const char *explicit_path, const char *exe_dir, char *out, size_t len, char *err, size_t errlen);

/* conf_locate, then conf_defaults + conf_load: what a process does at start.
 * *used gets the path read ("" for none). */
int conf_load_default(const char *explicit_path, const char *exe_dir, struct conf_settings *s, char *used, size_t used_len,
                      char *err, size_t errlen);

/* The value of "section.key" as text, as the file would spell it; NB_ENOENT
 * for an unknown key. */
int conf_get(const struct conf_settings *s, const char *key, char *out, size_t len);

/* Every key, one "section.key" per call: NULL after the last (i from 0). */
const char *conf_key_name(int i);

#endif
