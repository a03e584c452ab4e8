/* test_multinode_parts.c — the pieces of a multi-node run that need no second host:
 * placement with nodes (workers never span nodes, edges between nodes are tcp, ipc across
 * nodes is refused), the node count check, the graph JSON keeping nodes, the graph hash
 * (the same after a round trip, another for another param), the cluster addresses of
 * loopback, and the run key file's permissions.
 * vflow-test: labels=multinode */
#include "runtime/driver/cluster.h"
#include "runtime/core/params.h"
#include "tests/vf_test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* src (node src_node) -> sink (node sink_node), sink pinned to another worker */
static vf_graph *pair(int src_node, int sink_node, vf_transport tr, int count, vf_status *st)
{
    vf_graph *g = vf_graph_new("mn");
    char js[64];
    snprintf(js, sizeof js, "{\"shape\":[4],\"count\":%d}", count);
    vf_params *p1 = vf_params_from_json(js, st), *p2 = vf_params_from_json("{}", st);
    VF_CHECK(p1 && p2);
    VF_CHECK_EQ_INT(vf_graph_add_stage(g, "src", "synthetic", p1, "t.lua:1", st), 0);
    VF_CHECK_EQ_INT(vf_graph_add_stage(g, "sink", "null_sink", p2, "t.lua:2", st), 1);
    g->stages[0].node = src_node;
    g->stages[1].node = sink_node;
    snprintf(g->stages[1].worker_hint, sizeof g->stages[1].worker_hint, "other");
    VF_CHECK(vf_graph_add_edge(g, 0, "out", 1, "in", 4, false, "t.lua:3", st) >= 0);
    g->edges[0].transport = tr;
    VF_CHECK_MSG(vf_graph_validate(g, st) == 0, "%s", st->msg);
    return g;
}

VF_TEST(edges_between_nodes_are_tcp)
{
    vf_status st = {0};
    vf_graph *g = pair(1, 0, VF_TR_AUTO, 3, &st);
    VF_CHECK_MSG(vf_graph_place(g, &st) == 0, "%s", st.msg);
    VF_CHECK_EQ_INT(g->nworkers, 2);
    VF_CHECK_EQ_INT(g->workers[g->stages[0].worker].node, 1);
    VF_CHECK_EQ_INT(g->workers[g->stages[1].worker].node, 0);
    VF_CHECK_EQ_INT(g->edges[0].transport, VF_TR_TCP);
    VF_CHECK_EQ_INT(vf_graph_nodes(g), 2);
    vf_graph_free(g);
    g = pair(0, 0, VF_TR_AUTO, 3, &st); /* two workers on one node: ipc */
    VF_CHECK_MSG(vf_graph_place(g, &st) == 0, "%s", st.msg);
    VF_CHECK_EQ_INT(g->edges[0].transport, VF_TR_IPC);
    VF_CHECK_EQ_INT(vf_graph_nodes(g), 1);
    vf_graph_free(g);
}

VF_TEST(a_worker_never_spans_nodes)
{
    vf_status st = {0};
    vf_graph *g = pair(0, 1, VF_TR_AUTO, 3, &st);
    /* the same worker hint on both: still two workers, one per node */
    snprintf(g->stages[0].worker_hint, sizeof g->stages[0].worker_hint, "other");
    VF_CHECK_MSG(vf_graph_place(g, &st) == 0, "%s", st.msg);
    VF_CHECK_EQ_INT(g->nworkers, 2);
    VF_CHECK(g->stages[0].worker != g->stages[1].worker);
    VF_CHECK_EQ_INT(g->edges[0].transport, VF_TR_TCP);
    vf_graph_free(g);
}

VF_TEST(ipc_across_nodes_is_refused)
{
    vf_status st = {0};
    vf_graph *g = pair(0, 1, VF_TR_IPC, 3, &st);
    VF_CHECK_EQ_INT(vf_graph_place(g, &st), VF_EUSAGE);
    VF_CHECK_MSG(strstr(st.msg, "t.lua:3: connect 'src' -> 'sink': transport \"ipc\" cannot cross nodes") != NULL,
                 "%s", st.msg);
    vf_graph_free(g);
}

