/* item_internal.h — the item's layout, shared by the container (item.c) and the record
 * codec (item_codec.c), and the three helpers the decoder builds items with. Not for
 * use outside runtime/core/item*.c. */
#ifndef VF_ITEM_INTERNAL_H
#define VF_ITEM_INTERNAL_H

#include "runtime/core/item.h"

typedef struct item_tensor {
    char *name;
    vf_tensor *t;
} item_tensor;

typedef struct item_meta {
    char *key;
    char *str; /* NULL for numbers */
    double num;
} item_meta;

struct vf_item {
    char *id;
    int nt, capt;
    item_tensor *t;
    int nm, capm;
    item_meta *m;
};

/* a copy of s[0, n) with a NUL; NULL when out of memory */
char *vf_item_dupstr(const char *s, size_t n);
/* index of metadata `key`, -1 when absent */
int vf_item_find_meta(const vf_item *it, const char *key);
/* sets metadata `key` to the string str[0, slen) or, with str NULL, to the number num */
int vf_item_meta_set(vf_item *it, const char *key, const char *str, size_t slen, double num, vf_status *st);

#endif
