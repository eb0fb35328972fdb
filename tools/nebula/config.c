/* config.c — `nebula config`: what nebula.conf says (core/conf), for the
 * shell (deploy/start.sh reads its defaults this way, so no script parses
 * INI itself).
 *
 *   nebula config get KEY [--config FILE]   the value (the file's, else the built-in default)
 *   nebula config path [--config FILE]      the file that would be read ("" and exit 1 if none)
 *   nebula config keys                      every key, one "section.key" a line */
#include "core/conf/conf.h"
#include "core/util/err.h"
#include "tools/nebula/cli.h"

#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static void usage(FILE *f)
{
    fprintf(f, "usage: nebula config get KEY [--config FILE]\n"
               "       nebula config path [--config FILE]\n"
               "       nebula config keys\n"
               "\n"
               "Reads nebula.conf as the coordinator does: --config FILE, else\n"
               "$XDG_CONFIG_HOME/nebula/nebula.conf (~/.config/nebula/ when unset), else the\n"
               "repository's conf/nebula.conf; a key the file leaves out has its built-in default.\n"
               "KEY is section.key, like engine.threads (docs/RUNNING.md lists them).\n");
}

/* The directory of this executable (conf_locate looks for the repository's file from it). */
static const char *exe_dir(char *buf, size_t len)
{
    ssize_t n = readlink("/proc/self/exe", buf, len - 1);
    if (n <= 0) return NULL;
    buf[n] = 0;
    return dirname(buf);
}

int cli_conf_defaults(int argc, char **argv, struct cli_common *o)
{
    static struct conf_settings s; /* o's strings point into it */
    char exe[PATH_MAX], used[PATH_MAX], err[PATH_MAX + 256];
    const char *explicit_path = NULL;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--config") && i + 1 < argc) explicit_path = argv[i + 1];
    if (conf_load_default(explicit_path, exe_dir(exe, sizeof exe), &s, used, sizeof used, err, sizeof err)) {
        fprintf(stderr, "nebula: %s\n", err);
        return CLI_USAGE;
    }
    o->model_path = s.model[0] ? s.model : NULL;
    o->mtp_path = s.mtp[0] ? s.mtp : NULL;
    o->threads = s.threads, o->chunk = s.chunk, o->ctx = s.ctx, o->kernels = s.kernels, o->accuracy_level = s.accuracy_level;
    o->backend = strcmp(s.backend, "auto") ? s.backend : NULL; /* auto: the CLI's reference, cpu */
    return CLI_OK;
}

int cmd_config(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? CLI_USAGE : CLI_OK;
    }
    const char *sub = argv[1], *key = NULL, *explicit_path = NULL;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--config") && i + 1 < argc) explicit_path = argv[++i];
        else if (!key && argv[i][0] != '-') key = argv[i];
        else return usage(stderr), CLI_USAGE;
    }
    if (!strcmp(sub, "keys")) {
        for (int i = 0; conf_key_name(i); i++) puts(conf_key_name(i));
        return CLI_OK;
    }
    if (strcmp(sub, "get") && strcmp(sub, "path")) return usage(stderr), CLI_USAGE;
    if (!strcmp(sub, "get") && !key) return usage(stderr), CLI_USAGE;
    char exe[PATH_MAX], used[PATH_MAX], err[PATH_MAX + 256], value[CONF_PATH_MAX];
    struct conf_settings s;
    int rc = conf_load_default(explicit_path, exe_dir(exe, sizeof exe), &s, used, sizeof used, err, sizeof err);
    if (rc) {
        fprintf(stderr, "nebula: %s\n", err);
        return CLI_USAGE;
    }
    if (!strcmp(sub, "path")) {
        puts(used);
        return used[0] ? CLI_OK : CLI_FAIL;
    }
    if (conf_get(&s, key, value, sizeof value)) {
        fprintf(stderr, "nebula: config: unknown key '%s' (nebula config keys lists them)\n", key);
        return CLI_USAGE;
    }
    puts(value);
    return CLI_OK;
}
