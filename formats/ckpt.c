/* ckpt.c — checkpoint dirs on disk (ckpt.h), the reading side: finding the newest
 * complete one, verifying it against its manifest, `latest`, the model file to open;
 * and the small durable-write helpers the writer (ckpt_write.c) commits with.
 */
#include "formats/ckpt.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------------------ listing */

void vf_ckpt_dir(const char *param, const char *run_dir, char *out, size_t n)
{
    const char *run = run_dir && run_dir[0] ? run_dir : ".";
    if (param && !strncmp(param, "<run>/", 6)) snprintf(out, n, "%s/%s", run, param + 6);
    else if (param && param[0]) snprintf(out, n, "%s", param);
    else snprintf(out, n, "%s/ckpt", run);
}

/* "step-N" (or "step-N.tmp" with tmp): N, else -1. */
static int64_t step_of(const char *name, bool tmp)
{
    if (strncmp(name, "step-", 5) != 0) return -1;
    const char *p = name + 5;
    if (*p < '0' || *p > '9') return -1;
    char *end;
    long long v = strtoll(p, &end, 10);
    if (tmp ? strcmp(end, ".tmp") != 0 : *end != 0) return -1;
    return v;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

int vf_ckpt_list(const char *dir, bool tmp, int64_t **steps, int *n, vf_status *st)
{
    *steps = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d) {
        if (errno == ENOENT) return 0;
        if (errno == ENOTDIR)
            return vf_status_set(st, VF_EBADINPUT, __FILE__, __LINE__,
                                 "checkpoint dir %s is not a directory", dir);
        return vf_status_set(st, VF_EIO, __FILE__, __LINE__, "checkpoint dir %s: %s", dir,
                             strerror(errno));
    }
    int cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        int64_t s = step_of(e->d_name, tmp);
        if (s < 0) continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 16;
            int64_t *g = realloc(*steps, sizeof *g * (size_t)cap);
            if (!g) {
                closedir(d);
                free(*steps);
                *steps = NULL;
                *n = 0;
                return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "out of memory");
            }
            *steps = g;
        }
        (*steps)[(*n)++] = s;
    }
    closedir(d);
    if (*n) qsort(*steps, (size_t)*n, sizeof **steps, cmp_i64);
    return 0;
}

/* ------------------------------------------------------------------ verify */

static char *slurp(const char *path, size_t max, size_t *len, vf_status *st)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        vf_status_set(st, errno == ENOENT ? VF_ENOTFOUND : VF_EIO, __FILE__, __LINE__, "%s: %s",
                      path, strerror(errno));
        return NULL;
    }
    struct stat sb;
    char *buf = NULL;
    if (fstat(fd, &sb) != 0 || (size_t)sb.st_size > max) {
        vf_status_set(st, VF_ECORRUPT, __FILE__, __LINE__, "%s: unreadable or larger than %zu bytes",
                      path, max);
        goto out;
    }
    buf = malloc((size_t)sb.st_size + 1);
    if (!buf) {
        vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "out of memory");
        goto out;
    }
    size_t n = 0;
    while (n < (size_t)sb.st_size) {
        ssize_t r = read(fd, buf + n, (size_t)sb.st_size - n);
        if (r <= 0) break;
        n += (size_t)r;
    }
    buf[n] = 0;
    *len = n;
out:
    close(fd);
    return buf;
}

/* Size and CRC32C of a file, read in 1 MiB pieces. */
static int file_crc(const char *path, int64_t *bytes, uint32_t *crc, vf_status *st)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT)
        return vf_status_set(st, VF_ECORRUPT, __FILE__, __LINE__,
                             "%s: listed in the manifest but not there", path);
    if (fd < 0) return vf_status_set(st, VF_EIO, __FILE__, __LINE__, "%s: %s", path, strerror(errno));
    enum { CH = 1 << 20 };
    char *buf = malloc(CH);
    int rc = 0;
    if (!buf) {
        close(fd);
        return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "out of memory");
    }
    uint32_t c = 0;
    int64_t n = 0;
    for (;;) {
        ssize_t r = read(fd, buf, CH);
        if (r < 0) {
            if (errno == EINTR) continue;
            rc = vf_status_set(st, VF_EIO, __FILE__, __LINE__, "%s: %s", path, strerror(errno));
            break;
        }
        if (r == 0) break;
        c = vf_crc32c(c, buf, (size_t)r);
        n += r;
    }
    free(buf);
    close(fd);
    *bytes = n;
    *crc = c;
    return rc;
}

