/* nebula-gguf — looks inside GGUF files (and split sets) from the shell.
 *
 *   nebula-gguf info [--no-tensors] [--key KEY] FILE
 *   nebula-gguf stats FILE
 *
 * info prints the header facts, every key/value (type and value; long arrays
 * abbreviated) and the tensor table, like llama.cpp's gguf-dump; --key
 * prints one value alone, for scripts.  stats decodes every row of every
 * tensor and prints its value statistics (what a synthetic model's weights
 * are checked with: tests/tools/test_nebula_gen.sh).  All parsing and checking is the
 * library's (core/gguf): this file only lays out what it reports.
 * Exit status: 0 ok, 1 unreadable/corrupt file or missing key, 2 bad usage. */
#include <inttypes.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/gguf/gguf.h"
#include "core/quant/quant.h"

static const char usage[] =
    "usage: nebula-gguf info [--no-tensors] [--key KEY] FILE\n"
    "       nebula-gguf stats FILE\n"
    "\n"
    "  info FILE       header, key/values and tensor table of a GGUF file;\n"
    "                  a shard NAME-NNNNN-of-MMMMM.gguf opens its whole split set\n"
    "  --no-tensors    leave out the tensor table\n"
    "  --key KEY       print only the value of KEY (strings unquoted)\n"
    "  stats FILE      decode every row of every tensor: one line per tensor with\n"
    "                  name, type, values, min, max, mean, std, non-finite count\n"
    "  --help          this text\n"
    "\n"
    "exit status: 0 ok, 1 unreadable or corrupt file, missing key or (stats) a\n"
    "non-finite or undecodable value, 2 bad usage\n";

struct options {
    const char *file;
    const char *key;
    bool no_tensors;
};

static int bad_usage(const char *why)
{
    fprintf(stderr, "nebula-gguf: %s\n%s", why, usage);
    return 2;
}

/* "arr[u32]" for arrays, else the scalar type name. */
static const char *type_label(const gguf_file *g, int64_t i, char *buf, size_t len)
{
    if (gguf_kv_type(g, i) != GGUF_VT_ARRAY) return gguf_vtype_name(gguf_kv_type(g, i));
    snprintf(buf, len, "arr[%s]", gguf_vtype_name(gguf_kv_arr_type(g, i)));
    return buf;
}

static void print_kvs(const gguf_file *g)
{
    int64_t n = gguf_kv_count(g);
    int key_width = 0;
    for (int64_t i = 0; i < n; i++) {
        int w = (int)strlen(gguf_kv_key(g, i));
        if (w > key_width) key_width = w;
    }
    printf("\nkey/values: %" PRId64 "\n", n);
    static char value[4096];
    char type[24];
    for (int64_t i = 0; i < n; i++) {
        gguf_kv_format(g, i, value, sizeof value);
        printf("  %4" PRId64 "  %-9s  %-*s = %s\n", i, type_label(g, i, type, sizeof type), key_width, gguf_kv_key(g, i),
               value);
    }
}

static void print_tensors(const gguf_file *g)
{
    int64_t n = gguf_tensor_count(g);
    int name_width = 4;
    for (int64_t i = 0; i < n; i++) {
        int w = (int)strlen(gguf_tensor_at(g, i)->name);
        if (w > name_width) name_width = w;
    }
    printf("\ntensors: %" PRId64 "\n", n);
    printf("  %4s  %-*s  %-6s  %-24s  %12s  %12s  %s\n", "idx", name_width, "name", "type", "shape", "data offset",
           "bytes", "shard");
    for (int64_t i = 0; i < n; i++) {
        const struct gguf_tensor *t = gguf_tensor_at(g, i);
        /* "×" is two bytes in UTF-8: the column is padded by characters. */
        char shape[96];
        int at = 0, chars = 0;
        for (int d = 0; d < t->n_dims; d++) {
            int k = snprintf(shape + at, sizeof shape - (size_t)at, "%s%" PRId64, d ? "×" : "", t->ne[d]);
            at += k;
            chars += d ? k - 1 : k;
        }
        char offset[24];
        snprintf(offset, sizeof offset, "0x%" PRIx64, t->offset);
        printf("  %4" PRId64 "  %-*s  %-6s  %s%*s  %12s  %12" PRIu64 "  %d\n", i, name_width, t->name,
               quant_type_name((enum quant_type)t->type), shape, chars < 24 ? 24 - chars : 0, "", offset, t->nbytes,
               t->shard + 1);
    }
}

