/* edge_bulk.c — what both ends of a bulk lane use (edge_bulk_internal.h): the key, nonces,
 * AES-256-GCM, the admission reply, socket options.
 *
 * Encryption is OpenSSL's AES-256-GCM (AES-NI and carry-less multiply: several GB/s on
 * one core, where libsodium's AES-GCM runs at about half that), one EVP context per
 * side, keyed once, a fresh nonce per chunk.
 */
#include "runtime/edge/edge_bulk_internal.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/uio.h>

bool vf_bulk_is_desc(const void *data, size_t len)
{
    return len == VF_BULK_DESC_SIZE && memcmp(data, VF_BULK_DESC_MAGIC, 8) == 0;
}

bool vf_bulk_lane_off(void)
{
    const char *env = getenv("VFLOW_EDGE_BULK");
    return env && !strcmp(env, "0");
}

vf_bulk_mode vf_bulk_mode_for(const vf_curve *curve)
{
    const char *env = getenv("VFLOW_EDGE_BULK");
    if (!curve) return VF_BULK_PLAIN;
    return env && !strcmp(env, "auth") ? VF_BULK_AUTH : VF_BULK_SEALED;
}

void vf_bulk_key(const vf_curve *curve, const unsigned char salt[VF_BULK_SALT], unsigned char key[32])
{
    static const unsigned char zero[32];
    unsigned char msg[12 + VF_BULK_SALT];
    memcpy(msg, "vflow-bulk-1", 12);
    memcpy(msg + 12, salt, VF_BULK_SALT);
    crypto_generichash(key, 32, msg, sizeof msg, curve ? curve->key : zero, 32);
}

/* The nonce of chunk `ctr` (kind 0) or of the admission reply (kind 1). */
void vf_bulk_nonce(unsigned char n[12], unsigned kind, uint64_t ctr)
{
    memcpy(n, "VFB", 3);
    n[3] = (unsigned char)kind;
    for (int i = 0; i < 8; i++) n[4 + i] = (unsigned char)(ctr >> (8 * i));
}

/* AES-256-GCM of in[len] into out[len] (in == out: in place); enc: encrypt and write
 * tag, else decrypt and check tag (false when it does not authenticate). GCM is a
 * stream mode: nothing is written past out + len. */
bool vf_bulk_gcm(EVP_CIPHER_CTX *x, bool enc, const unsigned char n[12], const void *aad, int aadlen,
                const unsigned char *in, unsigned char *out, size_t len, unsigned char tag[VF_BULK_TAG])
{
    int ol = 0;
    unsigned char fin[16];
    if (enc) {
        if (EVP_EncryptInit_ex(x, NULL, NULL, NULL, n) != 1) return false;
        if (aadlen && EVP_EncryptUpdate(x, NULL, &ol, aad, aadlen) != 1) return false;
        if (len && EVP_EncryptUpdate(x, out, &ol, in, (int)len) != 1) return false; /* out NULL: more AAD */
        if (EVP_EncryptFinal_ex(x, fin, &ol) != 1) return false;
        return EVP_CIPHER_CTX_ctrl(x, EVP_CTRL_GCM_GET_TAG, VF_BULK_TAG, tag) == 1;
    }
    if (EVP_DecryptInit_ex(x, NULL, NULL, NULL, n) != 1) return false;
    if (aadlen && EVP_DecryptUpdate(x, NULL, &ol, aad, aadlen) != 1) return false;
    if (len && EVP_DecryptUpdate(x, out, &ol, in, (int)len) != 1) return false;
    if (EVP_CIPHER_CTX_ctrl(x, EVP_CTRL_GCM_SET_TAG, VF_BULK_TAG, tag) != 1) return false;
    return EVP_DecryptFinal_ex(x, fin, &ol) == 1;
}

EVP_CIPHER_CTX *vf_bulk_gcm_ctx(bool enc, const unsigned char key[32])
{
    EVP_CIPHER_CTX *x = EVP_CIPHER_CTX_new();
    if (!x) return NULL;
    int ok = enc ? EVP_EncryptInit_ex(x, EVP_aes_256_gcm(), NULL, key, NULL)
                 : EVP_DecryptInit_ex(x, EVP_aes_256_gcm(), NULL, key, NULL);
    if (ok != 1) {
        EVP_CIPHER_CTX_free(x);
        return NULL;
    }
    return x;
}

/* The reply that admits a connection: the tag of (challenge, salt) under the key. */
bool vf_bulk_hello_tag(const unsigned char key[32], const unsigned char salt[VF_BULK_SALT], const unsigned char ch[16],
                      unsigned char tag[VF_BULK_TAG])
{
    EVP_CIPHER_CTX *x = vf_bulk_gcm_ctx(true, key);
    if (!x) return false;
    unsigned char aad[sizeof VF_BULK_HELLO_AAD - 1 + VF_BULK_SALT + 16], n[12];
    memcpy(aad, VF_BULK_HELLO_AAD, sizeof VF_BULK_HELLO_AAD - 1);
    memcpy(aad + sizeof VF_BULK_HELLO_AAD - 1, salt, VF_BULK_SALT);
    memcpy(aad + sizeof VF_BULK_HELLO_AAD - 1 + VF_BULK_SALT, ch, 16);
    vf_bulk_nonce(n, 1, 0);
    bool ok = vf_bulk_gcm(x, true, n, aad, (int)sizeof aad, NULL, NULL, 0, tag);
    EVP_CIPHER_CTX_free(x);
    return ok;
}

void vf_bulk_chunk_aad(unsigned char a[20], uint64_t seq, uint32_t frame, uint64_t off)
{
    for (int i = 0; i < 8; i++) a[i] = (unsigned char)(seq >> (8 * i));
    for (int i = 0; i < 4; i++) a[8 + i] = (unsigned char)(frame >> (8 * i));
    for (int i = 0; i < 8; i++) a[12 + i] = (unsigned char)(off >> (8 * i));
}

/* An admitted lane: blocking, each call waiting at most VF_STOP_POLL_MS (so a whole
 * chunk moves in one system call, and the stop / quit flag is looked at between them). */
void vf_bulk_sockopts(int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct timeval tv = {0, VF_STOP_POLL_MS * 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
}

/* "tcp://host:port..." -> host (brackets of an IPv6 address removed). */
int vf_bulk_endpoint_host(const char *ep, char *host, size_t n)
{
    if (strncmp(ep, "tcp://", 6) != 0) return -1;
    const char *h = ep + 6, *end;
    if (*h == '[') {
        h++;
        if (!(end = strchr(h, ']'))) return -1;
    } else if (!(end = strrchr(h, ':'))) {
        return -1;
    }
    if ((size_t)(end - h) >= n) return -1;
    memcpy(host, h, (size_t)(end - h));
    host[end - h] = 0;
    return 0;
}

int vf_bulk_iov_advance(struct iovec **iov, int cnt, size_t done)
{
    struct iovec *v = *iov;
    while (cnt > 0 && done >= v->iov_len) {
        done -= v->iov_len;
        v++;
        cnt--;
    }
    if (cnt > 0) {
        v->iov_base = (char *)v->iov_base + done;
        v->iov_len -= done;
    }
    *iov = v;
    return cnt;
}
