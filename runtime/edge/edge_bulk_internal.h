/* edge_bulk_internal.h — what the bulk lane's receiver (edge_bulk_rx.c) and sender
 * (edge_bulk_tx.c) share: the descriptor on the wire, the lane's key, nonces, associated
 * data and admission reply, AES-256-GCM through OpenSSL, socket helpers (edge_bulk.c).
 * Not for anything outside the lane. */
#ifndef VF_EDGE_BULK_INTERNAL_H
#define VF_EDGE_BULK_INTERNAL_H
#include "runtime/edge/edge_bulk.h"

#include <openssl/evp.h>
#include <stdbool.h>
#include <stdint.h>

#define VF_BULK_DESC_MAGIC "VFBULKD"
#define VF_BULK_SALT 16
#define VF_BULK_TAG 16
#define VF_BULK_ALIGN 64
#define VF_BULK_ADMIT_MS 2000          /* a connection must answer the challenge within this */
#define VF_BULK_CONNECT_MS 30000       /* the writer's connect gives up after this */
#define VF_BULK_UNBOUNDED ((uint64_t)1 << 40)
#define VF_BULK_HELLO_AAD "vflow-bulk-hello"

/* A descriptor: what stands for a frame in the ZeroMQ message. */
typedef struct vf_bulk_desc {
    char magic[8];
    uint64_t seq;
    uint32_t frame, nframes;
    uint64_t len;
} vf_bulk_desc;
_Static_assert(sizeof(vf_bulk_desc) == VF_BULK_DESC_SIZE, "descriptor size");

/* What a lane does to the bytes, chosen by the receiving end and named in its endpoint:
 * an unsecured hub's lane is plain; a secured hub's is sealed (AES-256-GCM), or, with
 * VFLOW_EDGE_BULK=auth on the receiver's node, authenticated only (GMAC: the chunk is
 * associated data of an empty GCM message, sent as it is). */
typedef enum vf_bulk_mode { VF_BULK_PLAIN = 'p', VF_BULK_SEALED = 'e', VF_BULK_AUTH = 'a' } vf_bulk_mode;
/* VFLOW_EDGE_BULK=0 in the environment. */
bool vf_bulk_lane_off(void);
/* The mode a receiving end offers on a hub with (curve) or without (NULL) a run key. */
vf_bulk_mode vf_bulk_mode_for(const vf_curve *curve);
/* The lane's key: BLAKE2b-256 keyed by the run key (32 zero bytes without one) over
 * "vflow-bulk-1" || salt. */
void vf_bulk_key(const vf_curve *curve, const unsigned char salt[VF_BULK_SALT], unsigned char key[32]);
/* The nonce of chunk `ctr` (kind 0) or of the admission reply (kind 1). */
void vf_bulk_nonce(unsigned char n[12], unsigned kind, uint64_t ctr);
/* AES-256-GCM of in[len] into out[len] (in == out: in place); enc: encrypt and write
 * tag, else decrypt and check tag (false when it does not authenticate). out == NULL:
 * in[len] is authenticated as associated data and not encrypted (GMAC). */
bool vf_bulk_gcm(EVP_CIPHER_CTX *x, bool enc, const unsigned char n[12], const void *aad, int aadlen,
                 const unsigned char *in, unsigned char *out, size_t len, unsigned char tag[VF_BULK_TAG]);
/* A context keyed for encryption (enc) or decryption; NULL when OpenSSL has none. */
EVP_CIPHER_CTX *vf_bulk_gcm_ctx(bool enc, const unsigned char key[32]);
/* The reply that admits a connection: the tag of (challenge, salt) under the key. */
bool vf_bulk_hello_tag(const unsigned char key[32], const unsigned char salt[VF_BULK_SALT], const unsigned char ch[16],
                       unsigned char tag[VF_BULK_TAG]);
/* A chunk's associated data: (item, frame, offset), little-endian. */
void vf_bulk_chunk_aad(unsigned char a[20], uint64_t seq, uint32_t frame, uint64_t off);
/* An admitted lane: blocking, each call waiting at most VF_STOP_POLL_MS. */
void vf_bulk_sockopts(int fd);
/* "tcp://host:port..." -> host (brackets of an IPv6 address removed); 0 or -1. */
int vf_bulk_endpoint_host(const char *ep, char *host, size_t n);

/* Moves *iov past `done` bytes a readv / writev moved; returns the pieces left. */
struct iovec;
int vf_bulk_iov_advance(struct iovec **iov, int cnt, size_t done);

#endif /* VF_EDGE_BULK_INTERNAL_H */
