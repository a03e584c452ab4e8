-- vflow extension
-- train.lua — training sugar (docs/TRAINING.md, "The DSL"): p:pipeline_parallel(model, opts), the
-- `adamw` shard expander, and p:train{...}. Everything here expands into plain stages and
-- edges; the C stages (stages/train/dit_stage.c, adamw.c, checkpoint.c) never see the sugar.
--
--   local dit  = p:pipeline_parallel(vf.models.dit "tiny", { stages = P, micro_batches = M,
--                  recompute = true, devices = {"cpu", "cpu"}, replicas = D, sp = N })
-- (sp = N: sequence parallelism, each partition runs as N rank processes of one node, each
-- holding 1/N of every sample's tokens, with an all-to-all around self-attention; N
-- divides the model's heads. The ranks of partition q talk to the same rank of q - 1 and
-- q + 1, all of a replica's ranks read its reader's batches, and the shards sum the
-- ranks' gradients with the replicas' in one fixed order, rank after rank: to the shards
-- the D replicas of N ranks are D·N "replicas", numbered r·N + rank)
--   local opt  = p:stage("adamw", { lr = 1e-3, shards = S, ... })
--   local ckpt = p:stage("checkpoint", { dir = "runs/x/ckpt", every = 50, keep = 2 })
--   p:train { data = reader, model = dit, optimizer = opt, checkpoint = ckpt, steps = 200,
--             weights = "Wan2.1-T2V-1.3B/diffusion_pytorch_model.safetensors.index.json" }
-- (weights: optional; a .safetensors file, a sharded index or a diffusers directory)
--   p:train { ..., weights = "Wan2.2-T2V-A14B/", expert = "high" }
-- (expert: which expert of a two-expert source (Wan 2.2 A14B: high_noise_model/ and
-- low_noise_model/, or a diffusers pipeline's transformer/ and transformer_2/) the run
-- trains; models/dit_experts.h)
--   p:train { ..., expert = "high", route = "high", boundary = 0.875 }
-- (route: the run trains only the samples whose t, drawn over [0, 1], falls on this
-- expert's side of boundary, cut into its micro-batches; a step without one takes no
-- update: the two experts of finetune_wan22.lua, stages/train/dit_route.c)
--   p:train { ..., lora = { rank = 32, alpha = 32, targets = {"self_attn.q", "cross_attn.*", "ffn.*"} },
--             lora_init = "my_lora.safetensors" }
-- (lora: train adapters on a frozen base (targets: a list, or "a,b,c"): the partitions hold the base weights once and
-- the shards only the adapters; checkpoints write lora.safetensors. lora_init: start the
-- adapters from an existing LoRA file)
--   p:train { ..., sample = { prompts = {"cat.safetensors"}, every = 1, device = "cpu", steps = 20 } }
-- (a model trained on caption bytes takes sample = { captions = {"a red ball"}, ... } instead)
-- (sample: optional, needs a checkpoint stage; the params of a `sample` stage, or one made
-- with p:stage("sample", {...}): videos of the checkpoints in <run dir>/samples/step-N/)
--
-- The plain graph (D = 1; with D > 1 partitions are dit_<q>_r<r> and readers <name>_r<r>;
-- with sp = N > 1 each partition is N stages dit_<q>_s<k> (dit_<q>_r<r>_s<k>), k the rank):
--   stages   dit_0 .. dit_{P-1}          kind dit, stage = q, splits = block boundaries
--            adamw_0 .. adamw_{S-1}      kind adamw, shard = k, shards = S
--            the reader, the checkpoint stage
--   edges    reader.out        -> dit_0.batch           capacity 2
--            dit_q.act_out     -> dit_{q+1}.act_in      capacity M   activations, forward
--            dit_{q+1}.grad_out -> dit_q.grad_in        capacity M   loop: their gradients
--            dit_q.grad_s<k>   -> adamw_k.grads         capacity 2   views of the weights and
--                                                                    gradients the shard updates
--                                                                    in place (every q, k)
--            adamw_k.weights_p<q> -> dit_q.weights      capacity 2   loop: the shard's reply (done)
--            adamw_k.norm_out  -> adamw_j.norm_in       capacity 2   loop: global-norm partials (k ≠ j)
--            adamw_k.snap      -> checkpoint.snap       capacity 2   snapshot chunks (checkpoint.chunk bytes each)
--            checkpoint.ack    -> adamw_k.ack           capacity 2   loop, only with sync = true
--            checkpoint.done   -> sample.ckpt           capacity 2   only with sample = {...}
-- Every partition talks to every shard (an item with no tensor where their ranges do not
-- overlap): the ranges depend on parameter counts the Lua side does not know, and the
-- empty items double as the per-step barrier.
--
-- Groups: the partitions form the group "dit" (the `name` option) and the shards the group
-- "adamw" (their `name`), so `--set adamw.lr=2e-3` or `--set dit.recompute=true` reaches
-- every member. Values p:train copies into several stages are linked: the checkpoint
-- dir (checkpoint.dir = the partitions' and shards' ckpt_dir), the interval
-- (checkpoint.every = the shards' every), the snapshot chunk (checkpoint.chunk = the
-- shards' ckpt_chunk), steps, seed, the timestep distribution (t_sampling, t_mean, t_std,
-- t_shift, t_min, t_max, route, boundary) and micro_batches
-- are one value each, and `--set` of any copy (stage or group) sets them all; copies
-- whose value shapes the graph (model, splits, shards, sync, …) refuse an override and
-- say where to set them. The shards decide when to snapshot from `every`.
--
-- Placement: with isolate (default true) every partition, every shard and the checkpoint
-- writer get a worker process of their own (`worker = <stage name>`), so a crash costs
-- one of them and the tests can kill any one; isolate = false leaves placement to the
-- default rules (one CPU worker, one per CUDA device).
return function(vf)
  local fail = vf.fail

  local function int_of(v, what, lo, hi)
    if math.type(v) == "float" and v == math.floor(v) then v = math.tointeger(v) end
    if math.type(v) ~= "integer" or v < lo or v > hi then
      fail("%s must be an integer in %d..%d, got %s", what, lo, hi, tostring(v))
    end
    return v
  end

  -- Canonical JSON of a plain value (sorted keys), for params that carry other params.
  local function json(v)
    local t = type(v)
    if t == "string" then
      return '"' .. v:gsub('[%c"\\]', function(c)
        local map = { ['"'] = '\\"', ['\\'] = '\\\\', ['\n'] = '\\n', ['\r'] = '\\r', ['\t'] = '\\t' }
        return map[c] or string.format("\\u%04x", c:byte())
      end) .. '"'
    elseif t == "number" then
      if math.type(v) == "integer" then return tostring(v) end
      if v ~= v or v == math.huge or v == -math.huge then fail("a non-finite number cannot be a param") end
      return string.format("%.17g", v)
    elseif t == "boolean" then
      return tostring(v)
    elseif t == "table" then
      local n = #v
      local keys = {}
      for k in pairs(v) do keys[#keys + 1] = k end
      if n > 0 and #keys == n then
        local out = {}
        for i = 1, n do out[i] = json(v[i]) end
        return "[" .. table.concat(out, ",") .. "]"
      end
      table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
      local out = {}
      for _, k in ipairs(keys) do out[#out + 1] = json(tostring(k)) .. ":" .. json(v[k]) end
      return "{" .. table.concat(out, ",") .. "}"
    end
    fail("a %s cannot be a param value", t)
  end
  vf.json = json

  -- ------------------------------------------------------------ pipeline_parallel

  local Model = {}
  Model.__index = Model
  Model.__name = "vflow.dit_pipeline"

  function Model:_endpoints(dir)
    if dir == "in" then
      local out = {}
      for r = 1, self.R do out[#out + 1] = { self.parts[r][1], "batch" } end
      return out
    end
    fail("the pipeline model has no output to connect: p:train wires its gradients to the optimizer")
  end

  function Model:stages()
    local out = {}
    for r = 1, self.R do
      for q = 1, self.P do out[#out + 1] = self.parts[r][q] end
    end
    return out
  end

  local PP_OPTS = { "stages", "micro_batches", "recompute", "recompute_attention", "devices", "replicas", "name",
                    "isolate", "nodes", "base_dtype", "swap_blocks", "swap_budget", "sp", "offload_activations" }

  vf.extend("pipeline_parallel", function(p, model, opts)
    if getmetatable(p) ~= vf.Pipeline then fail("call it as p:pipeline_parallel(model, opts), with a colon") end
    if type(model) ~= "table" or getmetatable(model) ~= nil or model.depth == nil then
      fail("pipeline_parallel: the first argument is a DiT preset, e.g. vf.models.dit \"tiny\"")
    end
    opts = opts or {}
    if type(opts) ~= "table" then fail("pipeline_parallel: options must be a table") end
    for k in pairs(opts) do
      local known = false
      for _, o in ipairs(PP_OPTS) do known = known or o == k end
      if not known then
        local near = vf.did_you_mean(tostring(k), PP_OPTS)
        fail("pipeline_parallel: unknown option '%s'%s (options: %s)", tostring(k),
             near and ("; did you mean '" .. near .. "'?") or "", table.concat(PP_OPTS, ", "))
      end
    end
    local depth = int_of(model.depth, "model.depth", 1, 1 << 20)
    local P = int_of(opts.stages or 1, "pipeline_parallel: stages", 1, math.min(24, depth))
    local M = int_of(opts.micro_batches or 1, "pipeline_parallel: micro_batches", 1, 4096)
    local D = int_of(opts.replicas or 1, "pipeline_parallel: replicas", 1, 64)
    local SP = int_of(opts.sp or 1, "pipeline_parallel: sp", 1, 64)
    local heads = int_of(model.heads, "model.heads", 1, 1 << 20)
    if heads % SP ~= 0 then
      fail("pipeline_parallel: sp = %d does not divide the model's %d heads (each rank attends with heads/sp of them)",
           SP, heads)
    end
    if D * SP > 64 then fail("pipeline_parallel: replicas %d x sp %d is more than 64 ranks of a partition", D, SP) end
    local base = opts.name or "dit"
    if type(base) ~= "string" then fail("pipeline_parallel: name must be a string") end
    local devices = opts.devices or "cpu"
    if type(devices) == "string" then devices = { devices } end
    if type(devices) ~= "table" or (#devices ~= 1 and #devices ~= P and #devices ~= P * D and #devices ~= P * D * SP) then
      fail("pipeline_parallel: devices must be one device, %d (one per stage), %d (per stage and replica) or %d "
           .. "(per stage, replica and sp rank)", P, P * D, P * D * SP)
    end
    local isolate = opts.isolate ~= false
    -- swap_blocks = K: in every partition, the last K blocks' weights stream in from host
    -- memory (a full fine-tune's gradients go back; the stage checks K against the
    -- partition); "auto": each
    -- partition's smallest K that fits, which `vflow plan` and `vflow run` find against its
    -- device's budget, or against swap_budget (a size: the partition's own device memory)
    local swap = opts.swap_blocks == "auto" and "auto" or nil
    if not swap then
      if type(opts.swap_blocks) == "string" then
        fail("pipeline_parallel: swap_blocks must be an integer in 0..4096 or \"auto\", got \"%s\"", opts.swap_blocks)
      end
      swap = int_of(opts.swap_blocks or 0, "pipeline_parallel: swap_blocks", 0, 4096)
    end
    local swap_budget = opts.swap_budget
    if math.type(swap_budget) == "integer" or (math.type(swap_budget) == "float" and swap_budget == math.floor(swap_budget)) then
      swap_budget = string.format("%d", swap_budget)
    end
    if swap_budget ~= nil and type(swap_budget) ~= "string" then
      fail("pipeline_parallel: swap_budget must be a size (\"12GiB\", bytes), got %s", tostring(swap_budget))
    end
    if swap_budget ~= nil and swap ~= "auto" then
      fail("pipeline_parallel: swap_budget is what swap_blocks = \"auto\" fits; with swap_blocks = %s it does nothing",
           tostring(swap))
    end
    -- nodes = N spreads the P x D partitions over nodes 0..N-1 in order (replica-major),
    -- so neighbouring partitions share a node where they can
    local N = int_of(opts.nodes or 1, "pipeline_parallel: nodes", 1, P * D)
    local splits = {}
    for i = 0, P do splits[i + 1] = i * depth // P end
    -- rows of partitions: R = D·SP, row l = r·SP + k is rank k of replica r; the ranks of
    -- one partition share its node (their all-to-all is over the node's shared memory)
    local R = D * SP
    local m = { p = p, P = P, M = M, D = D, SP = SP, R = R, replica_of = {}, model = model, splits = splits,
                parts = {}, isolate = isolate }
    for l = 0, R - 1 do
      local r, k = l // SP, l % SP
      m.replica_of[l + 1] = r + 1
      local row = {}
      for q = 0, P - 1 do
        local name = D == 1 and (base .. "_" .. q) or (base .. "_" .. q .. "_r" .. r)
        if SP > 1 then name = name .. "_s" .. k end
        -- P·D·SP devices: row l's partition q on devices[l·P + q + 1], each rank on its own
        local dev = #devices == 1 and devices[1] or #devices == P and devices[q + 1]
                    or #devices == P * D and devices[r * P + q + 1] or devices[l * P + q + 1]
        row[q + 1] = p:raw_stage("dit", {
          name = name, model = model, stage = q, splits = splits, micro_batches = M,
          recompute = opts.recompute == true, recompute_attention = opts.recompute_attention == true,
          swap_blocks = (swap == "auto" or swap > 0) and swap or nil, swap_budget = swap_budget,
          offload_activations = opts.offload_activations == true or nil,
          device = dev, replicas = D, replica = r, base_dtype = opts.base_dtype,
          sp = SP > 1 and SP or nil, sp_rank = SP > 1 and k or nil,
          worker = isolate and name or nil, group = base,
          node = N > 1 and (r * P + q) * N // (P * D) or nil,
        })
        if q > 0 then
          p:connect({ row[q], "act_out" }, { row[q + 1], "act_in" }, { capacity = M })
          p:connect({ row[q + 1], "grad_out" }, { row[q], "grad_in" }, { capacity = M, loop = true })
        end
      end
      m.parts[l + 1] = row
    end
    return setmetatable(m, Model)
  end)

  -- ------------------------------------------------------------ adamw shards

  local Shards = {}
  Shards.__index = Shards
  Shards.__name = "vflow.adamw_shards"
  function Shards:_endpoints()
    fail("the optimizer shards are wired by p:train{optimizer = ...}, not p:connect")
  end

  vf.expand("adamw", function(p, kind, params)
    local S = int_of(params.shards or 1, "adamw: shards", 1, 24)
    local base = params.name or "adamw"
    if type(base) ~= "string" then fail("adamw: name must be a string") end
    local isolate = params.isolate ~= false
    local members = {}
    for k = 0, S - 1 do
      local q = {}
      for key, v in pairs(params) do
        if key ~= "shards" and key ~= "name" and key ~= "isolate" then q[key] = v end
      end
      q.name = base .. "_" .. k
      q.group = base
      q.shard, q.shards = k, S
      if q.worker == nil and isolate then q.worker = q.name end
      members[k + 1] = p:raw_stage(kind, q)
    end
    return setmetatable({ members = members, S = S }, Shards)
  end)

  -- ------------------------------------------------------------ train

  local TRAIN_OPTS = { "data", "model", "optimizer", "checkpoint", "steps", "seed", "t_mean", "t_std",
                       "t_sampling", "t_shift", "t_min", "t_max", "route", "boundary", "weights", "expert", "sample",
                       "lora", "lora_init" }
  -- the timestep distribution: set on every partition (which samples it) and shard (whose
  -- checkpoints record it, so a resume with another one is refused)
  -- (route / boundary: an expert of two routed by the drawn t, stages/train/dit_route.c)
  local T_KEYS = { "t_mean", "t_std", "t_sampling", "t_shift", "t_min", "t_max", "route", "boundary" }

  -- The `lora` option as the JSON the stages take, checked here so a typo fails at the line.
  local function lora_json(l)
    if type(l) ~= "table" or getmetatable(l) ~= nil then
      fail("p:train: lora must be a table { rank = 32, alpha = 32, targets = {\"self_attn.q\", ...} }")
    end
    for k in pairs(l) do
      if k ~= "rank" and k ~= "alpha" and k ~= "targets" then
        fail("p:train: lora: unknown key '%s' (keys: rank, alpha, targets)", tostring(k))
      end
    end
    local rank = int_of(l.rank, "p:train: lora.rank", 1, 4096)
    local alpha = l.alpha == nil and rank or l.alpha
    if type(alpha) ~= "number" or not (alpha > 0) then fail("p:train: lora.alpha must be a positive number") end
    local tg = l.targets
    if type(tg) == "string" then -- "self_attn.*,ffn.*", as a --set value gives it
      local list = {}
      for v in tg:gmatch("[^,]+") do list[#list + 1] = v end
      tg = list
    end
    if type(tg) ~= "table" or #tg == 0 then
      fail("p:train: lora.targets must list patterns over Wan's names, e.g. {\"self_attn.q\", \"cross_attn.*\", \"ffn.*\"}")
    end
    for i, v in ipairs(tg) do
      if type(v) ~= "string" or v == "" then fail("p:train: lora.targets[%d] must be a non-empty string", i) end
    end
    return json { rank = rank, alpha = alpha, targets = tg }
  end

  vf.extend("train", function(p, t)
    if getmetatable(p) ~= vf.Pipeline then fail("call it as p:train{...}, with a colon") end
    if type(t) ~= "table" then fail("p:train: expected a table {data, model, optimizer, checkpoint, steps}") end
    for k in pairs(t) do
      local known = false
      for _, o in ipairs(TRAIN_OPTS) do known = known or o == k end
      if not known then
        local near = vf.did_you_mean(tostring(k), TRAIN_OPTS)
        fail("p:train: unknown key '%s'%s (keys: %s)", tostring(k), near and ("; did you mean '" .. near .. "'?") or "",
             table.concat(TRAIN_OPTS, ", "))
      end
    end
    local m, opt, ck, data = t.model, t.optimizer, t.checkpoint, t.data
    if getmetatable(m) ~= Model then fail("p:train: model must come from p:pipeline_parallel(...)") end
    if m.p ~= p then fail("p:train: the model belongs to another pipeline") end
    if m.trained then fail("p:train: this model is already wired into a training loop") end
    if getmetatable(opt) ~= Shards then fail("p:train: optimizer must be p:stage(\"adamw\", {...})") end
    if not vf.is_stage(data) or data.kind ~= "latent_reader" then
      fail("p:train: data must be a latent_reader stage")
    end
    if ck ~= nil and (not vf.is_stage(ck) or ck.kind ~= "checkpoint") then
      fail("p:train: checkpoint must be a checkpoint stage (or absent)")
    end
    local smp = t.sample
    if smp ~= nil then
      if ck == nil then fail("p:train: sample needs a checkpoint stage: it samples the checkpoints") end
      if vf.is_stage(smp) then
        if smp.kind ~= "sample" then fail("p:train: sample must be a table of sample params or a sample stage") end
      elseif type(smp) ~= "table" or getmetatable(smp) ~= nil then
        fail("p:train: sample must be a table of sample params, e.g. { prompts = {\"cat.safetensors\"} }")
      elseif (type(smp.prompts) ~= "table" or #smp.prompts == 0) and
             (type(smp.captions) ~= "table" or #smp.captions == 0) then
        fail("p:train: sample.prompts must list text-embedding files (safetensors, one (L, text_dim) tensor each), " ..
             "or sample.captions captions as text for a model trained on caption bytes")
      end
    end
    local steps = int_of(t.steps, "p:train: steps", 1, 1 << 40)
    local seed = int_of(t.seed or 0, "p:train: seed", 0, 1 << 53)
    local tv = { t_mean = t.t_mean or 0.0, t_std = t.t_std or 1.0, t_sampling = t.t_sampling or "logit_normal",
                 t_shift = t.t_shift or 1.0, t_min = t.t_min or 0.0, t_max = t.t_max or 1.0,
                 route = t.route or "", boundary = t.boundary or 0.875 }
    for _, k in ipairs(T_KEYS) do
      if k ~= "t_sampling" and k ~= "route" and type(tv[k]) ~= "number" then fail("p:train: %s is a number", k) end
    end
    if tv.route ~= "" and tv.route ~= "high" and tv.route ~= "low" then
      fail("p:train: route %q is not \"high\" or \"low\"", tostring(tv.route))
    end
    if tv.route ~= "" and (tv.t_min ~= 0 or tv.t_max ~= 1) then
      fail("p:train: route draws t over [0, 1]; t_min %s .. t_max %s would remap it", tostring(tv.t_min),
           tostring(tv.t_max))
    end
    if tv.t_sampling ~= "logit_normal" and tv.t_sampling ~= "uniform" then
      fail("p:train: t_sampling %q is not \"logit_normal\" or \"uniform\"", tostring(tv.t_sampling))
    end
    if not (tv.t_shift > 0) then fail("p:train: t_shift %s is not above 0", tostring(tv.t_shift)) end
    if not (0 <= tv.t_min and tv.t_min < tv.t_max and tv.t_max <= 1) then
      fail("p:train: the timestep range t_min %s .. t_max %s is not within [0, 1] and non-empty",
           tostring(tv.t_min), tostring(tv.t_max))
    end
    m.trained = true

    -- a reader told to emit text embeddings (text_dim > 0) makes the model take them: its
    -- text_embedding then reads the batch's "text_emb" instead of the caption bytes
    local rdim = data.params.text_dim
    if m.model.text ~= "embeddings" and type(rdim) == "number" and rdim > 0 then
      if rdim ~= m.model.text_dim then
        fail("p:train: the reader emits text embeddings of width text_dim = %s, the model's text_dim is %s",
             tostring(rdim), tostring(m.model.text_dim))
      end
      m.model.text = "embeddings"
      for r = 1, m.R do
        for q = 1, m.P do m.parts[r][q].params.model.text = "embeddings" end
      end
    end

    -- a model conditioned on text embeddings: the reader emits "text_emb" (B, text_len,
    -- text_dim) and refuses a cache whose embeddings do not fit, before training starts
    if m.model.text == "embeddings" then
      if data.params.text_dim == nil then data.params.text_dim = m.model.text_dim end
      if data.params.text_len == nil then data.params.text_len = m.model.text_len end
    end

    -- an image-to-video model (in_dim > z): the reader emits the first-frame latents "y"
    -- (and with an image branch, img_dim > 0, the CLIP image features "clip_emb") and
    -- refuses a cache of another conditioning kind, before training starts
    local in_dim, img_dim = m.model.in_dim or 0, m.model.img_dim or 0
    if data.params.cond == nil then
      local concat = in_dim > 0 and in_dim ~= (m.model.z or 4)
      data.params.cond = concat and (img_dim > 0 and "concat+clip" or "concat") or "text"
    end
    if img_dim > 0 then
      if data.params.image_dim == nil then data.params.image_dim = img_dim end
      if data.params.image_len == nil then data.params.image_len = m.model.img_len end
    end

    -- data-parallel replicas read disjoint shards of the cache
    local readers = { data }
    if m.D > 1 then
      if data.params.shard ~= nil or data.params.nshards ~= nil then
        fail("p:train: with replicas = %d the readers' shard/nshards are set for you; drop them", m.D)
      end
      data.params.shard, data.params.nshards = 0, m.D
      for r = 1, m.D - 1 do
        local q = {}
        for k, v in pairs(data.params) do q[k] = v end
        q.shard, q.name, q.worker = r, data.name .. "_r" .. r, data.worker
        readers[r + 1] = p:raw_stage("latent_reader", q)
      end
    end
    -- Every value copied below is linked (the stage record's `links`, read by
    -- runtime/graph/graph.c for --set): "=TIE" makes an override of any copy reach all
    -- copies, a sentence refuses the override and says where the value is set.
    local where = vf.where()
    local function link(st, param, how)
      st.links = st.links or {}
      st.links[param] = how
    end
    local pp_where, opt_where = m.parts[1][1].where, opt.members[1].where
    local fixed_model = "is the DiT preset given to p:pipeline_parallel at " .. pp_where ..
                        " and copied by p:train; set it there (the script's model knobs)"
    local fixed_shards = "is the optimizer's `shards`, given at " .. opt_where ..
                         " and copied by p:train; set it there (the script's shards knob)"
    local fixed_pp = "is derived by p:pipeline_parallel at " .. pp_where ..
                     " from the model and its `stages`/`replicas`; set those there"
    local fixed_sync = "decides the ack edges p:train wires at " .. where ..
                       "; set the checkpoint stage's `sync` in the script"
    for r = 1, m.R do
      for q = 1, m.P do
        local d = m.parts[r][q]
        for _, k in ipairs { "steps", "seed" } do link(d, k, "=train." .. k) end
        for _, k in ipairs(T_KEYS) do link(d, k, "=train." .. k) end
        link(d, "ckpt_dir", "=ckpt.dir")
        link(d, "micro_batches", "=pp.micro_batches")
        link(d, "model", fixed_model)
        link(d, "shards", fixed_shards)
        for _, k in ipairs { "splits", "stage", "replicas", "replica", "sp", "sp_rank" } do link(d, k, fixed_pp) end
      end
    end
    for _, a in ipairs(opt.members) do
      for _, k in ipairs { "steps", "seed" } do link(a, k, "=train." .. k) end
      for _, k in ipairs(T_KEYS) do link(a, k, "=train." .. k) end
      link(a, "ckpt_dir", "=ckpt.dir")
      link(a, "every", "=ckpt.every")
      link(a, "ckpt_chunk", "=ckpt.chunk")
      link(a, "model", fixed_model)
      link(a, "splits", fixed_pp)
      link(a, "replicas", fixed_pp)
      link(a, "shards", fixed_shards)
      link(a, "shard", fixed_shards)
      link(a, "sync", fixed_sync)
      link(a, "data", "is the latent_reader's params, copied by p:train at " .. where ..
                      " for the resume check; set the reader's params instead")
    end
    if ck then
      link(ck, "dir", "=ckpt.dir")
      link(ck, "every", "=ckpt.every")
      link(ck, "chunk", "=ckpt.chunk")
      link(ck, "model", fixed_model)
      link(ck, "shards", fixed_shards)
      link(ck, "sync", fixed_sync)
    end
    if m.D > 1 then
      for _, rd in ipairs(readers) do
        for k in pairs(rd.params) do
          if k == "shard" or k == "nshards" then
            link(rd, k, "is set by p:train at " .. where .. " for replicas = " .. m.D .. " (one shard per replica)")
          else
            link(rd, k, "=reader." .. k)
          end
        end
      end
    end

    local dir = ck and ck.params.dir or ""
    local every = ck and (ck.params.every == nil and 50 or ck.params.every) or 0
    local sync = ck ~= nil and ck.params.sync == true
    -- the checkpoint stage's default chunk (stages/train/checkpoint.c), when it has none
    local chunk = ck and (ck.params.chunk == nil and 67108864 or ck.params.chunk) or 67108864
    if ck then ck.params.chunk = chunk end
    local model_params = m.model

    for r = 1, m.R do
      p:connect(readers[m.replica_of[r]], { m.parts[r][1], "batch" }, { capacity = 2 })
      for q = 1, m.P do
        local s = m.parts[r][q].params
        s.shards, s.steps, s.seed, s.ckpt_dir = opt.S, steps, seed, dir
        for _, k in ipairs(T_KEYS) do s[k] = tv[k] end
      end
    end
    local data_json = json(data.params)
    -- lora = {...}: every training stage takes the adapters' JSON; the partitions load the
    -- frozen base (`weights`, or the seeded init) themselves, the shards hold the adapters
    local lora = t.lora ~= nil and lora_json(t.lora) or nil
    if t.lora_init ~= nil and t.lora_init ~= "" then
      if lora == nil then fail("p:train: lora_init needs the lora option (its rank and targets)") end
      if type(t.lora_init) ~= "string" then fail("p:train: lora_init must be a path (a string)") end
      for _, a in ipairs(opt.members) do a.params.lora_init = t.lora_init end
    end
    if lora then
      for r = 1, m.R do
        for q = 1, m.P do
          local d = m.parts[r][q]
          d.params.lora = lora
          link(d, "lora", "is p:train's lora option at " .. where .. "; set it there")
          if t.weights ~= nil and t.weights ~= "" then d.params.weights = t.weights end
        end
      end
      for _, a in ipairs(opt.members) do
        a.params.lora = lora
        link(a, "lora", "is p:train's lora option at " .. where .. "; set it there")
      end
      if ck then
        ck.params.lora = lora
        link(ck, "lora", "is p:train's lora option at " .. where .. "; set it there")
      end
    end
    -- weights = PATH: the shards start from a file instead of the seeded init (and the
    -- partitions from what the shards send); checked against the model at check/plan
    if t.weights ~= nil and t.weights ~= "" then
      if type(t.weights) ~= "string" then fail("p:train: weights must be a path (a string)") end
      for _, a in ipairs(opt.members) do a.params.weights = t.weights end
    end
    -- expert = "high" | "low": the weights hold two experts and the stages that read them
    -- take this one (a resume checks it: the shards record it in the config)
    if t.expert ~= nil then
      if t.expert ~= "high" and t.expert ~= "low" then
        fail("p:train: expert %q is not \"high\" or \"low\"", tostring(t.expert))
      end
      if t.weights == nil or t.weights == "" then fail("p:train: expert needs weights (the two-expert model)") end
      local fixed_expert = "is p:train's expert option at " .. where .. "; set it there"
      for _, st in ipairs(m:stages()) do st.params.expert = t.expert; link(st, "expert", fixed_expert) end
      for _, a in ipairs(opt.members) do a.params.expert = t.expert; link(a, "expert", fixed_expert) end
    end
    -- the shards take the partitions' weight and gradient dtype: bf16 on GPUs, f32 on the
    -- CPU; a shard in host memory next to GPU partitions (offload) converts to its f32 state
    -- (param dtype); and a shard plans chunk buffers for the partitions not on its device
    -- (param part_devices)
    local part_dtype, part_devices = nil, {}
    for r = 1, m.R do
      for q = 1, m.P do
        local dev = tostring(m.parts[r][q].params.device or "cpu")
        part_devices[#part_devices + 1] = dev
        local dt = dev:match("^cuda") and "bf16" or "f32"
        if part_dtype and dt ~= part_dtype then
          fail("p:train: the partitions mix CPU and GPU devices (%s is %s, another %s): they exchange tensors of one dtype",
               m.parts[r][q].name, dev, part_dtype == "bf16" and "a GPU" or "the CPU")
        end
        part_dtype = dt
      end
    end
    local fixed_dtype = "is the partitions' dtype, derived by p:train at " .. where ..
                        " from their devices; set those in p:pipeline_parallel"
    for _, a in ipairs(opt.members) do
      local s = a.params
      s.dtype = part_dtype
      link(a, "dtype", fixed_dtype)
      s.model, s.splits, s.replicas, s.steps, s.seed = model_params, m.splits, m.R, steps, seed
      s.part_devices = part_devices
      for _, k in ipairs(T_KEYS) do s[k] = tv[k] end
      s.data, s.every, s.ckpt_dir, s.sync = data_json, every, dir, sync
      s.ckpt_chunk = chunk
    end
    if ck then
      ck.params.model, ck.params.shards = model_params, opt.S
      if ck.worker == nil and m.isolate then ck.worker = ck.name end
    end
    -- sampling: a stage of its own (its own process with isolate), fed by the writer's
    -- "done"; it reads the model preset for its memory plan
    if smp ~= nil then
      local ss = smp
      if not vf.is_stage(smp) then
        local q = {}
        for k, v in pairs(smp) do q[k] = v end
        q.name = q.name or "sample"
        if q.worker == nil and m.isolate then q.worker = q.name end
        ss = p:stage("sample", q)
      end
      ss.params.model = model_params
      link(ss, "model", fixed_model)
      p:connect({ ck, "done" }, { ss, "ckpt" }, { capacity = 2 })
    end

    for r = 1, m.R do
      for q = 1, m.P do
        local d = m.parts[r][q]
        for k, a in ipairs(opt.members) do
          p:connect({ d, "grad_s" .. (k - 1) }, { a, "grads" }, { capacity = 2 })
          p:connect({ a, "weights_p" .. (q - 1) }, { d, "weights" }, { capacity = 2, loop = true })
        end
      end
    end
    for k, a in ipairs(opt.members) do
      for j, b in ipairs(opt.members) do
        if j ~= k then p:connect({ a, "norm_out" }, { b, "norm_in" }, { capacity = 2, loop = true }) end
      end
      if ck then
        p:connect({ a, "snap" }, { ck, "snap" }, { capacity = 2 })
        if sync then p:connect({ ck, "ack" }, { a, "ack" }, { capacity = 2, loop = true }) end
      end
    end
    return p
  end)
end
