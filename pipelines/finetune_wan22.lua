-- Fine-tune one expert of Wan 2.2 A14B (T2V, or I2V with model=wan2.2-i2v-a14b) from its
-- published weights on your own clips: the example to copy.
--
--   # 1. latents and umT5 caption embeddings into a cache, as for Wan 2.1 (A14B keeps the
--   #    Wan 2.1 VAE; pipelines/finetune_wan.lua, docs/PRECOMPUTE.md)
--   # 2. check the expert against the preset, plan the memory, train it (here the high-noise one)
--   vflow check pipelines/finetune_wan22.lua --set weights=Wan2.2-T2V-A14B/ --set experts=high
--   vflow plan  pipelines/finetune_wan22.lua --set weights=Wan2.2-T2V-A14B/ --set experts=high \
--        --set lora_rank=32 --set fp8_base=true --budget cuda=80GiB
--   vflow run   pipelines/finetune_wan22.lua --set weights=Wan2.2-T2V-A14B/ --set experts=high \
--        --set lora_rank=32 --set fp8_base=true --set cache=cache/wan.lmdb
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
-- side. A run trains one expert (experts = high | low); the state of its checkpoints
-- records the expert, so a resume as the other one is refused.
--
-- Knobs (vf.args): weights or weights_high / weights_low (required), experts (required: high | low),
-- boundary (0.875; 0.900 for wan2.2-i2v-a14b), model or preset (wan2.2-a14b |
-- wan2.2-i2v-a14b), cache (cache/wan.lmdb), steps (2000), batch (1), lr (1e-5), warmup
-- (50), stages (1), micro_batches (1), recompute (true), shards (1), offload (false),
-- device ("cuda:0") or devices (comma list, one per stage), every (250), keep (2),
-- model_shard_bytes (1e10), seed (0), frames / size (81 / 832x480), lora_rank (off),
-- lora_alpha, lora_targets, lora_init, fp8_base (false), swap_blocks (0; "auto"), swap_budget, t_sampling
-- (logit_normal | uniform), t_mean / t_std (0 / 1), t_shift (1), t_min / t_max (the
-- expert's side of the boundary): each as in finetune_wan.lua.
local vf = require "vflow"
local a = vf.args
local p = vf.pipeline(a.run or "finetune_wan22")

local model = vf.models.dit(a.preset or a.model or "wan2.2-a14b")
local experts = a.experts
if experts == nil then vf.fail("finetune_wan22.lua: --set experts=high or experts=low (the expert this run trains) is required") end
if experts == "both" then
  vf.fail("finetune_wan22.lua: experts=both (the two experts in one run) is not available yet; " ..
          "train them one after the other with experts=high and experts=low")
end
if experts ~= "high" and experts ~= "low" then
  vf.fail("finetune_wan22.lua: experts=%s: expected high or low", tostring(experts))
end
local weights, wh, wl = a.weights, a.weights_high, a.weights_low
local expert_weights = experts == "high" and wh or wl
if weights ~= nil and (wh ~= nil or wl ~= nil) then
  vf.fail("finetune_wan22.lua: give weights (both experts in one source) or weights_high / weights_low, not both")
end
if weights == nil and expert_weights == nil then
  vf.fail("finetune_wan22.lua: --set weights=DIR (Wan-AI's high_noise_model/ + low_noise_model/, or a diffusers " ..
          "pipeline's transformer/ + transformer_2/) or --set weights_%s=FILE is required", experts)
end
local i2v = (model.in_dim or 0) > model.z
local boundary = a.boundary or (i2v and 0.900 or 0.875)
if type(boundary) ~= "number" or not (boundary > 0 and boundary < 1) then
  vf.fail("finetune_wan22.lua: boundary=%s: expected a number in (0, 1) (t after the shift)", tostring(boundary))
end
local t_min = a.t_min or (experts == "high" and boundary or 0.0)
local t_max = a.t_max or (experts == "high" and 1.0 or boundary)
if (experts == "high" and t_min < boundary) or (experts == "low" and t_max > boundary) then
  vf.fail("finetune_wan22.lua: t_min %s .. t_max %s crosses the boundary %s into the other expert's side",
          tostring(t_min), tostring(t_max), tostring(boundary))
end

-- the reader, partitions, shards and checkpoint stage from the knobs above (lua/wan_finetune.lua);
-- one source of both experts: the stages take the named expert's subdir; a file per
-- expert: that file is the expert
p:wan_finetune(model, a, { weights = weights or expert_weights, expert = weights and experts or nil,
                           t_min = t_min, t_max = t_max })
return p
