/* ports.c — static port specs (what a stage's `ports` hook declares) and memory plans
 * (what its `memory` hook declares). Both are plain data checked before launch: the
 * largest item a port allows sizes its edges' buffers, and the plans add up per device
 * in `vflow plan`.
 */
#include "runtime/core/item.h"

#include <stdio.h>
#include <string.h>

vf_port_spec *vf_port_add(vf_port_specs *ps, const char *name, vf_port_dir dir, bool required)
{
    VF_ASSERT(ps->n < VF_MAX_PORTS);
    VF_ASSERT(name && strlen(name) < VF_NAME_MAX);
    vf_port_spec *p = &ps->p[ps->n++];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", name);
    p->dir = dir;
    p->required = required;
    p->device = (vf_device){VF_DEV_CPU, 0};
    return p;
}

vf_tensor_spec *vf_port_tensor(vf_port_spec *p, const char *name, vf_dtype dt, int ndim, const int64_t *dims,
                               const char *const *sym)
{
    VF_ASSERT(p->ntensors < VF_MAX_PORT_TENSORS);
    VF_ASSERT(name && strlen(name) < VF_NAME_MAX);
    VF_ASSERT(ndim >= 0 && ndim <= VF_MAX_DIMS);
    VF_ASSERT((unsigned)dt < VF_DTYPE_COUNT);
    vf_tensor_spec *t = &p->t[p->ntensors++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->dtype = dt;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) {
        t->dims[i] = dims[i];
        if (sym && sym[i]) {
            VF_ASSERT(strlen(sym[i]) < sizeof t->sym[i]);
            snprintf(t->sym[i], sizeof t->sym[i], "%s", sym[i]);
        }
    }
    return t;
}

const vf_port_spec *vf_port_find(const vf_port_specs *ps, const char *name)
{
    for (int i = 0; i < ps->n; i++)
        if (strcmp(ps->p[i].name, name) == 0) return &ps->p[i];
    return NULL;
}

/* Default bound on id + metadata when a port does not declare one. */
#define DEFAULT_META_BYTES (16 * 1024)

int64_t vf_port_max_item_bytes(const vf_port_spec *p)
{
    size_t name_lens[VF_MAX_PORT_TENSORS];
    int ndims[VF_MAX_PORT_TENSORS];
    int64_t payload[VF_MAX_PORT_TENSORS];
    for (int i = 0; i < p->ntensors; i++) {
        const vf_tensor_spec *t = &p->t[i];
        uint64_t nb = vf_dtype_size(t->dtype);
        for (int d = 0; d < t->ndim; d++) {
            /* A dim without a bound (negative) makes the item size unbounded. */
            if (t->dims[d] < 0) return -1;
            if (__builtin_mul_overflow(nb, (uint64_t)t->dims[d], &nb) || nb > (uint64_t)INT64_MAX / 4) return -1;
        }
        name_lens[i] = strlen(t->name);
        ndims[i] = t->ndim;
        payload[i] = (int64_t)nb;
    }
    int64_t meta = p->meta_bytes > 0 ? p->meta_bytes : DEFAULT_META_BYTES;
    return vf_codec_size_bound(meta, p->ntensors, name_lens, ndims, payload);
}

static void mem_add(vf_mem_plan *m, vf_device dev, vf_mem_cat cat, vf_mem_holder holder, const char *what,
                    int64_t bytes)
{
    VF_ASSERT(cat >= 0 && cat < VF_MEM_CAT_COUNT);
    /* Same (device, category, holder, what) twice adds up: a hook may declare in pieces. */
    for (int i = 0; i < m->n; i++) {
        vf_mem_entry *e = &m->e[i];
        if (e->device.kind == dev.kind && e->device.index == dev.index && e->cat == cat && e->holder == holder &&
            strcmp(e->what, what) == 0) {
            e->bytes += bytes;
            return;
        }
    }
    VF_ASSERT(m->n < VF_MAX_MEM_ENTRIES);
    vf_mem_entry *e = &m->e[m->n++];
    snprintf(e->what, sizeof e->what, "%s", what);
    e->device = dev;
    e->cat = cat;
    e->holder = holder;
    e->bytes = bytes;
}

void vf_mem_plan_add(vf_mem_plan *m, vf_device dev, vf_mem_cat cat, const char *what, int64_t bytes)
{
    mem_add(m, dev, cat, VF_MEM_OWN, what, bytes);
}

void vf_mem_plan_add_input(vf_mem_plan *m, vf_device dev, vf_mem_cat cat, const char *what, int64_t bytes)
{
    mem_add(m, dev, cat, VF_MEM_INPUT, what, bytes);
}

void vf_mem_plan_add_lib(vf_mem_plan *m, vf_device dev, vf_mem_cat cat, const char *what, int64_t bytes)
{
    mem_add(m, dev, cat, VF_MEM_LIBRARY, what, bytes);
}

void vf_mem_plan_add_pinned(vf_mem_plan *m, vf_mem_cat cat, const char *what, int64_t bytes)
{
    mem_add(m, (vf_device){VF_DEV_CPU, 0}, cat, VF_MEM_PINNED, what, bytes);
}

int64_t vf_mem_plan_total(const vf_mem_plan *m, vf_device dev)
{
    int64_t n = 0;
    for (int i = 0; i < m->n; i++)
        if (m->e[i].device.kind == dev.kind && m->e[i].device.index == dev.index) n += m->e[i].bytes;
    return n;
}

void vf_mem_plan_params(vf_mem_plan *m, vf_device dev, int64_t n)
{
    for (int i = 0; i < m->np; i++) {
        if (m->params[i].device.kind != dev.kind || m->params[i].device.index != dev.index) continue;
        if (n > m->params[i].n) m->params[i].n = n;
        return;
    }
    VF_ASSERT(m->np < VF_MAX_MEM_PARAMS);
    m->params[m->np].device = dev;
    m->params[m->np++].n = n;
}
