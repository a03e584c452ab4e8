-- model_vae.lua — VAE presets (vf.models.vae "NAME"): plain tables of the `model` param
-- of vae_encode, checked there against the schema in stages/vae_encode.c. The network is
-- the causal 3D VAE encoder of models/vae.h (Wan 2.1 or Wan 2.2 structure and tensor names).
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
--   residual             1: Wan 2.2's levels, each with an average-down shortcut (0: Wan 2.1)
--   patch_size           pixel patchify before the encoder (Wan 2.2: 2, 12 input channels)
--   dec_dim              the decoder's base width (0: dim)
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
  -- Wan 2.2's VAE (TI2V-5B; z 48, stride 4x16x16): loads Wan2.2_VAE.pth converted to
  -- safetensors or ComfyUI's wan2.2_vae.safetensors (original names) or a diffusers
  -- AutoencoderKLWan directory. latents_mean/std: the Wan2.2-TI2V-5B diffusers config.
  ["wan2.2"] = { name = "wan2.2", dim = 160, dec_dim = 256, dim_mult = { 1, 2, 4, 4 },
                 num_res_blocks = 2, temporal_downsample = { 0, 1, 1 }, z_dim = 48, eps = 1e-12,
                 residual = 1, patch_size = 2, scale = 1.0, shift = 0.0,
                 latents_mean = { -0.2289, -0.0052, -0.1323, -0.2339, -0.2799, 0.0174, 0.1838, 0.1557,
                                  -0.1382, 0.0542, 0.2813, 0.0891, 0.1570, -0.0098, 0.0375, -0.1825,
                                  -0.2246, -0.1207, -0.0698, 0.5109, 0.2665, -0.2108, -0.2158, 0.2502,
                                  -0.2055, -0.0322, 0.1109, 0.1567, -0.0729, 0.0899, -0.2799, -0.1230,
                                  -0.0313, -0.1649, 0.0117, 0.0723, -0.2839, -0.2083, -0.0520, 0.3748,
                                  0.0152, 0.1957, 0.1433, -0.2944, 0.3573, -0.0548, -0.1681, -0.0667 },
                 latents_std = { 0.4765, 1.0364, 0.4514, 1.1677, 0.5313, 0.4990, 0.4818, 0.5013,
                                 0.8158, 1.0344, 0.5894, 1.0901, 0.6885, 0.6165, 0.8454, 0.4978,
                                 0.5759, 0.3523, 0.7135, 0.6804, 0.5833, 1.4146, 0.8986, 0.5659,
                                 0.7069, 0.5338, 0.4889, 0.4917, 0.4069, 0.4999, 0.6866, 0.4093,
                                 0.5709, 0.6065, 0.6415, 0.4944, 0.5726, 1.2042, 0.5458, 1.6887,
                                 0.3971, 1.0600, 0.3943, 0.5537, 0.5444, 0.4089, 0.7468, 0.7744 } },
}