/* A sharded model: every file the index's weight_map names is in the manifest (and so
 * was checked), so a shard that went missing or was never written cannot pass. */
static int index_listed(const char *path, const char *sub, const vf_json *files, vf_status *st)
{
    char ip[PATH_MAX + 64], name[PATH_MAX];
    size_t len = 0;
    snprintf(ip, sizeof ip, "%s/%s%s", path, sub, VF_CKPT_MODEL_INDEX);
    char *text = slurp(ip, 64 << 20, &len, st);
    if (!text) return st && st->code ? st->code : VF_EIO;
    vf_status pst;
    vf_status_clear(&pst);
    vf_json *j = vf_json_parse_n(text, len, &pst);
    free(text);
    const vf_json *map = j ? vf_json_get(j, "weight_map") : NULL;
    int rc = 0;
    if (!map || map->type != VF_JSON_OBJ || vf_json_len(map) == 0)
        rc = vf_status_set(st, VF_ECORRUPT, __FILE__, __LINE__, "%s: no \"weight_map\" object%s%s", ip,
                           j ? "" : ": ", j ? "" : pst.msg);
    for (int i = 0; !rc && i < vf_json_len(map); i++) {
        const vf_json *v = vf_json_at(map, i);
        if (v && v->type == VF_JSON_STR) snprintf(name, sizeof name, "%s%s", sub, v->s);
        if (!v || v->type != VF_JSON_STR || !vf_json_get(files, name))
            rc = vf_status_set(st, VF_ECORRUPT, __FILE__, __LINE__,
                               "%s: tensor %s: its file %s is not in the manifest", ip, vf_json_key_at(map, i),
                               v && v->type == VF_JSON_STR ? v->s : "(not a string)");
    }
    vf_json_free(j);
    return rc;
}

/* The expert subdirs a listed name may be in ("high_noise_model/", "low_noise_model/"). */
static const char *const expert_sub[2] = {VF_CKPT_EXPERT_HIGH "/", VF_CKPT_EXPERT_LOW "/"};

/* A listed file's name: a plain name, or one in an expert subdir. */
static bool listed_name_ok(const char *name)
{
    for (int e = 0; e < 2; e++)
        if (!strncmp(name, expert_sub[e], strlen(expert_sub[e]))) name += strlen(expert_sub[e]);
    return name[0] && !strchr(name, '/') && strcmp(name, "..") != 0 && strcmp(name, ".") != 0;
}

/* Whether the manifest's files hold a model: the one-model step's, an expert's in its
 * subdir, or a LoRA run's two adapter files. */
static bool model_listed(const vf_json *files)
{
    static const char *const top[] = {VF_CKPT_MODEL, VF_CKPT_MODEL_INDEX, VF_CKPT_LORA, VF_CKPT_LORA_HIGH,
                                      VF_CKPT_LORA_LOW};
    for (size_t i = 0; i < sizeof top / sizeof top[0]; i++)
        if (vf_json_get(files, top[i])) return true;
    char name[128];
    for (int e = 0; e < 2; e++)
        for (int k = 0; k < 2; k++) {
            snprintf(name, sizeof name, "%s%s", expert_sub[e], k ? VF_CKPT_MODEL_INDEX : VF_CKPT_MODEL);
            if (vf_json_get(files, name)) return true;
        }
    return false;
}

