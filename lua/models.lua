-- models.lua — model presets for the DSL: vf.models.vae "tiny", vf.models.dit "tiny".
--
-- A preset is a plain table (the `model` param of the stages that build the network);
-- the tables themselves live in lua/model_vae.lua and lua/model_dit.lua, owned by the
-- model code, so adding a preset touches only those files. An optional second argument
-- overrides fields: vf.models.dit("tiny", {depth = 4}).
return function(vf)
  local M = {}

  local function deep_copy(v)
    if type(v) ~= "table" then return v end
    local out = {}
    for k, x in pairs(v) do out[k] = deep_copy(x) end
    return out
  end

  local function family(kind, presets)
    return function(name, overrides)
      if type(name) ~= "string" then
        vf.fail("vf.models.%s: expected a preset name, e.g. vf.models.%s \"tiny\"", kind, kind)
      end
      local p = presets[name]
      if p == nil then
        local names = {}
        for k in pairs(presets) do names[#names + 1] = k end
        table.sort(names)
        local near = vf.did_you_mean(name, names)
        vf.fail("vf.models.%s: unknown preset '%s'%s (presets: %s)", kind, name,
                near and ("; did you mean '" .. near .. "'?") or "", table.concat(names, ", "))
      end
      local out = deep_copy(p)
      if overrides ~= nil then
        if type(overrides) ~= "table" then vf.fail("vf.models.%s: overrides must be a table", kind) end
        for k, v in pairs(overrides) do out[k] = deep_copy(v) end
      end
      return out
    end
  end

  M.vae = family("vae", require "model_vae")
  M.dit = family("dit", require "model_dit")
  return M
end
