/* rank.h — who this process is in a multi-node run, as the launcher that started it says.
 *
 * vflow rides on the launcher users already have instead of shipping a host manager:
 * the same `vflow run pipeline.lua …` is started once per node (or per rank) by torchrun,
 * Slurm's srun, Open MPI's mpirun or an MPICH/Intel MPI mpiexec, and each process reads
 * its rank, the world size, its local rank and where to meet from that launcher's
 * variables. Sources, first match wins (LAUNCH.md has the variables):
 *   vflow    VFLOW_RANK, VFLOW_WORLD_SIZE, VFLOW_LOCAL_RANK, VFLOW_LOCAL_WORLD_SIZE,
 *            VFLOW_NODE_RANK, VFLOW_NNODES, VFLOW_MASTER_ADDR, VFLOW_MASTER_PORT
 *   torchrun RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR,
 *            MASTER_PORT
 *   Open MPI OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE, _NODE_RANK
 *   PMI      PMI_RANK, PMI_SIZE, MPI_LOCALRANKID
 *   Slurm    SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NTASKS_PER_NODE, SLURM_NODEID,
 *            SLURM_NNODES, SLURM_STEP_NODELIST / SLURM_JOB_NODELIST (compact form expanded;
 *            the meeting host is its first name), SLURM_JOB_ID (the default port)
 * The meeting address (rank 0's host and port) comes from VFLOW_MASTER_ADDR /
 * VFLOW_MASTER_PORT when set (vflow's own variables win: torchrun's agent itself listens on
 * MASTER_PORT), else from the source's own variables, else MASTER_ADDR, else the first
 * Slurm host; the port else from MASTER_PORT, else one derived from the Slurm job id (two
 * jobs on a node meet on different ports), else VF_RANK_DEFAULT_PORT. No launcher at all
 * is a single-process run: rank 0 of 1.
 */
#ifndef VF_RANK_H
#define VF_RANK_H
#include "runtime/vflow.h"

#define VF_RANK_DEFAULT_PORT 29517
#define VF_RANK_HOST_MAX 256

typedef struct vf_rank_info {
    const char *source;          /* "vflow", "torchrun", "openmpi", "pmi", "slurm" or "none" */
    int rank, world;             /* 0 <= rank < world */
    int local_rank, local_world; /* on this node; local_world -1 when the launcher does not say */
    int node, nnodes;            /* this node's index and the node count; -1 when unknown */
    char master_addr[VF_RANK_HOST_MAX]; /* "" when no launcher names one */
    int master_port;
} vf_rank_info;

/* Reads the variables through getenv_fn (getenv when NULL; tests pass their own).
 * 0, or VF_EUSAGE with a message naming the variable when one is malformed or
 * inconsistent (a rank outside the world, a port outside 1..65535, a node list that
 * does not parse). */
typedef const char *(*vf_getenv_fn)(const char *name);
int vf_rank_from_env(vf_getenv_fn getenv_fn, vf_rank_info *out, vf_status *st);

/* Expands a Slurm compact host list ("n[01-04,07],gpu[1-2]-ib,login") into names. Calls
 * fn for each name in order (fn returns nonzero to stop early). Returns the number of
 * names, or VF_EUSAGE with a message when the list does not parse or expands to more
 * than max_names. */
int vf_slurm_hostlist(const char *list, int max_names, int (*fn)(const char *name, void *arg), void *arg,
                      vf_status *st);
#endif /* VF_RANK_H */
