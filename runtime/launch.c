/* launch.c — placeholder until the driver lands (owned by the runtime launch work). */
#include "launch.h"
int vf_driver_run(vf_graph *g, const vf_run_opts *opts, vf_status *st)
{
    (void)g; (void)opts;
    return vf_status_set(st, VF_EUSAGE, __FILE__, __LINE__, "vflow run: the driver is missing from this build");
}
int vf_worker_main(int argc, char **argv) { (void)argc; (void)argv; return 2; }