int vf_ckpt_verify(const char *path, vf_status *st)
{
    int rc = 0;
    char file[PATH_MAX + 64];
    size_t len = 0;
    vf_json *m = NULL;
    snprintf(file, sizeof file, "%s/%s", path, VF_CKPT_MANIFEST);
    char *text = slurp(file, 64 << 20, &len, st);
    if (!text) return st && st->code ? st->code : VF_EIO;
    vf_status pst;
    vf_status_clear(&pst);
    m = vf_json_parse_n(text, len, &pst);
    if (!m || m->type != VF_JSON_OBJ)
        VF_FAIL(st, VF_ECORRUPT, "%s: not a checkpoint manifest (%s)", file, m ? "not an object" : pst.msg);
    vf_json *files = vf_json_get(m, "files");
    if (!files || files->type != VF_JSON_OBJ)
        VF_FAIL(st, VF_ECORRUPT, "%s: no \"files\" object", file);
    if (!model_listed(files) || !vf_json_get(files, VF_CKPT_STATE))
        VF_FAIL(st, VF_ECORRUPT, "%s: does not list %s (or %s, or %s, or an expert's) and %s", file, VF_CKPT_MODEL,
                VF_CKPT_MODEL_INDEX, VF_CKPT_LORA, VF_CKPT_STATE);
    for (int i = 0; i < vf_json_len(files); i++) {
        const char *name = vf_json_key_at(files, i);
        const vf_json *f = files->items[i];
        if (!listed_name_ok(name)) VF_FAIL(st, VF_ECORRUPT, "%s: bad file name \"%s\"", file, name);
        int64_t want = vf_json_get_int(f, "bytes", -1), got = 0;
        const char *crc_hex = vf_json_get_str(f, "crc32c", "");
        uint32_t crc = 0;
        char fp[PATH_MAX + 64];
        snprintf(fp, sizeof fp, "%s/%s", path, name);
        VF_TRY(file_crc(fp, &got, &crc, st));
        if (got != want)
            VF_FAIL(st, VF_ECORRUPT, "%s: %lld bytes, the manifest says %lld", fp, (long long)got,
                    (long long)want);
        char hex[16];
        snprintf(hex, sizeof hex, "%08x", crc);
        if (strcmp(hex, crc_hex) != 0)
            VF_FAIL(st, VF_ECORRUPT, "%s: CRC32C %s, the manifest says %s", fp, hex, crc_hex);
    }
    /* the sizes and CRCs hold for every listed file: the index's shards must be among them */
    if (vf_json_get(files, VF_CKPT_MODEL_INDEX)) VF_TRY(index_listed(path, "", files, st));
    for (int e = 0; e < 2; e++) {
        char ix[128];
        snprintf(ix, sizeof ix, "%s%s", expert_sub[e], VF_CKPT_MODEL_INDEX);
        if (vf_json_get(files, ix)) VF_TRY(index_listed(path, expert_sub[e], files, st));
    }
fail:
    vf_json_free(m);
    free(text);
    return rc;
}

/* ------------------------------------------------------------------ latest */

int vf_ckpt_latest(const char *dir, int64_t *step, vf_status *st)
{
    char lp[PATH_MAX + 16], text[PATH_MAX];
    *step = -1;
    snprintf(lp, sizeof lp, "%s/latest", dir);
    struct stat sb;
    if (lstat(lp, &sb) != 0) {
        if (errno == ENOENT || errno == ENOTDIR) return 0;
        return vf_status_set(st, VF_EIO, __FILE__, __LINE__, "%s: %s", lp, strerror(errno));
    }
    if (S_ISLNK(sb.st_mode)) {
        /* a link (written by hand or by another tool) must lead to an entry of dir itself */
        ssize_t n = readlink(lp, text, sizeof text - 1);
        if (n < 0) return vf_status_set(st, VF_EIO, __FILE__, __LINE__, "%s: %s", lp, strerror(errno));
        text[n] = 0;
        char full[2 * PATH_MAX + 2], parent[PATH_MAX], rparent[PATH_MAX], rdir[PATH_MAX];
        if (text[0] == '/') snprintf(full, sizeof full, "%s", text);
        else snprintf(full, sizeof full, "%s/%s", dir, text);
        while (strlen(full) > 1 && full[strlen(full) - 1] == '/') full[strlen(full) - 1] = 0;
        char *slash = strrchr(full, '/');
        snprintf(parent, sizeof parent, "%.*s", (int)(slash - full), full);
        if (!realpath(dir, rdir) || !realpath(parent[0] ? parent : "/", rparent) || strcmp(rdir, rparent) != 0 ||
            step_of(slash + 1, false) < 0)
            return vf_status_set(st, VF_EBADINPUT, __FILE__, __LINE__,
                                 "%s points outside the checkpoint dir (-> %s); remove it or point it "
                                 "at a step-N dir in %s",
                                 lp, text, dir);
        *step = step_of(slash + 1, false);
        return 0;
    }
    if (!S_ISREG(sb.st_mode))
        return vf_status_set(st, VF_EBADINPUT, __FILE__, __LINE__, "%s is not a file", lp);
    size_t len = 0;
    char *t = slurp(lp, 4096, &len, st);
    if (!t) return st && st->code ? st->code : VF_EIO;
    while (len && (t[len - 1] == '\n' || t[len - 1] == ' ' || t[len - 1] == '\r')) t[--len] = 0;
    *step = step_of(t, false);
    int rc = 0;
    if (*step < 0)
        rc = vf_status_set(st, VF_EBADINPUT, __FILE__, __LINE__,
                           "%s holds \"%.64s\", not the name of a step dir in %s (step-N)", lp, t, dir);
    free(t);
    return rc;
}

