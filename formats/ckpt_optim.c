/* ckpt_optim.c — a checkpoint's optimizer-kk-of-SS.safetensors files (ckpt.h): each shard's
 * Adam moments written with the flat range they cover — whole, or streamed in pieces as
 * the shard's snapshot chunks arrive — and read back for any range whatever the number
 * of shards that wrote them.
 */
#include "formats/ckpt.h"
#include "formats/safetensors.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct vf_ckpt_optim {
    vf_ckpt_writer *w; /* borrowed */
    vf_st_writer *sw;
    vf_st_stream *s;
    char name[64];
    int64_t off, n;
    uint64_t at_m, at_v; /* file offsets of exp_avg[0], exp_avg_sq[0] */
};

int vf_ckpt_optim_open(vf_ckpt_writer *w, int k, int S, int64_t off, int64_t n, int64_t total,
                       vf_ckpt_optim **out, vf_status *st)
{
    int rc = 0;
    char path[PATH_MAX + 128];
    *out = NULL;
    vf_ckpt_optim *o = calloc(1, sizeof *o);
    if (!o || !(o->sw = vf_st_writer_new(st))) {
        free(o);
        return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "checkpoint: out of memory");
    }
    o->w = w, o->off = off, o->n = n;
    snprintf(o->name, sizeof o->name, "optimizer-%02d-of-%02d.safetensors", k, S);
    vf_ckpt_writer_path(w, o->name, path, sizeof path);
    const int64_t shape[1] = {n};
    char val[6][32];
    snprintf(val[0], 32, "%lld", (long long)off);
    snprintf(val[1], 32, "%lld", (long long)n);
    snprintf(val[2], 32, "%d", k);
    snprintf(val[3], 32, "%d", S);
    snprintf(val[4], 32, "%lld", (long long)vf_ckpt_writer_step(w));
    snprintf(val[5], 32, "%lld", (long long)total);
    static const char *const keys[6] = {"offset", "numel", "shard", "shards", "step", "total"};
    VF_TRY(vf_st_writer_add_streamed(o->sw, "exp_avg", VF_ST_F32, 1, shape, st));
    VF_TRY(vf_st_writer_add_streamed(o->sw, "exp_avg_sq", VF_ST_F32, 1, shape, st));
    for (int i = 0; i < 6; i++) VF_TRY(vf_st_writer_meta(o->sw, keys[i], val[i], st));
    VF_TRY(vf_st_stream_open(o->sw, path, &o->s, st));
    o->at_m = (uint64_t)vf_st_stream_offset(o->s, "exp_avg");
    o->at_v = (uint64_t)vf_st_stream_offset(o->s, "exp_avg_sq");
    *out = o;
    return 0;
fail:
    vf_ckpt_optim_abort(o);
    return rc;
}

int vf_ckpt_optim_put(vf_ckpt_optim *o, int64_t a, int64_t cnt, const float *m, const float *v, vf_status *st)
{
    if (a < o->off || cnt < 0 || a + cnt > o->off + o->n)
        return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__,
                             "checkpoint: %s: elements [%lld, +%lld) outside the shard's [%lld, +%lld)", o->name,
                             (long long)a, (long long)cnt, (long long)o->off, (long long)o->n);
    uint64_t rel = (uint64_t)(a - o->off) * 4;
    int rc = vf_st_stream_put(o->s, o->at_m + rel, m, (size_t)cnt * 4, st);
    return rc ? rc : vf_st_stream_put(o->s, o->at_v + rel, v, (size_t)cnt * 4, st);
}

int vf_ckpt_optim_close(vf_ckpt_optim *o, vf_status *st)
{
    int64_t bytes = 0;
    uint32_t crc = 0;
    int rc = vf_st_stream_finish(o->s, VF_ST_FSYNC, &bytes, &crc, st);
    o->s = NULL;
    if (!rc) rc = vf_ckpt_writer_add(o->w, o->name, bytes, crc, st);
    vf_ckpt_optim_abort(o);
    return rc;
}

void vf_ckpt_optim_abort(vf_ckpt_optim *o)
{
    if (!o) return;
    vf_st_stream_abort(o->s);
    vf_st_writer_free(o->sw);
    free(o);
}

int vf_ckpt_writer_optimizer(vf_ckpt_writer *w, int k, int S, int64_t off, int64_t n, int64_t total,
                             const float *m, const float *v, vf_status *st)
{
    vf_ckpt_optim *o = NULL;
    int rc = vf_ckpt_optim_open(w, k, S, off, n, total, &o, st);
    if (!rc) rc = vf_ckpt_optim_put(o, off, n, m, v, st);
    if (!rc) return vf_ckpt_optim_close(o, st);
    vf_ckpt_optim_abort(o);
    return rc;
}

static int64_t meta_int(const vf_st_file *f, const char *key)
{
    const char *v = vf_st_meta_get(f, key);
    if (!v || !v[0]) return -1;
    char *end;
    long long x = strtoll(v, &end, 10);
    return *end ? -1 : x;
}

int vf_ckpt_read_moments(const char *path, int64_t lo, int64_t hi, float *m, float *v, vf_status *st)
{
    int rc = 0;
    DIR *d = opendir(path);
    vf_st_file *f = NULL;
    int64_t covered = 0;
    if (!d) return vf_status_set(st, VF_EIO, __FILE__, __LINE__, "%s: cannot list", path);
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (strncmp(e->d_name, "optimizer-", 10) != 0 || len < 12 ||
            strcmp(e->d_name + len - 12, ".safetensors") != 0)
            continue;
        char file[PATH_MAX + 256];
        snprintf(file, sizeof file, "%s/%s", path, e->d_name);
        VF_TRY(vf_st_open(file, &f, st));
        int64_t off = meta_int(f, "offset"), n = meta_int(f, "numel");
        if (off < 0 || n < 0)
            VF_FAIL(st, VF_ECORRUPT, "%s: metadata \"offset\"/\"numel\" missing or not integers", file);
        int64_t a = off > lo ? off : lo, b = off + n < hi ? off + n : hi;
        if (b > a) {
            const int64_t shape[1] = {n};
            const vf_st_tensor *tm, *tv;
            VF_TRY(vf_st_expect(f, "exp_avg", 1, shape, &tm, st));
            VF_TRY(vf_st_expect(f, "exp_avg_sq", 1, shape, &tv, st));
            if (tm->dtype != VF_ST_F32 || tv->dtype != VF_ST_F32)
                VF_FAIL(st, VF_ECORRUPT, "%s: moments must be F32", file);
            memcpy(m + (a - lo), (const char *)tm->data + (size_t)(a - off) * 4, (size_t)(b - a) * 4);
            memcpy(v + (a - lo), (const char *)tv->data + (size_t)(a - off) * 4, (size_t)(b - a) * 4);
            covered += b - a;
        }
        vf_st_close(f);
        f = NULL;
    }
    if (covered != hi - lo)
        VF_FAIL(st, VF_ECORRUPT,
                "%s: the optimizer files cover %lld of the %lld elements [%lld, %lld) of this shard",
                path, (long long)covered, (long long)(hi - lo), (long long)lo, (long long)hi);
fail:
    vf_st_close(f);
    closedir(d);
    return rc;
}
