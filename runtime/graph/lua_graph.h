/* lua_graph.h — internal to the Lua host: converting the pipeline a script returned
 * into a vf_graph (lua_graph.c, called by lua_host.c). */
#ifndef VF_LUA_GRAPH_H
#define VF_LUA_GRAPH_H

#include "runtime/graph/graph.h"

#include <lua.h>

#define VF_LUA_REG_HOST "vflow.host" /* registry: the host table (Pipeline, Stage, …) */

typedef struct vf_json vf_json;

/* State of one conversion. The caller zeroes it, sets script and st, and frees g and
 * cur whatever the outcome (g is handed over on success by taking it). */
typedef struct vf_lua_conv {
    const char *script;  /* path, for messages */
    vf_status *st;
    vf_graph *g;         /* being built */
    vf_json *cur;        /* params being converted */
    int rc;              /* < 0 when st holds the error */
    const char *where, *stage, *kind; /* context of the stage being converted */
} vf_lua_conv;

/* lua_CFunction for lua_pcall: arg 1 = vf_lua_conv* (light userdata), arg 2 = the
 * pipeline table. Returns nothing; the outcome is in the conv. */
int vf_lua_convert(lua_State *L);

#endif /* VF_LUA_GRAPH_H */
