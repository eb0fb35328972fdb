/* prepare.h — the pieces of nebula-prepare and what they share.
 *
 * nebula-prepare splits a qwen4exp GGUF into the files the engine's rooms
 * read (docs/FILES.md): dense.gguf, experts.bin + experts.idx, ple.bin,
 * hotlist.tsv, placement.json, manifest.json and checksums.sha256.  Every
 * output is a pure function of the input and the options, so "is this part
 * done?" is always answered the same way: regenerate what is cheap and
 * compare bytes, hash what is large and compare with checksums.sha256.
 * Large parts are written through a resumable writer (ckpt.c) that
 * checkpoints whole units (a layer of experts, 256 MiB of n-gram rows).
 *
 * Errors are values: every function returns 0 or a negative NB_E* code and
 * writes a message into err; main() decides the exit status. */
#ifndef NB_PREPARE_H
#define NB_PREPARE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/util/mapfile.h"
#include "core/model/model.h"

#define PREP_PAGE 4096u               /* O_DIRECT unit: alignment of blobs, pages and headers */
#define PREP_FORMAT_VERSION 1u        /* of every binary file and of manifest.json */
#define PREP_HEAD_BYTES (16u << 20)   /* bytes of each input shard hashed for its identity */
#define PREP_SHA_HEX 65               /* 64 hex digits + NUL */

/* ---------- progress.c: a bar on a terminal, plain lines otherwise ---------- */

struct progress {
    const char *what;     /* "experts.bin: writing" */
    uint64_t total, done;
    double t0, last_draw;
    int last_pct;
};

/* Once, from main: quiet silences everything but errors; the bar is drawn
 * only when stderr is a terminal. */
void progress_setup(bool quiet);
bool progress_quiet(void);
void progress_begin(struct progress *p, const char *what, uint64_t total);
void progress_add(struct progress *p, uint64_t n);
/* Clears the bar; prints "WHAT: MESSAGE (seconds, rate)" unless quiet. */
void progress_end(struct progress *p, const char *message);
/* A plain line on stderr ("nebula-prepare: ..."), unless quiet. */
void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* "1.5 GiB" */
void fmt_bytes(uint64_t bytes, char *buf, size_t len);

/* ---------- sha.c: SHA-256 (OpenSSL EVP) and checksums.sha256 ---------- */

typedef struct prep_sha prep_sha;
int sha_new(prep_sha **out, char *err, size_t errlen);
void sha_update(prep_sha *s, const void *data, size_t n);
void sha_final_hex(prep_sha *s, char hex[PREP_SHA_HEX]); /* the context is spent */
void sha_free(prep_sha *s);
void sha_buf_hex(const void *data, size_t n, char hex[PREP_SHA_HEX]);
/* Hash of the first `limit` bytes of a file (UINT64_MAX: all of it). A
 * progress may be NULL. */
int sha_file(const char *path, uint64_t limit, struct progress *p, char hex[PREP_SHA_HEX], char *err, size_t errlen);

#define SUMS_MAX 16
struct sums {
    int n;
    struct {
        char name[32];
        char hex[PREP_SHA_HEX];
    } e[SUMS_MAX];
};
/* A missing file is an empty list; a malformed line is ignored (its part
 * then simply fails verification). */
void sums_load(struct sums *s, const char *dir);
const char *sums_get(const struct sums *s, const char *name); /* NULL if absent */
void sums_set(struct sums *s, const char *name, const char *hex);
void sums_drop(struct sums *s, const char *name);
/* Writes DIR/checksums.sha256 (sha256sum format, names sorted) atomically. */
int sums_save(const struct sums *s, const char *dir, char *err, size_t errlen);

/* ---------- files.c: small-file helpers ---------- */

/* DIR/NAME into buf (truncation is an error). */
int path_join(char *buf, size_t len, const char *dir, const char *name);
/* Writes DIR/NAME.tmp, syncs it, renames it to DIR/NAME. */
int write_file_atomic(const char *dir, const char *name, const void *data, size_t n, char *err, size_t errlen);
bool file_exists(const char *dir, const char *name);
/* Drops the input mapping's pages of [p, p+n) from this process (they stay
 * in the page cache): copying a 100 GB model does not grow the RSS. */
