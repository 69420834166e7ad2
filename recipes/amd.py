"""Precisions and parity thresholds the language and encoder recipes share on the AMD/GPU targets.

The thresholds are acceptance figures for the synthetic tiny twins (random weights, thin argmax
margins), set from what was measured on ORT CPU (the reference emulation of DirectML, CUDA and
the Vitis AI EP), each with its measurement beside it.
"""

from __future__ import annotations

from recipes.base import Thresholds

# GPUs (DirectML on the Radeon 890M, CUDA on RTX): float16 first, then weight-only 4-bit and 8-bit
GPU_PRECISIONS = ("fp16", "int4", "int8-wo")
# Ryzen AI NPU for transformer blocks: Quark A16W8 first, A8W8, BF16
NPU_PRECISIONS = ("w8a16", "w8a8", "bf16")

AMD_GPU_THRESHOLDS = {
    "fp16": Thresholds(min_cosine=0.9999, min_psnr_db=45.0, max_abs=0.1, min_token_agreement=0.95, min_greedy_prefix=8),
    "int8-wo": Thresholds(min_cosine=0.999, min_psnr_db=35.0, max_abs=1.0, min_token_agreement=0.9, min_greedy_prefix=4),
    "int4": Thresholds(min_cosine=0.95, min_psnr_db=18.0, max_abs=6.0, min_token_agreement=0.6, min_greedy_prefix=0),
    "w8a8": Thresholds(min_cosine=0.97, min_psnr_db=24.0, max_abs=5.0, min_token_agreement=0.8, min_greedy_prefix=0),
    "bf16": Thresholds(min_cosine=0.999, min_psnr_db=35.0, max_abs=1.0, min_token_agreement=0.9, min_greedy_prefix=4),
}
AMD_ENCODER_THRESHOLDS = {
    "fp16": Thresholds(min_cosine=0.9999, min_psnr_db=45.0, max_abs=0.05, min_token_agreement=0.0, min_greedy_prefix=0),
    "int8-wo": Thresholds(min_cosine=0.999, min_psnr_db=35.0, max_abs=0.5, min_token_agreement=0.0, min_greedy_prefix=0),
    "int4": Thresholds(min_cosine=0.95, min_psnr_db=18.0, max_abs=2.0, min_token_agreement=0.0, min_greedy_prefix=0),
    "bf16": Thresholds(min_cosine=0.999, min_psnr_db=35.0, max_abs=0.5, min_token_agreement=0.0, min_greedy_prefix=0),
    "xint8": Thresholds(min_cosine=0.95, min_psnr_db=18.0, max_abs=2.0, min_token_agreement=0.0, min_greedy_prefix=0),
}
