/* lua_graph.c — reads the pipeline tables a script returned (lua/vflow.lua's
 * p._stages / p._edges) into a vf_graph, params converted to JSON trees.
 *
 * Runs inside lua_pcall (lua_host.c), so a Lua error (out of memory at the cap) cannot
 * escape; every node is attached to its parent before descending, so such an error
 * leaks nothing (the caller frees c->g and c->cur). Only raw table access is used: the
 * tables are the script's and may carry metatables. Keys are sorted so the JSON, and
 * which error shows first, do not depend on Lua's traversal order.
 */
#include "runtime/graph/lua_graph.h"
#include "runtime/json.h"
#include "runtime/core/params.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>

static int conv_err(vf_lua_conv *c, const char *path, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int conv_err(vf_lua_conv *c, const char *path, const char *fmt, ...)
{
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    c->rc = vf_status_set(c->st, VF_EUSAGE, __FILE__, __LINE__, "%s: stage '%s' (%s): param '%s': %s",
                          c->where, c->stage, c->kind, path, what);
    return c->rc;
}

static int cmp_cstr(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Appends the Lua value at idx to parent (an array, or an object under key); the node
 * is attached before descending so a Lua error mid-way leaks nothing. */
static int put_json(lua_State *L, vf_lua_conv *c, int idx, vf_json *parent, const char *key, const char *path,
                    int depth);

static int table_json(lua_State *L, vf_lua_conv *c, int idx, vf_json *node_parent, const char *key,
                      const char *path, int depth)
{
    if (depth > 32) return conv_err(c, path, "nested too deeply (a table that contains itself?)");
    if (lua_getmetatable(L, idx)) {
        lua_getfield(L, LUA_REGISTRYINDEX, VF_LUA_REG_HOST);
        lua_getfield(L, -1, "Stage");
        bool stage = lua_rawequal(L, -1, -3);
        lua_pop(L, 3);
        if (stage) return conv_err(c, path, "a stage cannot be a param value (connect stages with p:connect)");
    }
    lua_Integer n = (lua_Integer)lua_rawlen(L, idx), count = 0;
    bool ints = true, strs = true;
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        count++;
        if (lua_type(L, -2) == LUA_TSTRING) ints = false;
        else if (lua_isinteger(L, -2)) strs = false;
        else {
            const char *tn = luaL_typename(L, -2);
            lua_pop(L, 2);
            return conv_err(c, path, "a table key must be a string or a list index, not a %s", tn);
        }
        lua_pop(L, 1);
    }
    char sub[256];
    if (count == 0 || (ints && count == n)) {
        vf_json *arr = vf_json_arr();
        if (!arr || (key ? vf_json_set(node_parent, key, arr) : vf_json_push(node_parent, arr)) < 0)
            return c->rc = vf_status_set(c->st, VF_ENOMEM, __FILE__, __LINE__, "out of memory");
        for (lua_Integer i = 1; i <= n; i++) {
            lua_rawgeti(L, idx, i);
            snprintf(sub, sizeof sub, "%s[%lld]", path, (long long)i);
            int rc = put_json(L, c, lua_gettop(L), arr, NULL, sub, depth + 1);
            lua_pop(L, 1);
            if (rc < 0) return rc;
        }
        return 0;
    }
    if (!strs)
        return conv_err(c, path, ints ? "a list with holes (nil entries) cannot be a param value"
                                      : "a table cannot mix list items and named keys");
    vf_json *obj = vf_json_obj();
    if (!obj || (key ? vf_json_set(node_parent, key, obj) : vf_json_push(node_parent, obj)) < 0)
        return c->rc = vf_status_set(c->st, VF_ENOMEM, __FILE__, __LINE__, "out of memory");
    /* Sorted keys: Lua's traversal order is arbitrary, messages and JSON should not be. */
    const char **keys = lua_newuserdatauv(L, sizeof *keys * (size_t)count, 0);
    int keys_idx = lua_gettop(L), k = 0;
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        keys[k++] = lua_tostring(L, -2); /* kept alive by the table */
        lua_pop(L, 1);
    }
    qsort(keys, (size_t)k, sizeof *keys, cmp_cstr);
    for (int i = 0; i < k; i++) {
        snprintf(sub, sizeof sub, "%s%s%s", path, *path ? "." : "", keys[i]);
        lua_pushstring(L, keys[i]);
        lua_rawget(L, idx);
        int rc = put_json(L, c, lua_gettop(L), obj, keys[i], sub, depth + 1);
        lua_pop(L, 1);
        if (rc < 0) return rc;
    }
    lua_remove(L, keys_idx);
    return 0;
}

