#!/usr/bin/env python3
"""Writes tests/onnx/quantops_opset13.* : the quantisation operators with answers computed here, in
NumPy, straight from the ONNX operator definitions (an implementation independent of cpudl's).

Needs Debian's python3-onnx and python3-numpy.  Run from the repository root:
    python3 scripts/gen-quant-fixtures.py

The graph (input x: 4 x 6 float):
  q, s, z = DynamicQuantizeLinear(x)
  y  = Mul(Cast(MatMulInteger(q, Wq, z)), Mul(s, w_scale)) + bias     the quantize_dynamic pattern
  m  = MatMulInteger(q, Wu, z, wu_zero)                               uint8 weights, per-column zero points
  xd = DequantizeLinear(QuantizeLinear(x, c_scale, c_zero, axis=1))   per-axis uint8 round trip
  x8 = QuantizeLinear(x, 0.5, int8 0)                                 per-tensor int8, ties to even
  u  = QuantizeLinear(x, 0.05, uint8 130);  ud = DequantizeLinear(u, 0.05, 130)   per-tensor uint8
Files: quantops_opset13.onnx, .input.npy, and .output<i>.npy for the outputs y, m, xd, x8, u, ud.

Also tests/onnx/convwindows_opset13.onnx (+ .input.npy): three float convolutions side by side on
one 2 x 5 x 16 x 16 input (7x7 stride 2 pad 3, 1x1 stride 2, 3x3 stride 2 pad 1 with bias), for
`cpudl quantize --mode static` and the int8 convolution's windows.
"""
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "onnx")
f32 = np.float32


def dynamic_quantize(x):
    lo, hi = min(f32(0), x.min()), max(f32(0), x.max())
    scale = f32((hi - lo) / f32(255))
    zero = np.round(np.clip(f32(0) - lo / scale, 0, 255))
    q = np.clip(np.round(x / scale) + zero, 0, 255).astype(np.uint8)
    return q, scale, np.uint8(zero)


def main():
    rng = np.random.default_rng(11)
    x = (rng.standard_normal((4, 6)) * 2).astype(f32)
    x[0, :4] = [0.25, 0.75, -0.25, -1.25]  # exact halves for the int8 QuantizeLinear (scale 0.5)
    wq = rng.integers(-127, 128, (6, 5)).astype(np.int8)
    wq[0, 0], wq[1, 0] = 127, -127  # extremes, to catch a saturating product
    w_scale = (rng.random(5) * 0.02 + 0.001).astype(f32)
    bias = rng.standard_normal(5).astype(f32)
    wu = rng.integers(0, 256, (6, 3)).astype(np.uint8)
    wu_zero = np.array([128, 3, 250], np.uint8)
    c_scale = (rng.random(6) * 0.05 + 0.01).astype(f32)
    c_zero = rng.integers(100, 156, 6).astype(np.uint8)

    q, s, z = dynamic_quantize(x)
    acc = (q.astype(np.int32) - np.int32(z)) @ wq.astype(np.int32)
    y = acc.astype(f32) * (s * w_scale) + bias
    m = (q.astype(np.int32) - np.int32(z)) @ (wu.astype(np.int32) - wu_zero.astype(np.int32))
    xq = np.clip(np.round(x / c_scale) + c_zero, 0, 255).astype(np.uint8)
    xd = ((xq.astype(np.int32) - c_zero.astype(np.int32)).astype(f32) * c_scale).astype(f32)
    x8 = np.clip(np.round(x / f32(0.5)), -128, 127).astype(np.int8)
    u = np.clip(np.round(x / f32(0.05)) + 130, 0, 255).astype(np.uint8)
    ud = ((u.astype(np.int32) - 130).astype(f32) * f32(0.05)).astype(f32)

    inits = [numpy_helper.from_array(a, n) for a, n in [
        (wq, "Wq"), (w_scale, "w_scale"), (bias, "bias"), (wu, "Wu"), (wu_zero, "wu_zero"), (c_scale, "c_scale"),
        (c_zero, "c_zero"), (np.array(0.5, f32), "half"), (np.array(0, np.int8), "zero8"),
        (np.array(0.05, f32), "u_scale"), (np.array(130, np.uint8), "u_zero")]]
    nodes = [
        helper.make_node("DynamicQuantizeLinear", ["x"], ["q", "s", "z"], name="dql"),
        helper.make_node("MatMulInteger", ["q", "Wq", "z"], ["i"], name="mmi"),
        helper.make_node("Cast", ["i"], ["f"], to=TensorProto.FLOAT, name="cast"),
        helper.make_node("Mul", ["s", "w_scale"], ["sc"], name="scale_mul"),
        helper.make_node("Mul", ["f", "sc"], ["y0"], name="mul"),
        helper.make_node("Add", ["y0", "bias"], ["y"], name="add"),
        helper.make_node("MatMulInteger", ["q", "Wu", "z", "wu_zero"], ["m"], name="mmi_u8"),
        helper.make_node("QuantizeLinear", ["x", "c_scale", "c_zero"], ["xq"], axis=1, name="ql"),
        helper.make_node("DequantizeLinear", ["xq", "c_scale", "c_zero"], ["xd"], axis=1, name="dq"),
        helper.make_node("QuantizeLinear", ["x", "half", "zero8"], ["x8"], name="ql8"),
        helper.make_node("QuantizeLinear", ["x", "u_scale", "u_zero"], ["u"], name="qlu"),
        helper.make_node("DequantizeLinear", ["u", "u_scale", "u_zero"], ["ud"], name="dqu"),
    ]
    outputs = [("y", TensorProto.FLOAT, [4, 5]), ("m", TensorProto.INT32, [4, 3]), ("xd", TensorProto.FLOAT, [4, 6]),
               ("x8", TensorProto.INT8, [4, 6]), ("u", TensorProto.UINT8, [4, 6]), ("ud", TensorProto.FLOAT, [4, 6])]
    graph = helper.make_graph(nodes, "quantops", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 6])],
                              [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], producer_name="gen-quant-fixtures")
    onnx.checker.check_model(model)
    base = os.path.join(OUT, "quantops_opset13")
    onnx.save(model, base + ".onnx")
    np.save(base + ".input.npy", x)
    for i, a in enumerate([y, m, xd, x8, u, ud]):
        np.save(f"{base}.output{i}.npy", a)
    print(f"wrote {base}.onnx")

    nodes, inits, outs = [], [], []
    for i, (k, st, p, o) in enumerate([(7, 2, 3, 8), (1, 2, 0, 6), (3, 2, 1, 9)]):
        inits.append(numpy_helper.from_array(rng.standard_normal((o, 5, k, k)).astype(f32), f"W{i}"))
        inits.append(numpy_helper.from_array(rng.standard_normal(o).astype(f32), f"B{i}"))
        nodes.append(helper.make_node("Conv", ["x", f"W{i}", f"B{i}"], [f"y{i}"], kernel_shape=[k, k], strides=[st, st],
                                      pads=[p, p, p, p], name=f"conv{i}"))
        side = (16 + 2 * p - k) // st + 1
        outs.append(helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, [None, o, side, side]))
    graph = helper.make_graph(nodes, "convwindows", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 5, 16, 16])],
                              outs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], producer_name="gen-quant-fixtures")
    onnx.checker.check_model(model)
    base = os.path.join(OUT, "convwindows_opset13")
    onnx.save(model, base + ".onnx")
    np.save(base + ".input.npy", rng.standard_normal((2, 5, 16, 16)).astype(f32))
    print(f"wrote {base}.onnx")


if __name__ == "__main__":
    main()
