/* test_rank_env.c — rank, world and meeting address as each launcher states them
 * (runtime/driver/rank.h), with the launchers' own variable sets, and Slurm's compact
 * host lists against the expansions `scontrol show hostnames` gives for them. */
#include "runtime/driver/rank.h"
#include "tests/vf_test.h"

#include <stdio.h>
#include <string.h>

/* A fake environment: NAME=VALUE strings, NULL-terminated. */
static const char *const *g_env;

static const char *fake_getenv(const char *name)
{
    size_t n = strlen(name);
    for (const char *const *e = g_env; e && *e; e++)
        if (strncmp(*e, name, n) == 0 && (*e)[n] == '=') return *e + n + 1;
    return NULL;
}

static int from(const char *const *env, vf_rank_info *ri, vf_status *st)
{
    g_env = env;
    vf_status_clear(st);
    return vf_rank_from_env(fake_getenv, ri, st);
}

VF_TEST(no_launcher_is_rank_0_of_1)
{
    static const char *const env[] = {"HOME=/root", NULL};
    vf_rank_info ri;
    vf_status st = {0};
    VF_CHECK_EQ_INT(from(env, &ri, &st), 0);
    VF_CHECK_STR(ri.source, "none");
    VF_CHECK_EQ_INT(ri.rank, 0);
    VF_CHECK_EQ_INT(ri.world, 1);
    VF_CHECK_EQ_INT(ri.master_port, VF_RANK_DEFAULT_PORT);
    VF_CHECK_STR(ri.master_addr, "");
}

VF_TEST(torchrun)
{
    static const char *const env[] = {"RANK=5", "WORLD_SIZE=8", "LOCAL_RANK=1", "LOCAL_WORLD_SIZE=4",
                                      "GROUP_RANK=1", "MASTER_ADDR=10.1.0.7", "MASTER_PORT=29400",
                                      "TORCHELASTIC_RESTART_COUNT=0", NULL};
    vf_rank_info ri;
    vf_status st = {0};
    VF_CHECK_EQ_INT(from(env, &ri, &st), 0);
    VF_CHECK_STR(ri.source, "torchrun");
    VF_CHECK(ri.rank == 5 && ri.world == 8 && ri.local_rank == 1 && ri.local_world == 4 && ri.node == 1);
    VF_CHECK_STR(ri.master_addr, "10.1.0.7");
    VF_CHECK_EQ_INT(ri.master_port, 29400);
}

VF_TEST(vflow_meeting_place_wins_over_torchrun)
{
    /* torchrun's agent listens on MASTER_PORT: vflow meets where its own variables say */
    static const char *const env[] = {"RANK=1", "WORLD_SIZE=2", "MASTER_ADDR=10.1.0.7", "MASTER_PORT=29400",
                                      "VFLOW_MASTER_PORT=29401", NULL};
    vf_rank_info ri;
    vf_status st = {0};
    VF_CHECK_EQ_INT(from(env, &ri, &st), 0);
    VF_CHECK_STR(ri.source, "torchrun");
    VF_CHECK_STR(ri.master_addr, "10.1.0.7");
    VF_CHECK_EQ_INT(ri.master_port, 29401);
    static const char *const env2[] = {"RANK=1", "WORLD_SIZE=2", "MASTER_ADDR=10.1.0.7", "MASTER_PORT=29400",
                                       "VFLOW_MASTER_ADDR=10.9.0.1", "VFLOW_MASTER_PORT=0", NULL};
    VF_CHECK_EQ_INT(from(env2, &ri, &st), VF_EUSAGE);
    VF_CHECK(strstr(st.msg, "VFLOW_MASTER_PORT=\"0\"") != NULL);
}

VF_TEST(openmpi_meets_at_vflow_address)
{
    static const char *const env[] = {"OMPI_COMM_WORLD_RANK=2", "OMPI_COMM_WORLD_SIZE=3",
                                      "OMPI_COMM_WORLD_LOCAL_RANK=0", "OMPI_COMM_WORLD_LOCAL_SIZE=1",
                                      "OMPI_COMM_WORLD_NODE_RANK=2", "VFLOW_MASTER_ADDR=h1",
                                      "VFLOW_MASTER_PORT=4000", NULL};
    vf_rank_info ri;
    vf_status st = {0};
    VF_CHECK_EQ_INT(from(env, &ri, &st), 0);
    VF_CHECK_STR(ri.source, "openmpi");
    VF_CHECK(ri.rank == 2 && ri.world == 3 && ri.node == 2);
    VF_CHECK_STR(ri.master_addr, "h1");
    VF_CHECK_EQ_INT(ri.master_port, 4000);
}

VF_TEST(pmi)
{
    static const char *const env[] = {"PMI_RANK=1", "PMI_SIZE=2", "MPI_LOCALRANKID=1", NULL};
    vf_rank_info ri;
    vf_status st = {0};
    VF_CHECK_EQ_INT(from(env, &ri, &st), 0);
    VF_CHECK_STR(ri.source, "pmi");
    VF_CHECK(ri.rank == 1 && ri.world == 2 && ri.local_rank == 1);
}