VF_TEST(more_nodes_than_the_run_has)
{
    vf_status st = {0};
    vf_graph *g = pair(0, 2, VF_TR_AUTO, 3, &st);
    VF_CHECK_EQ_INT(vf_graph_check_nodes(g, 2, &st), VF_EUSAGE);
    VF_CHECK_MSG(strstr(st.msg, "t.lua:2: stage 'sink' (null_sink) is placed on node 2, but the run has 2 nodes") !=
                     NULL,
                 "%s", st.msg);
    vf_status_clear(&st);
    VF_CHECK_EQ_INT(vf_graph_check_nodes(g, 3, &st), 0);
    vf_graph_free(g);
}

VF_TEST(json_keeps_nodes_and_the_hash)
{
    vf_status st = {0};
    vf_graph *g = pair(1, 0, VF_TR_AUTO, 3, &st), *back = NULL;
    VF_CHECK_MSG(vf_graph_place(g, &st) == 0, "%s", st.msg);
    char *json = vf_graph_to_json(g);
    VF_CHECK(json != NULL);
    VF_CHECK_MSG(vf_graph_from_json(json, &back, &st) == 0, "%s", st.msg);
    VF_CHECK_MSG(vf_graph_validate(back, &st) == 0, "%s", st.msg);
    VF_CHECK_EQ_INT(back->stages[0].node, 1);
    VF_CHECK_EQ_INT(back->workers[back->stages[0].worker].node, 1);
    char h1[VF_GRAPH_HASH_HEX + 1], h2[VF_GRAPH_HASH_HEX + 1], h3[VF_GRAPH_HASH_HEX + 1];
    VF_CHECK_EQ_INT(vf_graph_hash(g, h1, &st), 0);
    VF_CHECK_EQ_INT(vf_graph_hash(back, h2, &st), 0);
    VF_CHECK_STR(h1, h2);
    VF_CHECK_EQ_INT((int)strlen(h1), VF_GRAPH_HASH_HEX);
    vf_graph *other = pair(1, 0, VF_TR_AUTO, 4, &st); /* another count: another graph */
    VF_CHECK_MSG(vf_graph_place(other, &st) == 0, "%s", st.msg);
    VF_CHECK_EQ_INT(vf_graph_hash(other, h3, &st), 0);
    VF_CHECK(strcmp(h1, h3) != 0);
    free(json);
    vf_graph_free(g);
    vf_graph_free(back);
    vf_graph_free(other);
}

VF_TEST(loopback_addresses)
{
    vf_status st = {0};
    char ip[VF_ADDR_MAX];
    VF_CHECK_EQ_INT(vf_net_resolve("127.0.0.1", "test", ip, &st), 0);
    VF_CHECK_STR(ip, "127.0.0.1");
    VF_CHECK_EQ_INT(vf_net_route_addr("127.0.0.1", ip, &st), 0);
    VF_CHECK_STR(ip, "127.0.0.1");
    VF_CHECK_EQ_INT(vf_net_iface_addr("lo", ip, &st), 0);
    VF_CHECK_STR(ip, "127.0.0.1");
    VF_CHECK_EQ_INT(vf_net_iface_addr("no-such-if0", ip, &st), VF_EUSAGE);
    VF_CHECK(strstr(st.msg, "--iface no-such-if0") != NULL);
    vf_status_clear(&st);
    VF_CHECK_EQ_INT(vf_net_resolve("no-such-host.invalid", "--addr", ip, &st), VF_EUSAGE);
    VF_CHECK(strstr(st.msg, "--addr \"no-such-host.invalid\"") != NULL);
}

VF_TEST(run_key_file_is_private)
{
    vf_status st = {0};
    char dir[] = "/tmp/vf_runkey_XXXXXX", path[64], key[65], hex[65];
    VF_CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/run.key", dir);
    VF_CHECK_EQ_INT(vf_runkey_read(dir, hex, &st), 0); /* not there yet */
    memset(key, 'a', 64);
    key[64] = 0;
    VF_CHECK_EQ_INT(vf_runkey_write(dir, key, &st), 0);
    struct stat sb;
    VF_CHECK(stat(path, &sb) == 0 && (sb.st_mode & 0777) == 0600);
    VF_CHECK_EQ_INT(vf_runkey_read(dir, hex, &st), 1);
    VF_CHECK_STR(hex, key);
    chmod(path, 0644); /* readable by others: refused */
    VF_CHECK_EQ_INT(vf_runkey_read(dir, hex, &st), VF_EUSAGE);
    VF_CHECK(strstr(st.msg, "nobody else can read") != NULL);
    unlink(path);
    rmdir(dir);
}

int main(void) { return vf_test_main(); }
