-- Fine-tune Wan 2.2 TI2V-5B from its published weights on your own clips: the example to
-- copy. Image-to-video by the first frame: the clean latent of each clip's first frame
-- replaces the noisy latent's frame 0, its tokens sit at t = 0 (the model's time embedding
-- is per token) and frame 0 is left out of the loss. With image = false the same model
-- trains text-to-video on a text cache. Rank-32 LoRA on one GPU by default (lora_rank=0
-- trains every weight: docs/PLANNING.md plans both).
--
--   # 1. text embeddings, then latents through the Wan 2.2 VAE, marked as image-to-video
--   #    by the first frame (docs/PRECOMPUTE.md)
--   python3 tools/encode_captions.py --model umt5-xxl/ --manifest clips.csv \
--        --out-dir emb/ --out-manifest clips_emb.csv
--   vflow run pipelines/precompute_latents.lua --set manifest=clips_emb.csv \
--        --set cache=cache/ti2v.lmdb --set vae=wan2.2 --set weights=wan2.2_vae.safetensors \
--        --set text_dim=4096 --set text_len=512 --set frames=121 --set size=1280x704 \
--        --set clips_per_video=1 --set ti2v=true
--   # 2. check the weights against the preset, plan the memory, train
--   vflow plan pipelines/finetune_wan_ti2v.lua --set weights=Wan2.2-TI2V-5B/ --budget cuda=80GiB
--   vflow run  pipelines/finetune_wan_ti2v.lua --set weights=Wan2.2-TI2V-5B/ --set cache=cache/ti2v.lmdb
--
-- The cache's conditioning kind decides the path: image = true (the default) reads a cache
-- of kind first_frame (precomputed with ti2v=true), image = false one of kind text; the
-- other kind is refused before training starts, naming both.
-- Knobs (vf.args): weights (required), cache (cache/ti2v.lmdb), image (true), steps
-- (2000), batch (1), lr (1e-4), lora_rank (32; 0 = every weight), lora_alpha (the rank),
-- lora_targets (self_attn.*,cross_attn.*,ffn.*), device ("cuda:0"), every (250), seed (0),
-- frames / size (121 / 1280x704, WxH: the latent shape to plan with before the cache
-- exists).
local vf = require "vflow"
local a = vf.args
local p = vf.pipeline(a.run or "finetune_wan_ti2v")

if a.weights == nil then vf.fail("finetune_wan_ti2v.lua: --set weights=PATH (the TI2V-5B DiT checkpoint) is required") end
local model = vf.models.dit "wan2.2-ti2v-5b"
local dev = a.device or "cuda:0"
local T = 1 + ((a.frames or 121) - 1) // 4          -- the VAE's 4x causal time compression
local W, H = vf.size(a.size or "1280x704", "size")

local data = p:stage("latent_reader", {
  path = a.cache or "cache/ti2v.lmdb",
  batch = a.batch or 1,
  seed = a.seed or 0,
  text_len = model.text_len,
  cond = a.image == false and "text" or "first_frame",
  latent_shape = { model.z, T, H // 16, W // 16 },   -- the Wan 2.2 VAE's 16x space compression
})
local dit = p:pipeline_parallel(model, { stages = 1, micro_batches = 1, recompute = true, devices = dev })
local opt = p:stage("adamw", { lr = a.lr or 1e-4, warmup = 50, weight_decay = 0.0, shards = 1, device = dev })
local ckpt = p:stage("checkpoint", { dir = "", every = a.every or 250, keep = 2 })
local rank, alpha, targets = a.lora_rank or 32, a.lora_alpha, a.lora_targets
local lora = rank ~= 0 and { rank = rank, alpha = alpha or rank,
                             targets = targets or "self_attn.*,cross_attn.*,ffn.*" } or nil
p:train { data = data, model = dit, optimizer = opt, checkpoint = ckpt, steps = a.steps or 2000,
          seed = a.seed or 0, weights = a.weights, lora = lora }
return p