void release_input(const void *p, uint64_t n);
/* Parses "123", "12G", "512M", "1.5GiB", "all" (UINT64_MAX); binary multiples. */
int parse_size(const char *s, uint64_t *out);

/* ---------- ckpt.c: resumable output of a deterministic byte stream ---------- */

/* The content is a list of units; fill() produces bytes [off, off+n) of a
 * unit (always the same bytes for the same identity). */
struct ckpt_source {
    int n_units;
    uint64_t (*unit_bytes)(void *ctx, int unit);
    int (*fill)(void *ctx, int unit, uint64_t off, void *buf, size_t n, char *err, size_t errlen);
    void (*unit_done)(void *ctx, int unit); /* optional: the unit's input is no longer needed */
    void *ctx;
};

/* Writes DIR/NAME through DIR/NAME.tmp and DIR/NAME.state.  If a state with
 * the same identity exists, the units it records are re-read, compared with
 * fill()'s bytes and hashed, and writing continues after the last good one
 * (*resumed_units says how many).  Returns the whole file's SHA-256. */
int ckpt_write_file(const char *dir, const char *name, const char *identity, const struct ckpt_source *src,
                    char hex[PREP_SHA_HEX], int *resumed_units, char *err, size_t errlen);
/* Test hook: after this many units are checkpointed and part of the next one
 * is written, the process sends itself `sig` (SIGKILL: a crash mid-unit;
 * SIGINT: a user's Ctrl-C). */
void ckpt_set_test_kill(int after_units, int sig);
/* Set by SIGINT/SIGTERM: writers stop at the next chunk and keep their state. */
extern volatile int prep_interrupted;

/* ---------- experts.c: experts.idx and experts.bin ---------- */

enum { EXP_GATE = 0, EXP_UP = 1, EXP_DOWN = 2, EXP_PARTS = 3 };

struct expert_part {
    const uint8_t *data;  /* expert 0's rows in the input mapping */
    size_t stride;        /* bytes from expert e to e+1 in the input */
    enum quant_type type;
    uint32_t row_len;     /* values per row (ne[0]) */
    uint32_t n_rows;
    uint64_t row_bytes;
    uint64_t bytes;       /* n_rows · row_bytes */
    uint64_t offset;      /* within the blob */
};

struct expert_layer {
    int block;            /* GGUF block index (blk.N) */
    bool mtp;
    uint32_t n_expert;
    struct expert_part part[EXP_PARTS];
    uint64_t payload_bytes; /* gate + up + down */
    uint64_t blob_bytes;    /* payload padded to PREP_PAGE */
    uint64_t offset;        /* of expert 0's blob in experts.bin */
};

struct expert_layout {
    int n_layers;
    struct expert_layer *layers;
    uint64_t file_bytes;  /* of experts.bin */
    uint8_t *idx;         /* experts.idx, as it must be on disk */
    size_t idx_bytes;
};

int expert_layout_build(struct expert_layout *x, const struct model *m, char *err, size_t errlen);
void expert_layout_free(struct expert_layout *x);
int experts_write(const struct expert_layout *x, const char *dir, const char *input_id, char hex[PREP_SHA_HEX],
                  char *err, size_t errlen);

/* ---------- ple.c: ple.bin ---------- */

struct ple_layout {
    bool present;
    const uint8_t *data;
    enum quant_type type;
    uint32_t row_len;       /* W */
    uint64_t rows;
    uint64_t row_bytes;
    uint32_t rows_per_page; /* ≥ 1 when a row fits a page, else 0 */
    uint32_t pages_per_row; /* 1 when a row fits a page, else ceil(row_bytes / page) */
    uint64_t pages;         /* data pages */
    uint64_t file_bytes;
};

int ple_layout_build(struct ple_layout *p, const struct model *m, char *err, size_t errlen);
int ple_write(const struct ple_layout *p, const char *dir, const char *input_id, char hex[PREP_SHA_HEX], char *err,
              size_t errlen);

/* ---------- dense.c: dense.gguf ---------- */

