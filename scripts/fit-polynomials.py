#!/usr/bin/env python3
"""Fits the polynomials of src/kernels/simd/math.inl (VectorMath) and prints them.

normal-tail [degree]: g of VectorMath::normal_parts. The vector GELU and its derivative write the
standard normal tail erfc(z)/2, z = |x|/sqrt(2), as exp(-z^2) * u * g(u) with u = 1/(2 + z):
u g(u) = erfcx(z)/2, the scaled complementary error function, smooth and between 0.33 u and u on
the range the kernels use, |x| <= 15. g is the Chebyshev interpolant of erfcx(z)/(2u) at degree 8
on that range, converted to powers of u and rounded to float; this prints its coefficients
(lowest power first) and the largest relative error of u g(u) evaluated in float, which the
kernels' accuracy (GELU within 1e-6 relative, tails included) needs below about 2e-7 (degree 8:
1.4e-7).

expm1 [degree]: P of VectorMath::expm1_reduced, expm1(r) = r + r^2 P(r) on the reduced range
|r| <= ln2/2 that exp and tanh share. P is the Chebyshev interpolant of (e^r - 1 - r)/r^2 at
degree 4 (e^r to degree 6, where Cephes' expf takes degree 7 and the Taylor series degree 7 for the
same accuracy); this prints it and the largest relative error of r + r^2 P(r) and of
1 + r + r^2 P(r), evaluated in float by Horner's scheme as the kernels do: at degree 4, 8.5e-8
and 7.4e-8, about the float rounding itself (degree 5: 6.8e-8 and 6.6e-8; degree 3: 1.0e-6).

Plain Python (math.erfc and math.expm1 in double precision are the references): the machine has
no NumPy.
Usage: scripts/fit-polynomials.py normal-tail|expm1 [degree]
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


def horner(coeffs, x):
    """The float evaluation the kernels use: one rounding per fused multiply-add."""
    acc = coeffs[-1]
    for c in reversed(coeffs[:-1]):
        acc = to_f32(acc * x + c)
    return acc


def fit_normal_tail(degree):
    coeffs = [to_f32(v) for v in to_powers_of_u(chebyshev_interpolant(g, U_LO, U_HI, degree), U_LO, U_HI)]
    worst = 0.0
    for i in range(20001):
        u = to_f32(U_LO + (U_HI - U_LO) * i / 20000)
        worst = max(worst, abs(horner(coeffs, u) / g(u) - 1.0))
    print(", ".join(f"{c:.9e}f" for c in coeffs))
    print(f"max relative error of u g(u) in float, u in [{U_LO:.6f}, {U_HI}]: {worst:.3e}")


R_MAX = math.log(2.0) / 2 * (1 + 1e-6)  # the reduction's |r|, with room for its roundings


def expm1_tail(r):
    if abs(r) < 1e-4:  # the series, where e^r - 1 - r cancels in double
        return 0.5 + r / 6 + r * r / 24 + r**3 / 120
    return (math.expm1(r) - r) / (r * r)


def fit_expm1(degree):
    coeffs = [to_f32(v) for v in to_powers_of_u(chebyshev_interpolant(expm1_tail, -R_MAX, R_MAX, degree), -R_MAX, R_MAX)]
    worst_expm1 = worst_exp = 0.0
    for i in range(-20000, 20001):
        r = to_f32(R_MAX * i / 20000)
        if r == 0.0:
            continue
        p = horner(coeffs, r)
        q = to_f32(to_f32(r * r) * p + r)  # fma(r^2, P, r) after the rounded r^2
        worst_expm1 = max(worst_expm1, abs(q / math.expm1(r) - 1.0))
        worst_exp = max(worst_exp, abs(to_f32(q + 1.0) / math.exp(r) - 1.0))
    print(", ".join(f"{c:.9e}f" for c in coeffs))
    print(f"max relative error in float, |r| <= {R_MAX:.6f}: expm1 {worst_expm1:.3e}, exp {worst_exp:.3e}")


def main():
    target = sys.argv[1] if len(sys.argv) > 1 else "normal-tail"
    if target == "normal-tail":
        fit_normal_tail(int(sys.argv[2]) if len(sys.argv) > 2 else 8)
    elif target == "expm1":
        fit_expm1(int(sys.argv[2]) if len(sys.argv) > 2 else 4)
    else:
        sys.exit(f"fit-polynomials.py: unknown target '{target}' (expected normal-tail or expm1)")


if __name__ == "__main__":
    main()
