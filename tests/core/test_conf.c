/* test_conf.c — core/conf: nebula.conf's parse (a good file, each kind of
 * error naming file:line and the key, a missing key keeping its default),
 * the lookup order, `get`, and that the repository's conf/nebula.conf says
 * exactly the built-in defaults. */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/conf/conf.h"
#include "core/util/err.h"

static char dir[64], path[128];

static void setup(void)
{
    snprintf(dir, sizeof dir, "/tmp/nbtest-conf-XXXXXX");
    cr_assert(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/nebula.conf", dir);
}

static void teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}

static void write_file(const char *p, const char *text)
{
    FILE *f = fopen(p, "w");
    cr_assert_not_null(f, "%s", p);
    fputs(text, f);
    fclose(f);
}

static int load(const char *text, struct conf_settings *s, char *err, size_t errlen)
{
    write_file(path, text);
    conf_defaults(s);
    return conf_load(path, s, err, errlen);
}

TestSuite(conf, .init = setup, .fini = teardown);

Test(conf, good_file_sets_what_it_names_and_keeps_the_rest)
{
    struct conf_settings s;
    char err[512] = "";
    cr_assert_eq(load("; a comment\n# another\n[model]\npath = /m/x.gguf\n\n[engine]\nthreads = 6\nctx=4096\n"
                      "backend = cuda\nvram_budget = 12G\nram_budget = 512M ; inline comment\n[server]\napi_port = 9001\n",
                      &s, err, sizeof err),
                 0, "%s", err);
    cr_assert_str_eq(s.model, "/m/x.gguf");
    cr_assert_eq(s.threads, 6);
    cr_assert_eq(s.ctx, 4096);
    cr_assert_str_eq(s.backend, "cuda");
    cr_assert_eq(s.vram_budget, 12ull << 30);
    cr_assert_eq(s.ram_budget, 512ull << 20);
    cr_assert_eq(s.api_port, 9001);
    /* untouched keys: the built-in defaults */
    cr_assert_eq(s.port, 8090);
    cr_assert_eq(s.chunk, 512);
    cr_assert_str_eq(s.kernels, "fast");
    cr_assert_str_eq(s.prepared, "");
    cr_assert_str_eq(s.cpu_kernels, "auto");
    cr_assert_str_eq(s.spec, "off");
    cr_assert_eq(s.max_queue, 8);
    cr_assert_eq(s.max_body, 4194304);
    cr_assert_eq(s.accuracy_level, 3);
}

/* Each error: NB_EINVAL, the file, the line and the key. */
static void refused(const char *text, const char *want)
{
    struct conf_settings s;
    char err[512] = "";
    cr_assert_eq(load(text, &s, err, sizeof err), NB_EINVAL, "accepted:\n%s", text);
    cr_assert(strstr(err, path), "no file name: %s", err);
    cr_assert(strstr(err, want), "want '%s' in: %s", want, err);
}

Test(conf, unknown_key) { refused("[engine]\nthreads = 2\nthredas = 4\n", ":3: engine.thredas: unknown key"); }
Test(conf, unknown_section) { refused("[model]\n\n[engin]\nthreads = 4\n", ":4: engin.threads: unknown key"); }
Test(conf, key_outside_a_section) { refused("threads = 4\n", ":1: threads: a key outside any [section]"); }
Test(conf, bad_number) { refused("[engine]\nthreads = four\n", ":2: engine.threads: 'four' is not a whole number"); }
Test(conf, number_out_of_range) { refused("[server]\nport = 70000\n", ":2: server.port: '70000'"); }
Test(conf, bad_choice) { refused("[engine]\nbackend = tpu\n", ":2: engine.backend: 'tpu' is not one of auto|cpu|cuda"); }
Test(conf, bad_spec) { refused("[engine]\nspec = eagle\n", ":2: engine.spec: 'eagle' is not one of off|mtp|lookup|auto"); }

Test(conf, spec_auto_and_a_level)
{
    struct conf_settings s;
    char err[512] = "";
    cr_assert_eq(load("[engine]\nspec = auto\n[generate]\naccuracy_level = 2\n", &s, err, sizeof err), 0, "%s", err);
    cr_assert_str_eq(s.spec, "auto");
    cr_assert_eq(s.accuracy_level, 2);
}
Test(conf, bad_bytes) { refused("[engine]\nvram_budget = 12Q\n", ":2: engine.vram_budget: '12Q' is not a byte count"); }
Test(conf, slots_settings)
{
    struct conf_settings s;
    char err[512] = "";
    cr_assert_eq(load("[slots]\nadapt = adaptive\ndecay = 0.9\nhysteresis = 2\n", &s, err, sizeof err), 0, "%s", err);
    cr_assert_str_eq(s.slots_adapt, "adaptive");
    cr_assert_float_eq(s.slots_decay, 0.9, 1e-12);
    cr_assert_float_eq(s.slots_hysteresis, 2.0, 1e-12);
    cr_assert_eq(s.slots_every, 4); /* the defaults stay */
}
Test(conf, bad_real) { refused("[slots]\ndecay = 1.5\n", ":2: slots.decay: '1.5' is not a number in [1e-06, 1]"); }
Test(conf, bad_real_text) { refused("[slots]\nhysteresis = much\n", ":2: slots.hysteresis: 'much' is not a number"); }
Test(conf, accuracy_out_of_range) { refused("[generate]\naccuracy_level = 4\n", ":2: generate.accuracy_level"); }
Test(conf, not_ini) { refused("[engine]\nthis line has no equals sign\n", ":2: not an INI line"); }