/* True for the tensors that leave the dense file (routed experts, n-gram table). */
bool dense_excludes(const char *tensor_name);
/* Sum of the dense file's tensor bytes (what a GPU uploads). */
uint64_t dense_tensor_bytes(const gguf_file *g);
/* The checksums dense.gguf records in its nebula.prepared.* keys. */
struct dense_refs {
    char experts_sha[PREP_SHA_HEX];
    char idx_sha[PREP_SHA_HEX];
    char ple_sha[PREP_SHA_HEX]; /* "" without a table */
};
/* m's files minus experts and table: its GGUF, and with a separate MTP file
 * that file's blk.L tensors in place of the trunk file's (block_count and
 * nextn_predict_layers then say so), so dense.gguf is one complete file. */
int dense_write(const struct model *m, const char *dir, const struct dense_refs *refs, char *err, size_t errlen);
/* 0 if DIR/dense.gguf opens and records exactly these refs. */
int dense_check_refs(const char *dir, const struct dense_refs *refs, char *err, size_t errlen);

/* ---------- hotlist.c ---------- */

struct hotlist {
    int n_layers;         /* = expert_layout.n_layers, same order */
    uint32_t n_expert;
    uint64_t *count;      /* [layer][expert] */
    double *weight;       /* [layer][expert] */
    bool neutral;         /* every count 0 */
};

/* Parses and validates a hotlist against the layout (every layer × expert
 * once; `name` is used in messages).  NB_EINVAL with line numbers on bad content. */
int hotlist_parse(struct hotlist *h, const struct expert_layout *x, const char *text, size_t n, const char *name,
                  char *err, size_t errlen);
/* The neutral hotlist's text (malloc'ed). */
char *hotlist_neutral_text(const struct expert_layout *x, size_t *n);
void hotlist_free(struct hotlist *h);

/* ---------- placement.c ---------- */

#define BUDGET_ALL UINT64_MAX

struct placement_opts {
    uint64_t vram_bytes;    /* the device's whole budget (the gpu-worker's --vram-budget): dense weights +
                               the reserve (K/V for vram_ctx and scratch) + expert slots; 0 = no expert in VRAM */
    int64_t vram_ctx;       /* positions the reserve holds K/V for (0: the model's context) */
    uint64_t ram_bytes;     /* RAM arena + victim cache */
    uint64_t victim_bytes;  /* part of ram_bytes kept for a victim cache of SSD experts */
    double early_weight;    /* VRAM quota weight of trunk layer 0 (1 = equal quotas) */
    int early_layers;       /* layers over which the weight ramps up to 1 (0: n_trunk/4) */
    bool mtp_first;         /* MTP experts take VRAM before the trunk's quotas */
    bool ple_ssd;           /* the PLE table's rows are paged from ple.bin (else read from RAM) */
    bool ple_vram;          /* the table on the GPU (ple_tier "vram"; it counts in the VRAM plan) */
    bool arena_vram;        /* the RAM arena holds the VRAM tier's experts too (adaptive slots can then move
                               every expert; they count in ram_bytes) */
};

struct placement_ids {      /* what the placement must name */
    const char *dense_sha, *experts_sha, *idx_sha, *hotlist_sha;
    uint64_t dense_tensor_bytes;
    uint64_t vram_dense_bytes;   /* dense + MTP weights as the device holds them (gw_vram_dense_bytes) */
    uint64_t vram_reserve_bytes; /* K/V for vram_ctx + scratch (gw_vram_reserve) */
};

/* Ranks, assigns tiers and renders placement.json (malloc'ed text).
 * NB_EINVAL when the budgets cannot work (message says why). */
int placement_build(const struct expert_layout *x, const struct hotlist *h, const struct placement_opts *o,
                    const struct placement_ids *ids, char **json, char *summary, size_t summary_len, char *err,
                    size_t errlen);
/* The slots alone: vram[l] and ram[l] experts of each layer (arrays of
 * x->n_layers), from the budgets as placement_build shares them. */
int placement_tiers(const struct expert_layout *x, const struct placement_opts *o, const struct placement_ids *ids,
                    uint32_t *vram, uint32_t *ram, char *err, size_t errlen);
