-- model_vae.lua — VAE presets (vf.models.vae "NAME"): plain tables of the `model` param
-- of vae_encode, checked there against the schema in stages/vae_encode.c. The network is
-- the causal 3D VAE encoder of models/vae.h (Wan-2.1 structure and tensor names).
--
--   dim                  base channel width; level i has dim * dim_mult[i] channels
--   dim_mult             one entry per level; each level but the last ends with a 2x
--                        spatial downsample (4 levels: 8x)
--   num_res_blocks       residual blocks per level
--   temporal_downsample  1/0 per level but the last: 2x causal time downsample there
--                        (two 1s: 4x, clips of 1 + 4k frames)
--   z_dim                latent channels
--   eps                  RMSNorm eps
--   scale, shift         latent affine: latent = (mean - shift) * scale (presets without
--                        per-channel values)
--   latents_mean,        per-channel normalisation (z values each), as Wan's pipelines:
--   latents_std          latent = (mean - latents_mean) / latents_std; a diffusers VAE
--                        directory's config.json, or vae_encode's params, override them
return {
  -- tests and CPU runs: 8x space, 4x time, 4 latent channels
  tiny = { name = "tiny", dim = 8, dim_mult = { 1, 2, 2, 2 }, num_res_blocks = 1,
           temporal_downsample = { 0, 1, 1 }, z_dim = 4, eps = 1e-12,
           scale = 1.0, shift = 0.0 },
  -- Wan-2.1's VAE encoder widths (53.6M parameters); loads ComfyUI's
  -- wan_2.1_vae.safetensors (original names) or a diffusers AutoencoderKLWan directory.
  -- latents_mean/std: AutoencoderKLWan's config defaults (diffusers 0.33.1).
  wan = { name = "wan", dim = 96, dim_mult = { 1, 2, 4, 4 }, num_res_blocks = 2,
          temporal_downsample = { 0, 1, 1 }, z_dim = 16, eps = 1e-12,
          scale = 1.0, shift = 0.0,
          latents_mean = { -0.7571, -0.7089, -0.9113, 0.1075, -0.1745, 0.9653, -0.1517, 1.5508,
                           0.4134, -0.0715, 0.5517, -0.3632, -0.1922, -0.9497, 0.2503, -0.2921 },
          latents_std = { 2.8184, 1.4541, 2.3275, 2.6558, 1.2196, 1.7708, 2.6052, 2.0743,
                          3.2687, 2.1526, 2.8652, 1.5579, 1.6382, 1.1253, 2.8251, 1.9160 } },
}