/* Verifies one step dir and reads its state.json, whose "step" must be `step` (any step
 * when step < 0). */
int vf_ckpt_open(const char *path, int64_t step, vf_json **state, vf_status *st)
{
    int rc = vf_ckpt_verify(path, st);
    *state = NULL;
    if (rc) return rc;
    char sp[PATH_MAX + 32];
    size_t len = 0;
    snprintf(sp, sizeof sp, "%s/%s", path, VF_CKPT_STATE);
    char *text = slurp(sp, 64 << 20, &len, st);
    vf_json *j = text ? vf_json_parse_n(text, len, st) : NULL;
    free(text);
    if (!j) return st->code ? st->code : VF_ECORRUPT;
    int64_t got = vf_json_get_int(j, "step", -1);
    if (j->type != VF_JSON_OBJ || got < 0 || (step >= 0 && got != step)) {
        vf_json_free(j);
        if (step >= 0)
            return vf_status_set(st, VF_ECORRUPT, __FILE__, __LINE__, "%s: \"step\" is not %lld", sp, (long long)step);
        return vf_status_set(st, VF_ECORRUPT, __FILE__, __LINE__, "%s: no \"step\"", sp);
    }
    *state = j;
    return 0;
}

int vf_ckpt_find(const char *dir, vf_ckpt_warn_fn warn, void *user, vf_ckpt *out, vf_status *st)
{
    int rc = 0;
    int64_t *steps = NULL;
    int n = 0;
    memset(out, 0, sizeof *out);
    out->latest = -1;
    VF_TRY(vf_ckpt_list(dir, false, &steps, &n, st));
    VF_TRY(vf_ckpt_latest(dir, &out->latest, st));
    if (out->latest >= 0) {
        out->latest_missing = true;
        for (int i = 0; i < n; i++)
            if (steps[i] == out->latest) out->latest_missing = false;
        if (out->latest_missing && warn) {
            char msg[PATH_MAX + 160];
            snprintf(msg, sizeof msg, "%s/latest names step-%lld, which is not there; looking for the newest "
                     "complete checkpoint", dir, (long long)out->latest);
            warn(user, msg);
        }
    }
    for (int i = n - 1; i >= 0; i--) {
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/step-%lld", dir, (long long)steps[i]);
        vf_status vs;
        vf_status_clear(&vs);
        vf_json *state = NULL;
        if (vf_ckpt_open(path, steps[i], &state, &vs)) state = NULL;
        if (!state) {
            char msg[sizeof vs.msg + PATH_MAX + 128];
            snprintf(msg, sizeof msg, "skipping damaged checkpoint %s: %s", path, vs.msg);
            if (warn) warn(user, msg);
            out->skipped++;
            continue;
        }
        out->step = steps[i];
        snprintf(out->path, sizeof out->path, "%s", path);
        out->state = state;
        goto fail; /* rc == 0 */
    }
    if (out->skipped)
        rc = vf_status_set(st, VF_ENOTFOUND, __FILE__, __LINE__, "every step dir in %s is damaged (%d skipped)",
                           dir, out->skipped);
    else if (out->latest_missing)
        rc = vf_status_set(st, VF_ENOTFOUND, __FILE__, __LINE__, "%s/latest names step-%lld, which is not there, "
                           "and there is no other step dir", dir, (long long)out->latest);
    else
        rc = vf_status_set(st, VF_ENOTFOUND, __FILE__, __LINE__, "%s has no step dir", dir);
fail:
    free(steps);
    return rc;
}

