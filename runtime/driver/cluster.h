/* cluster.h — what a multi-node run needs beyond one node's driver: the node's address
 * on the cluster network, the hash that proves two ranks resolved the same graph, and
 * the run key's hand-over when the launcher did not give one.
 *
 * Addresses: edges between nodes and the control plane bind one address, the node's
 * cluster interface, never every interface. It is --addr IP, else --iface NAME's IPv4
 * address, else VFLOW_ADDR, else (rank 0) the meeting address itself, else (other ranks)
 * the local address the kernel routes the meeting address from: the interface that
 * reaches the coordinator.
 *
 * The run key (curve.h): VFLOW_RUN_KEY when the launcher's environment has it (an sbatch
 * script that exports a fresh one, say); else rank 0 makes one and writes it to
 * <run dir>/run.key, mode 0600 in a directory it created, and every other rank reads it
 * from the same path on the shared file system (the run dir every rank is given). A key
 * file left by an earlier run is replaced before the meeting opens; a rank that read a
 * stale one fails its CURVE handshake and reads again.
 */
#ifndef VF_CLUSTER_H
#define VF_CLUSTER_H
#include "runtime/graph/graph.h"

#define VF_ADDR_MAX 64
#define VF_GRAPH_HASH_HEX 64

/* host (a name or an IPv4 address) -> dotted IPv4. 0 or VF_EUSAGE naming `what`. */
int vf_net_resolve(const char *host, const char *what, char ip[VF_ADDR_MAX], vf_status *st);
/* The IPv4 address of interface iface. 0 or VF_EUSAGE. */
int vf_net_iface_addr(const char *iface, char ip[VF_ADDR_MAX], vf_status *st);
/* The local address the kernel would send to peer_ip from. 0 or VF_EUSAGE. */
int vf_net_route_addr(const char *peer_ip, char ip[VF_ADDR_MAX], vf_status *st);

/* BLAKE2b-256 of the resolved, placed graph's JSON, as hex. */
int vf_graph_hash(const vf_graph *g, char hex[VF_GRAPH_HASH_HEX + 1], vf_status *st);

/* Writes key_hex to <run_dir>/run.key (0600, atomically). */
int vf_runkey_write(const char *run_dir, const char *key_hex, vf_status *st);
/* Reads <run_dir>/run.key: 1 read (hex filled), 0 not there yet, negative on a file
 * that others can read or that is not a key (refused). */
int vf_runkey_read(const char *run_dir, char hex[65], vf_status *st);
#endif /* VF_CLUSTER_H */
