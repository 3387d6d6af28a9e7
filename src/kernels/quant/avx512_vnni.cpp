// AVX512-VNNI LLM weight products (bodies shared in quant.inl): the integer dot products of
// Q8_0, Q4_0 and the Q4_0 prompt panel take one VPDPBUSD per 32 byte pairs instead of
// VPMADDUBSW + VPMADDWD + VPADDD, on 256-bit vectors (AVX512-VL): the blocks are 32 values.
#define CPUDL_ISA avx512_vnni
#define CPUDL_QUANT_VNNI 1
#include "kernels/quant/quant.inl"