void vf_ckpt_fini(vf_ckpt *c)
{
    if (!c) return;
    vf_json_free(c->state);
    c->state = NULL;
}

/* ------------------------------------------------------------------ files */

void vf_ckpt_model_path(const char *path, char *out, size_t n)
{
    struct stat sb;
    snprintf(out, n, "%s/%s", path, VF_CKPT_MODEL_INDEX);
    if (stat(out, &sb) != 0) snprintf(out, n, "%s/%s", path, VF_CKPT_MODEL);
    if (stat(out, &sb) != 0) snprintf(out, n, "%s/%s", path, VF_CKPT_LORA);
}

int vf_ckpt_remove_tmp(const char *dir, void (*each)(void *user, const char *path), void *user, vf_status *st)
{
    int64_t *tmp = NULL;
    int n = 0;
    int rc = vf_ckpt_list(dir, true, &tmp, &n, st);
    for (int i = 0; i < n && !rc; i++) {
        char p[PATH_MAX + 64];
        snprintf(p, sizeof p, "%s/step-%lld.tmp", dir, (long long)tmp[i]);
        if (each) each(user, p);
        rc = vf_ckpt_remove(p, st);
    }
    free(tmp);
    return rc;
}

/* ------------------------------------------------------------------ writing */

int vf_ckpt_write_text(const char *path, const char *text, uint32_t *crc, int64_t *bytes,
                       vf_status *st)
{
    size_t len = strlen(text), off = 0;
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return vf_status_set(st, VF_EIO, __FILE__, __LINE__, "%s: %s", path, strerror(errno));
    while (off < len) {
        ssize_t w = write(fd, text + off, len - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            int e = errno;
            close(fd);
            return vf_status_set(st, VF_EIO, __FILE__, __LINE__, "%s: write: %s", path, strerror(e));
        }
        off += (size_t)w;
    }
    if (fsync(fd) != 0) {
        int e = errno;
        close(fd);
        return vf_status_set(st, VF_EIO, __FILE__, __LINE__, "%s: fsync: %s", path, strerror(e));
    }
    if (close(fd) != 0)
        return vf_status_set(st, VF_EIO, __FILE__, __LINE__, "%s: close: %s", path, strerror(errno));
    if (crc) *crc = vf_crc32c(0, text, len);
    if (bytes) *bytes = (int64_t)len;
    return 0;
}

int vf_ckpt_fsync_dir(const char *dir, vf_status *st)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return vf_status_set(st, VF_EIO, __FILE__, __LINE__, "%s: %s", dir, strerror(errno));
    int r = fsync(fd);
    int e = errno;
    close(fd);
    if (r != 0) return vf_status_set(st, VF_EIO, __FILE__, __LINE__, "%s: fsync: %s", dir, strerror(e));
    return 0;
}

