/* lr_cursor.c — printing, parsing and comparing the latent reader's cursor (lr_cursor.h). */
#include "formats/lr_cursor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void vf_lr_cursor_print(const vf_lr_cursor *c, char *buf, size_t n)
{
    if (c->version == 2)
        snprintf(buf, n, "v2;epoch=%llu;batch=%lld;n=%lld;seed=%llu;shard=%d/%d;buckets=%016llx",
                 (unsigned long long)c->epoch, (long long)c->pos, (long long)c->n, (unsigned long long)c->seed,
                 c->shard, c->nshards, (unsigned long long)c->buckets);
    else
        snprintf(buf, n, "v1;epoch=%llu;pos=%lld;n=%lld;seed=%llu;shard=%d/%d", (unsigned long long)c->epoch,
                 (long long)c->pos, (long long)c->n, (unsigned long long)c->seed, c->shard, c->nshards);
}

int vf_lr_cursor_parse(const char *text, int version, vf_lr_cursor *c)
{
    unsigned long long e, seed, lay = 0;
    long long pos, n;
    int k, K, end = -1, got;
    if (!text) return VF_EINVAL;
    if (version == 2)
        got = sscanf(text, "v2;epoch=%llu;batch=%lld;n=%lld;seed=%llu;shard=%d/%d;buckets=%16llx%n", &e, &pos, &n,
                     &seed, &k, &K, &lay, &end) == 7;
    else if (version == 1)
        got = sscanf(text, "v1;epoch=%llu;pos=%lld;n=%lld;seed=%llu;shard=%d/%d%n", &e, &pos, &n, &seed, &k, &K,
                     &end) == 6;
    else
        return VF_EINVAL;
    if (!got || end < 0 || text[end] != 0 || pos < 0) return VF_EINVAL;
    *c = (vf_lr_cursor){version, e, pos, n, seed, k, K, lay};
    return 0;
}

/* Epoch and position of a cursor: "v1;…;pos=P" (entries) or "v2;…;batch=J" (batches of
 * the epoch's schedule). */
static int cursor_pos(const char *c, long long *e, long long *p)
{
    if (!c || (strncmp(c, "v1;", 3) != 0 && strncmp(c, "v2;", 3) != 0)) return -1;
    const char *key = c[1] == '1' ? ";pos=" : ";batch=";
    const char *E = strstr(c, ";epoch="), *Q = strstr(c, key);
    if (!E || !Q) return -1;
    *e = strtoll(E + 7, NULL, 10);
    *p = strtoll(Q + strlen(key), NULL, 10);
    return 0;
}

int vf_lr_cursor_cmp(const char *a, const char *b, int *cmp)
{
    long long ea, pa, eb, pb;
    if (cursor_pos(a, &ea, &pa) || cursor_pos(b, &eb, &pb)) return VF_EINVAL;
    *cmp = ea != eb ? (ea < eb ? -1 : 1) : (pa != pb ? (pa < pb ? -1 : 1) : 0);
    return 0;
}

/* The cursor without its epoch= and pos= (batch=) fields. */
static void cursor_rest(const char *c, char *out, size_t n)
{
    size_t k = 0;
    while (*c && k + 1 < n) {
        const char *end = strchr(c, ';');
        size_t len = end ? (size_t)(end - c) : strlen(c);
        if (strncmp(c, "epoch=", 6) != 0 && strncmp(c, "pos=", 4) != 0 && strncmp(c, "batch=", 6) != 0) {
            for (size_t i = 0; i < len && k + 1 < n; i++) out[k++] = c[i];
            if (k + 1 < n) out[k++] = ';';
        }
        c += len + (end ? 1 : 0);
    }
    out[k] = 0;
}

bool vf_lr_cursor_same_stream(const char *a, const char *b)
{
    char ra[512], rb[512];
    cursor_rest(a, ra, sizeof ra);
    cursor_rest(b, rb, sizeof rb);
    return strcmp(ra, rb) == 0;
}
