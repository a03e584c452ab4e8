-- vflow.lua — the Lua side of the DSL (README.md, "The Lua DSL"): pipelines, stages, connections.
--
-- A script describes a graph; it does not compute. Everything here records stages and
-- edges in plain tables that the C host (runtime/graph/lua_host.c) converts into a vf_graph
-- after the script returns its pipeline. Sugar (p:train, p:pipeline_parallel, decode
-- `workers = N`) lives in extension modules: any embedded lua/*.lua whose first line is
-- "-- vflow extension" is loaded at the end of this file and called with this module;
-- it adds methods with vf.extend and stage expanders with vf.expand, so nobody has to
-- edit this file to add sugar.
--
-- Errors raised here point at the user's line (host.where() skips embedded frames).
local _, host = ...
assert(host, "vflow.lua must be loaded by the vflow host")

local vf = { version = host.version }

local Pipeline = {}
Pipeline.__index = Pipeline
Pipeline.__name = "vflow.pipeline"
local Stage = {}
Stage.__index = Stage
Stage.__name = "vflow.stage"
local Port = {}
Port.__index = Port
Port.__name = "vflow.port"
local Group = {}
Group.__index = Group
Group.__name = "vflow.group"
host.Pipeline, host.Stage = Pipeline, Stage

-- ---------------------------------------------------------------- errors

--- Raises an error at the user's current line: vf.fail("bad %s", x).
function vf.fail(fmt, ...)
  local msg = select("#", ...) > 0 and string.format(fmt, ...) or fmt
  error(setmetatable({ msg = host.where() .. ": " .. msg }, host.error_mt), 0)
end
host.error_mt.__tostring = function(e) return e.msg end
local fail = vf.fail

--- "path:line" of the user's call being executed (through any sugar).
function vf.where() return host.where() end

--- vf.size(v, knob) -> W, H: a frame size as every knob spells it, "WxH" (832x480) or one
-- number for a square (64 or "64"); a {W, H} or {S} table too. Anything else fails at the
-- user's line naming the knob.
function vf.size(v, knob)
  local w, h
  if type(v) == "number" then
    w, h = v, v
  elseif type(v) == "string" then
    local a, b = v:match("^%s*(%d+)%s*[xX]%s*(%d+)%s*$")
    if a then w, h = tonumber(a), tonumber(b) else w = tonumber(v:match("^%s*(%d+)%s*$")); h = w end
  elseif type(v) == "table" and (#v == 1 or #v == 2) then
    w, h = v[1], v[#v]
  end
  if math.type(w) ~= "integer" and w and w == math.floor(w) then w, h = math.tointeger(w), math.tointeger(h) end
  if not (math.type(w) == "integer" and math.type(h) == "integer" and w > 0 and h > 0) then
    fail("%s %s: expected WxH (e.g. 832x480) or one number for a square (e.g. 256)", knob or "size", tostring(v))
  end
  return w, h
end

--- vf.did_you_mean(word, list) -> the closest plausible name in list, or nil.
vf.did_you_mean = host.did_you_mean

local function suggest(word, list)
  local near = host.did_you_mean(word, list)
  return near and ("; did you mean '" .. near .. "'?") or ""
end

local function sorted_keys(t)
  local keys = {}
  for k in pairs(t) do keys[#keys + 1] = tostring(k) end
  table.sort(keys)
  return keys
end

-- ---------------------------------------------------------------- args

-- vf.args reads through a proxy that records which --set keys the script used, so the
-- CLI can tell a script knob ("stages=4") from a stage override ("vae.chunk=8").
do
  local raw, used = host.args, host.args_used
  vf.args = setmetatable({}, {
    __index = function(_, k) used[k] = true; return raw[k] end,
    __newindex = function(_, k, v) raw[k] = v end,
    __pairs = function()
      return function(_, k)
        local nk, nv = next(raw, k)
        if nk ~= nil then used[nk] = true end
        return nk, nv
      end, raw, nil
    end,
  })
end

-- ---------------------------------------------------------------- pipeline

--- vf.pipeline(name, opts) -> a new, empty pipeline. The name names the run dir
-- (runs/<name>). opts.tensorboard = false: the run writes no TensorBoard event file
-- (like `vflow run --no-tensorboard`); nil or true: it does.
function vf.pipeline(name, opts)
  name = name == nil and "pipeline" or name
  if type(name) ~= "string" or not name:match("^[%w_%-]+$") or #name > 47 then
    fail("vf.pipeline: bad pipeline name %s (use letters, digits, _ and -)",
         type(name) == "string" and string.format("%q", name) or tostring(name))
  end
  opts = opts or {}
  if type(opts) ~= "table" then fail("vf.pipeline: options must be a table") end
  for k, v in pairs(opts) do
    if k ~= "tensorboard" then fail("vf.pipeline: unknown option '%s' (options: tensorboard)", tostring(k)) end
    if type(v) ~= "boolean" then fail("vf.pipeline: tensorboard must be true or false, got %s", tostring(v)) end
  end
  return setmetatable({ _name = name, _stages = {}, _by_name = {}, _edges = {},
                        _tensorboard = opts.tensorboard ~= false }, Pipeline)
end

local function check_self(p, method)
  if getmetatable(p) ~= Pipeline then
    fail("call it as p:%s(...), with a colon, on a pipeline from vf.pipeline()", method)
  end
end

-- Deep copy of a params value, rejecting what cannot become JSON, so the error points
-- at the p:stage line and later edits of the caller's table do not leak in.
local function copy_value(v, path, seen, ctx)
  local t = type(v)
  if t == "string" or t == "number" or t == "boolean" then return v end
  if t ~= "table" then fail("%sparam '%s': a %s cannot be a param value", ctx, path, t) end
  local mt = getmetatable(v)
  if mt == Stage or mt == Port or mt == Group or mt == Pipeline then
    fail("%sparam '%s': a %s cannot be a param value (connect stages with p:connect)", ctx, path,
         (mt.__name:gsub("^vflow%.", "")))
  end
  if seen[v] then fail("%sparam '%s': a table cannot contain itself", ctx, path) end
  seen[v] = true
  local out = {}
  for k, x in pairs(v) do
    local sub = type(k) == "number" and (path .. "[" .. tostring(k) .. "]") or (path .. "." .. tostring(k))
    out[k] = copy_value(x, sub, seen, ctx)
  end
  seen[v] = nil
  return out
end

local RESERVED = { name = true, worker = true, group = true, node = true }
local expanders = {}

--- p:raw_stage(kind, params) -> stage: adds one stage, bypassing expanders (for sugar).
-- params.name (default: kind) names it, params.worker pins it to a named worker,
-- params.node to a node of a multi-node run (the launcher rank whose driver starts it), and
-- params.group (for expanders) names the group of stages one p:stage call became, so
-- that --set GROUP.param=v reaches all of them; all four are taken out of the params
-- the stage sees.
function Pipeline:raw_stage(kind, params)
  check_self(self, "raw_stage")
  params = params or {}
  local name = params.name == nil and kind or params.name
  if type(name) ~= "string" or name == "" then fail("stage name must be a non-empty string") end
  if name:find("[%.%s\"'\\/]") then
    fail("bad stage name '%s': no dots, blanks, quotes or slashes (it is used as NAME in --set NAME.param=v)", name)
  end
  if #name > 47 then fail("bad stage name '%s': 47 characters at most", name) end
  local worker = params.worker
  if worker ~= nil and (type(worker) ~= "string" or worker == "") then
    fail("stage '%s': worker must be a non-empty string (stages with the same worker share a process)", name)
  end
  local node = params.node
  if node ~= nil then
    if math.type(node) == "float" and node == math.floor(node) then node = math.tointeger(node) end
    if math.type(node) ~= "integer" or node < 0 or node > 4095 then
      fail("stage '%s': node must be an integer in 0..4095 (the launcher rank that runs it), got %s", name,
           tostring(params.node))
    end
  end
  local group = params.group
  if group ~= nil and (type(group) ~= "string" or group == "" or group:find("[%.%s\"'\\/]") or #group > 47) then
    fail("stage '%s': bad group name %s (a name as for stages: it is used as NAME in --set NAME.param=v)",
         name, tostring(group))
  end
  local prev = self._by_name[name]
  if prev then
    fail("duplicate stage name '%s' (first defined at %s); give one of them name = \"...\"", name, prev.where)
  end
  local copied = {}
  local ctx = string.format("stage '%s' (%s): ", name, kind)
  for k, v in pairs(params) do
    if not RESERVED[k] then
      if type(k) ~= "string" then fail("%sparam keys must be names, got a %s key", ctx, type(k)) end
      copied[k] = copy_value(v, k, {}, ctx)
    end
  end
  local s = setmetatable({ name = name, kind = kind, params = copied, worker = worker, group = group, node = node,
                           where = host.where(), pipeline = self }, Stage)
  self._by_name[name] = s
  self._stages[#self._stages + 1] = s
  return s
end

--- p:stage(kind, params) -> stage handle. Kinds with an expander (vf.expand) may
-- return a group of stages instead (e.g. decode with workers = N).
function Pipeline:stage(kind, params)
  check_self(self, "stage")
  if type(kind) ~= "string" or kind == "" then fail("p:stage: the first argument is the stage kind (a string)") end
  if params ~= nil and (type(params) ~= "table" or getmetatable(params) ~= nil) then
    fail("p:stage('%s', params): params must be a table", kind)
  end
  local ex = expanders[kind]
  if ex then return ex(self, kind, params or {}) end
  return self:raw_stage(kind, params)
end

--- p:find(name) -> the stage named name, or nil.
function Pipeline:find(name) return self._by_name[name] end
--- p:stages() -> list of the stages so far, in order.
function Pipeline:stages()
  local out = {}
  for i, s in ipairs(self._stages) do out[i] = s end
  return out
end
--- p:name() -> the pipeline's name.
function Pipeline:name() return self._name end

-- ---------------------------------------------------------------- ports and groups

--- stage:port(name) -> a port selector for p:connect.
function Stage:port(name)
  if getmetatable(self) ~= Stage then fail("call it as stage:port(\"name\"), with a colon") end
  if type(name) ~= "string" or name == "" then fail("stage '%s': port name must be a string", self.name) end
  return setmetatable({ stage = self, port = name }, Port)
end

--- vf.group(list) -> one handle for several stages (p:connect connects each of them).
function vf.group(members)
  if type(members) ~= "table" then fail("vf.group: expected a list of stages") end
  return setmetatable({ members = members }, Group)
end

--- True for stage handles.
function vf.is_stage(x) return getmetatable(x) == Stage end

-- Endpoints of a connect argument: a list of {stage, port}; port "" = the stage's only
-- port of that direction (resolved by validation, which knows the ports).
-- Any object with a method _endpoints(dir) (dir "out" for sources, "in" for
-- destinations) works too: that is how sugar returns composite handles.
local function endpoints(p, x, dir)
  local mt = getmetatable(x)
  if mt == Stage then
    if x.pipeline ~= p then fail("connect: stage '%s' belongs to another pipeline", x.name) end
    return { { x, "" } }
  elseif mt == Port then
    return { { x.stage, x.port } }
  elseif mt == Group then
    local out = {}
    for _, m in ipairs(x.members) do
      for _, e in ipairs(endpoints(p, m, dir)) do out[#out + 1] = e end
    end
    return out
  elseif type(x) == "string" then
    local name, port = x:match("^([^%.]+)%.(.+)$")
    name = name or x
    local s = p._by_name[name]
    if not s then
      local names = {}
      for _, st in ipairs(p._stages) do names[#names + 1] = st.name end
      fail("connect: no stage named '%s'%s", name, suggest(name, names))
    end
    return { { s, port or "" } }
  elseif type(x) == "table" and mt == nil and getmetatable(x[1]) == Stage and x[2] ~= nil then
    if type(x[2]) ~= "string" then fail("connect: in {stage, port} the port must be a string") end
    return { { x[1], x[2] } }
  elseif type(x) == "table" and type(x._endpoints) == "function" then
    return x:_endpoints(dir)
  end
  fail("connect: expected a stage, stage:port(\"name\"), {stage, \"port\"} or \"stage.port\", got %s",
       mt and mt.__name or type(x))
end
vf.endpoints = endpoints

local CONNECT_OPTS = { "capacity", "loop", "transport" }
local TRANSPORTS = { auto = true, inproc = true, ipc = true, tcp = true }

--- p:connect(a, b [, {capacity = 2, loop = false, transport = "auto"}]) -> p
function Pipeline:connect(a, b, opts)
  check_self(self, "connect")
  opts = opts or {}
  if type(opts) ~= "table" then fail("connect: options must be a table") end
  for _, k in ipairs(sorted_keys(opts)) do
    local known = false
    for _, o in ipairs(CONNECT_OPTS) do known = known or o == k end
    if not known then
      fail("connect: unknown option '%s'%s (options: capacity, loop, transport)", k, suggest(k, CONNECT_OPTS))
    end
  end
  local cap = opts.capacity == nil and 2 or opts.capacity
  if math.type(cap) == "float" and cap == math.floor(cap) then cap = math.tointeger(cap) end
  if math.type(cap) ~= "integer" or cap < 1 or cap > 1 << 30 then
    fail("connect: capacity must be a positive integer (items in flight), got %s", tostring(opts.capacity))
  end
  local tr = opts.transport == nil and "auto" or opts.transport
  if not TRANSPORTS[tr] then
    fail("connect: transport must be one of auto, inproc, ipc, tcp, got %s", tostring(opts.transport))
  end
  if opts.loop ~= nil and type(opts.loop) ~= "boolean" then fail("connect: loop must be true or false") end
  if a == nil or b == nil then fail("connect: expected p:connect(from, to [, options])") end
  local where = host.where()
  local src, dst = endpoints(self, a, "out"), endpoints(self, b, "in")
  for _, s in ipairs(src) do
    for _, d in ipairs(dst) do
      self._edges[#self._edges + 1] = {
        src = s[1].name, src_port = s[2], dst = d[1].name, dst_port = d[2],
        capacity = cap, loop = opts.loop == true, transport = tr, where = where,
      }
    end
  end
  return self
end

-- ---------------------------------------------------------------- extension points

--- vf.extend(name, fn): adds the pipeline method p:name(...) = fn(p, ...).
function vf.extend(name, fn)
  if type(name) ~= "string" or type(fn) ~= "function" then error("vf.extend(name, fn)", 2) end
  if Pipeline[name] ~= nil then error("vf.extend: pipeline method '" .. name .. "' already exists", 2) end
  Pipeline[name] = fn
end

--- vf.expand(kind, fn): p:stage(kind, params) calls fn(p, kind, params) instead, which
-- builds stages with p:raw_stage and returns a handle (a stage, a vf.group, or any
-- object with _endpoints(dir)).
function vf.expand(kind, fn)
  if type(kind) ~= "string" or type(fn) ~= "function" then error("vf.expand(kind, fn)", 2) end
  if expanders[kind] then error("vf.expand: kind '" .. kind .. "' already has an expander", 2) end
  expanders[kind] = fn
end

vf.Pipeline, vf.Stage = Pipeline, Stage

vf.models = require("models")(vf)

for _, name in ipairs(host.extensions()) do
  local ext = require(name)
  if type(ext) == "function" then ext(vf) end
end

return vf