int vf_ckpt_remove(const char *path, vf_status *st)
{
    DIR *d = opendir(path);
    if (!d) {
        if (errno == ENOENT) return 0;
        return vf_status_set(st, VF_EIO, __FILE__, __LINE__, "%s: %s", path, strerror(errno));
    }
    struct dirent *e;
    int rc = 0;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char f[PATH_MAX + 256];
        snprintf(f, sizeof f, "%s/%s", path, e->d_name);
        struct stat sb;
        bool dir = e->d_type == DT_DIR || (e->d_type == DT_UNKNOWN && lstat(f, &sb) == 0 && S_ISDIR(sb.st_mode));
        if (dir) { /* a two-expert step's subdir */
            vf_status sub;
            vf_status_clear(&sub);
            if (vf_ckpt_remove(f, &sub) && !rc) rc = vf_status_set(st, sub.code, __FILE__, __LINE__, "%s", sub.msg);
            continue;
        }
        if (unlink(f) != 0 && errno != ENOENT && !rc)
            rc = vf_status_set(st, VF_EIO, __FILE__, __LINE__, "%s: %s", f, strerror(errno));
    }
    closedir(d);
    if (rmdir(path) != 0 && errno != ENOENT && !rc)
        rc = vf_status_set(st, VF_EIO, __FILE__, __LINE__, "%s: %s", path, strerror(errno));
    return rc;
}

/* ------------------------------------------------------------------ two experts */

/* Where a one-model step's file `name` goes in the two-expert step of expert e: into the
 * expert's subdir (the model files), renamed to the top (lora.safetensors), or nowhere
 * (NULL: the optimizer's, state.json, the manifest). */
static const char *expert_name(int e, const char *name, char *out, size_t n)
{
    size_t sl = strlen(VF_CKPT_MODEL_STEM);
    bool shard = !strncmp(name, VF_CKPT_MODEL_STEM "-", sl + 1) && strlen(name) > 12 &&
                 !strcmp(name + strlen(name) - 12, ".safetensors");
    if (!strcmp(name, VF_CKPT_LORA)) snprintf(out, n, "%s", e ? VF_CKPT_LORA_LOW : VF_CKPT_LORA_HIGH);
    else if (!strcmp(name, VF_CKPT_MODEL) || !strcmp(name, VF_CKPT_MODEL_INDEX) || shard)
        snprintf(out, n, "%s%s", expert_sub[e], name);
    else return NULL;
    return out;
}

/* The model files of one expert's step dir `from`, linked into the writer's step and
 * listed with the sizes and CRCs from's manifest gives. */
static int link_expert(vf_ckpt_writer *w, int e, const char *from, vf_status *st)
{
    int rc = 0;
    char mp[PATH_MAX + 64], to[PATH_MAX + 256], src[PATH_MAX + 256], name[PATH_MAX];
    size_t len = 0;
    snprintf(mp, sizeof mp, "%s/%s", from, VF_CKPT_MANIFEST);
    char *text = slurp(mp, 64 << 20, &len, st);
    if (!text) return st->code ? st->code : VF_EIO;
    vf_json *m = vf_json_parse_n(text, len, st);
    const vf_json *files = m ? vf_json_get(m, "files") : NULL;
    if (!files || files->type != VF_JSON_OBJ) VF_FAIL(st, VF_ECORRUPT, "%s: no \"files\" object", mp);
    bool sub = false; /* the subdir made (a LoRA run's step has none) */
    for (int i = 0; i < vf_json_len(files); i++) {
        const char *f = vf_json_key_at(files, i);
        if (strchr(f, '/') || !expert_name(e, f, name, sizeof name)) continue;
        const char *hex = vf_json_get_str(files->items[i], "crc32c", "");
        char *end = NULL;
        unsigned long crc = strtoul(hex, &end, 16);
        int64_t bytes = vf_json_get_int(files->items[i], "bytes", -1);
        if (strlen(hex) != 8 || *end || bytes < 0) VF_FAIL(st, VF_ECORRUPT, "%s: file %s: no bytes or crc32c", mp, f);
        if (!sub && strchr(name, '/')) {
            vf_ckpt_writer_path(w, expert_sub[e], to, sizeof to);
            if (mkdir(to, 0755) != 0) VF_FAIL(st, VF_EIO, "checkpoint: mkdir %s: %s", to, strerror(errno));
            sub = true;
        }
        snprintf(src, sizeof src, "%s/%s", from, f);
        vf_ckpt_writer_path(w, name, to, sizeof to);
        if (link(src, to) != 0) VF_FAIL(st, VF_EIO, "checkpoint: link %s -> %s: %s", src, to, strerror(errno));
        VF_TRY(vf_ckpt_writer_add(w, name, bytes, (uint32_t)crc, st));
    }
    vf_ckpt_writer_path(w, sub ? expert_sub[e] : "", to, sizeof to);
    rc = vf_ckpt_fsync_dir(to, st);
fail:
    vf_json_free(m);
    free(text);
    return rc;
}

