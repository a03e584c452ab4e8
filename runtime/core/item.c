/* item.c — items (what flows on an edge): id, named tensors, metadata. The codec that
 * turns them into records for the wire and for LMDB is item_codec.c (format in item.h).
 *
 * Items are small: an id, a few named tensors, a few metadata entries, held in arrays
 * (linear lookup beats hashing at these sizes). Names, keys and strings are C strings
 * copied into the item; tensors are references.
 */
#include "runtime/core/item_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OOM(st) vf_status_set((st), VF_ENOMEM, __FILE__, __LINE__, "out of memory (item)")

char *vf_item_dupstr(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

vf_item *vf_item_new(const char *id, vf_status *st)
{
    vf_item *it = calloc(1, sizeof *it);
    if (!it || !(it->id = vf_item_dupstr(id ? id : "", id ? strlen(id) : 0))) {
        free(it);
        OOM(st);
        return NULL;
    }
    return it;
}

void vf_item_free(vf_item *it)
{
    if (!it) return;
    for (int i = 0; i < it->nt; i++) {
        free(it->t[i].name);
        vf_tensor_unref(it->t[i].t);
    }
    for (int i = 0; i < it->nm; i++) {
        free(it->m[i].key);
        free(it->m[i].str);
    }
    free(it->t);
    free(it->m);
    free(it->id);
    free(it);
}

const char *vf_item_id(const vf_item *it) { return it->id; }

int vf_item_set_id(vf_item *it, const char *id, vf_status *st)
{
    char *d = vf_item_dupstr(id ? id : "", id ? strlen(id) : 0);
    if (!d) return OOM(st);
    free(it->id);
    it->id = d;
    return 0;
}

static int check_name(const char *what, const char *name, vf_status *st)
{
    size_t n = name ? strlen(name) : 0;
    if (n == 0 || n > VF_CODEC_MAX_NAME)
        return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__, "item %s name must be 1..%d bytes (got %zu)", what,
                             VF_CODEC_MAX_NAME, n);
    return 0;
}

static int find_tensor(const vf_item *it, const char *name)
{
    for (int i = 0; i < it->nt; i++)
        if (strcmp(it->t[i].name, name) == 0) return i;
    return -1;
}

int vf_item_find_meta(const vf_item *it, const char *key)
{
    for (int i = 0; i < it->nm; i++)
        if (strcmp(it->m[i].key, key) == 0) return i;
    return -1;
}

int vf_item_put(vf_item *it, const char *name, vf_tensor *t, vf_status *st)
{
    int rc = check_name("tensor", name, st);
    if (rc < 0) goto fail;
    if (!t) VF_FAIL(st, VF_EINVAL, "vf_item_put('%s'): NULL tensor", name);
    int i = find_tensor(it, name);
    if (i >= 0) {
        vf_tensor_unref(it->t[i].t);
        it->t[i].t = t;
        return 0;
    }
    if (it->nt >= VF_CODEC_MAX_COUNT)
        VF_FAIL(st, VF_EINVAL, "item '%s': more than %d tensors", it->id, VF_CODEC_MAX_COUNT);
    if (it->nt == it->capt) {
        int cap = it->capt ? it->capt * 2 : 4;
        item_tensor *nt = realloc(it->t, (size_t)cap * sizeof *nt);
        if (!nt) VF_FAIL(st, VF_ENOMEM, "out of memory (item tensors)");
        it->t = nt;
        it->capt = cap;
    }
    char *nm = vf_item_dupstr(name, strlen(name));
    if (!nm) VF_FAIL(st, VF_ENOMEM, "out of memory (item tensor name)");
    it->t[it->nt++] = (item_tensor){nm, t};
    return 0;
fail:
    vf_tensor_unref(t); /* the item took the reference, also on failure */
    return rc;
}

vf_tensor *vf_item_get(const vf_item *it, const char *name)
{
    int i = find_tensor(it, name);
    return i >= 0 ? it->t[i].t : NULL;
}

