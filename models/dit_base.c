/* dit_base.c — a LoRA checkpoint's record of its base and the checks against it
 * (dit_base.h). */
#include "models/dit_base.h"
#include "models/dit_weights.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Adds the bytes of `path` to the digest. */
static int hash_file(EVP_MD_CTX *md, const char *path, unsigned char *buf, int64_t *bytes, vf_status *st)
{
    int rc = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return vf_status_set(st, VF_EBADINPUT, __FILE__, __LINE__, "weights: %s: %s", path, strerror(errno));
    for (;;) {
        ssize_t n = read(fd, buf, VF_DIT_BASE_CHUNK);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) VF_FAIL(st, VF_EBADINPUT, "weights: %s: %s", path, strerror(errno));
        if (n == 0) break;
        if (EVP_DigestUpdate(md, buf, (size_t)n) != 1) VF_FAIL(st, VF_EEXTERNAL, "weights: %s: SHA-256 failed", path);
        *bytes += n;
    }
fail:
    close(fd);
    return rc;
}

int vf_dit_base_id(const char *weights, vf_dit_base *out, vf_status *st)
{
    int rc = 0;
    vf_dit_wsrc *w = NULL;
    EVP_MD_CTX *md = NULL;
    unsigned char *buf = NULL, dig[32];
    memset(out, 0, sizeof *out);
    VF_TRY(vf_dit_wsrc_open(weights, &w, st));
    if (!realpath(weights, out->path)) VF_FAIL(st, VF_EBADINPUT, "weights: %s: %s", weights, strerror(errno));
    if (!(buf = malloc(VF_DIT_BASE_CHUNK)) || !(md = EVP_MD_CTX_new())) VF_FAIL(st, VF_ENOMEM, "weights: out of memory");
    if (EVP_DigestInit_ex(md, EVP_sha256(), NULL) != 1) VF_FAIL(st, VF_EEXTERNAL, "weights: SHA-256 unavailable");
    const char *const *files;
    int nf = vf_dit_wsrc_files(w, &files);
    for (int i = 0; i < nf; i++) VF_TRY(hash_file(md, files[i], buf, &out->bytes, st));
    unsigned int len = 0;
    if (EVP_DigestFinal_ex(md, dig, &len) != 1 || len != 32) VF_FAIL(st, VF_EEXTERNAL, "weights: SHA-256 failed");
    for (int i = 0; i < 32; i++) snprintf(out->sha256 + 2 * i, 3, "%02x", dig[i]);
fail:
    EVP_MD_CTX_free(md);
    free(buf);
    vf_dit_wsrc_close(w);
    return rc;
}

int vf_dit_base_recorded(const vf_json *state, vf_dit_base *out)
{
    memset(out, 0, sizeof *out);
    const vf_json *b = vf_json_get(state, "lora_base");
    if (b && b->type == VF_JSON_OBJ) {
        snprintf(out->path, sizeof out->path, "%s", vf_json_get_str(b, "path", ""));
        snprintf(out->sha256, sizeof out->sha256, "%s", vf_json_get_str(b, "sha256", ""));
        out->bytes = vf_json_get_int(b, "bytes", 0);
    } else { /* an older checkpoint: the path as the run was given it */
        snprintf(out->path, sizeof out->path, "%s", vf_json_get_str(vf_json_get(state, "config"), "lora.base", ""));
    }
    return out->path[0] != 0;
}

vf_json *vf_dit_base_json(const vf_dit_base *b)
{
    vf_json *o = vf_json_obj();
    if (!o) return NULL;
    if (vf_json_set(o, "path", vf_json_str(b->path)) || vf_json_set(o, "sha256", vf_json_str(b->sha256)) ||
        vf_json_set(o, "bytes", vf_json_int(b->bytes))) {
        vf_json_free(o);
        return NULL;
    }
    return o;
}

int vf_dit_base_verify(const char *ckpt, const vf_json *state, const char *use, bool use_record, const char *how,
                       vf_dit_base *now, vf_status *st)
{
    int rc = 0;
    vf_dit_base rec;
    char hash[96] = "";
    bool have = vf_dit_base_recorded(state, &rec) == 1;
    bool given = use && use[0];
    memset(now, 0, sizeof *now);
    snprintf(now->path, sizeof now->path, "%s", given ? use : use_record ? rec.path : "");
    if (!have) return 0; /* a seeded-init base, or nothing recorded to check against */
    if (rec.sha256[0]) snprintf(hash, sizeof hash, " (sha256 %s)", rec.sha256);
    if (!now->path[0])
        VF_FAIL(st, VF_EBADINPUT, "%s: the LoRA's base is missing from this run (no weights): the adapters were "
                "trained on %s%s: give it with %sPATH", ckpt, rec.path, hash, how);
    struct stat sb;
    if (stat(now->path, &sb) != 0) {
        if (given)
            VF_FAIL(st, VF_EBADINPUT, "%s: %s%s: %s; the LoRA's base is %s%s: give it with %sPATH", ckpt, how, use,
                    strerror(errno), rec.path, hash, how);
        VF_FAIL(st, VF_EBADINPUT, "%s: the LoRA's base %s%s is missing: give it with %sPATH", ckpt, rec.path, hash,
                how);
    }
    if (!rec.sha256[0]) return 0; /* an older checkpoint: the path is all there is */
    vf_status ist;
    vf_status_clear(&ist);
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s", now->path);
    if (vf_dit_base_id(path, now, &ist))
        VF_FAIL(st, ist.code == VF_ENOMEM ? VF_ENOMEM : VF_EBADINPUT, "%s: the LoRA's base %s%s cannot be read (%s): "
                "give it with %sPATH", ckpt, path, hash, ist.msg, how);
    if (strcmp(now->sha256, rec.sha256) != 0)
        VF_FAIL(st, VF_EBADINPUT, "%s: the LoRA's base is different: the adapters were trained on %s (sha256 %s, "
                "%lld bytes); %s has sha256 %s (%lld bytes): give that base with %sPATH", ckpt, rec.path, rec.sha256,
                (long long)rec.bytes, now->path, now->sha256, (long long)now->bytes, how);
fail:
    return rc;
}
