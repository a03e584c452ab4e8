-- Fine-tune Wan image-to-video from its published weights on your own clips: the example to
-- copy. Wan 2.1 I2V-14B (model wan-i2v-14b, CLIP image branch) or one Wan 2.2 I2V-A14B
-- expert (wan2.2-i2v-a14b, no CLIP), as rank-32 LoRA on one GPU by default
-- (docs/PLANNING.md: 73.69 GiB at 81x480x832; lora_rank=0 trains every weight, which
-- needs 8 x 80 GB: pipelines/plan_wan14b_8x80.lua --set model=wan-i2v-14b).
--
--   # 1. CLIP features of each clip's first frame (Wan 2.1 only), text embeddings, then
--   #    latents with the first-frame latent y (docs/PRECOMPUTE.md)
--   python3 tools/encode_images.py --model Wan2.1-I2V-14B-480P-Diffusers/image_encoder \
--        --manifest clips.csv --out-dir clip/ --out-manifest clips_clip.csv --size 832x480
--   python3 tools/encode_captions.py --model umt5-xxl/ --manifest clips_clip.csv \
--        --out-dir emb/ --out-manifest clips_i2v.csv
--   vflow run pipelines/precompute_latents.lua --set manifest=clips_i2v.csv \
--        --set cache=cache/i2v.lmdb --set vae=wan --set weights=wan_2.1_vae.safetensors \
--        --set text_dim=4096 --set text_len=512 --set frames=81 --set size=832x480 \
--        --set clips_per_video=1 --set first_frame=true --set image_dim=1280
--   # 2. check the weights against the preset, plan the memory, train
--   vflow plan pipelines/finetune_wan_i2v.lua --set weights=Wan2.1-I2V-14B-480P/ --budget cuda=80GiB
--   vflow run  pipelines/finetune_wan_i2v.lua --set weights=Wan2.1-I2V-14B-480P/ --set cache=cache/i2v.lmdb
--
-- The reader emits y (and for wan-i2v-14b the CLIP features) with each batch; the first
-- partition builds the 4-channel first-frame mask. A cache of another conditioning kind
-- (text only; or without CLIP features for wan-i2v-14b) is refused before training starts,
-- naming both kinds; a text-to-video checkpoint for the I2V preset likewise.
-- Knobs (vf.args): weights (required), model (wan-i2v-14b | wan2.2-i2v-a14b), cache
-- (cache/i2v.lmdb), steps (2000), batch (1), lr (1e-4), lora_rank (32; 0 = every weight),
-- lora_alpha (the rank), lora_targets (self_attn.*,cross_attn.*,ffn.*: cross_attn.*
-- includes k_img, v_img), device ("cuda:0"), every (250), seed (0), frames / size (81 /
-- 832x480, WxH: the latent shape to plan with before the cache exists).
local vf = require "vflow"
local a = vf.args
local p = vf.pipeline(a.run or "finetune_wan_i2v")

if a.weights == nil then vf.fail("finetune_wan_i2v.lua: --set weights=PATH (the I2V DiT checkpoint) is required") end
local model = vf.models.dit(a.model or "wan-i2v-14b")
local dev = a.device or "cuda:0"
local T = 1 + ((a.frames or 81) - 1) // 4
local W, H = vf.size(a.size or "832x480", "size")

local data = p:stage("latent_reader", {
  path = a.cache or "cache/i2v.lmdb",
  batch = a.batch or 1,
  seed = a.seed or 0,
  text_len = model.text_len,
  latent_shape = { model.z, T, H // 8, W // 8 },
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