static int put_json(lua_State *L, vf_lua_conv *c, int idx, vf_json *parent, const char *key, const char *path,
                    int depth)
{
    vf_json *v = NULL;
    switch (lua_type(L, idx)) {
    case LUA_TBOOLEAN: v = vf_json_bool(lua_toboolean(L, idx)); break;
    case LUA_TNUMBER:
        if (lua_isinteger(L, idx)) {
            v = vf_json_int((int64_t)lua_tointeger(L, idx));
        } else {
            double d = lua_tonumber(L, idx);
            if (!isfinite(d)) return conv_err(c, path, "number %g is not finite", d);
            v = vf_json_num(d);
        }
        break;
    case LUA_TSTRING: {
        size_t len;
        const char *s = lua_tolstring(L, idx, &len);
        if (!vf_json_utf8_ok(s, len)) return conv_err(c, path, "string is not valid UTF-8 text");
        v = vf_json_str(s);
        break;
    }
    case LUA_TTABLE: return table_json(L, c, idx, parent, key, path, depth);
    default: return conv_err(c, path, "a %s cannot be a param value", luaL_typename(L, idx));
    }
    if (!v || (key ? vf_json_set(parent, key, v) : vf_json_push(parent, v)) < 0)
        return c->rc = vf_status_set(c->st, VF_ENOMEM, __FILE__, __LINE__, "out of memory");
    return 0;
}

/* Raw string field of the table at idx, or NULL (no metamethods: the tables are the
 * script's to tamper with). */
static const char *raw_str(lua_State *L, int idx, const char *key)
{
    lua_pushstring(L, key);
    lua_rawget(L, idx);
    const char *s = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
    lua_pop(L, 1); /* the string stays alive in the table */
    return s;
}

/* The record's `links` (lua/train.lua: params it copied into this stage, param -> tie
 * or where to set it) into s->links; strings only, anything else is ignored. */
