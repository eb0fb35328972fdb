/* nebula — the command-line engine: generate text, dump logits, tokenize.
 *
 * One process, the CPU reference backend (engine/cpu).  Every subcommand
 * has --help; anything the user can fix (flags, model, prompt) exits 2 with
 * one clear line, an engine failure exits 1. */
#include "core/util/log.h"
#include "tools/nebula/cli.h"

#include <stdio.h>
#include <string.h>

static void usage(FILE *f)
{
    fprintf(f,
            "usage: nebula COMMAND [options]   (nebula COMMAND --help for its options)\n"
            "\n"
            "commands:\n"
            "  generate   stream text from a prompt, a chat turn or token ids\n"
            "  logits     write the full-sequence logits of token ids (float32, [tokens x vocab])\n"
            "  tokenize   print the ids of a text\n"
            "  hotlist    count expert activations over a prompt campaign (for nebula-prepare)\n"
            "  spec-bench the verify window bench: window costs, oracle drafts at chosen acceptances\n"
            "  config     print a setting of nebula.conf (nebula config get engine.threads)\n"
            "  start      start Nebula (the engine and the chat page) or find it running; open the page\n"
            "  stop       stop it\n");
}

int main(int argc, char **argv)
{
    nb_log_set_name("nebula");
    if (argc < 2) {
        usage(stderr);
        return CLI_USAGE;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
        usage(stdout);
        return CLI_OK;
    }
    if (!strcmp(cmd, "generate")) return cmd_generate(argc - 1, argv + 1);
    if (!strcmp(cmd, "logits")) return cmd_logits(argc - 1, argv + 1);
    if (!strcmp(cmd, "tokenize")) return cmd_tokenize(argc - 1, argv + 1);
    if (!strcmp(cmd, "hotlist")) return cmd_hotlist(argc - 1, argv + 1);
    if (!strcmp(cmd, "spec-bench")) return cmd_spec_bench(argc - 1, argv + 1);
    if (!strcmp(cmd, "config")) return cmd_config(argc - 1, argv + 1);
    if (!strcmp(cmd, "start")) return cmd_start(argc - 1, argv + 1);
    if (!strcmp(cmd, "stop")) return cmd_stop(argc - 1, argv + 1);
    fprintf(stderr, "nebula: unknown command '%s'\n", cmd);
    usage(stderr);
    return CLI_USAGE;
}
