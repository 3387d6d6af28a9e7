// AVX2 + FMA + F16C LLM weight products (bodies shared in quant.inl).
#define CPUDL_ISA avx2
#define CPUDL_QUANT_VNNI 0
#include "kernels/quant/quant.inl"
