/* ckpt_write.c — committing one checkpoint (ckpt.h, vf_ckpt_writer): the step-N.tmp dir,
 * the manifest of the files written into it, the rename that makes it complete, `latest`
 * and the removal of the checkpoints beyond `keep`. The reading side of the same files
 * is ckpt.c.
 */
#include "formats/ckpt.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

struct vf_ckpt_writer {
    char dir[PATH_MAX];
    char tmp[PATH_MAX + 64], fin[PATH_MAX + 64]; /* D/step-N.tmp, D/step-N */
    int64_t step, created;
    vf_json *files;                              /* the manifest's "files" */
    int64_t bytes;                               /* of every file listed, then the manifest */
};

int vf_ckpt_writer_begin(const char *dir, int64_t step, vf_ckpt_writer **out, vf_status *st)
{
    int rc = 0;
    *out = NULL;
    vf_ckpt_writer *w = calloc(1, sizeof *w);
    if (!w || !(w->files = vf_json_obj())) {
        free(w);
        return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "checkpoint: out of memory");
    }
    w->step = step;
    w->created = (int64_t)time(NULL);
    snprintf(w->dir, sizeof w->dir, "%s", dir);
    snprintf(w->tmp, sizeof w->tmp, "%s/step-%lld.tmp", dir, (long long)step);
    snprintf(w->fin, sizeof w->fin, "%s/step-%lld", dir, (long long)step);
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        VF_FAIL(st, VF_EIO, "checkpoint: mkdir %s: %s", dir, strerror(errno));
    VF_TRY(vf_ckpt_remove(w->tmp, st));
    if (mkdir(w->tmp, 0755) != 0) VF_FAIL(st, VF_EIO, "checkpoint: mkdir %s: %s", w->tmp, strerror(errno));
    *out = w;
    return 0;
fail:
    vf_json_free(w->files);
    free(w);
    return rc;
}

int64_t vf_ckpt_writer_step(const vf_ckpt_writer *w) { return w->step; }
const char *vf_ckpt_writer_dir(const vf_ckpt_writer *w) { return w->tmp; }

void vf_ckpt_writer_path(const vf_ckpt_writer *w, const char *name, char *out, size_t n)
{
    snprintf(out, n, "%s/%s", w->tmp, name);
}

int vf_ckpt_writer_add(vf_ckpt_writer *w, const char *name, int64_t bytes, uint32_t crc, vf_status *st)
{
    char hex[16];
    snprintf(hex, sizeof hex, "%08x", crc);
    vf_json *f = vf_json_obj();
    if (!f || vf_json_set(f, "bytes", vf_json_int(bytes)) || vf_json_set(f, "crc32c", vf_json_str(hex)) ||
        vf_json_set(w->files, name, f)) {
        vf_json_free(f);
        return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "checkpoint: out of memory");
    }
    w->bytes += bytes;
    return 0;
}

int vf_ckpt_writer_text(vf_ckpt_writer *w, const char *name, const char *text, vf_status *st)
{
    char path[PATH_MAX + 128];
    uint32_t crc;
    int64_t bytes;
    vf_ckpt_writer_path(w, name, path, sizeof path);
    int rc = vf_ckpt_write_text(path, text, &crc, &bytes, st);
    return rc ? rc : vf_ckpt_writer_add(w, name, bytes, crc, st);
}

int vf_ckpt_writer_state(vf_ckpt_writer *w, const vf_ckpt_state_info *s, vf_status *st)
{
    vf_ckpt_state_info at = *s;
    at.step = w->step;
    char *text = vf_ckpt_state_text(&at, st);
    if (!text) return st && st->code ? st->code : VF_ENOMEM;
    int rc = vf_ckpt_writer_text(w, VF_CKPT_STATE, text, st);
    free(text);
    return rc;
}

/* The complete checkpoints of dir older than `newest` beyond the keep-1 newest of them. */
static int prune(const char *dir, int64_t newest, int keep, vf_status *st)
{
    int64_t *steps = NULL;
    int n = 0, rc = vf_ckpt_list(dir, false, &steps, &n, st);
    if (rc) return rc;
    int older = 0;
    for (int i = 0; i < n; i++) older += steps[i] < newest;
    /* the newest plus keep-1 older ones stay */
    for (int i = 0; i < n && older > keep - 1; i++) {
        if (steps[i] >= newest) continue;
        char p[PATH_MAX + 64];
        snprintf(p, sizeof p, "%s/step-%lld", dir, (long long)steps[i]);
        if ((rc = vf_ckpt_remove(p, st))) break;
        older--;
    }
    free(steps);
    if (!rc) rc = vf_ckpt_fsync_dir(dir, st);
    return rc;
}

int vf_ckpt_writer_commit(vf_ckpt_writer *w, int keep, char *path, size_t n, int64_t *bytes, vf_status *st)
{
    int rc = 0;
    char *mtext = NULL;
    bool renamed = false;
    vf_json *man = vf_json_obj();
    if (!man || vf_json_set(man, "format", vf_json_str("vflow-checkpoint-manifest v1")) ||
        vf_json_set(man, "step", vf_json_int(w->step)) || vf_json_set(man, "created", vf_json_int(w->created)) ||
        vf_json_set(man, "files", w->files))
        VF_FAIL(st, VF_ENOMEM, "checkpoint: out of memory");
    w->files = NULL;
    mtext = vf_json_emit(man, false, 2);
    if (!mtext) VF_FAIL(st, VF_ENOMEM, "checkpoint: out of memory");
    char file[PATH_MAX + 128];
    int64_t mbytes;
    vf_ckpt_writer_path(w, VF_CKPT_MANIFEST, file, sizeof file);
    VF_TRY(vf_ckpt_write_text(file, mtext, NULL, &mbytes, st));
    w->bytes += mbytes;
    VF_TRY(vf_ckpt_fsync_dir(w->tmp, st));

    /* a step dir of this number can only be one that resume skipped as damaged */
    VF_TRY(vf_ckpt_remove(w->fin, st));
    if (rename(w->tmp, w->fin) != 0)
        VF_FAIL(st, VF_EIO, "checkpoint: rename %s -> %s: %s", w->tmp, w->fin, strerror(errno));
    renamed = true;
    VF_TRY(vf_ckpt_fsync_dir(w->dir, st));

    char lt[PATH_MAX + 16], lf[PATH_MAX + 16], text[64];
    snprintf(lt, sizeof lt, "%s/latest.tmp", w->dir);
    snprintf(lf, sizeof lf, "%s/latest", w->dir);
    snprintf(text, sizeof text, "step-%lld\n", (long long)w->step);
    VF_TRY(vf_ckpt_write_text(lt, text, NULL, NULL, st));
    if (rename(lt, lf) != 0) VF_FAIL(st, VF_EIO, "checkpoint: rename %s: %s", lt, strerror(errno));
    VF_TRY(vf_ckpt_fsync_dir(w->dir, st));
    VF_TRY(prune(w->dir, w->step, keep, st));
    if (path) snprintf(path, n, "%s", w->fin);
    if (bytes) *bytes = w->bytes;
fail:
    vf_json_free(man);
    free(mtext);
    if (renamed) w->tmp[0] = 0; /* nothing left to remove */
    vf_ckpt_writer_abort(w);
    return rc;
}

void vf_ckpt_writer_abort(vf_ckpt_writer *w)
{
    if (!w) return;
    if (w->tmp[0]) {
        vf_status rs;
        vf_status_clear(&rs);
        vf_ckpt_remove(w->tmp, &rs);
    }
    vf_json_free(w->files);
    free(w);
}
