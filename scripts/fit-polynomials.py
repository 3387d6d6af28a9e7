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

tables [degree]: the short-range tables of VectorMath (AVX-512). On |x| < 4, where nearly every
activation lies, three functions are each a polynomial of s = t - c_j (t = |x|) on 32 intervals of
width 1/8 (c_j their midpoints), with no exponential and no division: the normal tail
h(t) = erfc(t/sqrt2)/2 (GELU), d(t) = h(t) - t phi(t) (GELU's derivative) and tanh(t)/t (tanh).
Each interval's Chebyshev interpolant at degree 5, in powers of s,
rounded to float. Beside them, log's tables: x = 2^e m, m in [sqrt(1/2), sqrt(2)), falls in
one of 32 intervals by the top 5 bits of its mantissa field (counted from sqrt(1/2)'s), each with
a centre c (1 exactly for the interval holding 1), 1/c in float and -log(1/c) in float, so that
log x = e ln2 - log(1/c) + log1p(m/c - 1) with |m/c - 1| < 1/64 and log1p(r) = r + r^2 P(r),
P of degree 2 (log_polynomial). This writes src/kernels/simd/math_tables.inl (a test checks that the
committed file is what the script writes) and prints, for float evaluation by Horner's scheme as
the kernel does, the largest error of what each kernel forms from its table: at degree 5, GELU's
tail 1.1e-7 relative, its derivative 2.7e-8 absolute (d crosses zero near t = 0.75), tanh
1.3e-7 relative (degree 4: 4.1e-7 for the tail); log's 1.0e-7 relative on a sample of [1/4, 4].

Plain Python (math.erfc and math.expm1 in double precision are the references): the machine has
no NumPy.
Usage: scripts/fit-polynomials.py normal-tail|expm1|tables [degree] [tables' output path]
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


TABLE_INTERVALS, TABLE_WIDTH = 32, 1.0 / 8  # [0, 4): t + 4 has these intervals in its top mantissa bits
TABLE_PATH = "src/kernels/simd/math_tables.inl"


def normal_tail(t):
    return 0.5 * math.erfc(t / math.sqrt(2.0))


def normal_tail_minus_density(t):
    return normal_tail(t) - t * math.exp(-t * t / 2) / math.sqrt(2 * math.pi)


def tanh_ratio(t):
    return math.tanh(t) / t if t != 0.0 else 1.0


def interval_polynomials(f, degree):
    """Per interval j, the coefficients (lowest power first) of f(c_j + s), s in [-w/2, w/2]."""
    polys = []
    for j in range(TABLE_INTERVALS):
        lo, hi = j * TABLE_WIDTH, (j + 1) * TABLE_WIDTH
        in_t = to_powers_of_u(chebyshev_interpolant(f, lo, hi, degree), lo, hi)
        mid = (lo + hi) / 2
        # re-expand around the midpoint: sum a_i t^i = sum b_k s^k, t = mid + s
        in_s = [sum(a * math.comb(i, k) * mid ** (i - k) for i, a in enumerate(in_t) if i >= k) for k in range(degree + 1)]
        polys.append([to_f32(v) for v in in_s])
    return polys


# (C++ name, function tabulated, what the kernel forms from p = the table's value at t, its
# reference, and whether the error is relative). Products are exact in double before rounding.
TABLES = [
    ("kNormalTailTable", normal_tail, "GELU's tail h", lambda p, t: p, normal_tail, True),
    ("kNormalTailMinusDensityTable", normal_tail_minus_density, "GELU's derivative's d",
     lambda p, t: p, normal_tail_minus_density, False),
    ("kTanhRatioTable", tanh_ratio, "tanh = t p", lambda p, t: to_f32(t * p), math.tanh, True),
]


def worst_error(polys, form, reference, relative):
    worst = 0.0
    for j, coeffs in enumerate(polys):
        lo, mid = j * TABLE_WIDTH, (j + 0.5) * TABLE_WIDTH
        for i in range(801):
            t = to_f32(lo + TABLE_WIDTH * i / 800)
            got = form(horner(coeffs, to_f32(t - mid)), t)
            if t != 0.0 or reference(t) != 0.0:
                worst = max(worst, abs(got / reference(t) - 1.0) if relative else abs(got - reference(t)))
    return worst


SQRT_HALF_BITS = 0x3F3504F3  # sqrt(1/2) in float, where log's mantissa range starts
LOG_INTERVALS = 32  # by the top 5 of the 23 mantissa bits of bits(x) - SQRT_HALF_BITS


def from_bits(b):
    return struct.unpack("f", struct.pack("I", b & 0xFFFFFFFF))[0]


def to_bits(x):
    return struct.unpack("I", struct.pack("f", x))[0]


def log_tables():
    """1/c and -log(1/c) per interval, both in float; c = 1 for the interval holding 1."""
    inverse, log_of_centre = [], []
    for j in range(LOG_INTERVALS):
        lo = from_bits(SQRT_HALF_BITS + (j << 18))
        hi = from_bits(SQRT_HALF_BITS + ((j + 1) << 18) - 1)
        if lo <= 1.0 <= hi:
            inverse.append(1.0)
            log_of_centre.append(0.0)
            continue
        # Among the floats near 1/midpoint, the one whose log is closest to a float (Gal's
        # accurate tables): -log(1/c) rounded then costs the result almost nothing, where the
        # midpoint's own rounding cost up to half an ulp of it (log measured 1.83 ulp, 1.2 with this).
        base = to_bits(to_f32(2.0 / (lo + hi)))

        def rounding(inv):
            value = -math.log(inv)
            return abs(to_f32(value) - value) / math.ulp(to_f32(value))

        inv = min((from_bits(base + k) for k in range(-4096, 4097)), key=rounding)
        inverse.append(inv)
        log_of_centre.append(to_f32(-math.log(inv)))
    return inverse, log_of_centre


# log1p(r) = r + r^2 P(r) for |r| < 1/64: P is the Chebyshev interpolant of (log1p(r) - r)/r^2 at
# degree 2 (truncation below 1e-10 relative).
LOG1P_R = 1.0 / 64


def log1p_tail(r):
    if abs(r) < 1e-4:
        return -0.5 + r / 3 - r * r / 4
    return (math.log1p(r) - r) / (r * r)


def log_polynomial():
    return [to_f32(v) for v in to_powers_of_u(chebyshev_interpolant(log1p_tail, -LOG1P_R, LOG1P_R, 2), -LOG1P_R, LOG1P_R)]


def log_split(x):
    """VectorMath::log's x = 2^e m, m in [sqrt(1/2), sqrt(2)), and m's interval j."""
    t = (to_bits(x) - SQRT_HALF_BITS) & 0xFFFFFFFF
    e = float(struct.unpack("i", struct.pack("I", t))[0] >> 23)
    mantissa = t & 0x7FFFFF
    return e, from_bits(mantissa + SQRT_HALF_BITS), mantissa >> 18


def log_as_the_kernel(x, inverse, log_of_centre, poly):
    e, m, j = log_split(x)
    r = to_f32(m * inverse[j] - 1.0)  # one fma: the product is exact in double
    p = horner(poly, r)
    log1p_r = to_f32(p * to_f32(r * r) + r)
    ln2_hi, ln2_lo = 0.693359375, -2.12194440e-4
    inner = to_f32(to_f32(e * to_f32(ln2_lo) + log_of_centre[j]) + log1p_r)
    return to_f32(e * ln2_hi + inner)


def fit_tables(degree, path=TABLE_PATH):
    def wrapped(values, indent):
        """Five floats a line (the file is generated: clang-format is off in it)."""
        items = [f"{v:.9e}f" for v in values]
        lines = [", ".join(items[i : i + 5]) for i in range(0, len(items), 5)]
        return (",\n" + indent).join(lines)

    def table(name, polys):
        rows = [f"    {{{wrapped([p[k] for p in polys], '     ')}}}," for k in range(degree + 1)]
        return f"alignas(64) constexpr float {name}[{degree + 1}][{TABLE_INTERVALS}] = {{\n" + "\n".join(rows) + "\n};\n"

    text = (
        "// Written by scripts/fit-polynomials.py tables; do not edit. VectorMath's short-range\n"
        "// polynomials (table_polynomial): on t in [0, 4), interval j = floor(8 t), each function in\n"
        f"// powers of s = t - (j + 1/2)/8, degree {degree}; row k holds the coefficient of s^k for the 32\n"
        "// intervals. h(t) = erfc(t/sqrt2)/2, d(t) = h(t) - t phi(t), tanh(t)/t. Then log's\n"
        "// tables (VectorMath::log).\n"
        "// clang-format off\n"
        "namespace cpudl::kernels {\nnamespace {\n"
    )
    for name, f, what, form, reference, relative in TABLES:
        polys = interval_polynomials(f, degree)
        text += table(name, polys)
        kind = "relative" if relative else "absolute"
        print(f"{what}: max {kind} error in float, t in [0, 4): {worst_error(polys, form, reference, relative):.3e}")
    inverse, log_of_centre = log_tables()
    poly = log_polynomial()
    text += (
        "// log: per interval of the mantissa above sqrt(1/2), 1/c and -log(1/c); log1p's polynomial.\n"
        f"alignas(64) constexpr float kLogInverseTable[{LOG_INTERVALS}] = {{\n    {wrapped(inverse, '    ')}}};\n"
        f"alignas(64) constexpr float kLogOfCentreTable[{LOG_INTERVALS}] = {{\n    {wrapped(log_of_centre, '    ')}}};\n"
        f"constexpr float kLog1pPolynomial[3] = {{{', '.join(f'{v:.9e}f' for v in poly)}}};\n"
    )
    worst_r = worst = 0.0
    for i in range(200001):
        x = to_f32(0.25 * 16.0 ** (i / 200000))
        _, m, j = log_split(x)
        worst_r = max(worst_r, abs(m * inverse[j] - 1.0))
        if x != 1.0:
            worst = max(worst, abs(log_as_the_kernel(x, inverse, log_of_centre, poly) / math.log(x) - 1.0))
    print(f"log: largest |m/c - 1| {worst_r:.3e}; max relative error in float on a sample of [1/4, 4]: {worst:.3e}")
    text += "}  // namespace\n}  // namespace cpudl::kernels\n// clang-format on\n"
    with open(path, "w") as out:
        out.write(text)
    print(f"wrote {path}")


def main():
    target = sys.argv[1] if len(sys.argv) > 1 else "normal-tail"
    if target == "normal-tail":
        fit_normal_tail(int(sys.argv[2]) if len(sys.argv) > 2 else 8)
    elif target == "tables":
        fit_tables(int(sys.argv[2]) if len(sys.argv) > 2 else 5, *sys.argv[3:4])
    elif target == "expm1":
        fit_expm1(int(sys.argv[2]) if len(sys.argv) > 2 else 4)
    else:
        sys.exit(f"fit-polynomials.py: unknown target '{target}' (expected normal-tail, expm1 or tables)")


if __name__ == "__main__":
    main()
