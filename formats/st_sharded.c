/* st_sharded.c — one safetensors file or a sharded index, read as one (st_sharded.h). */
#include "formats/st_sharded.h"

#include "runtime/json.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

struct vf_st_sharded {
    int nf;
    vf_st_file **f;     /* owned */
    char **path;        /* owned, parallel to f */
    vf_json *index;     /* the parsed index (owned), NULL for one file */
    const vf_json *map; /* its weight_map */
    int *file_of;       /* per weight_map entry: its file in f */
};

static int oom(vf_status *st) { return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "out of memory"); }

/* Opens path unless it is open already; *idx = its slot. */
static int add_file(vf_st_sharded *s, const char *path, int *idx, vf_status *st)
{
    for (int i = 0; i < s->nf; i++)
        if (strcmp(s->path[i], path) == 0) return *idx = i, 0;
    vf_st_file **f = realloc(s->f, sizeof *f * (size_t)(s->nf + 1));
    if (!f) return oom(st);
    s->f = f;
    char **p = realloc(s->path, sizeof *p * (size_t)(s->nf + 1));
    if (!p) return oom(st);
    s->path = p;
    s->f[s->nf] = NULL;
    if (!(s->path[s->nf] = strdup(path))) return oom(st);
    s->nf++;
    *idx = s->nf - 1;
    return vf_st_open(path, &s->f[s->nf - 1], st);
}

static char *slurp(const char *path, size_t max, vf_status *st)
{
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        vf_status_set(st, VF_EBADINPUT, __FILE__, __LINE__, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    char *buf = malloc(max + 1);
    size_t n = buf ? fread(buf, 1, max + 1, fp) : 0;
    fclose(fp);
    if (!buf) {
        oom(st);
        return NULL;
    }
    if (n > max) {
        free(buf);
        vf_status_set(st, VF_EBADINPUT, __FILE__, __LINE__, "%s: over %zu bytes", path, max);
        return NULL;
    }
    buf[n] = 0;
    return buf;
}

static int open_index(vf_st_sharded *s, const char *index, vf_status *st)
{
    int rc = 0;
    char *text = slurp(index, 64 << 20, st);
    if (!text) return st && st->code ? st->code : VF_EBADINPUT;
    vf_status js;
    vf_status_clear(&js);
    s->index = vf_json_parse(text, &js);
    free(text);
    if (!s->index) return vf_status_set(st, VF_EBADINPUT, __FILE__, __LINE__, "%s: not JSON: %s", index, js.msg);
    s->map = vf_json_get(s->index, "weight_map");
    if (!s->map || s->map->type != VF_JSON_OBJ || vf_json_len(s->map) == 0)
        return vf_status_set(st, VF_EBADINPUT, __FILE__, __LINE__,
                             "%s: no \"weight_map\" object (a *" VF_ST_INDEX_SUFFIX " has one)", index);
    s->file_of = calloc((size_t)vf_json_len(s->map), sizeof *s->file_of);
    if (!s->file_of) return oom(st);
    const char *slash = strrchr(index, '/');
    int dl = slash ? (int)(slash - index) + 1 : 0;
    for (int i = 0; i < vf_json_len(s->map); i++) {
        const char *name = vf_json_key_at(s->map, i);
        const vf_json *v = vf_json_at(s->map, i);
        if (!v || v->type != VF_JSON_STR || !v->s[0] || strchr(v->s, '/'))
            return vf_status_set(st, VF_EBADINPUT, __FILE__, __LINE__,
                                 "%s: tensor %s: the weight map names no file beside the index", index, name);
        char p[4096];
        snprintf(p, sizeof p, "%.*s%s", dl, index, v->s);
        struct stat sb;
        if (stat(p, &sb) != 0 || !S_ISREG(sb.st_mode))
            return vf_status_set(st, VF_EBADINPUT, __FILE__, __LINE__, "%s: tensor %s: its file %s is missing",
                                 index, name, p);
        if ((rc = add_file(s, p, &s->file_of[i], st))) {
            vf_status_prefix(st, "%s: tensor %s", index, name);
            return rc;
        }
        if (!vf_st_find(s->f[s->file_of[i]], name))
            return vf_status_set(st, VF_EBADINPUT, __FILE__, __LINE__,
                                 "%s: tensor %s: not in %s, where the weight map puts it", index, name, p);
    }
    return 0;
}

int vf_st_sharded_open(const char *path, vf_st_sharded **out, vf_status *st)
{
    *out = NULL;
    vf_st_sharded *s = calloc(1, sizeof *s);
    if (!s) return oom(st);
    size_t n = strlen(path);
    int idx = 0, rc = n >= 5 && strcmp(path + n - 5, ".json") == 0 ? open_index(s, path, st)
                                                                  : add_file(s, path, &idx, st);
    if (rc) {
        vf_st_sharded_close(s);
        return rc;
    }
    *out = s;
    return 0;
}

void vf_st_sharded_close(vf_st_sharded *s)
{
    if (!s) return;
    for (int i = 0; i < s->nf; i++) {
        vf_st_close(s->f[i]);
        free(s->path[i]);
    }
    free(s->f);
    free(s->path);
    free(s->file_of);
    vf_json_free(s->index);
    free(s);
}

const vf_st_tensor *vf_st_sharded_find(const vf_st_sharded *s, const char *name, const vf_st_file **file,
                                       const char **path)
{
    int fi = -1;
    if (!s->map) {
        fi = s->nf ? 0 : -1;
    } else {
        for (int i = 0; i < vf_json_len(s->map) && fi < 0; i++)
            if (strcmp(vf_json_key_at(s->map, i), name) == 0) fi = s->file_of[i];
    }
    const vf_st_tensor *t = fi >= 0 ? vf_st_find(s->f[fi], name) : NULL;
    if (t && file) *file = s->f[fi];
    if (t && path) *path = s->path[fi];
    return t;
}

int vf_st_sharded_files(const vf_st_sharded *s, const vf_st_file *const **files, const char *const **paths)
{
    if (files) *files = (const vf_st_file *const *)s->f;
    if (paths) *paths = (const char *const *)s->path;
    return s->nf;
}

void vf_st_shard_name(const char *stem, int k, int n, char *out, size_t len)
{
    snprintf(out, len, "%s-%05d-of-%05d.safetensors", stem, k + 1, n);
}

char *vf_st_index_text(const char *stem, const char *const *names, const int *shard_of, int n, int nshards,
                       int64_t total_size, const char *const *meta, int nmeta)
{
    vf_json *o = vf_json_obj(), *md = vf_json_obj(), *map = vf_json_obj();
    char *text = NULL;
    int bad = !o || !md || !map;
    bad |= vf_json_set(md, "total_size", vf_json_int(total_size));
    for (int i = 0; i < nmeta && !bad; i++) bad |= vf_json_set(md, meta[2 * i], vf_json_str(meta[2 * i + 1]));
    for (int j = 0; j < n && !bad; j++) {
        char name[256];
        vf_st_shard_name(stem, shard_of[j], nshards, name, sizeof name);
        bad |= vf_json_set(map, names[j], vf_json_str(name));
    }
    bad |= vf_json_set(o, "metadata", md);
    md = NULL;
    bad |= vf_json_set(o, "weight_map", map);
    map = NULL;
    if (!bad) text = vf_json_emit(o, false, 2);
    vf_json_free(o);
    vf_json_free(md);
    vf_json_free(map);
    return text;
}