/* Options recorded in an existing placement.json (fields not found keep
 * their value). Returns 0 if the text parsed. */
int placement_read_opts(const char *json, struct placement_opts *o);

/* ---------- profile.c: hardware profiles (conf/profiles.tsv) ---------- */

#define PROFILE_MAX 64
#define PROFILE_COLS 7
#define PROFILE_CLASS_SHARE 0.95 /* of a class's nominal GiB that counts as reaching it */

struct profile_row {          /* one line of conf/profiles.tsv: a class and its policy */
    char name[32];
    double vram_gib, ram_gib; /* the class */
    int64_t ctx;              /* context wanted (the model's when smaller) */
    int chunk;                /* prefill chunk wanted */
    double vram_keep_gib, ram_keep_gib; /* left to the driver and desktop, to the OS and the processes */
};
struct profile_table {
    int n;
    struct profile_row row[PROFILE_MAX];
};
/* What a row means for one model. */
struct profile_result {
    const struct profile_row *row;
    char name[40];            /* the row's, or cpu-rNN for a machine without a GPU (cpu_only) */
    bool cpu_only;            /* no GPU: no VRAM budget, the RAM pays the dense weights and K/V first */
    bool fits;                /* false: why says what does not fit */
    char why[320];
    uint64_t vram_budget, ram_budget; /* nebula-prepare's --vram-budget, --ram-budget */
    int64_t ctx;
    int chunk;
    bool ple_ssd, has_mtp;
    uint64_t ple_bytes;       /* the n-gram table (0: none) */
    uint32_t mtp_vram;        /* the MTP layer's experts in VRAM */
    char vram_layer[24], ram_layer[24], ssd_layer[24]; /* trunk layers' experts per tier: "N" or "MIN-MAX" */
    uint64_t vram_fixed;      /* dense weights + reserve */
    uint64_t vram_used, ram_used; /* + slots; the arena + the table when in RAM */
    double vram_free, ram_free;   /* the class's size less the use */
};
int profile_load(struct profile_table *t, const char *path, char *err, size_t errlen);
const struct profile_row *profile_find(const struct profile_table *t, const char *name);
/* The row of the classes the machine reaches (VRAM and RAM rounded down
 * separately); NB_EINVAL with the GiB missing when it reaches none.
 * cpu_only: the RAM class alone decides (the row of the smallest VRAM
 * class gives the policy columns). */
int profile_pick(const struct profile_table *t, uint64_t vram_bytes, uint64_t ram_bytes, bool cpu_only,
                 const struct profile_row **out, char *err, size_t errlen);
/* A profile keeps the n-gram table off the device (ple_tier ram or ssd:
 * gw_ple_host), so the VRAM plan does not count it.  cpu_only (a machine
 * without a GPU, the CPU backend): VRAM budget 0, the context the row's, and
 * the RAM budget what the row's RAM keeps after the dense weights and the
 * context's K/V and scratch (sized as on the device: engine/vram.h). */
int profile_compute(const struct profile_row *row, bool cpu_only, const struct model *m, const struct expert_layout *x,
                    const struct ple_layout *ple, struct profile_result *out, char *err, size_t errlen);
void profile_print_header(FILE *f);
void profile_print_row(FILE *f, const struct profile_result *p);
/* key=value lines, for the installer. */
void profile_print_info(FILE *f, const struct profile_result *p);
/* The hardware of a file of key=value lines (gpu_vram_mib, ram_mib), or of
 * this machine (/proc/meminfo, nvidia-smi: the GPU with the most memory). */
int profile_hw_read(const char *path, uint64_t *vram_bytes, uint64_t *ram_bytes, char *err, size_t errlen);
int profile_hw_detect(uint64_t *vram_bytes, uint64_t *ram_bytes, char *err, size_t errlen);

/* ---------- manifest.c: identity of the input ---------- */

/* A one-line identity of the input (every shard's size, mtime and head
 * hash, and those of a separate MTP file when mtp_path is not NULL) and
 * manifest.json's text. */
int input_identity(const char *path, int n_shards, const char *mtp_path, char *id, size_t idlen, char **manifest_json,
                   char *err, size_t errlen);

#endif