Test(conf, the_first_error_is_reported)
{
    refused("[engine]\nthreads = x\nctx = y\n", ":2: engine.threads");
}

Test(conf, missing_file_is_enoent)
{
    struct conf_settings s;
    char err[512];
    conf_defaults(&s);
    cr_assert_eq(conf_load("/nonexistent/nebula.conf", &s, err, sizeof err), NB_ENOENT);
}

Test(conf, get_spells_values_as_the_file_would)
{
    struct conf_settings s;
    char err[512] = "", v[256];
    cr_assert_eq(load("[engine]\nthreads = 3\nvram_budget = 1K\n", &s, err, sizeof err), 0, "%s", err);
    cr_assert_eq(conf_get(&s, "engine.threads", v, sizeof v), 0);
    cr_assert_str_eq(v, "3");
    cr_assert_eq(conf_get(&s, "engine.vram_budget", v, sizeof v), 0);
    cr_assert_str_eq(v, "1024");
    cr_assert_eq(conf_get(&s, "engine.backend", v, sizeof v), 0);
    cr_assert_str_eq(v, "auto");
    cr_assert_eq(conf_get(&s, "model.path", v, sizeof v), 0);
    cr_assert_str_eq(v, "");
    cr_assert_eq(conf_get(&s, "engine.nope", v, sizeof v), NB_ENOENT);
    cr_assert_eq(conf_get(&s, "threads", v, sizeof v), NB_ENOENT);
}

/* --config FILE, else $XDG_CONFIG_HOME/nebula/nebula.conf, else the repo's
 * conf/nebula.conf beside build/bin/; the first found wins. */
Test(conf, lookup_order)
{
    char xdg[128], user[192], exe_dir[192], repo_conf[192], out[512], err[512], cmd[512];
    snprintf(xdg, sizeof xdg, "%s/xdg", dir);
    snprintf(user, sizeof user, "%s/nebula/nebula.conf", xdg);
    snprintf(exe_dir, sizeof exe_dir, "%s/repo/build/bin", dir);
    snprintf(repo_conf, sizeof repo_conf, "%s/repo/conf/nebula.conf", dir);
    snprintf(cmd, sizeof cmd, "mkdir -p %s/nebula %s %s/repo/conf", xdg, exe_dir, dir);
    cr_assert_eq(system(cmd), 0);
    setenv("XDG_CONFIG_HOME", xdg, 1);
    cr_assert_eq(conf_locate(NULL, exe_dir, out, sizeof out, err, sizeof err), 1, "none yet: %s", out);
    write_file(repo_conf, "[engine]\nthreads = 1\n");
    cr_assert_eq(conf_locate(NULL, exe_dir, out, sizeof out, err, sizeof err), 0);
    cr_assert(strstr(out, "/repo/build/bin/../../conf/nebula.conf"), "%s", out);
    write_file(user, "[engine]\nthreads = 2\n");
    cr_assert_eq(conf_locate(NULL, exe_dir, out, sizeof out, err, sizeof err), 0);
    cr_assert_str_eq(out, user);
    cr_assert_eq(conf_locate(path, exe_dir, out, sizeof out, err, sizeof err), NB_ENOENT, "an explicit file must exist");
    cr_assert(strstr(err, "--config"), "%s", err);
    write_file(path, "[engine]\nthreads = 3\n");
    cr_assert_eq(conf_locate(path, exe_dir, out, sizeof out, err, sizeof err), 0);
    cr_assert_str_eq(out, path);
    /* conf_load_default: the explicit one's values over the defaults */
    struct conf_settings s;
    cr_assert_eq(conf_load_default(path, exe_dir, &s, out, sizeof out, err, sizeof err), 0, "%s", err);
    cr_assert_eq(s.threads, 3);
    cr_assert_eq(conf_load_default(NULL, exe_dir, &s, out, sizeof out, err, sizeof err), 0, "%s", err);
    cr_assert_eq(s.threads, 2, "the user's copy before the repository's");
    unsetenv("XDG_CONFIG_HOME");
}

/* The shipped file spells out the built-in defaults, key for key. */
Test(conf, repository_file_is_the_defaults)
{
    struct conf_settings a, b;
    char err[512] = "", va[CONF_PATH_MAX], vb[CONF_PATH_MAX];
    conf_defaults(&a);
    conf_defaults(&b);
    memset(&b, 0x55, sizeof b); /* every field must come from the file */
    conf_defaults(&b);
    cr_assert_eq(conf_load("conf/nebula.conf", &b, err, sizeof err), 0, "%s", err);
    int n = 0;
    for (int i = 0; conf_key_name(i); i++, n++) {
        char key[64];
        snprintf(key, sizeof key, "%s", conf_key_name(i));
        cr_assert_eq(conf_get(&a, key, va, sizeof va), 0);
        cr_assert_eq(conf_get(&b, key, vb, sizeof vb), 0);
        cr_assert_str_eq(va, vb, "%s: built-in %s, conf/nebula.conf %s", key, va, vb);
    }
    /* and names every key */
    FILE *f = fopen("conf/nebula.conf", "r");
    cr_assert_not_null(f);
    char text[8192];
    size_t got = fread(text, 1, sizeof text - 1, f);
    text[got] = 0;
    fclose(f);
    for (int i = 0; conf_key_name(i); i++) {
        const char *dot = strchr(conf_key_name(i), '.');
        char line[64];
        snprintf(line, sizeof line, "\n%s =", dot + 1);
        cr_assert(strstr(text, line), "conf/nebula.conf lacks %s", conf_key_name(i));
    }
    cr_assert_gt(n, 10);
}
