/* cache_cli.c — placeholder until the LMDB cache tools land. */
#include "cache_cli.h"
#include <stdio.h>
int vf_cache_cli(int argc, char **argv) { (void)argc; (void)argv; fprintf(stderr, "vflow cache: missing from this build\n"); return 2; }