/* The low expert's "lora_base" (from its step dir `from`) into the joined state under
 * VF_CKPT_STATE_LOW; nothing when it records none (a full fine-tune, or a LoRA on the
 * seeded init). The joined state.json is the high expert's, whose own "lora_base" names
 * the high expert's base only. */
static int low_base(vf_json *state, const char *from, vf_status *st)
{
    int rc = 0;
    char sp[PATH_MAX + 64];
    size_t len = 0;
    vf_json *low = NULL, *rec = NULL, *obj = NULL;
    snprintf(sp, sizeof sp, "%s/%s", from, VF_CKPT_STATE);
    char *text = slurp(sp, 64 << 20, &len, st);
    if (!text) return st->code ? st->code : VF_EIO;
    low = vf_json_parse_n(text, len, st);
    if (!low || low->type != VF_JSON_OBJ) VF_FAIL(st, VF_ECORRUPT, "%s: not a JSON object", sp);
    if (!(rec = vf_json_take(low, "lora_base"))) goto fail;
    if (!(obj = vf_json_obj())) VF_FAIL(st, VF_ENOMEM, "checkpoint: out of memory");
    rc = vf_json_set(obj, "lora_base", rec);
    rec = NULL; /* the set took it */
    if (rc) VF_FAIL(st, VF_ENOMEM, "checkpoint: out of memory");
    rc = vf_json_set(state, VF_CKPT_STATE_LOW, obj);
    obj = NULL;
    if (rc) VF_FAIL(st, VF_ENOMEM, "checkpoint: out of memory");
fail:
    vf_json_free(obj);
    vf_json_free(rec);
    vf_json_free(low);
    free(text);
    return rc;
}

int vf_ckpt_join_experts(const char *dir, int64_t step, const char *const from[2], double boundary, int keep,
                         char *path, size_t n, vf_status *st)
{
    int rc = 0;
    vf_ckpt_writer *w = NULL;
    vf_json *state = NULL, *ex = NULL;
    char *text = NULL, *out = NULL;
    char sp[PATH_MAX + 64];
    size_t len = 0;
    VF_TRY(vf_ckpt_writer_begin(dir, step, &w, st));
    for (int e = 0; e < 2; e++) VF_TRY(link_expert(w, e, from[e], st));
    snprintf(sp, sizeof sp, "%s/%s", from[0], VF_CKPT_STATE);
    text = slurp(sp, 64 << 20, &len, st);
    if (!text) {
        rc = st->code ? st->code : VF_EIO;
        goto fail;
    }
    state = vf_json_parse_n(text, len, st);
    if (!state || state->type != VF_JSON_OBJ) VF_FAIL(st, VF_ECORRUPT, "%s: not a JSON object", sp);
    ex = vf_json_arr();
    if (!ex || vf_json_push(ex, vf_json_str("high")) || vf_json_push(ex, vf_json_str("low")))
        VF_FAIL(st, VF_ENOMEM, "checkpoint: out of memory");
    rc = vf_json_set(state, "experts", ex);
    ex = NULL; /* the set took it */
    if (rc || vf_json_set(state, "boundary", vf_json_num(boundary))) VF_FAIL(st, VF_ENOMEM, "checkpoint: out of memory");
    VF_TRY(low_base(state, from[1], st));
    if (!(out = vf_json_emit(state, false, 2))) VF_FAIL(st, VF_ENOMEM, "checkpoint: out of memory");
    VF_TRY(vf_ckpt_writer_text(w, VF_CKPT_STATE, out, st));
    rc = vf_ckpt_writer_commit(w, keep, path, n, NULL, st);
    w = NULL; /* freed by the commit, also on failure */
fail:
    vf_ckpt_writer_abort(w);
    vf_json_free(ex);
    vf_json_free(state);
    free(text);
    free(out);
    return rc;
}
