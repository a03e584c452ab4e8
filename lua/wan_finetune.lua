-- vflow extension
-- wan_finetune.lua — the body the Wan fine-tune scripts share (pipelines/finetune_wan.lua,
-- finetune_wan22.lua): p:wan_finetune(model, a, train) builds the reader, the pipeline
-- partitions, the AdamW shards and the checkpoint stage from the scripts' common knobs in
-- `a` (vf.args; each knob is listed in finetune_wan.lua's header) and wires them with
-- p:train, whose options `train` adds to or overrides (weights, expert, t_min, t_max).
-- Every knob is read whether it applies or not: a knob a script never reads is refused.
-- `own` (optional) makes it one of several trainings of one pipeline (the two experts of
-- finetune_wan22.lua): own.suffix ends each stage's and group's name (latent_reader_high,
-- dit_high_0, adamw_high, checkpoint_high), own.devices replaces the devices knob and
-- own.ckpt the checkpoint dir.
return function(vf)
  vf.extend("wan_finetune", function(p, model, a, train, own)
    own = own or {}
    local suf = own.suffix or ""
    local devices, device = a.devices, a.device
    if own.devices ~= nil then devices = own.devices end
    if type(devices) == "string" then
      local list = {}
      for d in devices:gmatch("[^,]+") do list[#list + 1] = d end
      devices = list
    end
    devices = devices or (device or "cuda:0")
    local first_dev = type(devices) == "table" and devices[1] or devices
    local T = 1 + ((a.frames or 81) - 1) // 4          -- the VAE's 4x causal time compression
    local W, H = vf.size(a.size or "832x480", "size")

    local data = p:stage("latent_reader", {
      name = "latent_reader" .. suf,
      path = a.cache or "cache/wan.lmdb",
      batch = a.batch or 1,
      seed = a.seed or 0,
      text_len = model.text_len,
      latent_shape = { model.z, T, H // 8, W // 8 },
    })
    local dit = p:pipeline_parallel(model, {
      stages = a.stages or 1,
      micro_batches = a.micro_batches or 1,
      recompute = a.recompute ~= false,
      devices = devices,
      base_dtype = a.fp8_base == true and "fp8" or nil,
      swap_blocks = a.swap_blocks,
      swap_budget = a.swap_budget,
      sp = a.sp or 1,
      offload_activations = a.offload_activations == true,
      name = "dit" .. suf,
    })
    local opt = p:stage("adamw", {
      name = "adamw" .. suf,
      lr = a.lr or 1e-5,
      warmup = a.warmup or 50,
      weight_decay = a.weight_decay or 0.0,
      clip_grad = a.clip or 1.0,
      shards = a.shards or 1,
      device = a.offload == true and "cpu" or first_dev,
    })
    -- With several devices the shards spread over them (shard k on device ⌊k·G/S⌋), as the
    -- partitions do, so no one device holds every shard's master weights and moments.
    if a.offload ~= true and type(devices) == "table" and #devices > 1 then
      for k, s in ipairs(opt.members or {}) do s.params.device = devices[(k - 1) * #devices // #opt.members + 1] end
    end
    local ckpt = p:stage("checkpoint", { name = "checkpoint" .. suf, dir = own.ckpt or a.ckpt or "",
                                        every = a.every or 250, keep = a.keep or 2,
                                        model_shard_bytes = a.model_shard_bytes })
    local lora_alpha, lora_targets = a.lora_alpha, a.lora_targets
    local lora = (a.lora_rank or 0) ~= 0 and { rank = a.lora_rank, alpha = lora_alpha,
                                               targets = lora_targets or "self_attn.*,cross_attn.*,ffn.*" } or nil
    local t = { data = data, model = dit, optimizer = opt, checkpoint = ckpt, steps = a.steps or 2000,
                seed = a.seed or 0, weights = a.weights, lora = lora, lora_init = a.lora_init,
                t_sampling = a.t_sampling, t_mean = a.t_mean, t_std = a.t_std, t_shift = a.t_shift,
                t_min = a.t_min, t_max = a.t_max }
    for k, v in pairs(train or {}) do t[k] = v end
    return p:train(t)
  end)
end
