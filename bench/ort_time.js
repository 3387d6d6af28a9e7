// Times ONNX Runtime (npm onnxruntime-node) on one model and one .npy input, for vs_onnx.py.
// Usage: node ort_time.js MODEL.onnx INPUT.npy THREADS RUNS [OUTPUT.npy]  ->  {"median_ms": .., "p90_ms": ..}
// OUTPUT.npy, when given, receives the first output (float32), to compare engines' numbers.
const fs = require('fs');
const ort = require('onnxruntime-node');

function loadNpy(path) {  // float32, C order: all vs_onnx.py writes
  const buf = fs.readFileSync(path);
  const headerLen = buf.readUInt16LE(8);
  const header = buf.toString('latin1', 10, 10 + headerLen);
  if (!header.includes("'<f4'") || header.includes('True')) throw new Error(path + ': expected float32 C-order');
  const shape = header.match(/\(([^)]*)\)/)[1].split(',').filter((s) => s.trim()).map(Number);
  const data = new Float32Array(buf.buffer.slice(buf.byteOffset + 10 + headerLen, buf.byteOffset + buf.length));
  return new ort.Tensor('float32', data, shape);
}

function saveNpy(path, tensor) {
  let header = `{'descr': '<f4', 'fortran_order': False, 'shape': (${tensor.dims.join(', ')}${tensor.dims.length === 1 ? ',' : ''}), }`;
  header += ' '.repeat(63 - ((10 + header.length) % 64)) + '\n';
  const head = Buffer.alloc(10);
  head.write('\x93NUMPY', 0, 'latin1');
  head[6] = 1;
  head[7] = 0;
  head.writeUInt16LE(header.length, 8);
  fs.writeFileSync(path, Buffer.concat([head, Buffer.from(header, 'latin1'), Buffer.from(tensor.data.buffer, tensor.data.byteOffset, tensor.data.byteLength)]));
}

(async () => {
  const [model, input, threads, runs, output] = process.argv.slice(2);
  const session = await ort.InferenceSession.create(model, {
    intraOpNumThreads: Number(threads), interOpNumThreads: 1, graphOptimizationLevel: 'all', executionMode: 'sequential'});
  const feeds = {[session.inputNames[0]]: loadNpy(input)};
  for (let i = 0; i < 4; ++i) await session.run(feeds);
  if (output) saveNpy(output, (await session.run(feeds))[session.outputNames[0]]);
  const ms = [];
  for (let i = 0; i < Number(runs); ++i) {
    const t0 = process.hrtime.bigint();
    await session.run(feeds);
    ms.push(Number(process.hrtime.bigint() - t0) / 1e6);
  }
  ms.sort((a, b) => a - b);
  console.log(JSON.stringify({median_ms: ms[Math.floor(ms.length / 2)], p90_ms: ms[Math.ceil(0.9 * ms.length) - 1]}));
})();
