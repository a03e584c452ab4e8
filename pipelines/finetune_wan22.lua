-- Fine-tune Wan 2.2 A14B (T2V, or I2V with model=wan2.2-i2v-a14b) from its published
-- weights on your own clips, one expert or both in one run: the example to copy.
--
--   # 1. latents and umT5 caption embeddings into a cache, as for Wan 2.1 (A14B keeps the
--   #    Wan 2.1 VAE; pipelines/finetune_wan.lua, docs/PRECOMPUTE.md)
--   # 2. check the expert against the preset, plan the memory, train it (here the high-noise one)
--   vflow check pipelines/finetune_wan22.lua --set weights=Wan2.2-T2V-A14B/ --set experts=high
--   vflow plan  pipelines/finetune_wan22.lua --set weights=Wan2.2-T2V-A14B/ --set experts=high \
--        --set lora_rank=32 --set fp8_base=true --budget cuda=80GiB
--   vflow run   pipelines/finetune_wan22.lua --set weights=Wan2.2-T2V-A14B/ --set experts=high \
--        --set lora_rank=32 --set fp8_base=true --set cache=cache/wan.lmdb
--   # or both experts at once, each on its own 4 of 8 GPUs
--   vflow run   pipelines/finetune_wan22.lua --set weights=Wan2.2-T2V-A14B/ --set experts=both \
--        --set stages=4 --set micro_batches=4 --set shards=4 --set offload=true \
--        --set devices_high=cuda:0,cuda:1,cuda:2,cuda:3 --set devices_low=cuda:4,cuda:5,cuda:6,cuda:7
--
-- weights: the two experts as one source, models/dit_experts.h: Wan-AI's layout
-- (high_noise_model/, low_noise_model/), a diffusers pipeline directory (transformer/ =
-- high, transformer_2/ = low) or a vflow checkpoint step holding both; or weights_high /
-- weights_low: one file (or index, or model directory) per expert, e.g. ComfyUI's single
-- files. Every naming and dtype the Wan 2.1 loader takes (finetune_wan.lua).
--
-- The high-noise expert denoises t >= boundary, the low-noise one t < boundary, t the
-- timestep after the shift (in [0, 1]; boundary 0.875 for T2V, 0.900 for I2V): the run's
-- timesteps are mapped into the expert's side (t_min = boundary for high, t_max =
-- boundary for low, unless given), so every micro-batch of the run is on its expert's
-- side. The state of its checkpoints records the expert, so a resume as the other one is
-- refused.
--
-- experts = both: two trainings in one graph, each with its own reader, partitions, AdamW
-- shards and checkpoint stage (named <stage>_high / <stage>_low), on devices_high /
-- devices_low (or both on device / devices). No stage passes batches between the experts:
-- each expert's reader reads every batch, and which samples an expert trains is decided
-- where t is drawn, so no expert waits on, or buffers batches for, the other.
--   routing = t (the default): each sample's t is drawn from the run's whole distribution
--     (t_sampling, t_mean / t_std, t_shift; no range), exactly as a one-model run draws it
--     for (seed, step, position in the step's batch), and the sample trains the expert
--     whose side it falls on. Each expert's first partition keeps the samples of the
--     batch routed to it, in order, and cuts those into its micro_batches, so no
--     micro-batch straddles the boundary and the experts share each step's samples by the
--     draw (P(t >= boundary) of them to high). A micro-batch left empty (fewer routed
--     samples than micro_batches) still flows through the partitions, computing nothing.
--     Each expert's loss is the mean over its samples of the step. A step with none of an
--     expert's samples leaves that expert as it was: no AdamW update, no weight decay,
--     Adam's step count unchanged (state.json's adam_step; a resume continues it), and
--     its train_step row says "samples":0 with no loss. The rows of a step with samples
--     have the expert, its loss, lr, grad_norm and "samples" (TensorBoard
--     train/<expert>/loss, lr, grad_norm, samples); the "timesteps" rows name each
--     sample's t and position.
--   routing = each: the two one-expert runs side by side: every sample trains both
--     experts, each drawing its t on its own side of the boundary (high: boundary +
--     (1 - boundary)·s, low: boundary·s, s the draw), so each expert's bits are those of
--     experts = high (or low) alone on the same seed, one optimizer step per step each.
-- Either way each expert checkpoints on the same steps (with its optimizer state, what a
-- resume reads: a kill + --resume resumes each from its own newest checkpoint) into
-- ckpt/high and ckpt/low (<ckpt>/high, <ckpt>/low with --set ckpt=DIR); stage ckpt_join
-- joins each step both wrote into ckpt/step-N with high_noise_model/ and
-- low_noise_model/ (formats/ckpt.h), which `vflow sample ckpt` samples, switching experts
-- at the boundary (a LoRA run's step: each adapter merged into the base its expert
-- trained on). A checkpoint records the routing, so a resume with the other is refused.
--
-- Knobs (vf.args): weights or weights_high / weights_low (required), experts (required: high | low | both),
-- boundary (0.875; 0.900 for wan2.2-i2v-a14b), routing (experts = both: t | each; t), model or preset (wan2.2-a14b |
-- wan2.2-i2v-a14b), text_dim (the preset's; with it a preset on caption bytes such as tiny
-- conditions on the cache's text embeddings of this width), cache (cache/wan.lmdb), steps
-- (2000), batch (1), lr (1e-5), warmup (50), stages (1), micro_batches (1), recompute (true), shards (1), offload (false),
-- device ("cuda:0") or devices (comma list, one per stage), devices_high / devices_low
-- (experts = both: each expert's devices, as devices), every (250), keep (2),
-- model_shard_bytes (1e10), seed (0), frames / size (81 / 832x480), lora_rank (off),
-- lora_alpha, lora_targets, lora_init (an adapter file to continue from; with experts = both
-- both experts start from it), lora_init_high / lora_init_low (experts = both: each expert's own,
-- e.g. a trained pair's *_high_noise / *_low_noise file), fp8_base (false), swap_blocks (0; "auto"),
-- swap_budget, t_sampling
-- (logit_normal | uniform), t_mean / t_std (0 / 1), t_shift (1), t_min / t_max (the
-- expert's side of the boundary; not with experts = both): each as in finetune_wan.lua.
local vf = require "vflow"
local a = vf.args
local p = vf.pipeline(a.run or "finetune_wan22")

-- text_dim: a preset on caption bytes (tiny) conditions on the cache's text embeddings of
-- this width instead, as the Wan presets do; what tests of a Wan checkpoint on tiny need
local overrides = {}
if a.text_dim ~= nil then overrides.text_dim, overrides.text = a.text_dim, "embeddings" end
local model = vf.models.dit(a.preset or a.model or "wan2.2-a14b", overrides)
local experts = a.experts
if experts == nil then
  vf.fail("finetune_wan22.lua: --set experts=high, low or both (the experts this run trains) is required")
end
if experts ~= "high" and experts ~= "low" and experts ~= "both" then
  vf.fail("finetune_wan22.lua: experts=%s: expected high, low or both", tostring(experts))
end
local both = experts == "both"
local weights, wh, wl = a.weights, a.weights_high, a.weights_low
if weights ~= nil and (wh ~= nil or wl ~= nil) then
  vf.fail("finetune_wan22.lua: give weights (both experts in one source) or weights_high / weights_low, not both")
end
local function weights_of(e)
  if weights == nil and (e == "high" and wh or wl) == nil then
    vf.fail("finetune_wan22.lua: --set weights=DIR (Wan-AI's high_noise_model/ + low_noise_model/, or a diffusers " ..
            "pipeline's transformer/ + transformer_2/) or --set weights_%s=FILE is required", e)
  end
  return weights or (e == "high" and wh or wl)
end
local i2v = (model.in_dim or 0) > model.z
local boundary = a.boundary or (i2v and 0.900 or 0.875)
if type(boundary) ~= "number" or not (boundary > 0 and boundary < 1) then
  vf.fail("finetune_wan22.lua: boundary=%s: expected a number in (0, 1) (t after the shift)", tostring(boundary))
end
local t_min_knob, t_max_knob = a.t_min, a.t_max
local devices_high, devices_low, ckpt = a.devices_high, a.devices_low, a.ckpt
local routing = a.routing

if not both then
  if devices_high ~= nil or devices_low ~= nil then
    vf.fail("finetune_wan22.lua: devices_high / devices_low place the experts of experts=both; " ..
            "a one-expert run takes device or devices")
  end
  if routing ~= nil then
    vf.fail("finetune_wan22.lua: routing=%s shares the samples between the experts of experts=both; " ..
            "a one-expert run trains every sample on its side", tostring(routing))
  end
  if a.lora_init_high ~= nil or a.lora_init_low ~= nil then
    vf.fail("finetune_wan22.lua: lora_init_high / lora_init_low start the experts of experts=both; " ..
            "a one-expert run takes lora_init")
  end
  local t_min = t_min_knob or (experts == "high" and boundary or 0.0)
  local t_max = t_max_knob or (experts == "high" and 1.0 or boundary)
  if (experts == "high" and t_min < boundary) or (experts == "low" and t_max > boundary) then
    vf.fail("finetune_wan22.lua: t_min %s .. t_max %s crosses the boundary %s into the other expert's side",
            tostring(t_min), tostring(t_max), tostring(boundary))
  end
  -- the reader, partitions, shards and checkpoint stage from the knobs above (lua/wan_finetune.lua);
  -- one source of both experts: the stages take the named expert's subdir; a file per
  -- expert: that file is the expert
  p:wan_finetune(model, a, { weights = weights_of(experts), expert = weights and experts or nil,
                             t_min = t_min, t_max = t_max })
  return p
end

-- experts = both: two trainings side by side in one graph, each a one-expert run of its
-- own (reader, partitions, shards, checkpoint stage, named <stage>_high / <stage>_low), sharing
-- nothing but the knobs; routing = t: each sample trains the expert its drawn t routes it to
-- (the partitions' route, stages/train/dit_route.c); routing = each: t_min / t_max are each
-- expert's side of the boundary, every sample trains both.
routing = routing or "t"
if routing ~= "t" and routing ~= "each" then
  vf.fail("finetune_wan22.lua: routing=%s: expected t (each sample to the expert of its drawn t) or each " ..
          "(every sample to both, at a t on each one's side)", tostring(routing))
end
if t_min_knob ~= nil or t_max_knob ~= nil then
  vf.fail("finetune_wan22.lua: t_min / t_max set one expert's range; with experts=both each expert " ..
          "trains its side of the boundary %s (set boundary instead)", tostring(boundary))
end
if ckpt ~= nil and (type(ckpt) ~= "string" or ckpt == "") then
  vf.fail("finetune_wan22.lua: ckpt=%s: expected a directory", tostring(ckpt))
end
local range = { high = { boundary, 1.0 }, low = { 0.0, boundary } }
for _, e in ipairs { "high", "low" } do
  local devs = e == "high" and devices_high or devices_low
  local train = routing == "t" and { weights = weights_of(e), expert = e, route = e, boundary = boundary }
                or { weights = weights_of(e), expert = e, t_min = range[e][1], t_max = range[e][2] }
  -- each expert's adapters continue from its own file (a trained pair's *_high_noise /
  -- *_low_noise), or both from lora_init
  local init = a["lora_init_" .. e]
  if init ~= nil and (a.lora_rank or 0) == 0 then
    vf.fail("finetune_wan22.lua: lora_init_%s continues LoRA adapters: set lora_rank too", e)
  end
  train.lora_init = init or a.lora_init
  p:wan_finetune(model, a, train,
                 { suffix = "_" .. e, devices = devs,
                   ckpt = (ckpt or "<run>/ckpt") .. "/" .. e })
end
-- each step both experts committed becomes one two-expert step dir next to their dirs
local join = p:stage("ckpt_join", { name = "checkpoint", dir = ckpt or "", boundary = boundary, keep = a.keep or 2 })
for _, e in ipairs { "high", "low" } do
  p:connect({ p:find("checkpoint_" .. e), "done" }, { join, e }, { capacity = 2 })
end
return p
