/* manifest.c — which input a prepared directory was made from.
 *
 * Hashing a 100 GB input on every run to learn that it did not change would
 * cost minutes, so the input is identified the way build tools do it: per
 * shard its size, its modification time (ns) and the SHA-256 of its first
 * 16 MiB (the GGUF header — key/values and tensor table — and the start of
 * the data).  A re-converted or re-quantized file differs in at least one.
 * The identity is one line (stored in manifest.json and in the resume state
 * files); the path is recorded for people, and is not part of it: moving
 * the input does not invalidate the outputs. */
#include "tools/nebula-prepare/prepare.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/util/err.h"

/* Path of shard s (0-based) of an n-shard set named like `path`. */
static int shard_path(const char *path, int s, int n, char *out, size_t len)
{
    if (n == 1) return snprintf(out, len, "%s", path) < (int)len ? 0 : NB_EINVAL;
    static const char shape[] = "-00001-of-00001.gguf";
    size_t plen = strlen(path), slen = sizeof shape - 1;
    if (plen < slen) return NB_EINVAL;
    int k = snprintf(out, len, "%.*s-%05d-of-%05d.gguf", (int)(plen - slen), path, s + 1, n);
    return k > 0 && k < (int)len ? 0 : NB_EINVAL;
}

int input_identity(const char *path, int n_shards, const char *mtp_path, char *id, size_t idlen, char **manifest_json,
                   char *err, size_t errlen)
{
    *manifest_json = NULL;
    cJSON *root = cJSON_CreateObject(), *input = cJSON_CreateObject(), *shards = cJSON_CreateArray();
    char real[PATH_MAX];
    cJSON_AddStringToObject(root, "format", "nebula.prepare/1");
    cJSON_AddItemToObject(root, "input", input);
    cJSON_AddStringToObject(input, "path", realpath(path, real) ? real : path);
    cJSON_AddItemToObject(input, "shards", shards);
    size_t used = (size_t)snprintf(id, idlen, "gguf");
    int rc = 0;
    for (int s = 0; s < n_shards + (mtp_path ? 1 : 0) && !rc; s++) {
        char sp[PATH_MAX], hex[PREP_SHA_HEX];
        struct stat st;
        bool mtp = s == n_shards; /* the separate MTP file, after the shards */
        if (mtp) snprintf(sp, sizeof sp, "%s", mtp_path);
        else if (shard_path(path, s, n_shards, sp, sizeof sp)) {
            rc = nb_errf(err, errlen, NB_EINVAL, "%s: cannot name shard %d", path, s + 1);
            break;
        }
        if (stat(sp, &st) != 0) {
            rc = nb_errf(err, errlen, NB_EIO, "%s: %s", sp, strerror(errno));
            break;
        }
        uint64_t head = (uint64_t)st.st_size < PREP_HEAD_BYTES ? (uint64_t)st.st_size : PREP_HEAD_BYTES;
        if ((rc = sha_file(sp, head, NULL, hex, err, errlen))) break;
        long long mtime_ns = (long long)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
        used += (size_t)snprintf(id + used, used < idlen ? idlen - used : 0, "%s%llu:%lld:%s", mtp ? "+mtp=" : s ? "," : "=",
                                 (unsigned long long)st.st_size, mtime_ns, hex);
        cJSON *o = cJSON_CreateObject();
        const char *base = strrchr(sp, '/');
        if (mtp) cJSON_AddStringToObject(o, "path", realpath(sp, real) ? real : sp);
        cJSON_AddStringToObject(o, "file", base ? base + 1 : sp);
        cJSON_AddNumberToObject(o, "bytes", (double)st.st_size);
        char ns[32];
        snprintf(ns, sizeof ns, "%lld", mtime_ns); /* 2^53 ns is only 104 days: keep it a string */
        cJSON_AddStringToObject(o, "mtime_ns", ns);
        cJSON_AddNumberToObject(o, "head_bytes", (double)head);
        cJSON_AddStringToObject(o, "head_sha256", hex);
        if (mtp) cJSON_AddItemToObject(input, "mtp", o);
        else cJSON_AddItemToArray(shards, o);
    }
    if (!rc && used >= idlen) rc = nb_errf(err, errlen, NB_EINVAL, "input identity too long");
    if (!rc) {
        cJSON_AddStringToObject(root, "identity", id);
        char *text = cJSON_Print(root);
        size_t n = text ? strlen(text) : 0;
        char *with_nl = text ? malloc(n + 2) : NULL;
        if (with_nl) {
            memcpy(with_nl, text, n);
            memcpy(with_nl + n, "\n", 2);
        }
        cJSON_free(text);
        if (!with_nl) rc = nb_errf(err, errlen, NB_ENOMEM, "out of memory");
        *manifest_json = with_nl;
    }
    cJSON_Delete(root);
    return rc;
}
