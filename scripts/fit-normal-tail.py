#!/usr/bin/env python3
"""Fits the polynomial g of src/kernels/simd/math.inl (VectorMath::normal_parts).

The vector GELU and its derivative write the standard normal tail erfc(z)/2, z = |x|/sqrt(2),
as exp(-z^2) * u * g(u) with u = 1/(2 + z): u g(u) = erfcx(z)/2, the scaled complementary error
function, smooth and between 0.33 u and u on the range the kernels use, |x| <= 15. g is the
Chebyshev interpolant of erfcx(z)/(2u) at degree 8 on that range, converted to powers of u and
rounded to float; this prints its coefficients (lowest power first) and the largest relative
error of u g(u) evaluated in float, which the kernels' accuracy (GELU within 1e-6 relative,
tails included) needs below about 2e-7 (degree 8: 1.4e-7).

Plain Python (math.erfc in double precision is the reference): the machine has no NumPy.
Usage: scripts/fit-normal-tail.py [degree]
"""
import math
import struct
import sys

X_MAX = 15.0  # the kernels clamp |x| here: the tail is below float's smallest denormal
U_LO, U_HI = 1.0 / (2.0 + X_MAX / math.sqrt(2.0)), 0.5


def g(u):
    z = 1.0 / u - 2.0
    return 0.5 * math.erfc(z) * math.exp(z * z) / u


def to_f32(x):
    return struct.unpack("f", struct.pack("f", x))[0]


def chebyshev_interpolant(f, lo, hi, degree):
    """Coefficients c_j of sum c_j T_j(t), t = (2u - lo - hi)/(hi - lo), through f at the nodes."""
    n = degree + 1
    nodes = [math.cos(math.pi * (k + 0.5) / n) for k in range(n)]
    values = [f((hi - lo) / 2 * t + (hi + lo) / 2) for t in nodes]
    c = [2.0 / n * sum(values[k] * math.cos(math.pi * j * (k + 0.5) / n) for k in range(n)) for j in range(n)]
    c[0] /= 2
    return c


def to_powers_of_u(c, lo, hi):
    t_polys = [[1.0], [0.0, 1.0]]  # T_j as power series in t
    for j in range(2, len(c)):
        nxt = [0.0] * (j + 1)
        for i, v in enumerate(t_polys[j - 1]):
            nxt[i + 1] += 2 * v
        for i, v in enumerate(t_polys[j - 2]):
            nxt[i] -= v
        t_polys.append(nxt)
    in_t = [0.0] * len(c)
    for j, cj in enumerate(c):
        for i, v in enumerate(t_polys[j]):
            in_t[i] += cj * v
    scale, shift = 2.0 / (hi - lo), -(hi + lo) / (hi - lo)  # t = scale u + shift
    in_u = [0.0] * len(c)
    for i, v in enumerate(in_t):
        for k in range(i + 1):
            in_u[k] += v * math.comb(i, k) * scale**k * shift ** (i - k)
    return in_u


def main():
    degree = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    coeffs = [to_f32(v) for v in to_powers_of_u(chebyshev_interpolant(g, U_LO, U_HI, degree), U_LO, U_HI)]
    worst = 0.0
    for i in range(20001):
        u = to_f32(U_LO + (U_HI - U_LO) * i / 20000)
        acc = coeffs[-1]
        for c in reversed(coeffs[:-1]):
            acc = to_f32(acc * u + c)
        worst = max(worst, abs(acc / g(u) - 1.0))
    print(", ".join(f"{c:.9e}f" for c in coeffs))
    print(f"max relative error of u g(u) in float, u in [{U_LO:.6f}, {U_HI}]: {worst:.3e}")


if __name__ == "__main__":
    main()
