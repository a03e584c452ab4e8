-- vflow extension
-- decode.lua — `workers = N` for the decode stage (docs/PRECOMPUTE.md).
--
-- p:stage("decode", {..., workers = N}) becomes N decode stages, decode_0 .. decode_{N-1}
-- (or NAME_0 .. with name = NAME), each with shard = i, nshards = N: instance i reads the
-- files i, i+N, i+2N, ... of the manifest or glob. The C stage has VF_STAGE_OWN_WORKER,
-- so each instance runs in a process of its own (a libav crash or hang costs one
-- decoder, which the supervisor restarts). The returned group connects like one stage:
-- p:connect(clips, vae) adds an edge from every instance (the consumer's input must
-- accept several edges). workers = 1 (or absent) is a plain stage named "decode".
-- The instances form the group NAME (default "decode"): --set decode.fps=8 sets the
-- param on every instance (--set decode_1.fps=8 on one).
-- bucket_config = { ["480p"] = { [49] = {0.5, 8}, ... } } (Open-Sora's table) has integer
-- length keys with holes, which no param value may have: they become string keys ("49")
-- here, and the C stage reads them back as lengths.
local function string_lengths(cfg)
  if type(cfg) ~= "table" then return cfg end
  local out = {}
  for res, lens in pairs(cfg) do
    if type(lens) == "table" then
      local t = {}
      for f, e in pairs(lens) do t[math.type(f) == "integer" and tostring(f) or f] = e end
      out[res] = t
    else
      out[res] = lens
    end
  end
  return out
end

return function(vf)
  vf.expand("decode", function(p, kind, params)
    local workers = params.workers
    local copy = {}
    for k, v in pairs(params) do
      if k ~= "workers" then copy[k] = v end
    end
    if copy.bucket_config ~= nil then copy.bucket_config = string_lengths(copy.bucket_config) end
    if workers == nil then return p:raw_stage(kind, copy) end
    if math.type(workers) == "float" and workers == math.floor(workers) then workers = math.tointeger(workers) end
    if math.type(workers) ~= "integer" or workers < 1 or workers > 1024 then
      vf.fail("decode: workers must be an integer in 1..1024 (decode processes), got %s", tostring(params.workers))
    end
    if workers == 1 then return p:raw_stage(kind, copy) end
    if params.shard ~= nil or params.nshards ~= nil then
      vf.fail("decode: give workers = N or shard/nshards, not both (workers sets them)")
    end
    if params.worker ~= nil then
      vf.fail("decode: workers = %d puts each instance in its own process; drop worker = \"%s\"",
              workers, tostring(params.worker))
    end
    local base = params.name == nil and "decode" or params.name
    if type(base) ~= "string" then vf.fail("decode: name must be a string") end
    local members = {}
    for i = 0, workers - 1 do
      local q = {}
      for k, v in pairs(copy) do q[k] = v end
      q.name = base .. "_" .. i
      q.group = base
      q.shard = i
      q.nshards = workers
      members[#members + 1] = p:raw_stage(kind, q)
    end
    return vf.group(members)
  end)
end
