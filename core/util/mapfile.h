/* mapfile.h — a whole regular file mapped read-only: the one way model files
 * (GGUF, safetensors) are opened, so every format reports open/size/mmap
 * failures the same way; and a whole small file (JSON, TSV, a template) read
 * into memory, the one way the text files beside them are read. */
#ifndef NB_MAPFILE_H
#define NB_MAPFILE_H

#include <stddef.h>

/* Maps path; a file shorter than min_bytes (or empty) fails with short_code
 * and `why_short` ("empty file", "too short for a header") in the message.
 * Unmap with munmap. */
int nb_map_file(const char *path, size_t min_bytes, int short_code, const char *why_short, void **map, size_t *size,
                char *err, size_t errlen);

/* The whole file at path in *data (malloc'ed, NUL-terminated; *n its bytes
 * without the NUL, n may be NULL).  NB_ENOENT when it does not exist, NB_EIO
 * when it cannot be opened or read, NB_ENOMEM; the message names the path. */
int nb_read_file(const char *path, char **data, size_t *n, char *err, size_t errlen);

#endif