static int print_key(const gguf_file *g, const struct options *o)
{
    int64_t i = gguf_find_key(g, o->key);
    if (i < 0) {
        fprintf(stderr, "nebula-gguf: %s: key \"%s\" not found\n", o->file, o->key);
        return 1;
    }
    const char *s;
    if (gguf_kv_type(g, i) == GGUF_VT_STRING && gguf_get_str(g, o->key, &s, NULL, 0) == 0) {
        printf("%s\n", s);
        return 0;
    }
    static char value[1 << 16];
    gguf_kv_format(g, i, value, sizeof value);
    printf("%s\n", value);
    return 0;
}

static int info(const struct options *o)
{
    char err[1024];
    gguf_file *g;
    if (gguf_open(o->file, &g, err, sizeof err) != 0) {
        fprintf(stderr, "nebula-gguf: %s\n", err);
        return 1;
    }
    int rc = 0;
    if (o->key) {
        rc = print_key(g, o);
    } else {
        printf("file:       %s\n", o->file);
        printf("version:    %" PRIu32 "\n", gguf_version(g));
        printf("alignment:  %" PRIu32 "\n", gguf_alignment(g));
        printf("shards:     %d\n", gguf_shard_count(g));
        print_kvs(g);
        if (!o->no_tensors) print_tensors(g);
    }
    gguf_close(g);
    return rc;
}

/* One tensor's values, decoded row by row in parallel; false if a value is
 * not finite or the type cannot be decoded. */
static bool tensor_stats(const struct gguf_tensor *t)
{
    const struct quant_traits *tr = quant_traits_of((enum quant_type)t->type);
    int64_t n = t->ne[0], rows = t->nbytes / (n ? quant_row_size((enum quant_type)t->type, n) : 1);
    if (!tr || !tr->to_float) {
        printf("%s\t%s\tcannot decode\n", t->name, quant_type_name((enum quant_type)t->type));
        return false;
    }
    size_t row_bytes = quant_row_size((enum quant_type)t->type, n);
    double sum = 0, sum2 = 0, lo = INFINITY, hi = -INFINITY;
    int64_t bad = 0;
    float *work = malloc((size_t)omp_get_max_threads() * (size_t)n * sizeof *work);
    if (!work) return false;
#pragma omp parallel for schedule(dynamic, 64) reduction(+ : sum, sum2, bad) reduction(min : lo) reduction(max : hi)
    for (int64_t r = 0; r < rows; r++) {
        float *v = work + (size_t)omp_get_thread_num() * (size_t)n;
        tr->to_float((const unsigned char *)t->data + (size_t)r * row_bytes, v, n);
        for (int64_t i = 0; i < n; i++) {
            if (!isfinite(v[i])) {
                bad++;
                continue;
            }
            sum += v[i], sum2 += (double)v[i] * v[i];
            lo = v[i] < lo ? v[i] : lo, hi = v[i] > hi ? v[i] : hi;
        }
    }
    free(work);
    double cnt = (double)(n * rows - bad), mean = cnt ? sum / cnt : 0, var = cnt ? sum2 / cnt - mean * mean : 0;
    printf("%s\t%s\t%" PRId64 "\t%.6g\t%.6g\t%.6g\t%.6g\t%" PRId64 "\n", t->name, quant_type_name((enum quant_type)t->type),
           n * rows, lo, hi, mean, sqrt(var > 0 ? var : 0), bad);
    return bad == 0;
}

static int stats(const char *file)
{
    char err[1024];
    gguf_file *g;
    if (gguf_open(file, &g, err, sizeof err) != 0) {
        fprintf(stderr, "nebula-gguf: %s\n", err);
        return 1;
    }
    bool ok = true;
    printf("name\ttype\tvalues\tmin\tmax\tmean\tstd\tnonfinite\n");
    for (int64_t i = 0; i < gguf_tensor_count(g); i++) ok &= tensor_stats(gguf_tensor_at(g, i));
    gguf_close(g);
    return ok ? 0 : 1;
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(usage, stdout);
            return 0;
        }
    if (argc < 2) return bad_usage("no command");
    if (strcmp(argv[1], "stats") == 0) {
        if (argc != 3 || argv[2][0] == '-') return bad_usage("stats wants one FILE");
        return stats(argv[2]);
    }
    if (strcmp(argv[1], "info") != 0) return bad_usage("unknown command (expected: info or stats)");
    struct options o = {0};
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--no-tensors") == 0) o.no_tensors = true;
        else if (strcmp(argv[i], "--key") == 0 && i + 1 < argc) o.key = argv[++i];
        else if (argv[i][0] == '-' && argv[i][1]) return bad_usage("unknown option or missing argument");
        else if (o.file) return bad_usage("more than one FILE");
        else o.file = argv[i];
    }
    if (!o.file) return bad_usage("no FILE");
    return info(&o);
}