static int convert_links(lua_State *L, vf_lua_conv *c, int rec, vf_gstage *s)
{
    lua_pushliteral(L, "links");
    lua_rawget(L, rec);
    if (lua_type(L, -1) != LUA_TTABLE) {
        lua_pop(L, 1);
        return 0;
    }
    int t = lua_gettop(L);
    if (!(s->links = vf_json_obj())) goto oom;
    lua_pushnil(L);
    while (lua_next(L, t)) {
        if (lua_type(L, -2) == LUA_TSTRING && lua_type(L, -1) == LUA_TSTRING) {
            vf_json *v = vf_json_str(lua_tostring(L, -1));
            if (!v || vf_json_set(s->links, lua_tostring(L, -2), v) < 0) {
                lua_pop(L, 3);
                goto oom;
            }
        }
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    return 0;
oom:
    return c->rc = vf_status_set(c->st, VF_ENOMEM, __FILE__, __LINE__, "out of memory");
}

static int convert_stage(lua_State *L, vf_lua_conv *c, int rec)
{
    const char *name = raw_str(L, rec, "name"), *kind = raw_str(L, rec, "kind");
    const char *where = raw_str(L, rec, "where"), *worker = raw_str(L, rec, "worker");
    const char *group = raw_str(L, rec, "group"); /* set by an expansion (lua/decode.lua) */
    if (!name || !kind || !where)
        return c->rc = vf_status_set(c->st, VF_EUSAGE, __FILE__, __LINE__,
                                     "%s: the pipeline's stage list was modified by the script", c->script);
    c->where = where;
    c->stage = name;
    c->kind = kind;
    if (!(c->cur = vf_json_obj()))
        return c->rc = vf_status_set(c->st, VF_ENOMEM, __FILE__, __LINE__, "out of memory");
    lua_pushliteral(L, "params");
    lua_rawget(L, rec);
    int pidx = lua_gettop(L);
    if (lua_type(L, pidx) == LUA_TTABLE) {
        /* Convert into a holder so the top level is checked like any table. */
        vf_json *holder = c->cur;
        int rc = table_json(L, c, pidx, holder, "p", "", 0);
        if (rc < 0) return rc;
        vf_json *p = vf_json_take(holder, "p");
        if (p->type == VF_JSON_ARR && p->len == 0) p->type = VF_JSON_OBJ;
        if (p->type != VF_JSON_OBJ) {
            vf_json_free(p);
            return c->rc = vf_status_set(c->st, VF_EUSAGE, __FILE__, __LINE__,
                                         "%s: stage '%s' (%s): params must be a table with named keys",
                                         where, name, kind);
        }
        vf_json_free(c->cur);
        c->cur = p;
    }
    lua_pop(L, 1);
    vf_params *params = vf_params_adopt(c->cur);
    c->cur = NULL;
    int idx = vf_graph_add_stage(c->g, name, kind, params, where, c->st);
    if (idx < 0) return c->rc = idx;
    if (worker) {
        if (strlen(worker) >= VF_NAME_MAX || !*worker)
            return c->rc = vf_status_set(c->st, VF_EUSAGE, __FILE__, __LINE__,
                                         "%s: stage '%s' (%s): bad worker name '%s'", where, name, kind, worker);
        snprintf(c->g->stages[idx].worker_hint, VF_NAME_MAX, "%s", worker);
    }
    lua_pushliteral(L, "node");
    lua_rawget(L, rec);
    if (!lua_isnil(L, -1)) {
        int isint = 0;
        lua_Integer node = lua_tointegerx(L, -1, &isint);
        if (!isint || node < 0 || node > 4095)
            return c->rc = vf_status_set(c->st, VF_EUSAGE, __FILE__, __LINE__,
                                         "%s: stage '%s' (%s): node must be an integer in 0..4095 (a launcher rank)",
                                         where, name, kind);
        c->g->stages[idx].node = (int)node;
    }
    lua_pop(L, 1);
    if (group) {
        if (strlen(group) >= VF_NAME_MAX || !*group || strchr(group, '.'))
            return c->rc = vf_status_set(c->st, VF_EUSAGE, __FILE__, __LINE__,
                                         "%s: stage '%s' (%s): bad group name '%s'", where, name, kind, group);
        snprintf(c->g->stages[idx].group, VF_NAME_MAX, "%s", group);
    }
    return convert_links(L, c, rec, &c->g->stages[idx]);
}

static int convert_edge(lua_State *L, vf_lua_conv *c, int rec)
{
    const char *src = raw_str(L, rec, "src"), *dst = raw_str(L, rec, "dst");
    const char *sp = raw_str(L, rec, "src_port"), *dp = raw_str(L, rec, "dst_port");
    const char *where = raw_str(L, rec, "where"), *tr = raw_str(L, rec, "transport");
    lua_pushliteral(L, "capacity");
    lua_rawget(L, rec);
    lua_Integer cap = lua_isinteger(L, -1) ? lua_tointeger(L, -1) : -1;
    lua_pop(L, 1);
    lua_pushliteral(L, "loop");
    lua_rawget(L, rec);
    bool loop = lua_toboolean(L, -1);
    lua_pop(L, 1);
    int a = src ? vf_graph_find(c->g, src) : -1, b = dst ? vf_graph_find(c->g, dst) : -1;
    vf_transport t = VF_TR_AUTO;
    if (a < 0 || b < 0 || !where || cap < 1 || cap > 1 << 30 || (tr && vf_transport_parse(tr, &t) < 0))
        return c->rc = vf_status_set(c->st, VF_EUSAGE, __FILE__, __LINE__,
                                     "%s: the pipeline's edge list was modified by the script",
                                     where ? where : c->script);
    int e = vf_graph_add_edge(c->g, a, sp ? sp : "", b, dp ? dp : "", (int)cap, loop, where, c->st);
    if (e < 0) return c->rc = e;
    c->g->edges[e].transport = t;
    return 0;
}

int vf_lua_convert(lua_State *L)
{
    vf_lua_conv *c = lua_touserdata(L, 1);
    const char *name = raw_str(L, 2, "_name");
    c->g = vf_graph_new(name ? name : "pipeline");
    if (!c->g) {
        c->rc = vf_status_set(c->st, VF_ENOMEM, __FILE__, __LINE__, "out of memory");
        return 0;
    }
    snprintf(c->g->script, sizeof c->g->script, "%s", c->script);
    lua_pushliteral(L, "_tensorboard");
    lua_rawget(L, 2);
    c->g->no_tensorboard = lua_type(L, -1) == LUA_TBOOLEAN && !lua_toboolean(L, -1);
    lua_pop(L, 1);
    static const char *const lists[2] = {"_stages", "_edges"};
    for (int l = 0; l < 2; l++) {
        lua_pushstring(L, lists[l]);
        lua_rawget(L, 2);
        int t = lua_gettop(L);
        if (lua_type(L, t) != LUA_TTABLE) {
            c->rc = vf_status_set(c->st, VF_EUSAGE, __FILE__, __LINE__, "%s: the pipeline table was modified",
                                  c->script);
            return 0;
        }
        lua_Integer n = (lua_Integer)lua_rawlen(L, t);
        for (lua_Integer i = 1; i <= n; i++) {
            if (lua_rawgeti(L, t, i) != LUA_TTABLE) {
                c->rc = vf_status_set(c->st, VF_EUSAGE, __FILE__, __LINE__,
                                      "%s: the pipeline table was modified", c->script);
                return 0;
            }
            int rc = l == 0 ? convert_stage(L, c, lua_gettop(L)) : convert_edge(L, c, lua_gettop(L));
            lua_pop(L, 1);
            if (rc < 0) return 0;
        }
        lua_pop(L, 1);
    }
    return 0;
}