VF_TEST(slurm_first_host_and_job_port)
{
    static const char *const env[] = {"SLURM_PROCID=3", "SLURM_NTASKS=4", "SLURM_LOCALID=1",
                                      "SLURM_NTASKS_PER_NODE=2(x2)", "SLURM_NODEID=1", "SLURM_NNODES=2",
                                      "SLURM_JOB_NODELIST=gpu[07-08]", "SLURM_STEP_NODELIST=gpu[007,012]",
                                      "SLURM_JOB_ID=123456", NULL};
    vf_rank_info ri;
    vf_status st = {0};
    VF_CHECK_EQ_INT(from(env, &ri, &st), 0);
    VF_CHECK_STR(ri.source, "slurm");
    VF_CHECK(ri.rank == 3 && ri.world == 4 && ri.local_rank == 1 && ri.local_world == 2);
    VF_CHECK(ri.node == 1 && ri.nnodes == 2);
    VF_CHECK_STR(ri.master_addr, "gpu007"); /* the step's list before the job's */
    VF_CHECK_EQ_INT(ri.master_port, 20000 + 123456 % 20000);
}

VF_TEST(order_vflow_then_torchrun_then_mpi_then_slurm)
{
    /* torchrun started inside an srun allocation: torchrun's variables describe the ranks */
    static const char *const env[] = {"SLURM_PROCID=0", "SLURM_NTASKS=1", "RANK=3", "WORLD_SIZE=4",
                                      "MASTER_ADDR=a", "MASTER_PORT=1234", NULL};
    vf_rank_info ri;
    vf_status st = {0};
    VF_CHECK_EQ_INT(from(env, &ri, &st), 0);
    VF_CHECK_STR(ri.source, "torchrun");
    VF_CHECK_EQ_INT(ri.rank, 3);
    static const char *const env2[] = {"VFLOW_RANK=1", "VFLOW_WORLD_SIZE=2", "RANK=3", "WORLD_SIZE=4", NULL};
    VF_CHECK_EQ_INT(from(env2, &ri, &st), 0);
    VF_CHECK_STR(ri.source, "vflow");
    VF_CHECK(ri.rank == 1 && ri.world == 2);
}

VF_TEST(bad_values_name_the_variable)
{
    vf_rank_info ri;
    vf_status st = {0};
    static const char *const e1[] = {"RANK=4", "WORLD_SIZE=4", NULL};
    VF_CHECK_EQ_INT(from(e1, &ri, &st), VF_EUSAGE);
    VF_CHECK_MSG(strstr(st.msg, "RANK=\"4\"") && strstr(st.msg, "0..3"), "%s", st.msg);
    static const char *const e2[] = {"RANK=0", NULL};
    VF_CHECK_EQ_INT(from(e2, &ri, &st), VF_EUSAGE);
    VF_CHECK_MSG(strstr(st.msg, "WORLD_SIZE"), "%s", st.msg);
    static const char *const e3[] = {"RANK=0", "WORLD_SIZE=2", "MASTER_PORT=70000", NULL};
    VF_CHECK_EQ_INT(from(e3, &ri, &st), VF_EUSAGE);
    VF_CHECK_MSG(strstr(st.msg, "MASTER_PORT"), "%s", st.msg);
    static const char *const e4[] = {"SLURM_PROCID=0", "SLURM_NTASKS=2", "SLURM_JOB_NODELIST=n[1-", NULL};
    VF_CHECK_EQ_INT(from(e4, &ri, &st), VF_EUSAGE);
    VF_CHECK_MSG(strstr(st.msg, "SLURM_JOB_NODELIST"), "%s", st.msg);
    static const char *const e5[] = {"OMPI_COMM_WORLD_RANK=x", "OMPI_COMM_WORLD_SIZE=2", NULL};
    VF_CHECK_EQ_INT(from(e5, &ri, &st), VF_EUSAGE);
    VF_CHECK_MSG(strstr(st.msg, "OMPI_COMM_WORLD_RANK"), "%s", st.msg);
}

/* ------------------------------------------------------------------ host lists */

static int collect(const char *name, void *arg)
{
    char *buf = arg;
    strcat(buf, buf[0] ? " " : "");
    strcat(buf, name);
    return 0;
}

static void expect_hosts(const char *list, const char *want)
{
    char got[4096] = "";
    vf_status st = {0};
    int n = vf_slurm_hostlist(list, 1000, collect, got, &st);
    VF_CHECK_MSG(n >= 0, "%s: %s", list, st.msg);
    VF_CHECK_MSG(strcmp(got, want) == 0, "%s: got \"%s\", want \"%s\"", list, got, want);
}

VF_TEST(slurm_hostlists)
{
    /* expansions as `scontrol show hostnames` prints them */
    expect_hosts("node1", "node1");
    expect_hosts("n[01-04,07]", "n01 n02 n03 n04 n07");
    expect_hosts("gpu[1-2]-ib,login", "gpu1-ib gpu2-ib login");
    expect_hosts("a[8-11]", "a8 a9 a10 a11");
    expect_hosts("rack[1-2]-n[1-2]", "rack1-n1 rack1-n2 rack2-n1 rack2-n2");
    expect_hosts("x[098-101],y", "x098 x099 x100 x101 y");
    const char *bad[] = {"n[1-", "n[]", "n[3-1]", "n[a-b]", "n]1[", "a,,b", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        vf_status st = {0};
        VF_CHECK_MSG(vf_slurm_hostlist(bad[i], 1000, NULL, NULL, &st) == VF_EUSAGE, "%s accepted", bad[i]);
    }
    vf_status st = {0};
    VF_CHECK_EQ_INT(vf_slurm_hostlist("n[1-100]", 10, NULL, NULL, &st), VF_EUSAGE);
    VF_CHECK(strstr(st.msg, "more than 10") != NULL);
}

int main(void) { return vf_test_main(); }