vf_tensor *vf_item_take(vf_item *it, const char *name)
{
    int i = find_tensor(it, name);
    if (i < 0) return NULL;
    vf_tensor *t = it->t[i].t;
    free(it->t[i].name);
    memmove(&it->t[i], &it->t[i + 1], (size_t)(it->nt - i - 1) * sizeof *it->t);
    it->nt--;
    return t;
}

int vf_item_ntensors(const vf_item *it) { return it->nt; }

vf_tensor *vf_item_tensor_at(const vf_item *it, int i, const char **name)
{
    if (i < 0 || i >= it->nt) return NULL;
    if (name) *name = it->t[i].name;
    return it->t[i].t;
}

int vf_item_meta_set(vf_item *it, const char *key, const char *str, size_t slen, double num, vf_status *st)
{
    int rc = check_name("metadata key", key, st);
    if (rc < 0) return rc;
    char *s = NULL;
    if (str && !(s = vf_item_dupstr(str, slen))) return OOM(st);
    int i = vf_item_find_meta(it, key);
    if (i >= 0) {
        free(it->m[i].str);
        it->m[i].str = s;
        it->m[i].num = num;
        return 0;
    }
    if (it->nm >= VF_CODEC_MAX_COUNT) {
        free(s);
        return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__, "item '%s': more than %d metadata entries", it->id,
                             VF_CODEC_MAX_COUNT);
    }
    if (it->nm == it->capm) {
        int cap = it->capm ? it->capm * 2 : 8;
        item_meta *nm = realloc(it->m, (size_t)cap * sizeof *nm);
        if (!nm) {
            free(s);
            return OOM(st);
        }
        it->m = nm;
        it->capm = cap;
    }
    char *k = vf_item_dupstr(key, strlen(key));
    if (!k) {
        free(s);
        return OOM(st);
    }
    it->m[it->nm++] = (item_meta){k, s, num};
    return 0;
}

int vf_item_set_str(vf_item *it, const char *key, const char *val, vf_status *st)
{
    if (!val) val = "";
    return vf_item_meta_set(it, key, val, strlen(val), 0, st);
}

int vf_item_set_num(vf_item *it, const char *key, double val, vf_status *st)
{
    return vf_item_meta_set(it, key, NULL, 0, val, st);
}

const char *vf_item_str(const vf_item *it, const char *key)
{
    int i = vf_item_find_meta(it, key);
    return i >= 0 ? it->m[i].str : NULL;
}

int vf_item_num(const vf_item *it, const char *key, double *out)
{
    int i = vf_item_find_meta(it, key);
    if (i < 0 || it->m[i].str) return VF_ENOTFOUND;
    *out = it->m[i].num;
    return 0;
}

int vf_item_nmeta(const vf_item *it) { return it->nm; }

void vf_item_meta_at(const vf_item *it, int i, const char **key, const char **str, double *num, bool *is_num)
{
    if (i < 0 || i >= it->nm) return;
    if (key) *key = it->m[i].key;
    if (str) *str = it->m[i].str;
    if (num) *num = it->m[i].num;
    if (is_num) *is_num = it->m[i].str == NULL;
}

vf_item *vf_item_share(const vf_item *it, vf_status *st)
{
    vf_item *c = vf_item_new(it->id, st);
    if (!c) return NULL;
    for (int i = 0; i < it->nm; i++) {
        const item_meta *m = &it->m[i];
        if (vf_item_meta_set(c, m->key, m->str, m->str ? strlen(m->str) : 0, m->num, st) < 0) goto fail;
    }
    for (int i = 0; i < it->nt; i++)
        if (vf_item_put(c, it->t[i].name, vf_tensor_ref(it->t[i].t), st) < 0) goto fail;
    return c;
fail:
    vf_item_free(c);
    return NULL;
}

size_t vf_item_tensor_bytes(const vf_item *it)
{
    size_t n = 0;
    for (int i = 0; i < it->nt; i++)
        if (!vf_tensor_is_view(it->t[i].t)) n += vf_tensor_nbytes(it->t[i].t);
    return n;
}
