// AVX512-VNNI integer LLM weight products (bodies shared in int8_products.inl): Q8_0, Q4_0 and
// the Q4_0 and Q8_0 prompt panels with one VPDPBUSD per 32 byte pairs instead of VPMADDUBSW + VPMADDWD +
// VPADDD, on 256-bit vectors (AVX512-VL): the blocks are 32 values. The float and K-quant
// products have no VNNI form here; AVX-512 CPUs run their AVX2 variants.
#define CPUDL_ISA avx512_vnni
#define CPUDL_QUANT_VNNI 1
#include "kernels/quant/int8_products.inl"
