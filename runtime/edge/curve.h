/* curve.h — CURVE authentication and encryption of a run's tcp sockets.
 *
 * A run has one secret, the run key (32 random bytes, as 64 hex digits): the driver
 * makes it (or takes VFLOW_RUN_KEY, which a multi-node launch gives every node) and hands
 * it to its workers in their environment, never in a file. Every process of the run has
 * an identity — its worker index, or VF_CURVE_DRIVER — and its CURVE keypair is derived
 * from the run key and that identity (secret key = BLAKE2b-256 keyed by the run key over
 * "vflow-curve-1/<identity>", public key = its Curve25519 base point multiple). So any
 * process of the run can compute any other's public key, and the allow-list of a socket
 * is exactly the run's identities: a process without the run key cannot produce an
 * allowed key, and its handshake is refused by the ZAP handler (ZeroMQ RFC 27) that each
 * process runs in its ZeroMQ context. The handler is bound before the first server socket
 * of the context (Debian's libzmq has no ZMQ_ZAP_ENFORCE_DOMAIN, a draft option, so a
 * server must never exist without it).
 *
 * The side that binds is the CURVE server, the side that connects the client (it names
 * the server's identity to get its public key). Data is encrypted as a side effect.
 */
#ifndef VF_CURVE_H
#define VF_CURVE_H
#include "runtime/vflow.h"

#define VF_CURVE_DRIVER (-1)          /* identity of the driver (the control plane's server) */
#define VF_CURVE_KEY_HEX 64           /* hex digits of a run key */
#define VF_CURVE_ZAP_DOMAIN "vflow"

typedef struct vf_curve {
    unsigned char key[32]; /* the run key */
    int self;              /* this process's identity */
    int npeers;            /* identities VF_CURVE_DRIVER .. npeers-1 belong to the run */
} vf_curve;

/* A fresh run key from the kernel's random source, as hex (hex has room for 65). */
int vf_curve_new_key(char *hex, vf_status *st);
/* Parses a hex run key; 0 or VF_EUSAGE naming `what` (the variable it came from). */
int vf_curve_init(vf_curve *c, const char *hex, int self, int npeers, const char *what, vf_status *st);
/* The keypair of identity id, Z85 text (41 bytes each with the NUL). */
void vf_curve_keypair(const vf_curve *c, int id, char pub[41], char sec[41]);
/* Socket options: a server with this process's keys under the ZAP domain, or a client
 * of the server with identity server_id. Call before bind / connect. */
int vf_curve_server(const vf_curve *c, void *sock, vf_status *st);
int vf_curve_client(const vf_curve *c, void *sock, int server_id, vf_status *st);

/* The ZAP handler of one ZeroMQ context: a thread answering handshakes, allowing the
 * run's identities only. Start it before the first server socket binds; stop it before
 * zmq_ctx_term. The count of refused handshakes is for logs and tests. */
typedef struct vf_zap vf_zap;
int vf_zap_start(void *zctx, const vf_curve *c, vf_zap **out, vf_status *st);
int64_t vf_zap_refused(const vf_zap *z);
void vf_zap_stop(vf_zap *z);
#endif /* VF_CURVE_H */
