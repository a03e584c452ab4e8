/* cache_cli.h — `vflow cache stat|ls|verify PATH` over an LMDB latent cache. */
#ifndef VF_CACHE_CLI_H
#define VF_CACHE_CLI_H
/* argv[0] is "cache". Returns the process exit code (0 ok, 1 verify found damage, 2 usage). */
int vf_cache_cli(int argc, char **argv);
#endif
