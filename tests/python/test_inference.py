# cpudl.InferenceSession with ONNX Runtime's call shape, against the committed ONNX fixtures (their
# outputs computed by PyTorch), two sessions on two threads, bad input, and no leak per call.
import concurrent.futures

import numpy as np
import pytest

import cpudl
from conftest import resident_bytes


@pytest.mark.parametrize("name", ["lenet5_opset13", "mlp_opset17", "simplecnn_opset17", "transformer_opset13"])
def test_outputs_match_pytorch(onnx_fixtures, name):
    sess = cpudl.InferenceSession(str(onnx_fixtures / f"{name}.onnx"))
    x = np.load(onnx_fixtures / f"{name}.input.npy")
    inputs = sess.get_inputs()
    assert len(inputs) == 1 and inputs[0].type.startswith("tensor(")
    (y,) = sess.run(None, {inputs[0].name: x})
    np.testing.assert_allclose(y, np.load(onnx_fixtures / f"{name}.output.npy"), rtol=1e-4, atol=1e-4)
    named = sess.run([sess.get_outputs()[0].name], {inputs[0].name: x})
    np.testing.assert_array_equal(named[0], y)


def test_node_args_describe_the_model(onnx_fixtures):
    sess = cpudl.InferenceSession(onnx_fixtures / "lenet5_opset13.onnx")
    (i,), (o,) = sess.get_inputs(), sess.get_outputs()
    assert i.type == "tensor(float)" and o.type == "tensor(float)"
    assert i.shape[1:] == [1, 28, 28] and (i.shape[0] is None or isinstance(i.shape[0], int))


def test_inputs_are_converted_when_they_must_be(onnx_fixtures):
    sess = cpudl.InferenceSession(onnx_fixtures / "lenet5_opset13.onnx")
    x = np.load(onnx_fixtures / "lenet5_opset13.input.npy")
    name = sess.get_inputs()[0].name
    (want,) = sess.run(None, {name: x})
    (f64,) = sess.run(None, {name: x.astype(np.float64)})  # floats of another width are converted once
    (strided,) = sess.run(None, {name: np.repeat(x, 2, axis=0)[::2]})
    (tensor,) = sess.run(None, {name: cpudl.tensor(x)})
    for got in (f64, strided, tensor):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_bad_input_gets_clear_errors(onnx_fixtures, tmp_path):
    sess = cpudl.InferenceSession(onnx_fixtures / "lenet5_opset13.onnx")
    name = sess.get_inputs()[0].name
    x = np.load(onnx_fixtures / "lenet5_opset13.input.npy")
    with pytest.raises(ValueError, match=f"missing input '{name}'"):
        sess.run(None, {})
    with pytest.raises(ValueError, match="has no input 'nope'"):
        sess.run(None, {name: x, "nope": x})
    with pytest.raises(ValueError, match="has no output 'nope'"):
        sess.run(["nope"], {name: x})
    with pytest.raises(ValueError, match="takes float32"):
        sess.run(None, {name: x.astype(np.int64)})
    with pytest.raises(RuntimeError, match=name):
        sess.run(None, {name: np.zeros((1, 3, 28, 28), dtype=np.float32)})
    with pytest.raises(FileNotFoundError, match="missing.onnx"):
        cpudl.InferenceSession(tmp_path / "missing.onnx")
    (tmp_path / "junk.onnx").write_bytes(b"\x01\x02not a model")
    with pytest.raises(RuntimeError, match="junk.onnx"):
        cpudl.InferenceSession(tmp_path / "junk.onnx")
    with pytest.raises(TypeError):
        cpudl.InferenceSession(42)


def test_two_threads_run_two_sessions(onnx_fixtures):
    models = ["lenet5_opset13", "mlp_opset13"]
    sessions = [cpudl.InferenceSession(onnx_fixtures / f"{m}.onnx", threads=1) for m in models]
    inputs = [np.load(onnx_fixtures / f"{m}.input.npy") for m in models]
    wants = [np.load(onnx_fixtures / f"{m}.output.npy") for m in models]

    def work(i):
        name = sessions[i].get_inputs()[0].name
        return [sessions[i].run(None, {name: inputs[i]})[0] for _ in range(30)]

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        results = list(pool.map(work, [0, 1]))
    for i, outputs in enumerate(results):
        for y in outputs:
            np.testing.assert_allclose(y, wants[i], rtol=1e-4, atol=1e-4)


def test_threads_may_share_one_session(onnx_fixtures):
    sess = cpudl.InferenceSession(onnx_fixtures / "lenet5_opset13.onnx")
    name = sess.get_inputs()[0].name
    x = np.load(onnx_fixtures / "lenet5_opset13.input.npy")
    want = np.load(onnx_fixtures / "lenet5_opset13.output.npy")
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        for y in pool.map(lambda _: sess.run(None, {name: x})[0], range(40)):
            np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)


def test_resident_memory_stays_flat_over_many_calls(onnx_fixtures):
    sess = cpudl.InferenceSession(onnx_fixtures / "lenet5_opset13.onnx")
    name = sess.get_inputs()[0].name
    x = np.load(onnx_fixtures / "lenet5_opset13.input.npy")[:1]
    a = np.zeros((4, 4), dtype=np.float32)
    for _ in range(500):  # warm-up: plans, arenas, allocator pools
        sess.run(None, {name: x})
        (cpudl.from_numpy(a) * 2.0).numpy()
    before = resident_bytes()
    for _ in range(10000):
        sess.run(None, {name: x})
        t = cpudl.from_numpy(a)
        (t * 2.0 + t).numpy()
    grown = resident_bytes() - before
    assert grown < 4 << 20, f"resident memory grew by {grown / 1e6:.1f} MB over 10,000 calls"
